#include "infer/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace lol {

KVCache::KVCache(int64_t batch, int64_t kv_heads, int64_t head_dim, torch::TensorOptions options)
    : kv_heads_(kv_heads), head_dim_(head_dim), length_(batch, 0) {
  k_ = torch::zeros({batch, kv_heads, 0, head_dim}, options);
  v_ = torch::zeros({batch, kv_heads, 0, head_dim}, options);
  slot_position_ = torch::zeros({batch, 0}, options.dtype(torch::kInt64));
}

void KVCache::reserve(int64_t slots) {
  if (slots <= capacity_) return;
  const int64_t capacity = std::max<int64_t>(slots, std::max<int64_t>(16, capacity_ * 2));
  auto grow = [&](const torch::Tensor& t, int64_t dim) {
    auto shape = t.sizes().vec();
    shape[dim] = capacity;
    auto bigger = torch::zeros(shape, t.options());
    bigger.narrow(dim, 0, capacity_).copy_(t.narrow(dim, 0, capacity_));
    return bigger;
  };
  k_ = grow(k_, 2);
  v_ = grow(v_, 2);
  slot_position_ = grow(slot_position_, 1);
  capacity_ = capacity;
}

void KVCache::append(int64_t row, const torch::Tensor& k, const torch::Tensor& v,
                     const std::vector<int64_t>& positions) {
  const int64_t n = k.size(0);
  if (n == 0) return;
  reserve(length_[row] + n);
  k_[row].narrow(1, length_[row], n).copy_(k.transpose(0, 1));
  v_[row].narrow(1, length_[row], n).copy_(v.transpose(0, 1));
  slot_position_[row].narrow(0, length_[row], n).copy_(torch::tensor(positions, torch::kInt64));
  length_[row] += n;
}

void KVCache::clear(int64_t row) { length_[row] = 0; }

int64_t KVCache::bytes() const {
  int64_t slots = 0;
  for (auto l : length_) slots += l;
  return slots * 2 * kv_heads_ * head_dim_ * static_cast<int64_t>(k_.element_size());
}

torch::Tensor KVCache::attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const std::vector<int64_t>& positions,
                              const std::vector<uint8_t>& router_only, int64_t band) {
  const int64_t batch = q.size(0), heads = q.size(1), group = heads / kv_heads_;
  const int64_t used = *std::max_element(length_.begin(), length_.end()) + 1;
  reserve(used);
  // Write the new token into slot length[b] of each row; it is visible to itself only.
  auto rows = torch::arange(batch, torch::kInt64).to(k_.device());
  auto slots = torch::tensor(length_, torch::kInt64).to(k_.device());
  using torch::indexing::Slice;
  k_.index_put_({rows, Slice(), slots}, k);
  v_.index_put_({rows, Slice(), slots}, v);
  auto position_t = torch::tensor(positions, torch::kInt64).to(k_.device());
  slot_position_.index_put_({rows, slots}, position_t);

  auto keys = k_.narrow(2, 0, used), values = v_.narrow(2, 0, used);  // (B, Hkv, used, dh)
  auto slot_index = torch::arange(used, torch::kInt64).to(k_.device()).unsqueeze(0);  // (1, used)
  auto allowed = slot_index <= slots.unsqueeze(1);  // stored slots and the new token
  if (band > 0) allowed = allowed & (slot_position_.narrow(1, 0, used) > (position_t - band).unsqueeze(1));
  auto qg = q.view({batch, kv_heads_, group, head_dim_});
  auto scores = torch::matmul(qg, keys.transpose(-1, -2)) / std::sqrt(static_cast<double>(head_dim_));
  scores.masked_fill_(allowed.logical_not().view({batch, 1, 1, used}), -std::numeric_limits<float>::infinity());
  auto out = torch::matmul(torch::softmax(scores, -1), values);  // (B, Hkv, g, dh)
  for (int64_t b = 0; b < batch; ++b)
    if (!router_only[b]) ++length_[b];
  return out.reshape({batch, heads * head_dim_});
}

}  // namespace lol
