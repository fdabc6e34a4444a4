// The CPU segment-attention kernel against attend()'s LibTorch expressions (padded buckets,
// masked_fill, softmax, autograd): outputs and the gradients of q, k and v, over segments
// shorter and longer than a query block, router-only keys, a band, grouped key heads, permuted
// rows and strided inputs; and the same bits on one thread and two.
#include "model/segment_attention.h"

#include "helpers.h"
#include "util/runtime.h"

namespace lol {
namespace {

struct Case {
  std::vector<int64_t> lengths;
  int64_t heads, kv_heads, band;
  bool permuted;
};

struct Result {
  torch::Tensor out, dq, dk, dv;
};

// attend() on fixed random inputs with the kernel on or off; v is a strided view, as the
// value part of a fused q|k|v product is.
Result run(const Case& c, bool kernel, int threads) {
  torch::manual_seed(7);
  const int64_t dh = 16;
  std::vector<Segment> segments;
  int64_t n = 0;
  for (int64_t len : c.lengths) {
    segments.push_back({n, len});
    n += len;
  }
  std::vector<uint8_t> router_only(n);
  auto flags = torch::rand({n}) < 0.2;
  for (int64_t t = 0; t < n; ++t) router_only[t] = flags[t].item<bool>();
  const auto plan = build_attention_plan(segments, router_only, n, c.band, torch::kCPU);
  torch::Tensor perm, inverse;
  if (c.permuted) {
    perm = torch::randperm(n, torch::kInt64);
    inverse = torch::argsort(perm);
  }
  auto q = torch::randn({n, c.heads, dh}).requires_grad_(true);
  auto k = torch::randn({n, c.kv_heads, dh}).requires_grad_(true);
  auto wide = torch::randn({n, c.kv_heads + 1, dh}).requires_grad_(true);
  auto v = wide.narrow(1, 1, c.kv_heads);
  auto weight = torch::randn({n, c.heads * dh});
  set_segment_attention_enabled(kernel);
  configure_runtime(threads);
  EXPECT_EQ(segment_attention_supported(q, k, v), kernel);
  auto out = attend(q, k, v, plan, perm, inverse);
  (out * weight).sum().backward();
  set_segment_attention_enabled(true);
  return {out.detach(), q.grad(), k.grad(), wide.grad().narrow(1, 1, c.kv_heads)};
}

TEST(SegmentAttention, KernelMatchesTheLibTorchExpressionsForwardAndBackward) {
  const int before = at::get_num_threads();
  const std::vector<Case> cases = {
      {{5, 1, 150, 64, 65, 30}, 4, 4, 0, false},  // blocks of 64 queries, a lone token
      {{200, 17, 90}, 4, 2, 0, true},             // grouped key heads, permuted rows
      {{130, 40, 7}, 2, 1, 37, false},            // a band shorter than a query block
      {{300}, 4, 2, 100, true},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto fast = run(cases[i], true, 2);
    const auto slow = run(cases[i], false, 2);
    const auto one_thread = run(cases[i], true, 1);
    for (auto [name, a, b] : {std::tuple{"out", fast.out, slow.out},
                              {"dq", fast.dq, slow.dq},
                              {"dk", fast.dk, slow.dk},
                              {"dv", fast.dv, slow.dv}}) {
      EXPECT_TRUE(torch::allclose(a, b, 1e-4, 1e-5))
          << "case " << i << " " << name << ": max difference "
          << (a - b).abs().max().item<float>();
    }
    EXPECT_TRUE(torch::equal(fast.out, one_thread.out)) << "case " << i;
    EXPECT_TRUE(torch::equal(fast.dq, one_thread.dq)) << "case " << i;
    EXPECT_TRUE(torch::equal(fast.dk, one_thread.dk)) << "case " << i;
  }
  configure_runtime(before);
}

}  // namespace
}  // namespace lol
