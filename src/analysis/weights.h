#pragma once
// What training made of the small tensors that steer a routed model, read from its
// model.safetensors without the blocks (`lol info --model`, docs/analysis.md): the balancing
// biases (SPEC 1.7), FiLM per depth (1.1), the router's depth vectors and each expert's router
// row (1.4). All start at a known point (gamma 1, beta 0, bias 0), so the figures say how far
// training moved them.
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "util/json.h"

namespace lol {

// One printed row: a label and one figure per depth, expert or FiLM slot.
struct WeightRow {
  std::string name;
  std::vector<double> values;
};

struct RoutingWeights {
  // The balancing bias as stored, one row per balanced router ("router.balance_bias";
  // "...[l]" per depth with balance_per_depth; one per MoE layer).
  std::vector<WeightRow> balance_bias;
  // The skip's bias (router_skip_share): one row, "router.skip_bias", one figure per depth with
  // balance_per_depth.
  std::vector<WeightRow> skip_bias;
  // Per depth: rms over d_model of gamma - 1 and of beta ("attn.gamma - 1", "attn.beta",
  // "ffn.gamma - 1", "ffn.beta").
  std::vector<WeightRow> film;
  // Per depth: the L2 norm of the router's depth vector e[l].
  std::vector<WeightRow> depth_vectors;
  // Per expert: the L2 norm of its router row, one row per router copy (tied: one; untied: one
  // per depth, "router.weight[l]"; MoE: one per layer). Logits scale with it.
  std::vector<WeightRow> router_rows;

  bool empty() const;
  // {"balance_bias": {name: row or [rows]}, "skip_bias": [...], "film_rms": {row name: row},
  //  "router_depth_vector_norms": [...],
  //  "router_row_norms": {name: [rows]}}; keys only for what the model has.
  json to_json() const;
};

// Whether a balancing bias added to the probabilities (balance_space=probs) is at the most it
// can do: a range (largest - smallest) of 0.99 or more, where the expert lowest in it wins
// against the highest only where its probability leads by nearly all of 1 (docs/analysis.md).
bool bias_at_probability_limit(const std::vector<double>& bias);
// Largest minus smallest (0 for none).
double value_range(const std::vector<double>& values);

// Whether `routing_weights` reads a tensor of this name: the filter for read_safetensors.
bool is_routing_weight(const std::string& name);
// Throws lol::Error naming a tensor whose shape does not fit its role.
RoutingWeights routing_weights(const TensorMap& tensors);

}  // namespace lol
