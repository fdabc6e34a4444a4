// The packed inference kernel against torch::linear, and the Projection that dispatches to it
// (and pads rows under CPU autocast).
#include "model/packed_gemm.h"

#include <set>

#include "helpers.h"
#include "model/block.h"
#include "train/precision.h"
#include "util/runtime.h"

namespace lol {
namespace {

// The panel widths this CPU's kernels take: 8 (AVX2), and 16 with AVX-512.
std::vector<int64_t> panel_widths() {
  std::vector<int64_t> widths;
  for (int64_t w : {8, 16})
    if (w <= panel_width_supported()) widths.push_back(w);
  return widths;
}

TEST(GoldenKernels, PackedGemmMatchesLinearForEveryRowCountAndRaggedShapes) {
  if (!packed_gemm_supported()) GTEST_SKIP() << "CPU without AVX2+FMA: projections use BLAS";
  torch::manual_seed(3);
  for (int64_t width : panel_widths())
    for (int64_t n : {1, 8, 13, 40, 77})
      for (int64_t k : {1, 7, 64, 129}) {
        auto w = torch::randn({n, k});
        auto panels = pack_panels(w, width);
        EXPECT_EQ(panels.sizes(), (std::vector<int64_t>{(n + width - 1) / width, k, width}));
        // Every remainder of the 4- and 8-row tiles, and prefill-sized blocks of rows.
        std::vector<int64_t> rows;
        for (int64_t m = 1; m <= 33; ++m) rows.push_back(m);
        for (int64_t m : {64, 130, 517}) rows.push_back(m);
        for (int64_t m : rows) {
          auto x = torch::randn({m, k});
          auto expected =
              torch::nn::functional::linear(x.to(torch::kFloat64), w.to(torch::kFloat64));
          auto got = packed_gemm(x, panels, n);
          ASSERT_EQ(got.sizes(), expected.sizes());
          EXPECT_LT(testing::max_abs_diff(got, expected), 1e-4 * std::sqrt(static_cast<double>(k)))
              << "width " << width << " m " << m << " n " << n << " k " << k;
        }
      }
}

// Both kernels sum every column over k in order with one FMA per k: 16-column panels (AVX-512)
// give the bits of 8-column ones (AVX2), so a model decodes alike on either kind of CPU.
TEST(PackedGemm, SixteenColumnPanelsGiveTheBitsOfEightColumnOnes) {
  if (panel_width_supported() < 16) GTEST_SKIP() << "CPU without AVX-512: 8-column panels only";
  torch::manual_seed(7);
  EXPECT_EQ(pack_panels(torch::randn({40, 8})).size(2), 16);  // the default is the widest
  for (int64_t n : {13, 768})
    for (int64_t k : {7, 256})
      for (int64_t m : {1, 2, 7, 8, 9, 32, 300}) {
        auto w = torch::randn({n, k}), x = torch::randn({m, k});
        EXPECT_TRUE(torch::equal(packed_gemm(x, pack_panels(w, 8), n),
                                 packed_gemm(x, pack_panels(w, 16), n)))
            << "m " << m << " n " << n << " k " << k;
      }
}

// Large products split their column panels over the threads; every column is still one
// thread's sum in the same order, so the result does not depend on the thread count.
TEST(PackedGemm, SplittingOverThreadsGivesTheSameBits) {
  if (!packed_gemm_supported()) GTEST_SKIP() << "CPU without AVX2+FMA: projections use BLAS";
  torch::manual_seed(5);
  auto w = torch::randn({1408, 256});
  const int before = at::get_num_threads();
  for (int64_t width : panel_widths()) {
    auto panels = pack_panels(w, width);
    for (int64_t m : {1, 5, 12, 32, 300}) {
      auto x = torch::randn({m, 256});
      at::set_num_threads(1);
      auto one = packed_gemm(x, panels, 1408);
      configure_runtime(2);
      auto two = packed_gemm(x, panels, 1408);
      EXPECT_TRUE(torch::equal(one, two)) << "width " << width << " m " << m;
      EXPECT_LT(testing::max_abs_diff(two, torch::nn::functional::linear(x.to(torch::kFloat64),
                                                                         w.to(torch::kFloat64))),
                1e-4 * 16);
    }
  }
  configure_runtime(before);
}

// A routed depth's experts in one grouped call: each group's rows get exactly what packed_gemm
// gives them alone (the same sums in the same order), whatever the row counts, the split of
// the (group, panel) pairs over the threads, or a ragged column count.
TEST(PackedGemm, GroupedProductsGiveEachGroupTheBitsOfItsOwnProduct) {
  if (!packed_gemm_supported()) GTEST_SKIP() << "CPU without AVX2+FMA: projections use BLAS";
  torch::manual_seed(6);
  const int before = at::get_num_threads();
  for (int64_t width : panel_widths())
    for (int64_t n : {768, 13})
      for (const auto& rows :
           std::vector<std::vector<int64_t>>{{1}, {2, 1, 5, 1}, {14, 9, 6, 3}, {1, 32}}) {
        std::vector<torch::Tensor> xs, panels, weights;
        for (int64_t m : rows) {
          weights.push_back(torch::randn({n, 256}));
          panels.push_back(pack_panels(weights.back(), width));
          xs.push_back(torch::randn({m, 256}));
        }
        for (int threads : {1, 2}) {
          configure_runtime(threads);
          auto grouped = grouped_packed_gemm(xs, panels, n);
          int64_t row = 0;
          for (size_t g = 0; g < xs.size(); ++g) {
            auto alone = packed_gemm(xs[g], panels[g], n);
            EXPECT_TRUE(torch::equal(grouped.narrow(0, row, xs[g].size(0)), alone))
                << "width " << width << " n " << n << " group " << g << " threads " << threads;
            EXPECT_LT(testing::max_abs_diff(
                          alone, torch::nn::functional::linear(xs[g].to(torch::kFloat64),
                                                               weights[g].to(torch::kFloat64))),
                      1e-4 * 16);
            row += xs[g].size(0);
          }
          EXPECT_EQ(grouped.size(0), row);
        }
      }
  configure_runtime(before);
}

TEST(PackedGemm, ProjectionRepacksWhenTheWeightChanges) {
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
  auto many = torch::randn({300, 16});  // prefill-sized
  EXPECT_LT(testing::max_abs_diff(projection.apply(many, {a, b}),
                                  torch::nn::functional::linear(many, fused)),
            1e-5);
  {  // under CPU autocast the product is LibTorch's, in bf16
    AutocastGuard autocast(torch::kCPU, true);
    auto y = projection.apply(many, {a, b});
    EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
    EXPECT_LT(
        testing::max_abs_diff(y.to(torch::kFloat32), torch::nn::functional::linear(many, fused)),
        0.25);
  }
  {  // with gradients: BLAS through autograd, which the packed kernel does not serve
    torch::AutoGradMode grad(true);
    auto w = a.clone().requires_grad_(true);
    auto y = projection.apply(many, {w, b});
    y.sum().backward();
    EXPECT_TRUE(w.grad().defined());
  }
}

// Under CPU autocast a product runs over autocast_rows(n) rows, so that oneDNN compiles a kernel
// for a bounded set of shapes however the routed slices' sizes change: at most 1/8 more rows,
// eight sizes per power of two, and the padding changes neither the product nor its gradients.
TEST(Projection, AutocastRowsAreBoundedAndThePaddingChangesNothing) {
  std::set<int64_t> sizes;
  for (int64_t n = 1; n <= 65536; ++n) {
    const int64_t padded = autocast_rows(n);
    ASSERT_GE(padded, n);
    if (n <= 64) {
      ASSERT_EQ(padded, n);
    }
    ASSERT_LE(8 * padded, 9 * n) << n;
    ASSERT_EQ(autocast_rows(padded), padded) << n;
    sizes.insert(padded);
  }
  EXPECT_LE(sizes.size(), 64u + 8u * 10u);  // up to 64, then eight per octave up to 2^16

  torch::manual_seed(5);
  auto a = torch::randn({24, 16}), b = torch::randn({8, 16});
  Projection projection;
  for (int64_t rows : {7, 65, 300, 1000}) {
    ASSERT_GT(autocast_rows(rows) - rows, rows > 64 ? 0 : -1);
    auto x = torch::randn({rows, 16});
    auto grad_out = torch::randn({rows, 32});
    std::vector<torch::Tensor> got, want;
    for (bool padded : {true, false}) {
      auto xg = x.clone().requires_grad_(true);
      auto ag = a.clone().requires_grad_(true);
      torch::Tensor y;
      {
        AutocastGuard autocast(torch::kCPU, true);
        // The reference: LibTorch's product over exactly the rows given.
        y = padded ? projection.apply(xg, {ag, b})
                   : torch::nn::functional::linear(xg, torch::cat({ag, b}, 0));
      }
      ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
      ASSERT_EQ(y.size(0), rows);
      (y.to(torch::kFloat32) * grad_out).sum().backward();
      auto& out = padded ? got : want;
      out = {y.to(torch::kFloat32), xg.grad(), ag.grad()};
    }
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-2, 1e-2))
          << rows << " rows, output " << i << ": " << testing::max_abs_diff(got[i], want[i]);
  }
}

}  // namespace
}  // namespace lol
