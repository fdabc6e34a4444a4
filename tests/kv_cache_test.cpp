// The CPU attention kernel of the decode cache against the generic (matmul + softmax) path.
#include "infer/kv_cache.h"

#include <random>

#include "helpers.h"
#include "util/runtime.h"

namespace lol {
namespace {

// Rows of different lengths (one router-only), GQA, with and without a band; the fp32 cache
// runs the CPU kernel, a float64 cache the generic path. Long enough rows that the kernel
// splits its (row, head) items over two threads, and neither the split nor streamed reads may
// change a bit. Head sizes with a compiled value pass (32, 64, 128) and one without (48).
class KvCacheKernel : public ::testing::TestWithParam<int64_t> {};

TEST_P(KvCacheKernel, CpuKernelMatchesTheGenericPathOnAnyThreadCount) {
  const int64_t B = 6, H = 8, Hkv = 4, dh = GetParam();
  std::mt19937 rng(11);
  std::vector<int64_t> lengths;
  for (int64_t b = 0; b < B; ++b)
    lengths.push_back(std::uniform_int_distribution<int64_t>(300, 900)(rng));
  torch::manual_seed(12);
  std::vector<torch::Tensor> keys, values;
  for (auto n : lengths) {
    keys.push_back(torch::randn({n, Hkv, dh}));
    values.push_back(torch::randn({n, Hkv, dh}));
  }
  auto q = torch::randn({B, H, dh}), k = torch::randn({B, Hkv, dh}), v = torch::randn({B, Hkv, dh});
  std::vector<int64_t> positions = lengths;
  std::vector<uint8_t> router_only(B, 0);
  router_only[2] = 1;
  // v as the decoder passes it: columns of a wider fused product (rows apart by its width).
  auto wide = torch::cat({torch::randn({B, 16}), v.reshape({B, Hkv * dh})}, 1);
  auto v_view = wide.narrow(1, 16, Hkv * dh).reshape({B, Hkv, dh});
  ASSERT_FALSE(v_view.is_contiguous());
  ASSERT_TRUE(torch::equal(v_view, v));
  auto run = [&](torch::ScalarType dtype, int threads, int64_t band, bool streamed = false,
                 bool strided_v = false) {
    KVCache cache(B, Hkv, dh, torch::TensorOptions().dtype(dtype), streamed);
    for (int64_t b = 0; b < B; ++b) {
      std::vector<int64_t> pos(lengths[b]);
      for (int64_t i = 0; i < lengths[b]; ++i) pos[i] = i;
      cache.append(b, keys[b].to(dtype), values[b].to(dtype), pos);
    }
    configure_runtime(threads);
    auto out = cache.attend(q.to(dtype), k.to(dtype), strided_v ? v_view : v.to(dtype), positions,
                            router_only, band);
    for (int64_t b = 0; b < B; ++b)
      EXPECT_EQ(cache.length(b), lengths[b] + (router_only[b] ? 0 : 1));
    return out;
  };
  const int before = at::get_num_threads();
  for (int64_t band : {0, 200}) {
    auto one = run(torch::kFloat32, 1, band);
    auto two = run(torch::kFloat32, 2, band);
    auto reference = run(torch::kFloat64, 1, band);
    EXPECT_TRUE(torch::equal(one, two)) << "band " << band;
    // Reading the cache as a stream (non-temporal) is a hint to the processor only.
    EXPECT_TRUE(torch::equal(two, run(torch::kFloat32, 2, band, true))) << "band " << band;
    // Values read in place from a strided view store the same as a contiguous copy.
    EXPECT_TRUE(torch::equal(two, run(torch::kFloat32, 2, band, false, true))) << "band " << band;
    EXPECT_LT(testing::max_abs_diff(two, reference), 1e-5) << "band " << band;
  }
  configure_runtime(before);
}

INSTANTIATE_TEST_SUITE_P(GoldenKernels, KvCacheKernel, ::testing::Values(32, 48, 64, 128),
                         [](const ::testing::TestParamInfo<int64_t>& p) {
                           return "HeadSize" + std::to_string(p.param);
                         });

}  // namespace
}  // namespace lol
