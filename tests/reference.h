#pragma once
// An independent, slow implementation of SPEC section 1, for tests only. It reads nothing of
// the engine but the config and the named tensors, works in float64 on one document at a
// time, and runs the routed core exactly as Algorithm 1: one window after another.
#include <torch/torch.h>

#include <map>
#include <optional>
#include <vector>

#include "model/config.h"
#include "model/router.h"

namespace lol::reference {

struct Document {
  std::vector<int64_t> tokens;
  int64_t prompt_len = 0;
  std::vector<bool> router_only;  // empty = none
};

struct Route {
  int64_t depth, ordinal, expert;
  double gate, margin;
  std::vector<double> probs;
};

struct Output {
  torch::Tensor logits;  // (n, V) float64
  std::vector<Route> routes;
};

// Where the reference's own selection margin is below `tie_margin`, it takes the expert from
// `hint` (depth, ordinal) -> expert, so float rounding cannot fork the two paths.
Output forward(const ModelConfig& config, const std::map<std::string, torch::Tensor>& weights,
               const Document& doc, const ForcedPath* force = nullptr, int64_t depth = -1,
               const std::map<std::pair<int64_t, int64_t>, int64_t>* hint = nullptr,
               double tie_margin = 1e-6);

}  // namespace lol::reference
