#pragma once
// Exact cached decoding (SPEC 4.1). A Decoder holds the decode state of a batch of sequences:
// full key/value caches for the prelude and coda (and for full or sliding attention in a
// dense/looped/MoE core), and for each routed depth of a lol core only the current window:
// its ordinal, its route (expert, gate) fixed when it opened, the keys/values of its tokens
// under that expert with that depth's FiLM, the running sum of its input states and the sum
// and count of closed-window means that give the next window's router input. The core's
// state never grows with the context.
#include <memory>
#include <string>
#include <vector>

#include "infer/kv_cache.h"
#include "model/model.h"

namespace lol {

struct Prompt {
  std::vector<int64_t> tokens;       // at least one
  int64_t prompt_len = 0;            // P, window 0 at every depth (SPEC 1.3)
  std::vector<int64_t> router_only;  // positions within the prompt (SPEC 1.5)
};

// A routing decision taken while decoding: made when window `window` of depth `depth` opened.
struct DecodeRoute {
  int64_t sequence = 0, depth = 0, window = 0, position = 0;  // position: first token of the window
  int64_t expert = 0, router_choice = 0;
  double gate = 0, margin = 0;
  bool forced_expert = false, forced_gate = false;
  std::vector<double> probs;
};

struct DecodeOutput {
  torch::Tensor logits;             // (B, V): next-token logits after the tokens just fed
  std::vector<DecodeRoute> routes;  // windows that opened during this call
};

class Decoder {
 public:
  Decoder(LanguageModel model, torch::Device device, const ForcedPath* force = nullptr);
  ~Decoder();

  // Starts a batch: runs every prompt through the batched training-path forward and builds the
  // state that decoding the prompts token by token would have left.
  DecodeOutput prefill(const std::vector<Prompt>& prompts);
  // Adds sequences to a running batch (continuous batching): prefills them on their own and
  // appends their state after the current rows, which they join from the next step. The
  // returned logits are the new rows'; route sequence indices count from the old batch size.
  // On a decoder that holds no batch yet it is prefill().
  DecodeOutput admit(const std::vector<Prompt>& prompts);
  // One token per sequence (router_only: per sequence, empty = none).
  DecodeOutput step(const std::vector<int64_t>& tokens,
                    const std::vector<uint8_t>& router_only = {});
  // Keeps only the sequences `keep` (strictly increasing indices into the current batch);
  // sequence i afterwards is keep[i] before. Finished generations stop costing compute.
  void retain(const std::vector<int64_t>& keep);

  int64_t batch() const { return static_cast<int64_t>(positions_.size()); }
  int64_t position(int64_t sequence) const { return positions_[sequence]; }
  int64_t core_state_bytes() const;     // routed/windowed core state, all sequences
  int64_t growing_cache_bytes() const;  // prelude, coda and full/sliding core caches

  // What the latest step did: block calls (a routed depth counts one per distinct expert in
  // the batch), weight bytes those calls read (plus the LM head), and where the time went.
  struct StepStats {
    int64_t block_calls = 0, weight_bytes = 0;
    double core_seconds = 0, other_seconds = 0;  // core layers vs prelude, coda, head
  };
  const StepStats& last_step() const { return stats_; }

 private:
  struct Layer;
  torch::Tensor run_layer(Layer& layer, const torch::Tensor& x, const Rotary& rotary,
                          const std::vector<uint8_t>& router_only,
                          std::vector<DecodeRoute>* routes);
  LanguageModel model_;
  torch::Device device_;
  const ForcedPath* force_;
  std::vector<std::unique_ptr<Layer>> layers_;  // execution order: prelude, core, coda
  std::vector<int64_t> positions_, prompt_lens_;
  Projection head_;  // the LM head (cached panels for a few rows)
  StepStats stats_;
};

}  // namespace lol
