// The row movements of a routed depth (model/routed_rows.h) against the LibTorch expressions
// they replace, in float64 under autograd: the window means and first states against an
// index_add and an index_select, and the
// permutation with the gated residual in token order against the residual in expert order
// permuted back (the form it replaced); outputs and every input gradient for a random upstream
// gradient, on one thread and two (the same bits).
#include "model/routed_rows.h"

#include "helpers.h"

namespace lol {
namespace {

constexpr int64_t kRows = 203, kWidth = 52;

// Windows of uneven lengths tiling the rows in order (one of length 1; more windows than a
// thread chunk) in documents of one to four windows, each row's window and a permutation that
// groups the rows by a random expert.
struct Case {
  WindowPartition part;
  torch::Tensor window_t, perm, inverse;
};

Case make_case() {
  Case c;
  auto& part = c.part;
  const std::vector<int64_t> pattern{7, 1, 13, 4, 9}, windows_per_document{3, 1, 4, 2};
  std::vector<int64_t> lengths, first_token;
  for (int64_t r = 0, i = 0, document = -1, ordinal = 0, document_start = 0; r < kRows; ++i) {
    const int64_t length = std::min(pattern[static_cast<size_t>(i) % pattern.size()], kRows - r);
    if (document < 0 || ordinal == windows_per_document[static_cast<size_t>(document) % 4]) {
      ++document;
      ordinal = 0;
      document_start = r;
    }
    part.windows.push_back(Window{document, ordinal++, r, length});
    lengths.push_back(length);
    first_token.push_back(document_start);
    for (int64_t k = 0; k < length; ++k)
      part.token_window.push_back(static_cast<int64_t>(part.windows.size()) - 1);
    r += length;
  }
  part.token_window_t = c.window_t = torch::tensor(part.token_window, torch::kInt64);
  part.lengths_t = torch::tensor(lengths, torch::kInt64);
  part.first_token_t = torch::tensor(first_token, torch::kInt64);
  torch::manual_seed(5);
  auto expert = torch::randint(0, 4, {kRows}, torch::kInt64);
  c.perm = std::get<1>(expert.sort(/*stable=*/true, 0, /*descending=*/false));
  c.inverse = torch::empty_like(c.perm).scatter_(0, c.perm, torch::arange(kRows));
  return c;
}

// f's output and gradients (testing::output_and_gradients) in `dtype` on `threads` threads.
std::vector<torch::Tensor> run(
    const std::vector<torch::Tensor>& inputs, torch::ScalarType dtype, int threads,
    const torch::Tensor& upstream,
    const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& f) {
  return testing::output_and_gradients(inputs, dtype, upstream, f, threads);
}

void expect_same_and_close(const std::vector<torch::Tensor>& one,
                           const std::vector<torch::Tensor>& two,
                           const std::vector<torch::Tensor>& ref, const std::string& what) {
  ASSERT_EQ(one.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_TRUE(torch::equal(one[i], two[i])) << what << ": tensor " << i;
    EXPECT_LT(testing::max_abs_diff(one[i], ref[i]),
              1e-5 * std::max(1.0, ref[i].abs().max().item<double>()))
        << what << ": tensor " << i;
  }
}

TEST(GoldenRoutedRows, WindowSummariesMatchTheIndexExpressionsForwardAndBackward) {
  const auto c = make_case();
  const auto windows = static_cast<int64_t>(c.part.windows.size());
  torch::manual_seed(11);
  const auto x = torch::randn({kRows, kWidth}) * 2, upstream = torch::randn({2 * windows, kWidth});
  // Both summaries stacked, so one upstream gradient reaches each.
  auto fused = [&](const std::vector<torch::Tensor>& l) {
    const auto s = window_summaries(l[0], c.part);
    return torch::cat({s.means, s.firsts});
  };
  auto means = [&](const torch::Tensor& rows) {
    return torch::zeros({windows, kWidth}, rows.options()).index_add(0, c.window_t, rows) /
           c.part.lengths_t.to(rows.scalar_type()).unsqueeze(1);
  };
  auto expression = [&](const std::vector<torch::Tensor>& l) {
    return torch::cat({means(l[0]), l[0].index_select(0, c.part.first_token_t)});
  };
  const auto one = run({x}, torch::kFloat32, 1, upstream, fused);
  const auto two = run({x}, torch::kFloat32, 2, upstream, fused);
  const auto ref = run({x}, torch::kFloat64, 1, upstream, expression);
  expect_same_and_close(one, two, ref, "summaries");
  // In fp32 the forward is the expressions' arithmetic to the bit.
  EXPECT_TRUE(torch::equal(one[0], run({x}, torch::kFloat32, 1, upstream, expression)[0]));
  // float64 takes the expressions inside window_summaries: the same values.
  expect_same_and_close(run({x}, torch::kFloat64, 1, upstream, fused),
                        run({x}, torch::kFloat64, 2, upstream, fused), ref, "expressions");
  // Only the means used (the first states' gradient undefined): the means' gradient alone.
  auto means_only = [&](const std::vector<torch::Tensor>& l) {
    return window_summaries(l[0], c.part).means;
  };
  const auto half = upstream.narrow(0, 0, windows);
  expect_same_and_close(run({x}, torch::kFloat32, 1, half, means_only),
                        run({x}, torch::kFloat32, 2, half, means_only),
                        run({x}, torch::kFloat64, 1, half,
                            [&](const std::vector<torch::Tensor>& l) { return means(l[0]); }),
                        "means only");
}

// out = (x_p + a_p (y - x_p))[inverse], x_p = x[perm], a_p the gate of each grouped row's window.
torch::Tensor residual_in_expert_order(const torch::Tensor& x, const torch::Tensor& y,
                                       const torch::Tensor& gates, const Case& c) {
  const auto xp = x.index_select(0, c.perm);
  const auto alpha = gates.index_select(0, c.window_t.index_select(0, c.perm));
  return (xp + alpha.unsqueeze(1) * (y - xp)).index_select(0, c.inverse);
}

TEST(GoldenRoutedRows, PermutationAndResidualInTokenOrderMatchTheExpertOrderForm) {
  const auto c = make_case();
  const auto windows = static_cast<int64_t>(c.part.windows.size());
  torch::manual_seed(13);
  // y stands for the blocks' output: a function of the permuted x plus its own leaf, so x's
  // gradient flows through both the permutation and the residual as in a routed depth.
  const std::vector<torch::Tensor> inputs{torch::randn({kRows, kWidth}),
                                          torch::randn({kRows, kWidth}), torch::rand({windows})};
  const auto upstream = torch::randn({kRows, kWidth});
  auto blocks = [](const torch::Tensor& xp, const torch::Tensor& leaf) {
    return xp * leaf + leaf.pow(2);
  };
  auto fused = [&](const std::vector<torch::Tensor>& l) {
    const auto y = blocks(permute_rows(l[0], c.perm, c.inverse), l[1]);
    return routed_residual(l[0], y, l[2], c.window_t, c.inverse);
  };
  auto reference = [&](const std::vector<torch::Tensor>& l) {
    return residual_in_expert_order(l[0], blocks(l[0].index_select(0, c.perm), l[1]), l[2], c);
  };
  const auto one = run(inputs, torch::kFloat32, 1, upstream, fused);
  const auto two = run(inputs, torch::kFloat32, 2, upstream, fused);
  const auto ref = run(inputs, torch::kFloat64, 1, upstream, reference);
  expect_same_and_close(one, two, ref, "permuted");
  // float64 takes the expressions of routed_residual: the same values.
  expect_same_and_close(run(inputs, torch::kFloat64, 1, upstream, fused),
                        run(inputs, torch::kFloat64, 2, upstream, fused), ref, "expressions");

  // Rows already grouped (no inverse): the residual row by row.
  auto identity = [&](const std::vector<torch::Tensor>& l) {
    return routed_residual(l[0], blocks(l[0], l[1]), l[2], c.window_t, torch::Tensor());
  };
  auto plain = [&](const std::vector<torch::Tensor>& l) {
    const auto alpha = l[2].index_select(0, c.window_t).unsqueeze(1);
    return l[0] + alpha * (blocks(l[0], l[1]) - l[0]);
  };
  expect_same_and_close(run(inputs, torch::kFloat32, 1, upstream, identity),
                        run(inputs, torch::kFloat32, 2, upstream, identity),
                        run(inputs, torch::kFloat64, 1, upstream, plain), "identity");
}

}  // namespace
}  // namespace lol
