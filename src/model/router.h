#pragma once
// The prefix router of the routed core (SPEC 1.4) and forced routing (SPEC 1.6).
#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/layout.h"
#include "model/param_role.h"

namespace lol {

// A forced path: for some (depth, window ordinal), an expert id and/or a gate. Beyond the last
// ordinal a depth covers, its last covered ordinal applies. Applies to every document.
struct ForcedPath {
  struct Entry {
    std::optional<int64_t> expert;
    std::optional<double> gate;
    bool operator==(const Entry& o) const { return expert == o.expert && gate == o.gate; }
  };
  std::map<int64_t, std::map<int64_t, Entry>> depths;  // depth l (1-based) -> ordinal -> entry

  const Entry* find(int64_t depth, int64_t ordinal) const;
  // Throws naming the entry when a depth or expert is outside the model: experts 0..L-1, and
  // L (the skip) when the router may skip (ModelConfig::router_skip).
  void validate(int64_t core_depth, int64_t library_size, bool skip) const;
  static ForcedPath from_json(const json& object);
  static ForcedPath load(const std::string& path);
  json to_json() const;
};

// One routing decision as reports show it: `lol forward` JSON, `lol generate --routes`,
// prefill and decoding (docs/formats.md).
struct RouteRecord {
  int64_t sequence = 0;       // document (forward) or sequence (decoding) index
  int64_t depth = 0;          // l, 1-based
  int64_t window = 0;         // ordinal k within the document
  int64_t position = 0;       // first token of the window within its document
  int64_t length = -1;        // tokens in the window; -1 when unknown (decoding opens it)
  int64_t expert = 0;         // rho, the expert that ran (L: the skip, with router_skip)
  int64_t router_choice = 0;  // argmax of the balanced scores (p + b) before forcing
  double gate = 0;            // alpha
  double margin = 0;          // best minus second-best balanced score (inf when L = 1: null in
                              // JSON)
  bool forced_expert = false, forced_gate = false;
  std::vector<double> probs;  // p, before the bias
  json to_json() const;
  static RouteRecord from_json(const json& object);  // throws naming the field
};

// Routing of every window of one depth, as tensors on the model's device: making them waits for
// nothing on the host, so a routed depth on a GPU keeps its decisions there. Tensors keep their
// autograd history (gates carry the router's gradient). host() brings the integer decisions to
// the host in one transfer, for reports, decoding and forced-path bookkeeping.
struct RouteDecisions {
  int64_t depth = 0;  // l, 1-based
  int64_t skip = -1;  // the skip's id (L) when the router may skip (router_skip), else -1
  const WindowPartition* partition = nullptr;
  torch::Tensor experts;                     // (windows) int64: rho (the skip included)
  torch::Tensor router_choice;               // (windows) int64: argmax of the balanced scores
                                             // (p + b) before forcing
  torch::Tensor margins;                     // (windows) float64: best minus second-best
                                             // balanced score (inf when L = 1)
  torch::Tensor forced_expert, forced_gate;  // (windows) bool
  torch::Tensor router_inputs;               // (windows, d)
  torch::Tensor probs;                       // (windows, C) softmax before the bias
  torch::Tensor gates;                       // (windows) alpha
  // With router_skip_head, what a skipped window runs instead (undefined otherwise): `fallback`
  // (windows) int64, the expert of the best balanced score but the skip's; `probe_gates`
  // (windows), of value exactly 0 with the gradient of g (1 - p_skip) in p_skip, g the fallback's
  // gate among the experts held fixed: d loss / d alpha of the update the window did not make
  // reaches the skip's logit alone; `fallback_gates` (windows, detached), that g.
  torch::Tensor fallback, probe_gates, fallback_gates;
  // With router_skip_target (training: RouterImpl::route), the skip head's logit z_L - log L of
  // the router inputs detached (windows), which the target trains (skip_target); set by
  // skip_target, a scalar of value 0 that carries the target's gradient: the trainer adds it to
  // the summed loss. Undefined otherwise.
  torch::Tensor head_logits, target_carrier;
  // With router_skip, (windows) bool: the windows the skip is offered to (all, or those of
  // ordinal > 0 with router_skip_window0 = false). Undefined otherwise.
  torch::Tensor skip_offered;

  // What a routed depth runs. A skipped window keeps its states: it runs expert 0 (the fallback
  // with router_skip_head) at update gate 0 (the probe gate, of value 0), s = H + 0 (E(H) - H) = H
  // exactly, so the windows of a depth still make one batched pass (attention stays within the
  // window, so the other windows never see that block's output) and the block gets no gradient
  // from it; the router gets none either, but for the probe's, which reaches the skip's logit.
  // Without skips these are `experts` and `gates`.
  torch::Tensor block_ids() const;     // (windows) int64: the expert whose block runs
  torch::Tensor update_gates() const;  // (windows): the gate of the residual update

  struct Host {
    std::vector<int64_t> experts, router_choice;
    std::vector<int64_t> blocks;  // block_ids() on the host
    std::vector<double> margins;
    std::vector<uint8_t> forced_expert, forced_gate;
  };
  // The host copy, made on first use and kept (not safe to call from two threads at once for
  // the first time).
  const Host& host() const;

  // Every window's decision as a record. With the layout the decisions came from (and a
  // partition), sequence, window, position and length are filled; otherwise they stay 0 / -1
  // for the caller.
  std::vector<RouteRecord> records(const Layout* layout = nullptr) const;

