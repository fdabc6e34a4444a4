#include "text/corpus.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "data/shards.h"
#include "text/bpe_train.h"
#include "text/subword.h"
#include "text/utf8.h"
#include "util/error.h"
#include "util/files.h"
#include "util/hash.h"
#include "util/parse.h"

namespace lol {
namespace {

const char* const kSplits[] = {"train", "val", "test"};

uint64_t text_hash(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a, then mixed
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return mix64(h);
}

// CRLF to LF, no trailing spaces on lines, no blank lines at either end, at most one blank
// line in a row.
std::string clean(const std::string& raw) {
  std::string out;
  out.reserve(raw.size());
  std::istringstream in(raw);
  std::string line;
  int blanks = 0;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.pop_back();
    if (line.empty()) {
      ++blanks;
      continue;
    }
    if (!out.empty()) out += blanks > 0 ? "\n\n" : "\n";
    blanks = 0;
    out += line;
  }
  return out;
}

void collect_files(const std::string& dir, std::vector<std::string>* files) {
  for (const auto& name : list_directory(dir)) {
    const auto path = dir + "/" + name;
    if (is_directory(path))
      collect_files(path, files);
    else if (name.size() > 4 && name.compare(name.size() - 4, 4, ".txt") == 0)
      files->push_back(path);
  }
}

struct Chunked {
  std::string label, source, split;
  uint64_t hash;
  std::vector<std::vector<int64_t>> chunks;
  std::vector<int64_t> chunk_bytes;
};

void write_split(const std::string& out, const std::string& split,
                 const std::vector<const Chunked*>& docs, const std::vector<int64_t>& keep_chunks,
                 int64_t vocab_size) {
  std::vector<Document> shard;
  std::string table = "label\tsource\tchunk\ttokens\tbytes\n";
  for (size_t d = 0; d < docs.size(); ++d) {
    const auto& doc = *docs[d];
    for (int64_t c = 0; c < keep_chunks[d]; ++c) {
      Document document;
      document.tokens = doc.chunks[c];
      shard.push_back(std::move(document));
      table += doc.label + "\t" + doc.source + "\t" + std::to_string(c) + "\t" +
               std::to_string(doc.chunks[c].size()) + "\t" + std::to_string(doc.chunk_bytes[c]) +
               "\n";
    }
  }
  write_shard(out + "/" + split + ".shard", shard, vocab_size);
  write_file_atomic(out + "/" + split + ".docs.tsv", table);
}

}  // namespace

json CorpusSummary::to_json() const {
  json labels = json::object();
  for (const auto& [label, splits] : counts)
    for (const auto& [split, c] : splits)
      labels[label][split] = {{"documents", c.documents},
                              {"chunks", c.chunks},
                              {"bytes", c.bytes},
                              {"tokens", c.tokens}};
  return json{{"labels", labels},
              {"duplicates_removed", duplicates},
              {"empty_removed", empty},
              {"invalid_utf8_removed", invalid_utf8},
              {"chunks_over_token_cap", capped_chunks},
              {"tokenizer", tokenizer}};
}

std::string corpus_split(const std::string& text, double val_fraction, double test_fraction) {
  // The top 53 bits of the hash as a uniform number in [0, 1).
  const double u = static_cast<double>(text_hash(text) >> 11) / 9007199254740992.0;
  if (u < test_fraction) return "test";
  if (u < test_fraction + val_fraction) return "val";
  return "train";
}

