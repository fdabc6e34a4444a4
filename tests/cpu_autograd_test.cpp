// The fused CPU training functions (RMS normalisation, SwiGLU) against the LibTorch expressions
// they replace, evaluated in float64 under autograd: outputs and input gradients for a random
// upstream gradient, on one thread and two (the same bits), and the block functions taking
// them whenever gradients are on.
#include "model/cpu_autograd.h"

#include <set>

#include "helpers.h"
#include "model/attention.h"
#include "model/block.h"
#include "model/sliced_linear.h"
#include "util/runtime.h"

namespace lol {
namespace {

struct Result {
  torch::Tensor out, grad;
};

// f(x) and d(sum(f(x) * upstream))/dx.
Result forward_backward(const std::function<torch::Tensor(const torch::Tensor&)>& f,
                        const torch::Tensor& x, const torch::Tensor& upstream) {
  const auto r = testing::output_and_gradients(
      {x}, x.scalar_type(), upstream,
      [&](const std::vector<torch::Tensor>& leaves) { return f(leaves[0]); });
  return {r[0], r[1]};
}

// Rows more than one thread chunk, a row width off the vector lanes.
void expect_matches_reference(const std::function<torch::Tensor(const torch::Tensor&)>& fused,
                              const std::function<torch::Tensor(const torch::Tensor&)>& reference,
                              int64_t rows, int64_t in_cols, int64_t out_cols) {
  torch::manual_seed(3);
  auto x = torch::randn({rows, in_cols}) * 2;
  auto upstream = torch::randn({rows, out_cols});
  const int before = at::get_num_threads();
  configure_runtime(1);
  auto one = forward_backward(fused, x, upstream);
  configure_runtime(2);
  auto two = forward_backward(fused, x, upstream);
  configure_runtime(before);
  auto ref = forward_backward(reference, x.to(torch::kFloat64), upstream.to(torch::kFloat64));
  EXPECT_TRUE(torch::equal(one.out, two.out));
  EXPECT_TRUE(torch::equal(one.grad, two.grad));
  EXPECT_LT(testing::max_abs_diff(one.out, ref.out), 1e-5 * ref.out.abs().max().item<double>());
  EXPECT_LT(testing::max_abs_diff(one.grad, ref.grad), 1e-5 * ref.grad.abs().max().item<double>());
}

TEST(GoldenKernels, FusedRmsNormalizeMatchesTheExpressionForwardAndBackward) {
  const double eps = 1e-5;
  expect_matches_reference([&](const torch::Tensor& x) { return rms_normalize_autograd(x, eps); },
                           [&](const torch::Tensor& x) {
                             return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps);
                           },
                           203, 52, 52);
}

TEST(GoldenKernels, FusedSwigluMatchesTheExpressionForwardAndBackward) {
  expect_matches_reference([](const torch::Tensor& x) { return swiglu_autograd(x); },
                           [](const torch::Tensor& x) {
                             const int64_t f = x.size(-1) / 2;
                             return torch::silu(x.narrow(-1, 0, f)) * x.narrow(-1, f, f);
                           },
                           203, 2 * 45, 45);
}

// Norm weights alone, with FiLM's scale, and with FiLM's scale and shift, over three slices of
// rows with their own weights (as a routed depth's experts; slice edges inside thread chunks):
// the output and the gradients of x and of every vector.
TEST(GoldenKernels, FusedScaleShiftMatchesTheExpressionForwardAndBackward) {
  const int64_t n = 203, d = 52;
  const std::vector<int64_t> counts{70, 1, 132};
  torch::manual_seed(9);
  const auto x = torch::randn({n, d}), upstream = torch::randn({n, d});
  const std::vector<torch::Tensor> inputs{x,
                                          torch::randn({d}),
                                          torch::randn({d}),
                                          torch::randn({d}),
                                          torch::randn({d}),
                                          torch::randn({d})};
  for (int variant = 0; variant < 3; ++variant) {
    const bool film = variant >= 1, shift = variant == 2;
    auto run = [&](torch::ScalarType dtype, bool fused, int threads) {
      // leaves: x, w0, w1, w2, gamma, beta
      auto f = [&](const std::vector<torch::Tensor>& leaves) {
        const std::vector<torch::Tensor> ws{leaves[1], leaves[2], leaves[3]};
        const auto *gamma = film ? &leaves[4] : nullptr, *beta = shift ? &leaves[5] : nullptr;
        if (fused) return scale_shift_autograd(leaves[0], ws, counts, gamma, beta);
        std::vector<torch::Tensor> parts;
        for (int64_t s = 0, offset = 0; s < 3; offset += counts[static_cast<size_t>(s)], ++s) {
          auto y = leaves[0].narrow(0, offset, counts[static_cast<size_t>(s)]) *
                   ws[static_cast<size_t>(s)];
          if (gamma) y = y * *gamma;
          if (beta) y = y + *beta;
          parts.push_back(y);
        }
        return torch::cat(parts, 0);
      };
      return testing::output_and_gradients(inputs, dtype, upstream, f, threads);
    };
    auto one = run(torch::kFloat32, true, 1), two = run(torch::kFloat32, true, 2);
    auto ref = run(torch::kFloat64, false, 1);
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_TRUE(torch::equal(one[i], two[i])) << "variant " << variant << " tensor " << i;
      EXPECT_LT(testing::max_abs_diff(one[i], ref[i]),
                1e-5 * std::max(1.0, ref[i].abs().max().item<double>()))
          << "variant " << variant << " tensor " << i;
    }
  }
}