 private:
  mutable std::shared_ptr<const Host> host_;
};

// The scores that top-k selection ranks (SPEC 1.4, 1.7): p + bias (balance_space "probs", the
// SPEC's rule) or log p + bias ("logits": the same ranking as logits + bias, so a bias can
// outweigh a saturated router; docs/config.md). Detached: selection passes no gradient.
torch::Tensor balanced_scores(const torch::Tensor& probs, const torch::Tensor& bias,
                              BalanceSpace space);

// What the last route choice is: `skip`, the last of the C choices is the skip (router_skip);
// `renorm`, a routed window's gate leaves the skip out (router_skip_renorm); `head`, the skip's
// probability is its own sigmoid and a skipped window probes the router's best expert
// (router_skip_head: RouteDecisions::probe_gates); `target`, the skip is a decision of its own,
// p_skip > sigmoid(-b_skip) (b_skip the skip's bias), before the best balanced expert is chosen,
// and the probe gate is a plain 0 whose gradient skip_target reads (router_skip_target);
// `window0`, the skip is offered to window 0 too (false: to windows of ordinal 1.. only,
// router_skip_window0 = false).
struct SkipRule {
  bool skip = false;
  bool renorm = false;
  bool head = false;
  bool target = false;
  bool window0 = true;
};

// Top-1 selection from router probabilities (SPEC 1.4, 1.6): argmax of the balanced scores (the
// first maximum on ties; with skip_rule.target the skip when p_skip > sigmoid(-b_skip), else the
// experts' argmax, and margins among the experts; a window the skip is not offered to,
// skip_rule.window0 false and ordinal 0, ranks the experts alone), then the forced path (which
// may still force the skip anywhere); alpha = p of the chosen
// expert (over the experts' total with skip_rule.renorm) unless the gate is forced. One row per
// window, `ordinals` (windows) int64 its window ordinal, on the device of `probs`. Tensor
// operations only: nothing waits for the device. Fills every RouteDecisions field but partition and
// inputs. probs and bias over the C choices: C = L, or C = L + 1 with skip_rule.skip, the last
// choice the skip (RouterImpl::depth_bias).
RouteDecisions select_experts(const torch::Tensor& probs, const torch::Tensor& bias,
                              BalanceSpace space, int64_t depth, const torch::Tensor& ordinals,
                              const ForcedPath* force, SkipRule skip_rule);

// router_skip_target, in training: the skip head learns to pick the windows whose update helps
// least. Returns `decisions.update_gates()` unchanged, through a node that, in the backward pass,
// reads each window's d loss / d alpha (a), scores its update's benefit b = -g a (g its gate, or
// for a skipped window the gate its fallback would have had among the experts, so a is that of
// the zero probe gate), labels the share `share` of the windows the skip is offered to
// (skip_offered) with the lowest b 1 (skip) and the rest 0 (the first in window order on ties),
// and gives their head_logits the gradient of a binary cross-entropy of sigmoid(head_logits)
// against the labels (the others' none), summed over the windows and scaled as
// the loss is (the gradient reaching target_carrier, which it sets). The labels come from the
// micro-batch's windows of this depth, so the forward pass stays causal and per-row.
torch::Tensor skip_target(RouteDecisions& decisions, double share);

// An lr multiplier for router.weight, (1, C, 1) for C = route_choices(): `scale` on the skip's
// row (the last, with router_skip), 1 on the experts' (the training option skip_lr_scale).
torch::Tensor skip_row_scale(const ModelConfig& c, double scale);

struct RouterImpl : torch::nn::Module {
  explicit RouterImpl(const ModelConfig& c);
  // p = softmax(R_l r (+ noise)) for router inputs r: (n, d) -> (n, C), C = route_choices().
  // With router_skip_head, for logits z: p_skip = sigmoid(z_L - log L) (odds e^z_L / L), p_e =
  // (1 - p_skip) softmax(z_0..z_{L-1})_e.
  torch::Tensor probabilities(const torch::Tensor& inputs, int64_t depth, bool add_noise) const;

  // states: (N, d) core input at depth l in flat order.
  RouteDecisions route(const torch::Tensor& states, int64_t depth, const WindowPartition& part,
                       const Layout& layout, bool add_noise, const ForcedPath* force) const;
  // Router inputs of windows as a decoder opens them one at a time: (first + e[l]) / 2 for
  // ordinal 0, closed_mean_sums / k for ordinal k > 0. first_states, closed_mean_sums: (n, d).
  torch::Tensor decode_inputs(const torch::Tensor& first_states,
                              const torch::Tensor& closed_mean_sums,
                              const std::vector<int64_t>& ordinals, int64_t depth) const;

  torch::Tensor weight;         // (R, C, d): R = 1 tied, R = D untied; C = L (+ 1 skip)
  torch::Tensor depth_vectors;  // (D, d): e[l]
  torch::Tensor balance_bias;   // (L) buffer, (D, L) with balance_per_depth
  torch::Tensor skip_bias;      // (1) buffer, (D) with balance_per_depth: router_skip_share > 0
  // The bias that depth l's selection adds to each of the C choices: balance_bias (its row l with
  // balance_per_depth), then with router_skip the skip's: skip_bias (its entry l), or 0 without a
  // router_skip_share (the skip's score is then the router's own).
  torch::Tensor depth_bias(int64_t depth) const;
  BalanceSpace balance_space;
  bool skip;         // the last of the C choices is the skip (router_skip)
  bool skip_renorm;  // gates among the experts only (router_skip_renorm)
  bool skip_head;    // p_skip = sigmoid(z_L - log L), the experts share the rest (router_skip_head)
  bool skip_target;  // p_skip against its bias decides, the head learns a target
                     // (router_skip_target)
  bool skip_window0;  // window 0 may skip (router_skip_window0)
  SkipRule skip_rule() const { return {skip, skip_renorm, skip_head, skip_target, skip_window0}; }
  double noise_std;
  ParamRoles roles;
};
TORCH_MODULE(Router);

}  // namespace lol
