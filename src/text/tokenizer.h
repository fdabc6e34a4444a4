#pragma once
// Text in and out of a model: the seam every text-facing command and the server go through.
// Implementations: task vocabularies (words separated by spaces), token ids, and byte-level
// BPE for text (text/subword.h).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/layout.h"
#include "tasks/task.h"

namespace lol {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;  // "task:maze"
  virtual int64_t vocab_size() const = 0;
  // Token ids of `text`; throws lol::Error naming what cannot be encoded.
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;
  // The text of `id` where it follows other tokens (`first`: at the start of a text), such
  // that the pieces of a sequence concatenate to its decoding and a continuation's pieces
  // append to its prompt's text. Throws for an id outside the vocabulary.
  virtual std::string piece(int64_t id, bool first) const = 0;
  virtual std::optional<int64_t> eos() const = 0;
  virtual std::optional<int64_t> bos() const = 0;
  virtual std::optional<int64_t> pad() const = 0;
  // The prompt structure the model was trained with for these tokens: its prompt window and
  // router-only positions (SPEC 1.3, 1.5). Plain text has neither.
  virtual TokenSequence prompt(std::vector<int64_t> ids) const;

  std::string decode(const std::vector<int64_t>& ids) const;  // the pieces, concatenated
  // The text of generated ids as it follows a prompt: every piece with first = false.
  std::string continuation(const std::vector<int64_t>& ids) const;
};

// Where the first of `stops` begins in `text` (npos when none does). Generation stops as soon
// as a stop string occurs anywhere in the continuation (a token may carry text past it), and
// the text shown ends before it: `lol generate --stop` and the server's `stop` alike.
size_t find_stop(const std::string& text, const std::vector<std::string>& stops);

// The vocabulary of the sudoku or maze task ("sudoku" | "maze").
std::unique_ptr<Tokenizer> task_tokenizer(const std::string& task);
// Token ids as decimal numbers separated by commas ("ids"): for models without a text vocabulary.
std::unique_ptr<Tokenizer> id_tokenizer(int64_t vocab_size);

// NAME beside a model: in the run directory MODEL, or in the run two levels above a checkpoint.
std::optional<std::string> model_file(const std::string& model_path, const std::string& name);
// The task a model's training run was trained on, read from RUN/train_config.json beside a run
// or above a checkpoint; none for other models and data.
std::optional<tasks::TaskData> model_task(const std::string& model_path);
// The tokenizer of a model with `vocab_size` ids: `task` when given, else the run's
// tokenizer.json (a text model), else model_task's, else the id tokenizer. Throws when the
// tokenizer has more tokens than the model.
std::unique_ptr<Tokenizer> model_tokenizer(const std::string& model_path, int64_t vocab_size,
                                           const std::string& task);

}  // namespace lol