// Three slices of rows (one of a single row), each through its own weight of two stacked
// parts, against a linear per slice over the cat of its parts and a cat of the outputs: the
// output and the gradients of x and of every part.
TEST(GoldenKernels, SlicedLinearMatchesPerSliceLinearsForwardAndBackward) {
  const int64_t n = 203, in = 24;
  const std::vector<int64_t> counts{50, 1, 152};
  torch::manual_seed(13);
  std::vector<torch::Tensor> inputs{torch::randn({n, in})};
  for (int s = 0; s < 3; ++s) {
    inputs.push_back(torch::randn({10, in}));
    inputs.push_back(torch::randn({6, in}));
  }
  const auto upstream = torch::randn({n, 16});
  auto run = [&](torch::ScalarType dtype, bool fused) {
    auto f = [&](const std::vector<torch::Tensor>& leaves) {
      if (fused) {
        std::vector<SlicedWeight> weights;
        for (size_t s = 0; s < 3; ++s) {
          std::vector<torch::Tensor> parts{leaves[1 + 2 * s], leaves[2 + 2 * s]};
          weights.push_back({parts, torch::cat(parts, 0).detach()});
        }
        return sliced_linear(leaves[0], counts, weights);
      }
      std::vector<torch::Tensor> outs;
      for (int64_t s = 0, offset = 0; s < 3; offset += counts[static_cast<size_t>(s)], ++s) {
        auto w = torch::cat(
            {leaves[static_cast<size_t>(1 + 2 * s)], leaves[static_cast<size_t>(2 + 2 * s)]}, 0);
        outs.push_back(torch::nn::functional::linear(
            leaves[0].narrow(0, offset, counts[static_cast<size_t>(s)]), w));
      }
      return torch::cat(outs, 0);
    };
    return testing::output_and_gradients(inputs, dtype, upstream, f);
  };
  // Every gradient is reached (none is a zero stand-in), fused and reference alike.
  auto fused = run(torch::kFloat32, true), ref = run(torch::kFloat64, false);
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_GT(ref[i].abs().max().item<double>(), 0.0) << "tensor " << i;
    EXPECT_LT(testing::max_abs_diff(fused[i], ref[i]), 1e-5 * ref[i].abs().max().item<double>())
        << "tensor " << i;
  }
  // Bad slices are refused with a message.
  EXPECT_THROW(
      sliced_linear(inputs[0], {50, 1, 151},
                    {{{inputs[1]}, inputs[1]}, {{inputs[1]}, inputs[1]}, {{inputs[1]}, inputs[1]}}),
      std::exception);
}