std::vector<TextDocument> read_text_documents(const std::string& input, bool blocks,
                                              CorpusSummary* summary) {
  LOL_CHECK(is_directory(input), "corpus input ", input,
            " is not a directory (expected INPUT/<label>/*.txt)");
  std::vector<TextDocument> docs;
  std::unordered_map<uint64_t, std::vector<size_t>> seen;
  for (const auto& label : list_directory(input)) {
    const auto dir = input + "/" + label;
    if (!is_directory(dir)) continue;
    LOL_CHECK(label.find_first_of("\t\n") == std::string::npos, "label '", label,
              "' has a tab or newline");
    std::vector<std::string> files;
    collect_files(dir, &files);
    for (const auto& file : files) {
      const auto raw = read_text_file(file);
      std::vector<std::string> texts;
      if (blocks) {
        size_t at = 0;
        const auto whole = clean(raw);
        while (at < whole.size()) {
          const auto end = std::min(whole.find("\n\n", at), whole.size());
          texts.push_back(whole.substr(at, end - at));
          at = end + 2;
        }
      } else {
        texts.push_back(clean(raw));
      }
      const auto source = file.substr(input.size() + 1);
      for (auto& text : texts) {
        if (text.empty()) {
          ++summary->empty;
          continue;
        }
        if (!valid_utf8(text)) {
          ++summary->invalid_utf8;
          continue;
        }
        auto& same = seen[text_hash(text)];
        if (std::any_of(same.begin(), same.end(), [&](size_t i) { return docs[i].text == text; })) {
          ++summary->duplicates;
          continue;
        }
        same.push_back(docs.size());
        docs.push_back({label, source, std::move(text)});
      }
    }
  }
  LOL_CHECK(!docs.empty(), "corpus input ", input, " has no documents (INPUT/<label>/*.txt)");
  return docs;
}

