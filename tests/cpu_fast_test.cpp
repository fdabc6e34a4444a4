// The fused CPU inference loops against the LibTorch expressions they replace (which run
// whenever gradients are on).
#include "model/cpu_fast.h"

#include "helpers.h"
#include "model/attention.h"
#include "model/block.h"
#include "util/runtime.h"

namespace lol {
namespace {

// The same call with gradients on (LibTorch ops) and off (fused loop).
template <typename F>
std::pair<torch::Tensor, torch::Tensor> both_paths(F f) {
  torch::Tensor slow;
  {
    torch::AutoGradMode on(true);
    slow = f().detach();
  }
  torch::NoGradGuard off;
  return {slow, f()};
}

TEST(GoldenKernels, NormScaleShiftSwigluAndRotaryMatchTheLibTorchExpressions) {
  torch::manual_seed(21);
  const int before = at::get_num_threads();
  configure_runtime(2);  // 300 rows: split over the threads as in prefill
  for (int64_t n : {1, 5, 300}) {
    auto x = torch::randn({n, 40}) * 3;
    auto [slow_norm, fast_norm] = both_paths([&] { return rms_normalize(x, 1e-5); });
    EXPECT_LT(testing::max_abs_diff(slow_norm, fast_norm), 1e-5) << "n " << n;
    RMSNorm norm(40, 1e-5);
    norm->weight.data().uniform_(0.5, 1.5);
    auto gamma = torch::rand({40}) + 0.5, beta = torch::randn({40});
    auto [slow_film, fast_film] =
        both_paths([&] { return BlockImpl::sublayer_input(slow_norm, norm, &gamma, &beta); });
    EXPECT_LT(testing::max_abs_diff(slow_film, fast_film), 1e-5) << "n " << n;
    auto [slow_plain, fast_plain] =
        both_paths([&] { return BlockImpl::sublayer_input(slow_norm, norm, nullptr, nullptr); });
    EXPECT_LT(testing::max_abs_diff(slow_plain, fast_plain), 1e-5) << "n " << n;
    auto gate_up = torch::randn({n, 2 * 24}) * 4;
    auto [slow_glu, fast_glu] = both_paths([&] { return swiglu(gate_up); });
    EXPECT_LT(testing::max_abs_diff(slow_glu, fast_glu), 1e-5) << "n " << n;
    // q cut from a fused q|k|v, as the blocks do: a strided view.
    auto fused = torch::randn({n, 3 * 4 * 16});
    auto q = fused.narrow(1, 0, 4 * 16).reshape({n, 4, 16});
    ASSERT_FALSE(q.is_contiguous() && n > 1);
    auto positions = torch::randint(0, 1000, {n}, torch::kInt64);
    auto rotary = Rotary::at_positions(positions, 16, 10000.0);
    auto [slow_rot, fast_rot] = both_paths([&] { return rotary.apply(q); });
    EXPECT_LT(testing::max_abs_diff(slow_rot, fast_rot), 1e-5) << "n " << n;
    EXPECT_TRUE(fast_rot.is_contiguous());
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

}  // namespace
}  // namespace lol
