#pragma once
// Route extraction (docs/analysis.md): teacher-forced forward passes over labelled sequences,
// recording every routing decision, streamed to a JSON-lines file one sequence per line. The
// file is what the analysis tools read (mode paths, statistics, probes).
#include <functional>
#include <istream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"
#include "text/tokenizer.h"

namespace lol {

// A sequence with the label an analysis groups it by (a task's strategy, a language, a class).
struct LabelledSequence {
  std::string label;
  TokenSequence sequence;
};

// Where labelled sequences come from, one at a time (bounded memory whatever the count).
class LabelledSource {
 public:
  virtual ~LabelledSource() = default;
  virtual std::optional<LabelledSequence> next() = 0;  // none when exhausted
  virtual int64_t size() const = 0;                    // how many in all (for progress)
  virtual std::string describe() const = 0;
};

// Held-out task sequences: `count` puzzles of task:sudoku or task:maze[:size], each with all
// five strategies, labelled with the strategy's name, the descriptor in place.
std::unique_ptr<LabelledSource> task_sequences(const std::string& task, int maze_size,
                                               int64_t count, uint64_t seed);
// A labelled set as a TSV file: `label<TAB>ids` per line (ids comma-separated), or with a
// `text` tokenizer `label<TAB>text` (\n, \t, \\ escaped). Throws naming the line for a
// malformed one.
std::unique_ptr<LabelledSource> tsv_sequences(const std::string& path, int64_t vocab_size,
                                              const Tokenizer* text = nullptr);
// The chunks of a `lol corpus build` split labelled by their label (a language), at most
// `per_label` of each.
std::unique_ptr<LabelledSource> corpus_sequences(const std::string& dir, const std::string& split,
                                                 int64_t per_label, int64_t vocab_size);

// One window's routing decision with what the analysis needs to know about the window.
struct WindowRoute {
  RouteRecord route;        // depth, window ordinal, position, length, expert, gate, probs, margin
  bool prompt = false;      // the prompt window (ordinal 0 of a sequence with P > 0)
  int64_t router_only = 0;  // router-only tokens in the window
  // Whether the router's own choice (argmax of p + b) changed when its input was perturbed
  // (ExtractOptions::perturbation); unset when not measured.
  std::optional<bool> flipped;
};

// Every routing decision of one sequence, depth-major.
struct SequenceRoutes {
  int64_t sequence = 0;
  std::string label;
  int64_t length = 0, prompt_len = 0;
  std::vector<WindowRoute> windows;
  json to_json() const;
  static SequenceRoutes from_json(const json& object);  // throws naming the field
};

// What a route file says about the model it came from (its first line).
struct RouteFileHeader {
  std::string model, source;
  int64_t core_depth = 0, library_size = 0, sequences = 0;
  bool skip = false;        // the router may skip: route choice library_size is the skip
  double perturbation = 0;  // relative noise of the flip measurement; 0: not measured
  // What a window's route chooses between: its probabilities and expert ids (the skip included).
  int64_t choices() const { return library_size + (skip ? 1 : 0); }
  json to_json() const;
  static RouteFileHeader from_json(const json& object);
};

struct ExtractOptions {
  int64_t batch_size = 16;  // sequences per forward pass
  // > 0: each window's router input r is also routed as r + eps * rms(r) * z, z ~ N(0, I)
  // (seeded), and WindowRoute::flipped says whether the router's choice changed.
  double perturbation = 0;
  uint64_t seed = 0;
  std::function<void(int64_t done)> on_progress;
};

// Runs every sequence of `source` through the model (no grad, batched, full depth) and calls
// `sink` with each sequence's routes in source order. Needs a core that routes windows. A
// sequence longer than the model's max_seq_len is routed on its first max_seq_len tokens
// (exactly its routes there: routing is causal) and its length is the cut one; returns how
// many were cut.
int64_t extract_routes(LanguageModel& model, LabelledSource& source, const ExtractOptions& options,
                       const std::function<void(SequenceRoutes&&)>& sink);

// Reads a route file line by line (bounded memory): the header when constructed, then one
// sequence per next(). Throws naming the line for a malformed one.
class RouteReader {
 public:
  RouteReader(std::istream& in, std::string name);
  const RouteFileHeader& header() const { return header_; }
  std::optional<SequenceRoutes> next();  // none at the end of the file

 private:
  std::istream& in_;
  std::string name_;
  RouteFileHeader header_;
  int64_t line_ = 1;
};

}  // namespace lol
