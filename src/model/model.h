#pragma once
// The whole language model: embedding -> prelude -> core (per family) -> coda -> norm -> head.
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "model/config.h"
#include "model/core.h"
#include "model/layout.h"

namespace lol {

struct ForwardResult {
  torch::Tensor logits;                // (N, V) in the layout's flat order
  std::vector<RouteDecisions> routes;  // one per executed routed depth (lol only)
};

class LanguageModelImpl : public torch::nn::Module {
 public:
  // Validates the config and refuses, before allocating, a model larger than this machine's
  // memory.
  explicit LanguageModelImpl(const ModelConfig& config);

  ForwardResult forward(const Layout& layout, const ForwardOptions& options = {});
  // Initialisation used by a training run (docs/architecture.md), by each parameter's role:
  // normal(0, init_std) matrices, residual output projections scaled by 1/sqrt(2 * blocks),
  // norms and FiLM gamma at 1, FiLM beta and balance biases at 0. Deterministic given the seed.
  void initialize(uint64_t seed);

  const ModelConfig& config() const { return config_; }
  Core& core() { return *core_; }
  const Core& core() const { return *core_; }
  // Parameters and buffers under their canonical names (SPEC 2).
  std::vector<std::pair<std::string, torch::Tensor>> named_state() const;
  // The role of every parameter, by canonical name (model/param_role.h).
  const ParamRoles& roles() const { return roles_; }

  torch::nn::Embedding embed{nullptr};
  torch::nn::ModuleList prelude{nullptr}, coda{nullptr};
  RMSNorm norm{nullptr};
  torch::nn::Linear lm_head{nullptr};  // null when tied to the embedding

 private:
  ModelConfig config_;
  ParamRoles roles_;
  std::unique_ptr<Core> core_;
};
TORCH_MODULE(LanguageModel);

}  // namespace lol
