#include "infer/kv_cache.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "model/cpu_fast.h"
#include "util/error.h"
#include "util/tensor.h"

namespace lol {

KVCache::KVCache(int64_t batch, int64_t kv_heads, int64_t head_dim, torch::TensorOptions options,
                 bool streamed)
    : kv_heads_(kv_heads), head_dim_(head_dim), streamed_(streamed), length_(batch, 0) {
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
    auto bigger = zeros_in_huge_pages(shape, t.options());
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

void KVCache::clear(int64_t row) {
  length_[row] = 0;
}

void KVCache::retain(const std::vector<int64_t>& keep) {
  auto idx = int64_tensor(keep, k_.device());
  k_ = k_.index_select(0, idx);
  v_ = v_.index_select(0, idx);
  slot_position_ = slot_position_.index_select(0, idx);
  length_ = kept_rows(length_, keep);
}

void KVCache::append_rows(const KVCache& other) {
  LOL_CHECK(other.kv_heads_ == kv_heads_ && other.head_dim_ == head_dim_ &&
                other.k_.scalar_type() == k_.scalar_type() && other.k_.device() == k_.device(),
            "append_rows: the caches differ in heads, head size, dtype or device");
  reserve(other.capacity_);
  const int64_t capacity = capacity_;                      // >= other's
  auto widen = [&](const torch::Tensor& t, int64_t dim) {  // other's slots to this capacity
    if (other.capacity_ == capacity) return t;
    auto shape = t.sizes().vec();
    shape[dim] = capacity;
    auto wide = torch::zeros(shape, t.options());
    wide.narrow(dim, 0, other.capacity_).copy_(t);
    return wide;
  };
  k_ = torch::cat({k_, widen(other.k_, 2)}, 0);
  v_ = torch::cat({v_, widen(other.v_, 2)}, 0);
  slot_position_ = torch::cat({slot_position_, widen(other.slot_position_, 1)}, 0);
  length_.insert(length_.end(), other.length_.begin(), other.length_.end());
}

int64_t KVCache::slots() const {
  int64_t slots = 0;
  for (auto l : length_) slots += l;
  return slots;
}

bool KVCache::streaming_helps() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool amd = __builtin_cpu_is("amd");
  return amd;
#else
  return false;
#endif
}

int64_t KVCache::bytes() const {
  return slots() * 2 * kv_heads_ * head_dim_ * static_cast<int64_t>(k_.element_size());
}

torch::Tensor KVCache::attend(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const std::vector<int64_t>& positions,
                              const std::vector<uint8_t>& router_only, int64_t band) {
  const int64_t batch = q.size(0), heads = q.size(1), group = heads / kv_heads_;
  const int64_t used = *std::max_element(length_.begin(), length_.end()) + 1;
  reserve(used);
  // Write the new token into slot length[b] of each row; it is visible to itself only.
  const bool cpu_kernel = k_.device().is_cpu() && k_.scalar_type() == torch::kFloat32 &&
                          q.scalar_type() == torch::kFloat32 &&
                          k.scalar_type() == torch::kFloat32 && v.scalar_type() == torch::kFloat32;
  if (cpu_kernel) {
    // k and v are usually column ranges of a fused q|k|v product: rows apart by its width, each
    // row's heads contiguous. Read them in place; copy only other layouts.
    auto rows_of_heads = [&](const torch::Tensor& t) {
      return t.stride(2) == 1 && t.stride(1) == head_dim_ ? t : t.contiguous();
    };
    const auto kc = rows_of_heads(k), vc = rows_of_heads(v);
    const float* kin = kc.data_ptr<float>();
    const float* vin = vc.data_ptr<float>();
    const int64_t k_row = kc.stride(0), v_row = vc.stride(0);
    float* kp = k_.data_ptr<float>();
    float* vp = v_.data_ptr<float>();
    int64_t* slot_pos = slot_position_.data_ptr<int64_t>();
    for (int64_t b = 0; b < batch; ++b) {
      slot_pos[b * capacity_ + length_[b]] = positions[b];
      for (int64_t h = 0; h < kv_heads_; ++h) {
        const int64_t at = ((b * kv_heads_ + h) * capacity_ + length_[b]) * head_dim_;
        std::copy_n(kin + b * k_row + h * head_dim_, head_dim_, kp + at);
        std::copy_n(vin + b * v_row + h * head_dim_, head_dim_, vp + at);
      }
    }
    auto out = attend_cpu(q.contiguous(), positions, band);
    for (int64_t b = 0; b < batch; ++b)
      if (!router_only[b]) ++length_[b];
    return out;
  }
  auto rows = torch::arange(batch, torch::kInt64).to(k_.device());
  auto slots = int64_tensor(length_, k_.device());
  using torch::indexing::Slice;
  k_.index_put_({rows, Slice(), slots}, k);
  v_.index_put_({rows, Slice(), slots}, v);
  auto position_t = int64_tensor(positions, k_.device());
  slot_position_.index_put_({rows, slots}, position_t);
  auto keys = k_.narrow(2, 0, used), values = v_.narrow(2, 0, used);  // (B, Hkv, used, dh)
  auto slot_index = torch::arange(used, torch::kInt64).to(k_.device()).unsqueeze(0);  // (1, used)
  auto allowed = slot_index <= slots.unsqueeze(1);  // stored slots and the new token
  if (band > 0)
    allowed = allowed & (slot_position_.narrow(1, 0, used) > (position_t - band).unsqueeze(1));
  auto qg = q.view({batch, kv_heads_, group, head_dim_});
  auto scores =
      torch::matmul(qg, keys.transpose(-1, -2)) / std::sqrt(static_cast<double>(head_dim_));
  scores.masked_fill_(allowed.logical_not().view({batch, 1, 1, used}),
                      -std::numeric_limits<float>::infinity());
  auto out = torch::matmul(torch::softmax(scores, -1), values);  // (B, Hkv, g, dh)
  for (int64_t b = 0; b < batch; ++b)
    if (!router_only[b]) ++length_[b];
  return out.reshape({batch, heads * head_dim_});
}

namespace {

// Eight floats as one value (a GCC/Clang vector type): each target clone maps it onto its own
// registers and every clone does the same arithmetic in the same order.
// (Its helpers are always inlined, so GCC's note that passing such a vector by value changes
// the ABI without AVX does not apply.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float Float8 __attribute__((vector_size(32)));

LOL_ALWAYS_INLINE Float8 load8(const float* p) {
  Float8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

LOL_ALWAYS_INLINE float sum8(const Float8& v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

// Streamed caches: with every four slots read, the bytes kStreamAhead further on are asked for
// as non-temporal (prefetchnta), so that a growing cache read once per step passes through
// without evicting what the next layers reread from the last-level cache (the core's library,
// its window caches, the other blocks' weights). Measured at maze-cpu, context 512, over
// interleaved rounds (docs/performance.md): batch 8 +2-11%, batch 32 +3-5%, batch 1 even on an
// AMD Zen 4; on an Intel Xeon the same reads ran ~1.5x slower, so the decoder streams only
// where KVCache::streaming_helps().
constexpr int kStreamAhead = 1024;
template <int DH>
LOL_ALWAYS_INLINE void stream_ahead(const float* at) {
  const char* p = reinterpret_cast<const char*>(at) + kStreamAhead;
  for (int c = 0; c < 4 * DH * 4; c += 64) __builtin_prefetch(p + c, 0, 0);
}

// scores[t] = q . keys[t] * scale over n slots, for a head size known at compile time: q held
// in registers, four slots per iteration in four independent sums. (A dot product per slot,
// eight lanes summed at its end, is one chain of dependent adds: it held the key pass to
// compute speed, below what the memory delivers.)
template <int DH, bool Stream>
LOL_ALWAYS_INLINE void key_scores(const float* q, const float* keys, int64_t n, float scale,
                                  float* scores) {
  static_assert(DH % 8 == 0, "key_scores: head size a multiple of 8");
  Float8 qv[DH / 8];
  for (int i = 0; i < DH / 8; ++i) qv[i] = load8(q + 8 * i);
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    const float* k = keys + t * DH;
    if (Stream) stream_ahead<DH>(k);
    Float8 a0 = qv[0] * load8(k), a1 = qv[0] * load8(k + DH);
    Float8 a2 = qv[0] * load8(k + 2 * DH), a3 = qv[0] * load8(k + 3 * DH);
    for (int i = 1; i < DH / 8; ++i) {
      a0 += qv[i] * load8(k + 8 * i);
      a1 += qv[i] * load8(k + DH + 8 * i);
      a2 += qv[i] * load8(k + 2 * DH + 8 * i);
      a3 += qv[i] * load8(k + 3 * DH + 8 * i);
    }
    scores[t] = sum8(a0) * scale;
    scores[t + 1] = sum8(a1) * scale;
    scores[t + 2] = sum8(a2) * scale;
    scores[t + 3] = sum8(a3) * scale;
  }
  for (; t < n; ++t) {
    const float* k = keys + t * DH;
    Float8 a = qv[0] * load8(k);
    for (int i = 1; i < DH / 8; ++i) a += qv[i] * load8(k + 8 * i);
    scores[t] = sum8(a) * scale;
  }
}

#pragma GCC diagnostic pop

// o = (sum over slots t of w[t] v[t]) * inv_total, for a head size known at compile time: the
// sum stays in a local array the compiler keeps in registers, four slots per iteration. (A
// loop that adds into o itself loads and stores o for every slot, since o might alias the
// values: that ran the value pass at 25-29 GB/s where the key pass streams at 36-39.)
template <int DH, bool Stream>
LOL_ALWAYS_INLINE void weighted_values(const float* w, const float* values, int64_t n,
                                       float inv_total, float* o) {
  float acc[DH] = {};
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    const float w0 = w[t], w1 = w[t + 1], w2 = w[t + 2], w3 = w[t + 3];
    const float* v = values + t * DH;
    if (Stream) stream_ahead<DH>(v);
    for (int i = 0; i < DH; ++i)
      acc[i] += w0 * v[i] + w1 * v[DH + i] + w2 * v[2 * DH + i] + w3 * v[3 * DH + i];
  }
  for (; t < n; ++t)
    for (int i = 0; i < DH; ++i) acc[i] += w[t] * values[t * DH + i];
  for (int i = 0; i < DH; ++i) o[i] = acc[i] * inv_total;
}

// Attention of one query head over n slots of keys/values (each dh floats, contiguous):
// scores, softmax, weighted sum into o. Slots at positions <= limit are skipped (band);
// `scores` has room for n floats. Stream: the reads are non-temporal (see stream_ahead).
// Always inlined into attend_head's clones, so each is compiled for their vector widths.
template <bool Stream>
LOL_ALWAYS_INLINE void head_passes(const float* q, const float* keys, const float* values,
                                   const int64_t* pos, int64_t n, int64_t dh, float scale,
                                   bool banded, int64_t limit, float* scores, float* o) {
  // A row's slots hold increasing positions (appended in order), so those a band leaves out
  // are a prefix: both passes skip it (the mask below still covers any others).
  if (banded) {
    int64_t first = 0;
    while (first < n && pos[first] <= limit) ++first;
    keys += first * dh;
    values += first * dh;
    pos += first;
    n -= first;
  }
  switch (dh) {
    case 32:
      key_scores<32, Stream>(q, keys, n, scale, scores);
      break;
    case 64:
      key_scores<64, Stream>(q, keys, n, scale, scores);
      break;
    case 128:
      key_scores<128, Stream>(q, keys, n, scale, scores);
      break;
    default:
      for (int64_t t = 0; t < n; ++t) scores[t] = dot(q, keys + t * dh, dh) * scale;
  }
  if (banded)
    for (int64_t t = 0; t < n; ++t)
      if (pos[t] <= limit) scores[t] = -std::numeric_limits<float>::infinity();
  const float inv_total = 1.0f / exp_shifted_sum(scores, scores, n, max_of(scores, n));
  switch (dh) {
    case 32:
      return weighted_values<32, Stream>(scores, values, n, inv_total, o);
    case 64:
      return weighted_values<64, Stream>(scores, values, n, inv_total, o);
    case 128:
      return weighted_values<128, Stream>(scores, values, n, inv_total, o);
    default:
      break;
  }
  std::fill(o, o + dh, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    const float* vt = values + t * dh;
    for (int64_t i = 0; i < dh; ++i) o[i] += scores[t] * vt[i];
  }
  for (int64_t i = 0; i < dh; ++i) o[i] *= inv_total;
}

LOL_CPU_CLONES
void attend_head(const float* q, const float* keys, const float* values, const int64_t* pos,
                 int64_t n, int64_t dh, float scale, bool banded, int64_t limit, bool stream,
                 float* scores, float* o) {
  stream ? head_passes<true>(q, keys, values, pos, n, dh, scale, banded, limit, scores, o)
         : head_passes<false>(q, keys, values, pos, n, dh, scale, banded, limit, scores, o);
}

}  // namespace

// Keys and values one thread reads before a second one is worth waking (measured: see
// docs/performance.md). Small: the reads are short runs (a window's slots per row and head)
// that one thread's prefetcher barely starts on, so two threads keep twice the misses in flight.
constexpr int64_t kParallelBytes = 128 << 10;

// One pass over each row's own slots, (row, kv head) pairs spread over the threads: keys and
// values are read once at memory speed instead of through many tiny GEMMs, and rows shorter
// than the longest cost only their own length.
torch::Tensor KVCache::attend_cpu(const torch::Tensor& q, const std::vector<int64_t>& positions,
                                  int64_t band) {
  const int64_t batch = q.size(0), heads = q.size(1), group = heads / kv_heads_, dh = head_dim_;
  auto out = torch::empty({batch, heads * dh}, q.options());
  const float* qp = q.data_ptr<float>();
  const float* kp = k_.data_ptr<float>();
  const float* vp = v_.data_ptr<float>();
  const int64_t* slot_pos = slot_position_.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  // Waking the second thread costs a few microseconds: split only when the keys and values
  // read are large enough to repay it (not for batch 1 over a window of 64 slots).
  int64_t slots = 0;
  for (int64_t b = 0; b < batch; ++b) slots += length_[b] + 1;
  const int64_t bytes_per_item = std::max<int64_t>(1, slots * 2 * dh * 4 / batch);
  const int64_t grain = std::max<int64_t>(1, kParallelBytes / bytes_per_item);
  at::parallel_for(0, batch * kv_heads_, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / kv_heads_, h = item % kv_heads_;
      const int64_t n = length_[b] + 1;  // stored slots and the new token
      const float* keys = kp + (b * kv_heads_ + h) * capacity_ * dh;
      const float* values = vp + (b * kv_heads_ + h) * capacity_ * dh;
      const int64_t* pos = slot_pos + b * capacity_;
      scores.resize(n);
      for (int64_t g = 0; g < group; ++g) {
        const int64_t head = h * group + g;
        attend_head(qp + (b * heads + head) * dh, keys, values, pos, n, dh, scale, band > 0,
                    positions[b] - band, streamed_, scores.data(), op + b * heads * dh + head * dh);
      }
    }
  });
  return out;
}

}  // namespace lol
