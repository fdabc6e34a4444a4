// The fused CPU inference loops against the LibTorch expressions they replace (which run for
// other dtypes and devices), and the vectorised exp and softmax under them.
#include "model/cpu_fast.h"

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "helpers.h"
#include "model/attention.h"
#include "model/block.h"
#include "util/runtime.h"

namespace lol {
namespace {

// The same call in float64, which the fused loops never take (the LibTorch expressions), and
// in fp32 without gradients (the fused loop).
template <typename F>
std::pair<torch::Tensor, torch::Tensor> both_paths(F f) {
  auto slow = f(torch::kFloat64).to(torch::kFloat32);
  torch::NoGradGuard off;
  return {slow, f(torch::kFloat32)};
}

TEST(GoldenKernels, NormScaleShiftSwigluRotaryAndGateMatchTheLibTorchExpressions) {
  torch::manual_seed(21);
  const int before = at::get_num_threads();
  configure_runtime(2);  // 300 rows: split over the threads as in prefill
  for (int64_t n : {1, 5, 300}) {
    auto x = torch::randn({n, 40}) * 3;
    // std::tie, not a structured binding: the lambdas below use slow_norm, and C++17 lambdas
    // cannot capture structured bindings (clang refuses them).
    torch::Tensor slow_norm, fast_norm;
    std::tie(slow_norm, fast_norm) =
        both_paths([&](torch::ScalarType t) { return rms_normalize(x.to(t), 1e-5); });
    EXPECT_LT(testing::max_abs_diff(slow_norm, fast_norm), 1e-5) << "n " << n;
    auto w = torch::rand({40}) + 0.5, gamma = torch::rand({40}) + 0.5, beta = torch::randn({40});
    auto [slow_film, fast_film] = both_paths([&](torch::ScalarType t) {
      auto g = gamma.to(t), b = beta.to(t);
      return BlockImpl::sublayer_input(slow_norm.to(t), {n}, {w.to(t)}, &g, &b);
    });
    EXPECT_LT(testing::max_abs_diff(slow_film, fast_film), 1e-5) << "n " << n;
    auto [slow_plain, fast_plain] = both_paths([&](torch::ScalarType t) {
      return BlockImpl::sublayer_input(slow_norm.to(t), {n}, {w.to(t)}, nullptr, nullptr);
    });
    EXPECT_LT(testing::max_abs_diff(slow_plain, fast_plain), 1e-5) << "n " << n;
    // A routed depth's slices, each with its own block's norm weight.
    if (n >= 5) {
      const std::vector<int64_t> counts{n / 5, n - n / 5 - 1, 1};
      const std::vector<torch::Tensor> weights{torch::rand({40}) + 0.5, torch::rand({40}) + 0.5,
                                               torch::rand({40}) + 0.5};
      auto [slow, fast] = both_paths([&](torch::ScalarType t) {
        auto g = gamma.to(t), b = beta.to(t);
        std::vector<torch::Tensor> ws;
        for (const auto& weight : weights) ws.push_back(weight.to(t));
        return BlockImpl::sublayer_input(slow_norm.to(t), counts, ws, &g, &b);
      });
      auto expected = slow_norm.narrow(0, counts[0], counts[1]) * weights[1] * gamma + beta;
      EXPECT_LT(testing::max_abs_diff(slow.narrow(0, counts[0], counts[1]), expected), 1e-5);
      EXPECT_LT(testing::max_abs_diff(slow, fast), 1e-5) << "n " << n;
    }
    // Gates spanning the exp's whole range, and past it (+-100: silu saturates to 0 and x).
    auto gate_up = torch::randn({n, 2 * 24}) * 4;
    gate_up.index_put_({0, 0}, 100.0);
    gate_up.index_put_({0, 1}, -100.0);
    auto [slow_glu, fast_glu] =
        both_paths([&](torch::ScalarType t) { return swiglu(gate_up.to(t)); });
    EXPECT_LT(testing::max_abs_diff(slow_glu, fast_glu), 1e-5 * slow_glu.abs().max().item<double>())
        << "n " << n;
    // q cut from a fused q|k|v, as the blocks do: a strided view.
    auto fused = torch::randn({n, 3 * 4 * 16});
    auto positions = torch::randint(0, 1000, {n}, torch::kInt64);
    auto rotary = Rotary::at_positions(positions, 16, 10000.0);
    auto [slow_rot, fast_rot] = both_paths([&](torch::ScalarType t) {
      auto q = fused.to(t).narrow(1, 0, 4 * 16).reshape({n, 4, 16});
      EXPECT_FALSE(q.is_contiguous() && n > 1);
      return rotary.apply(q);
    });
    EXPECT_LT(testing::max_abs_diff(slow_rot, fast_rot), 1e-5) << "n " << n;
    EXPECT_TRUE(fast_rot.is_contiguous());
    // The routed core's gated residual, a gate per row (0 keeps x, 1 takes y).
    auto y = torch::randn({n, 40}), gates = torch::rand({n});
    gates.index_put_({0}, 0.0);
    auto [slow_gate, fast_gate] = both_paths(
        [&](torch::ScalarType t) { return gated_residual(x.to(t), y.to(t), gates.to(t)); });
    EXPECT_LT(testing::max_abs_diff(slow_gate, x + gates.unsqueeze(1) * (y - x)), 1e-5);
    EXPECT_LT(testing::max_abs_diff(slow_gate, fast_gate), 1e-5) << "n " << n;
    EXPECT_TRUE(torch::equal(fast_gate[0], x[0]));
  }
  configure_runtime(before);
  // Training (gradients on) never takes the fused loops, which autograd cannot see through.
  auto x = torch::randn({3, 8});
  {
    torch::AutoGradMode on(true);
    EXPECT_FALSE(cpu_fast_path({&x}));
  }
  torch::NoGradGuard off;
  EXPECT_TRUE(cpu_fast_path({&x}));
  EXPECT_TRUE(cpu_fast_path({&x, nullptr}));  // absent optional tensors are fine
  auto strided = x.t();
  EXPECT_FALSE(cpu_fast_path({&strided}));
}

// exp_approx against std::exp over its whole range (every 1/64 from -87 to 88 and 20000 random
// points), its edges, and softmax_row against LibTorch's softmax with masked (-inf) scores.
TEST(GoldenKernels, VectorisedExpAndSoftmaxMatchTheLibrary) {
  std::vector<float> xs;
  for (int i = -87 * 64; i <= 88 * 64; ++i) xs.push_back(static_cast<float>(i) / 64.0f);
  auto random = (torch::rand({20000}) * 175 - 87).contiguous();
  for (int64_t i = 0; i < random.numel(); ++i) xs.push_back(random[i].item<float>());
  std::vector<float> ys(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) ys[i] = exp_approx(xs[i]);  // a loop that vectorises
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double exact = std::exp(static_cast<double>(xs[i]));
    worst = std::max(worst, std::abs(ys[i] - exact) / exact);
  }
  EXPECT_LT(worst, 1.5e-7);  // about one float ulp
  EXPECT_EQ(exp_approx(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(exp_approx(-100.0f), 0.0f);
  EXPECT_EQ(exp_approx(0.0f), 1.0f);
  EXPECT_TRUE(std::isfinite(exp_approx(1000.0f)));
  EXPECT_TRUE(std::isnan(exp_approx(std::numeric_limits<float>::quiet_NaN())));

  torch::manual_seed(4);
  for (int64_t n : {1, 7, 8, 61, 64}) {
    auto scores = torch::randn({n}) * 6;
    if (n > 1) scores.index_put_({n / 2}, -std::numeric_limits<float>::infinity());
    std::vector<float> out(static_cast<size_t>(n));
    softmax_row(scores.data_ptr<float>(), out.data(), n);
    auto got = torch::from_blob(out.data(), {n}).clone();
    auto expected = torch::softmax(scores.to(torch::kFloat64), 0).to(torch::kFloat32);
    EXPECT_LT(testing::max_abs_diff(got, expected), 1e-6) << "n " << n;
    if (n > 1) {
      EXPECT_EQ(out[static_cast<size_t>(n / 2)], 0.0f);
    }
  }
}

}  // namespace
}  // namespace lol
