#pragma once
// Batched generation over the cached decoder: sampling (greedy, temperature, top-k, top-p,
// seeded per sequence), stop tokens, a stop predicate (stop strings), a token budget, and
// continuous batching of more prompts than run at once.
#include <functional>
#include <string>
#include <vector>

#include "data/document.h"
#include "infer/decoder.h"

namespace lol {

struct SamplingOptions {
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  uint64_t seed = 0;
  int64_t max_tokens = 64;
  int64_t vocab_limit = 0;           // sample only ids below this (0: all); a task's vocabulary
                                     // is smaller than the model's padded one
  std::vector<int64_t> stop_tokens;  // included in the output when hit
  // Called after each token with the tokens generated so far; true stops that sequence.
  std::function<bool(int64_t sequence, const std::vector<int64_t>& generated)> stop;
  void validate() const;
};

struct Generation {
  std::vector<int64_t> tokens;      // the continuation
  std::string finish_reason;        // "stop" or "length"
  std::vector<RouteRecord> routes;  // every routing decision (prompt windows first), per step
};

// How generate() schedules many prompts: at most max_batch sequences are decoded at once
// (0: all of them); the others wait, and join the running batch as sequences finish
// (continuous batching). on_finish, if set, is told how many have finished.
struct BatchOptions {
  int64_t max_batch = 0;
  std::function<void(int64_t finished)> on_finish;
};

// The first `length` tokens of a document as a prompt, with its prompt window and router-only
// positions.
Prompt prompt_from_document(const Document& doc, int64_t length);

// Picks the next token from one row of logits (V).
int64_t sample_token(const torch::Tensor& logits, const SamplingOptions& options,
                     torch::Generator& generator);

// The generator sequence `sequence` samples from: each sequence has its own, seeded from
// (seed, sequence), so a prompt's continuation does not depend on the batch it ran in.
torch::Generator sequence_generator(uint64_t seed, int64_t sequence);

// Continues every prompt; the result is the same for any max_batch (each sequence decodes as
// if alone, with its own generator).
std::vector<Generation> generate(LanguageModel model, const std::vector<Prompt>& prompts,
                                 const SamplingOptions& options, torch::Device device,
                                 const ForcedPath* force = nullptr,
                                 const BatchOptions& batching = {});

}  // namespace lol
