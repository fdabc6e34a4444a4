#pragma once
// The architecture of a model: every hyperparameter that changes which tensors exist or what
// the forward pass computes. Serialised as config.json beside the weights (SPEC section 2).
#include <string>
#include <vector>

#include "util/fields.h"

namespace lol {

// The model families compared in one engine (SPEC 1.9). Adding one: docs/adding-a-family.md.
enum class Family { kLol, kDense, kLooped, kMoe };
// The attention mask of a dense, looped or MoE core.
enum class CoreAttention { kFull, kSliding, kStrided };
// What a load counts for loss-free balancing (SPEC 1.7).
enum class BalanceCount { kWindows, kTokens, kGates };
// Where the balancing bias is added before top-k selection (SPEC 1.4 adds it to p; docs/config.md).
enum class BalanceSpace { kProbs, kLogits };

template <>
const std::vector<std::pair<Family, const char*>>& enum_names<Family>();
template <>
const std::vector<std::pair<CoreAttention, const char*>>& enum_names<CoreAttention>();
template <>
const std::vector<std::pair<BalanceCount, const char*>>& enum_names<BalanceCount>();
template <>
const std::vector<std::pair<BalanceSpace, const char*>>& enum_names<BalanceSpace>();

struct ModelConfig {
  Family family = Family::kLol;   // lol | dense | looped | moe
  int64_t vocab_size = 256;       // token ids are in [0, vocab_size)
  int64_t d_model = 64;           // residual width d
  int64_t n_heads = 4;            // query heads H; head size is d_model / n_heads
  int64_t n_kv_heads = 4;         // key/value heads (grouped-query attention when < n_heads)
  int64_t ffn_hidden = 176;       // SwiGLU hidden size F
  int64_t n_prelude = 1;          // fixed blocks before the core (full causal attention)
  int64_t core_depth = 4;         // D: routed depths (lol) or core layers (other families)
  int64_t library_size = 4;       // L: library experts (lol only)
  int64_t n_coda = 1;             // fixed blocks after the core
  int64_t window = 16;            // W: tokens per core window
  int64_t stride = 8;             // S: window offset added per routed depth
  bool router_tied = true;        // one router matrix for all depths (false: one per depth)
  double router_noise_std = 0.0;  // std of Gaussian noise on router logits, training only
  double balance_rate = 1e-3;     // u: loss-free balancing bias step (SPEC 1.7)
  BalanceCount balance_count = BalanceCount::kWindows;  // windows | tokens | gates
  bool balance_window0 = false;  // count window 0 (content-independent route) in the load
  BalanceSpace balance_space = BalanceSpace::kProbs;  // probs: p + b | logits: log p + b
  bool balance_per_depth = false;  // lol: one bias and one load per routed depth (bias (D, L))
  bool router_skip = false;  // lol: a route choice L beside the library that leaves the window's
                             // states unchanged; the balancing bias neither moves nor counts it
  bool router_skip_renorm = false;  // lol with router_skip: a routed window's gate is its expert's
                                    // probability among the experts, p_e / (1 - p_skip)
  bool router_skip_head = false;    // lol with router_skip: p_skip = sigmoid(z_L - log L), of the
                                    // skip's logit alone (the experts share 1 - p_skip by softmax),
                                    // and a skipped window runs the router's best expert at a
                                    // gate of value 0 whose gradient reaches that logit (what the
                                    // update would have done)
  double router_skip_share = 0;     // lol with router_skip: the share of counted windows the skip
                                 // should take; a bias on the skip's score moves toward it (0: no
                                 // bias on the skip)
  bool router_skip_target = false;  // lol with router_skip_head, router_skip_renorm and a
                                    // router_skip_share s: a window skips when p_skip >
                                    // sigmoid(-b_skip), and the head learns by binary
                                    // cross-entropy to pick, per micro-batch and depth, the share
                                    // s of windows whose update helps least
  bool router_skip_window0 = true;  // lol with router_skip: window 0 (the prompt window) may
                                    // skip; false: the skip is offered to windows 1.. only
  double rope_theta = 10000.0;      // rotary base
  double norm_eps = 1e-5;           // RMSNorm epsilon
  bool tie_embeddings = true;       // LM head shares the embedding matrix
  int64_t max_seq_len = 1024;       // longest document the model is meant for
  CoreAttention core_attention = CoreAttention::kFull;  // non-lol core: full | sliding | strided
  int64_t loop_blocks = 1;  // R: distinct blocks of the looped core (core_depth % R == 0)
  int64_t moe_experts = 4;  // FFN experts per MoE layer
  int64_t moe_top_k = 1;    // experts per token in MoE layers
  double init_std = 0.02;   // std of the normal initialisation of weight matrices

  int64_t head_dim() const { return d_model / n_heads; }
  // What a lol router chooses between: the L experts, and the skip (id L) with router_skip.
  int64_t route_choices() const { return library_size + (router_skip ? 1 : 0); }

  // Throws lol::Error naming the first field that breaks its rule. Sizes have upper bounds
  // (docs/config.md) so that no count derived from them overflows.
  void validate() const;
  json to_json() const;
  static ModelConfig from_json(const json& object);  // defaults for absent keys, then validate
  static const std::vector<Field<ModelConfig>>& fields();
};

// A named preset from configs/ (searched next to the binary and in the source tree), or a
// JSON file path. Overrides "key=value" are applied in order, then the result is validated.
ModelConfig load_model_config(const std::string& preset_or_path,
                              const std::vector<std::string>& overrides = {});
std::string find_preset_file(const std::string& name);

}  // namespace lol