// q cut from a fused q|k|v (a strided view), as attention rotates it.
TEST(GoldenKernels, FusedRotaryMatchesTheExpressionForwardAndBackward) {
  const int64_t heads = 3, dh = 10, n = 203;
  torch::manual_seed(5);
  const auto cos = torch::randn({n, dh / 2}), sin = torch::randn({n, dh / 2});
  auto q_of = [&](const torch::Tensor& fused) {
    return fused.narrow(1, 0, heads * dh).reshape({n, heads, dh});
  };
  expect_matches_reference(
      [&](const torch::Tensor& x) {
        auto q = q_of(x);
        EXPECT_FALSE(q.is_contiguous());
        return rotary_autograd(q, cos, sin).reshape({n, heads * dh});
      },
      [&](const torch::Tensor& x) {
        auto q = q_of(x);
        auto x1 = q.narrow(-1, 0, dh / 2), x2 = q.narrow(-1, dh / 2, dh / 2);
        auto c = cos.unsqueeze(1).to(x.scalar_type()), s = sin.unsqueeze(1).to(x.scalar_type());
        return torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1).reshape({n, heads * dh});
      },
      n, 3 * heads * dh, heads * dh);
}

// The block functions and attention's rotary route gradient-tracking fp32 CPU inputs through the
// fused functions (and only those: a double input keeps the expression).
TEST(CpuAutograd, BlockFunctionsTakeTheFusedFunctionsUnderGradients) {
  auto x = torch::randn({4, 8}, torch::requires_grad());
  EXPECT_NE(rms_normalize(x, 1e-5).grad_fn()->name().find("RmsNormalize"), std::string::npos);
  EXPECT_NE(swiglu(x).grad_fn()->name().find("Swiglu"), std::string::npos);
  const auto rotary = Rotary::at_positions(torch::arange(4, torch::kInt64), 8, 10000.0);
  auto q = torch::randn({4, 2, 8}, torch::requires_grad());
  EXPECT_NE(rotary.apply(q).grad_fn()->name().find("Rotary"), std::string::npos);
  auto d = torch::randn({4, 8}, torch::dtype(torch::kFloat64).requires_grad(true));
  EXPECT_EQ(rms_normalize(d, 1e-5).grad_fn()->name().find("RmsNormalize"), std::string::npos);
}

// The names of the autograd nodes behind t.
std::set<std::string> graph_nodes(const torch::Tensor& t) {
  std::set<std::string> names;
  std::vector<torch::autograd::Node*> stack{t.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  while (!stack.empty()) {
    auto* node = stack.back();
    stack.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    names.insert(node->name());
    for (const auto& edge : node->next_edges()) stack.push_back(edge.function.get());
  }
  return names;
}

// Two blocks over two slices of rows under gradients: every product one sliced product and the
// norm weights with FiLM one scale-shift node, so no rows are concatenated.
TEST(CpuAutograd, RoutedBlocksTakeTheSlicedProductsUnderGradients) {
  const auto c = testing::tiny_config();
  Block a(c), b(c);
  auto x = torch::randn({7, c.d_model}, torch::requires_grad());
  FilmRows film{torch::ones({c.d_model}, torch::requires_grad()), torch::zeros({c.d_model}),
                torch::ones({c.d_model}), torch::zeros({c.d_model})};
  auto y = run_slices(x, {{a, 0, 3}, {b, 3, 4}}, &film, [](const BlockImpl::QKV& qkv) {
    return qkv.v.repeat({1, qkv.q.size(1) / qkv.v.size(1), 1}).reshape({qkv.q.size(0), -1});
  });
  const auto names = graph_nodes(y);
  int sliced = 0, scale_shift = 0;
  for (const auto& name : names) {
    sliced += name.find("SlicedLinear") != std::string::npos;
    scale_shift += name.find("ScaleShift") != std::string::npos;
    EXPECT_EQ(name.find("Cat"), std::string::npos) << name;
  }
  EXPECT_EQ(sliced, 1);  // one class of node; four instances
  EXPECT_EQ(scale_shift, 1);
  y.sum().backward();
  for (auto* block : {&a, &b})
    for (const auto& p : (*block)->parameters()) EXPECT_TRUE(p.grad().defined());
}

}  // namespace
}  // namespace lol
