#pragma once
// The middle of the model, one Core subclass per kind of core (SPEC 1.9). Everything that
// differs between families lives behind this interface: the forward pass, the layers a
// decoder caches, the window router (lol), loss-free balancing and, from the config alone,
// the parameter and FLOP counts. The family enum is switched on in make_core() and
// add_core_stats() only, so a family without a case there does not compile (ci preset);
// docs/adding-a-family.md lists what a new family touches.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/block.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/param_role.h"
#include "model/router.h"
#include "model/stats.h"

namespace lol {

// Named intermediate tensors for analysis and prefill (llama.cpp's cb(t, name, layer)), all
// (N, ...) in flat token order: "prelude_in" / "coda_in" (block index, its input), "core_in"
// (depth or layer, 1-based, its input), "router_input" / "router_probs" (depth, per window),
// "core_depth_out", "prelude_out", "core_out".
using TensorHook =
    std::function<void(const std::string& name, int64_t layer, const torch::Tensor&)>;

struct ForwardOptions {
  int64_t executed_depth = -1;  // core depths (lol) or layers run, D_t <= D (-1: all of D)
  // lol only: executed_depth may exceed D (test-time depth extrapolation). Depth l > D re-uses
  // the router, depth vector, FiLM and forced-path entries of depth ((l - 1) mod D) + 1; its
  // windows take depth l's own offset (SPEC 1.3). Routes report l.
  bool extrapolate_depth = false;
  bool router_noise = false;  // add router logit noise (training)
  const ForcedPath* force = nullptr;
  TensorHook hook;  // optional
};

// One executed layer of a core: the block it runs and the keys its queries see (SPEC 1.2,
// 1.3). The full forward and the cached decoder both follow this list.
struct CoreLayer {
  enum class Mask {
    kDocument,  // causal within the document
    kSliding,   // the token and the window - 1 before it, within the document
    kStrided,   // the windows of SPEC 1.3 at offset delta, one fixed block
    kRouted,    // the same windows, each running the expert its route picked (lol)
  };
  Mask mask = Mask::kDocument;
  int64_t depth = 0;     // 1-based
  int64_t window = 0;    // W: window or band
  int64_t delta = 0;     // window offset of this depth (strided, routed)
  Block block{nullptr};  // the block of a fixed layer; null when routed
};

// The attention plan of a fixed (not routed) layer over a layout.
const AttentionPlan& layer_plan(const CoreLayer& layer, const Layout& layout);

// Loads of a core's balanced routers over one optimizer step (SPEC 1.7).
struct BalanceLoads {
  std::vector<std::vector<double>>
      loads;               // per balanced router (Core::balance_biases order), per expert
  int64_t decisions = 0;   // routing decisions counted for the agreement rate
  int64_t agreements = 0;  // ... where the router's own top choice (no bias) was used
  // With a skip choice (router_skip), per balanced router: the windows the load counts (window 0
  // only with balance_window0), and those of them that took the skip. Empty without the skip.
  std::vector<double> counted, skipped;
};

// What cached decoding needs from a core that routes windows (SPEC 1.4, 4.1): router inputs
// and routes of windows as they open, and the expert blocks and FiLM a routed depth runs.
class WindowRouting {
 public:
  virtual ~WindowRouting() = default;
  // Router inputs of windows opening at `depth`: ordinal 0 from its document's first core
  // input, ordinal k > 0 from the sum of the k closed windows' means. All (n, d).
  virtual torch::Tensor router_inputs(const torch::Tensor& first_states,
                                      const torch::Tensor& closed_mean_sums,
                                      const std::vector<int64_t>& ordinals,
                                      int64_t depth) const = 0;
  // Top-1 routes (with the balancing bias and the forced path) from router inputs (n, d).
  virtual RouteDecisions route(const torch::Tensor& inputs, int64_t depth,
                               const std::vector<int64_t>& ordinals,
                               const ForcedPath* force) const = 0;
  virtual std::vector<Block> experts() const = 0;
  virtual FilmRows film(int64_t depth) const = 0;  // FiLM of routed depth l (1-based)
  // Throws naming the entry when a forced path leaves the model's depths or library.
  virtual void check(const ForcedPath& path) const = 0;
};

class Core {
 public:
  virtual ~Core() = default;
  // x: (N, d) prelude output in flat order. Returns the core output; routed cores append one
  // RouteDecisions per executed depth to `routes`.
  virtual torch::Tensor forward(const torch::Tensor& x, const Layout& layout, const Rotary& rotary,
                                const ForwardOptions& options,
                                std::vector<RouteDecisions>* routes) = 0;
  // Every block the core owns, for counting and initialisation.
  virtual std::vector<Block> blocks() const = 0;
  // The layers a forward of executed depth `depth` runs, in order.
  virtual std::vector<CoreLayer> layers(int64_t depth) const = 0;
  // The window router, or null for a core that does not route windows.
  virtual const WindowRouting* routing() const = 0;
  // Loss-free balancing (SPEC 1.7): adds one forward pass's loads (`routes` as forward() gave
  // them), and the bias buffers those loads move, in the same order. Empty for no balancing.
  virtual void count_loads(const std::vector<RouteDecisions>& routes,
                           BalanceLoads& loads) const = 0;
  virtual std::vector<torch::Tensor> balance_biases() const = 0;
  // The skip's bias of each balanced router (router_skip_share), in the same order: one-element
  // views that the trainer moves in place. Empty where nothing steers the skip.
  virtual std::vector<torch::Tensor> skip_biases() const { return {}; }
};

// Builds the core of config.family, registers its parameters on `model` and their roles.
std::unique_ptr<Core> make_core(const ModelConfig& config, torch::nn::Module& model,
                                ParamRoles& roles);
// Adds the core's parameters, FLOPs and decode state to stats computed from the config alone
// (model_stats); `depth` is the executed depth.
void add_core_stats(const ModelConfig& config, int64_t seq_len, int64_t depth, ModelStats& stats);

// The library core of the lol family (SPEC 1.4): per depth, route every window, then run all
// windows that chose the same expert as one slice of a single batched block pass.
class LolCore : public Core, public WindowRouting {
 public:
  LolCore(const ModelConfig& config, torch::nn::Module& model, ParamRoles& roles);
  torch::Tensor forward(const torch::Tensor& x, const Layout& layout, const Rotary& rotary,
                        const ForwardOptions& options,
                        std::vector<RouteDecisions>* routes) override;
  std::vector<Block> blocks() const override;
  std::vector<CoreLayer> layers(int64_t depth) const override;
  const WindowRouting* routing() const override { return this; }
  void count_loads(const std::vector<RouteDecisions>& routes, BalanceLoads& loads) const override;
  std::vector<torch::Tensor> balance_biases() const override;
  std::vector<torch::Tensor> skip_biases() const override;

