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
  explicit LanguageModelImpl(const ModelConfig& config);

  ForwardResult forward(const Layout& layout, const ForwardOptions& options = {});
  // Initialisation used by a training run (docs/model.md): normal(0, init_std) matrices,
  // residual output projections scaled by 1/sqrt(2 * blocks), norms and FiLM gamma at 1,
  // FiLM beta, balance biases at 0. Deterministic given the seed.
  void initialize(uint64_t seed);

  const ModelConfig& config() const { return config_; }
  Core& core() { return *core_; }
  const Core& core() const { return *core_; }
  // Every block of the model (prelude, core, coda).
  std::vector<Block> all_blocks() const;
  // Parameters and buffers under their canonical names (SPEC 2).
  std::vector<std::pair<std::string, torch::Tensor>> named_state() const;

  torch::nn::Embedding embed{nullptr};
  torch::nn::ModuleList prelude{nullptr}, coda{nullptr};
  RMSNorm norm{nullptr};
  torch::nn::Linear lm_head{nullptr};  // null when tied to the embedding

 private:
  ModelConfig config_;
  std::unique_ptr<Core> core_;
};
TORCH_MODULE(LanguageModel);

}  // namespace lol
