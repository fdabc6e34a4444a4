#pragma once
// The middle of the model, one implementation per family (SPEC 1.9). Each core registers its
// parameters on the model under the canonical names of SPEC 2; adding a family means one
// new Core subclass and one line in make_core().
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/block.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/router.h"

namespace lol {

// Named intermediate tensors for analysis and prefill (llama.cpp's cb(t, name, layer)), all
// (N, ...) in flat token order: "prelude_in" / "coda_in" (block index, its input), "core_in"
// (depth or layer, 1-based, its input), "router_input" / "router_probs" (depth, per window),
// "core_depth_out", "prelude_out", "core_out".
using TensorHook =
    std::function<void(const std::string& name, int64_t layer, const torch::Tensor&)>;

struct ForwardOptions {
  int64_t core_depth = -1;    // executed core depth D_t <= D (-1: all of D)
  bool router_noise = false;  // add router logit noise (training)
  const ForcedPath* force = nullptr;
  TensorHook hook;  // optional
};

class Core {
 public:
  virtual ~Core() = default;
  // x: (N, d) prelude output in flat order. Returns the core output; routed cores append one
  // RouteDecisions per executed depth to `routes`.
  virtual torch::Tensor forward(const torch::Tensor& x, const Layout& layout, const Rotary& rotary,
                                const ForwardOptions& options,
                                std::vector<RouteDecisions>* routes) = 0;
  // Every block the core owns, for parameter counting and initialisation.
  virtual std::vector<Block> blocks() const = 0;
};

// Builds the core of config.family and registers its parameters on `model`.
std::unique_ptr<Core> make_core(const ModelConfig& config, torch::nn::Module& model);

// SPEC 1.3: window offset of routed depth l (1-based).
inline int64_t window_offset(int64_t depth, int64_t window, int64_t stride) {
  return ((depth - 1) * stride) % window;
}

// The library core of the lol family (SPEC 1.4): per depth, route every window, then run all
// windows that chose the same expert as one slice of a single batched block pass.
class LolCore : public Core {
 public:
  LolCore(const ModelConfig& config, torch::nn::Module& model);
  torch::Tensor forward(const torch::Tensor& x, const Layout& layout, const Rotary& rotary,
                        const ForwardOptions& options,
                        std::vector<RouteDecisions>* routes) override;
  std::vector<Block> blocks() const override;

  torch::nn::ModuleList library{nullptr};
  Film film_attn{nullptr}, film_ffn{nullptr};
  Router router{nullptr};
  FilmRows film_rows(int64_t depth) const;  // FiLM of routed depth l (1-based)

 private:
  ModelConfig config_;
};

// A fixed stack of blocks: dense (D distinct blocks), looped (R blocks applied D/R times),
// moe (D blocks with token-routed FFN experts).
class StackCore : public Core {
 public:
  StackCore(const ModelConfig& config, torch::nn::Module& model);
  torch::Tensor forward(const torch::Tensor& x, const Layout& layout, const Rotary& rotary,
                        const ForwardOptions& options,
                        std::vector<RouteDecisions>* routes) override;
  std::vector<Block> blocks() const override;

  torch::nn::ModuleList core{nullptr};

 private:
  const AttentionPlan& plan_for_layer(const Layout& layout, int64_t layer) const;
  ModelConfig config_;
};

}  // namespace lol
