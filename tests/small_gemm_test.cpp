// The packed few-row kernel against torch::linear, and the Projection that dispatches to it.
#include "model/small_gemm.h"

#include "helpers.h"
#include "util/runtime.h"

namespace lol {
namespace {

TEST(GoldenKernels, SmallGemmMatchesLinearForEveryRowCountAndRaggedShapes) {
  if (!small_gemm_supported()) GTEST_SKIP() << "CPU without AVX2+FMA: projections use BLAS";
  torch::manual_seed(3);
  for (int64_t n : {1, 8, 13, 40, 77})
    for (int64_t k : {1, 7, 64, 129}) {
      auto w = torch::randn({n, k});
      auto panels = pack_panels(w);
      EXPECT_EQ(panels.sizes(), (std::vector<int64_t>{(n + 7) / 8, k, 8}));
      for (int64_t m = 1; m <= kSmallGemmMaxRows; ++m) {
        auto x = torch::randn({m, k});
        auto expected = torch::nn::functional::linear(x.to(torch::kFloat64), w.to(torch::kFloat64));
        auto got = small_gemm(x, panels, n);
        ASSERT_EQ(got.sizes(), expected.sizes());
        EXPECT_LT(testing::max_abs_diff(got, expected), 1e-4 * std::sqrt(static_cast<double>(k)))
            << "m " << m << " n " << n << " k " << k;
      }
    }
}

// Large products split their column panels over the threads; every column is still one
// thread's sum in the same order, so the result does not depend on the thread count.
TEST(SmallGemm, SplittingOverThreadsGivesTheSameBits) {
  if (!small_gemm_supported()) GTEST_SKIP() << "CPU without AVX2+FMA: projections use BLAS";
  torch::manual_seed(5);
  auto w = torch::randn({1408, 256});
  auto panels = pack_panels(w);
  const int before = at::get_num_threads();
  for (int64_t m : {1, 5, 12, 32}) {
    auto x = torch::randn({m, 256});
    at::set_num_threads(1);
    auto one = small_gemm(x, panels, 1408);
    configure_runtime(2);
    auto two = small_gemm(x, panels, 1408);
    EXPECT_TRUE(torch::equal(one, two)) << "m " << m;
    EXPECT_LT(testing::max_abs_diff(
                  two, torch::nn::functional::linear(x.to(torch::kFloat64), w.to(torch::kFloat64))),
              1e-4 * 16);
  }
  configure_runtime(before);
}

TEST(SmallGemm, ProjectionRepacksWhenTheWeightChanges) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  auto a = torch::randn({24, 16}), b = torch::randn({8, 16});
  auto x = torch::randn({3, 16});
  Projection projection;
  auto fused = torch::cat({a, b}, 0);
  EXPECT_LT(
      testing::max_abs_diff(projection.apply(x, {a, b}), torch::nn::functional::linear(x, fused)),
      1e-5);
  a.mul_(-2.0);  // an optimizer step or a load changes a part in place
  fused = torch::cat({a, b}, 0);
  EXPECT_LT(
      testing::max_abs_diff(projection.apply(x, {a, b}), torch::nn::functional::linear(x, fused)),
      1e-5);
  auto many = torch::randn({40, 16});  // more rows than the kernel takes: BLAS
  EXPECT_LT(testing::max_abs_diff(projection.apply(many, {a, b}),
                                  torch::nn::functional::linear(many, fused)),
            1e-5);
}

}  // namespace
}  // namespace lol
