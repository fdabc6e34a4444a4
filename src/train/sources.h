#pragma once
// Where training documents come from, by the `data` spec of a training config: a built-in task
// (task:copy, task:sudoku, task:maze, task:maze:N), a text corpus built by `lol corpus build`
// (corpus:DIR: its train.shard, held out: its val.shard), a token shard file, or a weighted
// mixture of those (mix:W*SPEC,W*SPEC,..., data/mixture.h) whose parts share a vocabulary. This
// composition sits above data/ (documents, shards, packing) and tasks/ (the generators), which do
// not know each other's sources.
#include <memory>
#include <optional>
#include <string>

#include "data/document.h"

namespace lol {

// `split` selects the training (0) or held-out (1) stream of a task; for shards, held-out
// data is a separate file (eval_data).
// DIR/SPLIT.shard of a corpus directory, checked to exist.
std::string corpus_shard(const std::string& dir, const std::string& split);
std::unique_ptr<DocumentSource> open_source(const std::string& spec, uint64_t seed, int split);
// The tokenizer.json that goes with the data: a corpus's, or the first corpus's of a mixture.
std::optional<std::string> data_tokenizer_file(const std::string& spec);
// Fails, naming the data, when `source` uses token ids beyond a model's `vocab_size`.
void check_source_vocab(const DocumentSource& source, const std::string& spec, int64_t vocab_size);

}  // namespace lol
