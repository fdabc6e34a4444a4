#pragma once
// Key/value cache of one attention layer for a batch of sequences being decoded. Each sequence
// owns a row; slots hold the keys and values of earlier tokens that other tokens may see
// (router-only tokens attend to themselves but are never stored, SPEC 1.5). A windowed layer
// clears a row when its window closes, so its size never exceeds the window.
#include <torch/torch.h>

#include <vector>

namespace lol {

// The entries of the rows kept, v[keep[0]], v[keep[1]], ... (retain() of the caches, the
// decoder and generation's row bookkeeping).
template <typename T>
std::vector<T> kept_rows(const std::vector<T>& v, const std::vector<int64_t>& keep) {
  std::vector<T> out;
  out.reserve(keep.size());
  for (auto r : keep) out.push_back(v[r]);
  return out;
}

class KVCache {
 public:
  // `streamed`: the keys and values are read past the processor's caches (non-temporal) on the
  // CPU, for caches that grow with the document and are each read once per step.
  KVCache(int64_t batch, int64_t kv_heads, int64_t head_dim, torch::TensorOptions options,
          bool streamed = false);

  // Attention of one new token per row: q (B, H, dh), k/v (B, Hkv, dh), rotary applied.
  // The token sees the stored slots of its row and itself; band > 0 also drops keys at
  // positions <= position - band. Stores k/v unless the row's token is router-only.
  // Returns (B, H * dh).
  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const std::vector<int64_t>& positions,
                       const std::vector<uint8_t>& router_only, int64_t band = 0);
  // Appends precomputed keys/values (prefill): k/v (n, Hkv, dh) for row b at `positions`.
  void append(int64_t row, const torch::Tensor& k, const torch::Tensor& v,
              const std::vector<int64_t>& positions);
  void clear(int64_t row);  // the row's window closed
  // Keeps the rows `keep` (increasing indices), which become rows 0..n-1.
  void retain(const std::vector<int64_t>& keep);
  // Appends the rows of another cache of the same shape after this one's (admitting new
  // sequences into a running batch).
  void append_rows(const KVCache& other);
  int64_t length(int64_t row) const { return length_[row]; }
  int64_t slots() const;  // used slots over all rows
  // Whether this CPU reads caches that grow with the document faster streamed (see `streamed`):
  // AMD's, whose last-level cache takes what leaves L2, so a cache read once per step evicts the
  // weights the next layers reread unless it is fetched non-temporally; not Intel's, where
  // prefetchnta fills L1 alone, past the L2 streamer, and the reads ran ~1.5x slower
  // (docs/performance.md, 2026-12-02).
  static bool streaming_helps();
  int64_t bytes() const;  // bytes of keys and values held (used slots)

 private:
  void reserve(int64_t slots);
  torch::Tensor attend_cpu(const torch::Tensor& q, const std::vector<int64_t>& positions,
                           int64_t band);
  int64_t kv_heads_, head_dim_;
  bool streamed_;
  torch::Tensor k_, v_;          // (B, Hkv, capacity, dh)
  torch::Tensor slot_position_;  // (B, capacity) int64, position of the token in each slot
  std::vector<int64_t> length_;  // used slots per row
  int64_t capacity_ = 0;
};

}  // namespace lol
