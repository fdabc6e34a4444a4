#pragma once
// Exact cached decoding (SPEC 4.1). A Decoder holds the decode state of a batch of sequences:
// full key/value caches for the prelude and coda (and for full or sliding attention in a
// dense/looped/MoE core), and for each routed depth of a lol core only the current window:
// its ordinal, its route (expert, gate) fixed when it opened, the keys/values of its tokens
// under that expert with that depth's FiLM, the running sum of its input states and the sum
// and count of closed-window means that give the next window's router input. The core's
// state never grows with the context.
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "infer/kv_cache.h"
#include "model/model.h"

namespace lol {

// A prompt: its tokens (at least one), its prompt window P (window 0 at every depth, SPEC 1.3)
// and its router-only positions (SPEC 1.5).
using Prompt = TokenSequence;

struct DecodeOutput {
  torch::Tensor logits;  // (B, V): next-token logits after the tokens just fed
  // prefill() and admit(): each new prompt's logits at every one of its tokens (len, V); the
  // last row is that prompt's row of `logits`. Log-probabilities of prompts (echo) read them.
  std::vector<torch::Tensor> prompt_logits;
  std::vector<RouteRecord> routes;  // windows that opened during this call; sequence = row
};

class Decoder {
 public:
  // `force` (if any) routes every sequence that does not bring its own (admit); it must outlive
  // the decoder.
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
  // The same with the new sequences following their own forced path (null: none) instead of
  // the decoder's; it must outlive their rows. Sequences of different paths share a batch.
  DecodeOutput admit(const std::vector<Prompt>& prompts, const ForcedPath* force);
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
  // the batch), weight bytes those calls read (plus the LM head), cache bytes attention read,
  // the FLOPs of its products and attention, and where the time went.
  struct StepStats {
    int64_t block_calls = 0, weight_bytes = 0, cache_bytes = 0;
    double flops = 0;
    double core_seconds = 0, other_seconds = 0;  // core layers vs prelude, coda, head
  };
  const StepStats& last_step() const { return stats_; }

 private:
  struct Layer;
  using LayerInputs = std::map<std::pair<std::string, int64_t>, torch::Tensor>;
  // The jobs of prefill(): the batched forward over the prompts, keeping each layer's input;
  // the layers in execution order with empty state; the state one layer keeps of one prompt.
  ForwardResult forward_prompts(const Layout& layout, LayerInputs& inputs);
  void build_layers(int64_t batch);
  void fill_state(Layer& layer, const Layout& layout, const torch::Tensor& x, const Rotary& rotary,
                  const RouteDecisions* decision, const std::vector<RouteRecord>& records,
                  int64_t b, std::vector<RouteRecord>* routes);
  torch::Tensor run_layer(Layer& layer, const torch::Tensor& x, const Rotary& rotary,
                          const std::vector<uint8_t>& router_only,
                          std::vector<RouteRecord>* routes);
  LanguageModel model_;
  torch::Device device_;
  const ForcedPath* force_;                // the default path of new sequences
  std::vector<const ForcedPath*> forces_;  // each sequence's path (null: routed freely)
  const WindowRouting* routing_;           // the core's window router; null for cores without one
  std::vector<std::unique_ptr<Layer>> layers_;  // execution order: prelude, core, coda
  std::vector<int64_t> positions_, prompt_lens_;
  Projection head_;  // the LM head (cached panels for a few rows)
  // Rotary angles of positions [0, n), computed once and grown by doubling: a step selects its
  // rows' positions from it (the same bits as computing them, without a dozen operators).
  Rotary rotary_at(const std::vector<int64_t>& positions);
  Rotary rotary_table_;
  StepStats stats_;
  // Weight bytes one call of a block reads and its FLOPs per row; counted once per block
  // (walking a module's parameters costs microseconds), except MoE blocks, whose bytes follow
  // the experts used.
  struct BlockCost {
    int64_t bytes = 0;
    double flops_per_row = 0;
  };
  void count_call(const Block& block, int64_t rows);
  std::unordered_map<const BlockImpl*, BlockCost> costs_;
};

}  // namespace lol
