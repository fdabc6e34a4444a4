#pragma once
// Attention over segments of the flat token array (documents or windows). Segments of similar
// length are padded together into buckets and run as batched matmuls; the key rules of
// SPEC 1.2 (causal, same segment, router-only tokens invisible to others, optional band)
// are a boolean mask per bucket, built once per layout.
#include <torch/torch.h>

#include <vector>

namespace lol {

struct Segment {
  int64_t start = 0;  // first flat token
  int64_t length = 0;
};

struct AttentionBucket {
  int64_t segments = 0;
  int64_t capacity = 0;   // padded segment length
  torch::Tensor gather;   // (segments * capacity) int64 flat token per slot (pads repeat a token)
  torch::Tensor allowed;  // (segments, 1, capacity, capacity) bool: query i may use key j
  torch::Tensor valid;    // (real tokens) int64 slots holding real tokens, in segment order
};

struct AttentionPlan {
  std::vector<AttentionBucket> buckets;
  torch::Tensor output_index;  // (N) int64: row of each flat token in the buckets' outputs
  // The same rules for the CPU kernel (model/segment_attention.h), always on the CPU:
  torch::Tensor segment_table;  // (segments, 2) int64: flat start, length
  torch::Tensor key_visible;    // (N) uint8: 1 where other tokens may see the token as a key
  int64_t band = 0;
};

// band = 0: no band limit; band > 0: key j allowed only when i - j < band.
AttentionPlan build_attention_plan(const std::vector<Segment>& segments,
                                   const std::vector<uint8_t>& router_only, int64_t num_tokens,
                                   int64_t band, torch::Device device);

// Rotary embedding, rotate-half pairing (i, i + dh/2). cos/sin: (N, dh/2).
struct Rotary {
  torch::Tensor cos, sin;
  static Rotary at_positions(const torch::Tensor& positions, int64_t head_dim, double theta);
  Rotary select(const torch::Tensor& rows) const;     // rows of a permuted layout
  torch::Tensor apply(const torch::Tensor& x) const;  // x: (n, heads, dh)
};

// q: (n, H, dh), k/v: (n, Hkv, dh) in "row order". When `perm` is defined, row r holds flat
// token perm[r] (and inverse_perm maps flat token -> row); otherwise rows are flat tokens.
// Returns (n, H * dh) in row order.
torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const AttentionPlan& plan, const torch::Tensor& perm = {},
                     const torch::Tensor& inverse_perm = {});

}  // namespace lol
