#pragma once
// Generation by recomputing the whole sequence at every step: slow, obviously correct, and
// the baseline that cached decoding is checked and benchmarked against.
#include <vector>

#include "model/model.h"

namespace lol {

struct GreedyResult {
  std::vector<int64_t> tokens;         // prompt + continuation
  std::vector<RouteDecisions> routes;  // routes of the final full forward
};

// Greedy continuation of `prompt` until `eos` (included) or max_new tokens. prompt_len and
// router_only describe the prompt (SPEC 1.3, 1.5); new tokens are ordinary.
GreedyResult greedy_recompute(LanguageModel& model, const std::vector<int64_t>& prompt,
                              int64_t prompt_len, const std::vector<int64_t>& router_only,
                              int64_t max_new, int64_t eos, torch::Device device,
                              const ForcedPath* force = nullptr);

}  // namespace lol
