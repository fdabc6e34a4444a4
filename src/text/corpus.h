#pragma once
// Text corpora as token shards (docs/text.md): documents read from a directory tree whose
// first level names each document's label (a language), cleaned, deduplicated, split into
// train/val/test by a hash of their text (so a document's split never depends on what else is
// in the corpus), tokenized, cut into chunks that fit a training row, and written as shards
// with a table of labels beside them. Everything is deterministic: the same input and options
// give byte-identical output.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "text/normalizer.h"
#include "util/json.h"

namespace lol {

struct CorpusOptions {
  std::string input;      // INPUT/<label>/**/*.txt
  std::string out;        // OUT/{tokenizer.json,corpus.json,<split>.shard,<split>.docs.tsv}
  std::string tokenizer;  // a tokenizer.json to use; empty: train one on the train split
  int64_t vocab_size = 8192;
  Normalizer normalizer;  // of the tokenizer trained (a given tokenizer.json has its own)
  int64_t tokenizer_bytes_per_label = 4'000'000;  // the tokenizer's training sample
  double val_fraction = 0.02, test_fraction = 0.02;
  int64_t chunk_tokens = 512;  // documents longer are cut into chunks (<= training seq_len)
  int64_t max_train_tokens_per_label = 0;  // 0: all; else an equal-token mix of the labels
  bool blocks = false;                     // blank-line-separated blocks are the documents
};

struct CorpusCounts {
  int64_t documents = 0, chunks = 0, bytes = 0, tokens = 0;
};

struct CorpusSummary {
  // label -> split ("train" | "val" | "test") -> counts
  std::map<std::string, std::map<std::string, CorpusCounts>> counts;
  int64_t duplicates = 0, empty = 0, invalid_utf8 = 0, capped_chunks = 0;
  std::string tokenizer;  // where it came from
  json to_json() const;
};

// Documents of one label in the input tree, in path order: each file, or with `blocks` each
// blank-line-separated block; text cleaned (CRLF, trailing spaces, outer blank lines).
struct TextDocument {
  std::string label, source, text;
};
std::vector<TextDocument> read_text_documents(const std::string& input, bool blocks,
                                              CorpusSummary* summary);

CorpusSummary build_corpus(const CorpusOptions& options,
                           const std::function<void(const std::string&)>& log = {});

// The split a document belongs to, from its text alone: "train", "val" or "test".
std::string corpus_split(const std::string& text, double val_fraction, double test_fraction);

// One row of OUT/<split>.docs.tsv: the label of each chunk of the shard, in shard order.
struct ChunkInfo {
  std::string label, source;
  int64_t chunk = 0, tokens = 0, bytes = 0;
};
std::vector<ChunkInfo> read_chunk_table(const std::string& path);

}  // namespace lol
