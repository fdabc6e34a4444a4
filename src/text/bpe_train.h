#pragma once
// Training a byte-level BPE (what `lol tokenizer train` and `lol corpus build` run): the
// tokenizer it makes is a SubwordTokenizer with GPT-2's byte tokens first, then the merges it
// learnt, then the special tokens.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "text/normalizer.h"
#include "text/regex_split.h"
#include "text/subword.h"

namespace lol {

struct BpeTrainOptions {
  int64_t vocab_size = 8192;  // bytes + merges + special tokens
  std::string pattern = kCl100kPattern;
  std::vector<std::string> special_tokens = {"<|endoftext|>", "<|pad|>"};
  int64_t min_frequency = 2;  // a pair seen fewer times is not merged
  // Applied to the documents before counting (the text between special tokens) and stored in
  // the tokenizer, which then applies it to every text it encodes.
  Normalizer normalizer;
};

// Learns merges from documents: counts pre-tokens, then repeatedly merges the most frequent
// adjacent pair (ties: the smaller pair of ids). Deterministic. `progress(done, total)` is
// called now and then with merges done.
std::unique_ptr<SubwordTokenizer> train_bpe(
    const std::vector<std::string>& documents, const BpeTrainOptions& options,
    const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace lol
