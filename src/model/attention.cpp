#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "model/cpu_autograd.h"
#include "model/cpu_fast.h"
#include "model/segment_attention.h"
#include "util/tensor.h"

namespace lol {
namespace {

int64_t size_class(int64_t length) {
  int64_t c = 1;
  while (c < length) c <<= 1;
  return c;
}

}  // namespace

AttentionPlan build_attention_plan(const std::vector<Segment>& segments,
                                   const std::vector<uint8_t>& router_only, int64_t num_tokens,
                                   int64_t band, torch::Device device) {
  // Group segments by the power of two above their length; each group pads to its longest.
  std::map<int64_t, std::vector<const Segment*>> groups;
  for (const auto& s : segments)
    if (s.length > 0) groups[size_class(s.length)].push_back(&s);

  AttentionPlan plan;
  std::vector<int64_t> output_index(num_tokens, -1);
  int64_t output_row = 0;
  for (const auto& [cls, members] : groups) {
    int64_t capacity = 0;
    for (const Segment* s : members) capacity = std::max(capacity, s->length);
    const int64_t count = static_cast<int64_t>(members.size());
    std::vector<int64_t> gather(count * capacity);
    std::vector<int64_t> valid;
    auto allowed = torch::zeros({count, 1, capacity, capacity}, torch::kBool);
    auto allowed_a = allowed.accessor<bool, 4>();
    for (int64_t s = 0; s < count; ++s) {
      const Segment& seg = *members[s];
      for (int64_t c = 0; c < capacity; ++c) {
        const bool real = c < seg.length;
        gather[s * capacity + c] = seg.start + (real ? c : 0);
        if (real) {
          valid.push_back(s * capacity + c);
          output_index[seg.start + c] = output_row++;
        }
      }
      for (int64_t i = 0; i < capacity; ++i) {
        for (int64_t j = 0; j <= i; ++j) {
          const bool key_visible = j < seg.length && !router_only[seg.start + j];
          const bool in_band = band <= 0 || i - j < band;
          // The diagonal is always allowed: a router-only token sees itself, and padded
          // query rows get a finite softmax (their outputs are dropped).
          allowed_a[s][0][i][j] = (i == j) || (key_visible && in_band);
        }
      }
    }
    AttentionBucket bucket;
    bucket.segments = count;
    bucket.capacity = capacity;
    bucket.gather = int64_tensor(gather, device);
    bucket.allowed = allowed.to(device);
    bucket.valid = int64_tensor(valid, device);
    plan.buckets.push_back(std::move(bucket));
  }
  TORCH_CHECK(output_row == num_tokens, "attention segments must cover every token once");
  plan.output_index = int64_tensor(output_index, device);
  std::vector<int64_t> table;
  for (const auto& s : segments)
    if (s.length > 0) table.insert(table.end(), {s.start, s.length});
  plan.segment_table = int64_tensor(table, torch::kCPU).view({-1, 2});
  plan.key_visible = torch::empty({num_tokens}, torch::kUInt8);
  uint8_t* visible = plan.key_visible.data_ptr<uint8_t>();
  for (int64_t t = 0; t < num_tokens; ++t) visible[t] = !router_only[t];
  plan.band = band;
  return plan;
}

Rotary Rotary::at_positions(const torch::Tensor& positions, int64_t head_dim, double theta) {
  const int64_t half = head_dim / 2;
  auto options = torch::TensorOptions().dtype(torch::kFloat64).device(positions.device());
  auto inv_freq = torch::pow(theta, -torch::arange(0, half, options) * 2.0 / head_dim);
  auto angles = positions.to(torch::kFloat64).unsqueeze(1) * inv_freq.unsqueeze(0);  // (N, dh/2)
  return Rotary{angles.cos().to(torch::kFloat32), angles.sin().to(torch::kFloat32)};
}

Rotary Rotary::select(const torch::Tensor& rows) const {
  return Rotary{cos.index_select(0, rows), sin.index_select(0, rows)};
}

torch::Tensor Rotary::apply(const torch::Tensor& x) const {
  if (rotary_fast_path(x, cos, sin)) return rotary_cpu(x, cos, sin);
  if (torch::GradMode::is_enabled() && rotary_cpu_layout(x, cos, sin))
    return rotary_autograd(x, cos, sin);
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  auto c = cos.unsqueeze(1).to(x.scalar_type());  // (n, 1, dh/2)
  auto s = sin.unsqueeze(1).to(x.scalar_type());
  return torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
}

torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const AttentionPlan& plan, const torch::Tensor& perm,
                     const torch::Tensor& inverse_perm) {
  if (segment_attention_supported(q, k, v))
    return segment_attention(q, k, v, plan, perm.defined() ? inverse_perm : torch::Tensor());
  const int64_t heads = q.size(1), kv_heads = k.size(1), head_dim = q.size(2);
  std::vector<torch::Tensor> outputs;
  outputs.reserve(plan.buckets.size());
  for (const auto& b : plan.buckets) {
    auto rows = perm.defined() ? inverse_perm.index_select(0, b.gather) : b.gather;
    auto shape = [&](const torch::Tensor& t, int64_t h) {  // -> (segments, h, capacity, dh)
      return t.index_select(0, rows).view({b.segments, b.capacity, h, head_dim}).transpose(1, 2);
    };
    auto qb = shape(q, heads);
    auto kb = shape(k, kv_heads);
    auto vb = shape(v, kv_heads);
    if (kv_heads != heads) {
      // Each key/value head serves heads / kv_heads consecutive query heads: an expanded view
      // copied once (repeat_interleave with a scalar reads a size back from a GPU in 1.13).
      auto share = [&](const torch::Tensor& t) {
        return t.unsqueeze(2)
            .expand({b.segments, kv_heads, heads / kv_heads, b.capacity, head_dim})
            .reshape({b.segments, heads, b.capacity, head_dim});
      };
      kb = share(kb);
      vb = share(vb);
    }
#if TORCH_VERSION_MAJOR >= 2
    auto out = at::scaled_dot_product_attention(qb, kb, vb, b.allowed);
#else
    auto scores = torch::matmul(qb, kb.transpose(-1, -2))
                      .mul_(1.0 / std::sqrt(static_cast<double>(head_dim)));
    scores.masked_fill_(b.allowed.logical_not(), -std::numeric_limits<float>::infinity());
    auto out = torch::matmul(torch::softmax(scores, -1), vb);
#endif
    out = out.transpose(1, 2).reshape({b.segments * b.capacity, heads * head_dim});
    outputs.push_back(out.index_select(0, b.valid));
  }
  auto joined = outputs.size() == 1 ? outputs[0] : torch::cat(outputs, 0);
  auto index = perm.defined() ? plan.output_index.index_select(0, perm) : plan.output_index;
  return joined.index_select(0, index);
}

}  // namespace lol