  torch::Tensor router_inputs(const torch::Tensor& first_states,
                              const torch::Tensor& closed_mean_sums,
                              const std::vector<int64_t>& ordinals, int64_t depth) const override;
  RouteDecisions route(const torch::Tensor& inputs, int64_t depth,
                       const std::vector<int64_t>& ordinals,
                       const ForcedPath* force) const override;
  std::vector<Block> experts() const override { return blocks(); }
  FilmRows film(int64_t depth) const override;
  void check(const ForcedPath& path) const override;

  static void add_stats(const ModelConfig& config, int64_t seq_len, int64_t depth,
                        ModelStats& stats);

 private:
  ModelConfig config_;
  torch::nn::ModuleList library_{nullptr};
  Film film_attn_{nullptr}, film_ffn_{nullptr};
  Router router_{nullptr};
};

// A fixed stack of blocks: dense (D distinct blocks), looped (R blocks applied D/R times),
// moe (D blocks with token-routed FFN experts), with the mask of core_attention.
class StackCore : public Core {
 public:
  StackCore(const ModelConfig& config, torch::nn::Module& model, ParamRoles& roles);
  torch::Tensor forward(const torch::Tensor& x, const Layout& layout, const Rotary& rotary,
                        const ForwardOptions& options,
                        std::vector<RouteDecisions>* routes) override;
  std::vector<Block> blocks() const override;
  std::vector<CoreLayer> layers(int64_t depth) const override;
  const WindowRouting* routing() const override { return nullptr; }
  void count_loads(const std::vector<RouteDecisions>& routes, BalanceLoads& loads) const override;
  std::vector<torch::Tensor> balance_biases() const override;

  static void add_stats(const ModelConfig& config, int64_t seq_len, int64_t depth,
                        ModelStats& stats);

 private:
  ModelConfig config_;
  torch::nn::ModuleList core_{nullptr};
};

}  // namespace lol
