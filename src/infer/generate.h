#pragma once
// Batched generation over the cached decoder: sampling (greedy, temperature, top-k, top-p,
// seeded), stop tokens, a stop predicate (stop strings), a token budget.
#include <functional>
#include <string>
#include <vector>

#include "data/document.h"
#include "infer/decoder.h"

namespace lol {

struct SamplingOptions {
  double temperature = 0.0;  // <= 0: greedy
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  uint64_t seed = 0;
  int64_t max_tokens = 64;
  std::vector<int64_t> stop_tokens;  // included in the output when hit
  // Called after each token with the tokens generated so far; true stops that sequence.
  std::function<bool(int64_t sequence, const std::vector<int64_t>& generated)> stop;
  void validate() const;
};

struct Generation {
  std::vector<int64_t> tokens;  // the continuation
  std::string finish_reason;    // "stop" or "length"
  std::vector<DecodeRoute> routes;  // every routing decision (prompt windows first), per step
};

// The first `length` tokens of a document as a prompt, with its prompt window and router-only
// positions.
Prompt prompt_from_document(const Document& doc, int64_t length);

// Picks the next token from one row of logits (V).
int64_t sample_token(const torch::Tensor& logits, const SamplingOptions& options, torch::Generator& generator);

std::vector<Generation> generate(LanguageModel model, const std::vector<Prompt>& prompts,
                                 const SamplingOptions& options, torch::Device device,
                                 const ForcedPath* force = nullptr);

}  // namespace lol