CorpusSummary build_corpus(const CorpusOptions& o,
                           const std::function<void(const std::string&)>& log) {
  LOL_CHECK(o.val_fraction >= 0 && o.test_fraction >= 0 && o.val_fraction + o.test_fraction < 1,
            "val and test fractions must be >= 0 with a sum below 1");
  LOL_CHECK(o.chunk_tokens >= 2, "chunk_tokens must be >= 2, got ", o.chunk_tokens);
  LOL_CHECK(o.max_train_tokens_per_label >= 0, "max_train_tokens_per_label must be >= 0");
  auto say = [&](const std::string& s) {
    if (log) log(s);
  };
  CorpusSummary summary;
  auto docs = read_text_documents(o.input, o.blocks, &summary);
  say("read " + std::to_string(docs.size()) + " documents (" + std::to_string(summary.duplicates) +
      " duplicates, " + std::to_string(summary.empty) + " empty, " +
      std::to_string(summary.invalid_utf8) + " not UTF-8 removed)");

  std::vector<Chunked> chunked(docs.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    chunked[i].label = docs[i].label;
    chunked[i].source = docs[i].source;
    chunked[i].hash = text_hash(docs[i].text);
    chunked[i].split = corpus_split(docs[i].text, o.val_fraction, o.test_fraction);
  }

  std::unique_ptr<SubwordTokenizer> tokenizer;
  if (!o.tokenizer.empty()) {
    tokenizer = SubwordTokenizer::load(o.tokenizer);
    summary.tokenizer = o.tokenizer;
  } else {
    // An equal number of bytes of every label's training documents (in hash order), so that
    // small languages get their own merges.
    std::map<std::string, std::vector<size_t>> by_label;
    for (size_t i = 0; i < docs.size(); ++i)
      if (chunked[i].split == "train") by_label[docs[i].label].push_back(i);
    std::vector<std::string> sample;
    for (auto& [label, ids] : by_label) {
      std::sort(ids.begin(), ids.end(),
                [&](size_t a, size_t b) { return chunked[a].hash < chunked[b].hash; });
      int64_t bytes = 0;
      for (auto i : ids) {
        if (bytes >= o.tokenizer_bytes_per_label) break;
        sample.push_back(docs[i].text);
        bytes += docs[i].text.size();
      }
    }
    BpeTrainOptions t;
    t.vocab_size = o.vocab_size;
    t.normalizer = o.normalizer;
    say("training a byte-level BPE of " + std::to_string(o.vocab_size) + " tokens on " +
        std::to_string(sample.size()) + " documents");
    tokenizer = train_bpe(sample, t);
    summary.tokenizer = "trained: " + std::to_string(o.vocab_size) + " tokens, " +
                        std::to_string(o.tokenizer_bytes_per_label) + " bytes per label";
  }
  const auto eos = tokenizer->eos();
  LOL_CHECK(
      eos.has_value(),
      "the tokenizer has no end-of-text token (an added <|endoftext|>, <|end_of_text|>, </s>, "
      "<eos> or [SEP])");

  // Tokenize, end each document with <|endoftext|>, cut into chunks. The texts are valid
  // UTF-8 (checked above), but a tokenizer without an unknown token refuses a character it
  // has no token for: the first such error leaves the loop as the error of the build.
  std::string refused;
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t i = 0; i < static_cast<int64_t>(docs.size()); ++i) {
    std::vector<int64_t> ids;
    try {
      ids = tokenizer->encode(docs[i].text);
    } catch (const Error& e) {
#pragma omp critical(corpus_refused)
      if (refused.empty()) refused = docs[i].source + ": " + e.what();
      continue;
    }
    ids.push_back(*eos);
    for (size_t at = 0; at < ids.size(); at += o.chunk_tokens) {
      const auto end = std::min(ids.size(), at + static_cast<size_t>(o.chunk_tokens));
      std::vector<int64_t> chunk(ids.begin() + at, ids.begin() + end);
      // The bytes of the document text the chunk decodes to: its first token decodes as a
      // text's first (a sentencepiece-style tokenizer's prepended "▁" is no byte of it), and
      // the <|endoftext|> appended has none (one written in the text has its own).
      int64_t bytes = 0;
      for (size_t k = 0; k < chunk.size() && at + k + 1 < ids.size(); ++k)
        bytes += static_cast<int64_t>(tokenizer->piece(chunk[k], at + k == 0).size());
      chunked[i].chunk_bytes.push_back(bytes);
      chunked[i].chunks.push_back(std::move(chunk));
    }
  }
  LOL_CHECK(refused.empty(), refused);

  make_directories(o.out);
  tokenizer->save(o.out + "/tokenizer.json");
  for (const char* split : kSplits) {
    std::vector<const Chunked*> in_split;
    for (const auto& c : chunked)
      if (c.split == split) in_split.push_back(&c);
    // Documents in hash order: a cap keeps a fixed, content-chosen subset of every label.
    std::stable_sort(in_split.begin(), in_split.end(),
                     [](const Chunked* a, const Chunked* b) { return a->hash < b->hash; });
    std::vector<int64_t> keep(in_split.size());
    std::map<std::string, int64_t> used;
    for (size_t d = 0; d < in_split.size(); ++d) {
      const auto& doc = *in_split[d];
      auto& counts = summary.counts[doc.label][split];
      for (size_t c = 0; c < doc.chunks.size(); ++c) {
        const auto n = static_cast<int64_t>(doc.chunks[c].size());
        if (std::string(split) == "train" && o.max_train_tokens_per_label > 0 &&
            used[doc.label] + n > o.max_train_tokens_per_label) {
          summary.capped_chunks += doc.chunks.size() - c;
          break;
        }
        used[doc.label] += n;
        ++keep[d];
        ++counts.chunks;
        counts.tokens += n;
        counts.bytes += doc.chunk_bytes[c];
      }
      if (keep[d] > 0) ++counts.documents;
    }
    write_split(o.out, split, in_split, keep, tokenizer->vocab_size());
  }
  json manifest = summary.to_json();
  manifest["format"] = "lol-corpus-1";
  manifest["vocab_size"] = tokenizer->vocab_size();
  manifest["options"] = {{"val_fraction", o.val_fraction},
                         {"test_fraction", o.test_fraction},
                         {"chunk_tokens", o.chunk_tokens},
                         {"max_train_tokens_per_label", o.max_train_tokens_per_label},
                         {"blocks", o.blocks}};
  write_file_atomic(o.out + "/corpus.json", manifest.dump(2) + "\n");
  return summary;
}

std::vector<ChunkInfo> read_chunk_table(const std::string& path) {
  std::ifstream in(path);
  LOL_CHECK(in.good(), "cannot read ", path);
  std::vector<ChunkInfo> rows;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    if (++number == 1) continue;  // header
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, '\t');) f.push_back(x);
    LOL_CHECK(f.size() == 5, path, ":", number, ": expected 5 tab-separated fields");
    const auto chunk = parse_int(f[2]), tokens = parse_int(f[3]), bytes = parse_int(f[4]);
    LOL_CHECK(chunk && tokens && bytes, path, ":", number,
              ": chunk, tokens and bytes must be integers");
    rows.push_back({f[0], f[1], *chunk, *tokens, *bytes});
  }
  return rows;
}

}  // namespace lol
