#include "model/sliced_linear.h"

#include "model/row_slices.h"
#include "util/error.h"
#include "util/op_profile.h"

namespace lol {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct SlicedLinearFunction : torch::autograd::Function<SlicedLinearFunction> {
  // parts: every slice's parts in order (the variables gradients go to); stacked: each slice's
  // stack, a std::vector so that autograd does not count it among the inputs; part_counts:
  // parts per slice.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               torch::TensorList parts, std::vector<torch::Tensor> stacked,
                               std::vector<int64_t> counts, std::vector<int64_t> part_counts) {
    profile_custom_function_forward();
    auto y = torch::empty({x.size(0), stacked.front().size(0)}, x.options());
    const RowSlices slices(counts);
    for (size_t i = 0; i < slices.size(); ++i) {
      auto out = y.narrow(0, slices.begin(i), slices.count(i));
      at::mm_out(out, x.narrow(0, slices.begin(i), slices.count(i)), stacked[i].t());
    }
    std::vector<torch::Tensor> saved{x};
    saved.insert(saved.end(), stacked.begin(), stacked.end());
    ctx->save_for_backward(saved);
    std::vector<int64_t> part_rows;
    for (const auto& p : parts) part_rows.push_back(p.size(0));
    ctx->saved_data["counts"] = counts;
    ctx->saved_data["part_counts"] = part_counts;
    ctx->saved_data["part_rows"] = part_rows;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto counts = ctx->saved_data["counts"].toIntVector();
    const auto part_counts = ctx->saved_data["part_counts"].toIntVector();
    const auto part_rows = ctx->saved_data["part_rows"].toIntVector();
    const auto dy = grads[0].contiguous();
    const bool want_x = ctx->needs_input_grad(0);
    auto dx = want_x ? torch::empty_like(x) : torch::Tensor();
    variable_list out{dx};
    const RowSlices slices(counts);
    size_t part = 0;
    for (size_t i = 0; i < slices.size(); ++i) {
      const auto dy_i = dy.narrow(0, slices.begin(i), slices.count(i));
      const auto x_i = x.narrow(0, slices.begin(i), slices.count(i));
      if (want_x) {
        auto dx_i = dx.narrow(0, slices.begin(i), slices.count(i));
        at::mm_out(dx_i, dy_i, saved[1 + i]);
      }
      // The stack's gradient (out, in), row-major as the weights are; each part a row range.
      bool want_w = false;
      for (int64_t j = 0; j < part_counts[i]; ++j)
        want_w = want_w || ctx->needs_input_grad(1 + part + static_cast<size_t>(j));
      const auto dw = want_w ? at::mm(dy_i.t(), x_i) : torch::Tensor();
      int64_t row = 0;
      for (int64_t j = 0; j < part_counts[i]; ++j, ++part) {
        out.push_back(want_w ? dw.narrow(0, row, part_rows[part]) : torch::Tensor());
        row += part_rows[part];
      }
    }
    for (int k = 0; k < 3; ++k) out.emplace_back();  // stacked, counts, part_counts
    return out;
  }
};

}  // namespace

torch::Tensor sliced_linear(const torch::Tensor& x, const std::vector<int64_t>& counts,
                            const std::vector<SlicedWeight>& weights) {
  LOL_CHECK(x.dim() == 2, "sliced_linear: x must be (rows, features), got ", x.sizes());
  LOL_CHECK(!counts.empty() && counts.size() == weights.size(),
            "sliced_linear: one weight per slice");
  int64_t rows = 0;
  std::vector<torch::Tensor> parts, stacked;
  std::vector<int64_t> part_counts;
  for (size_t i = 0; i < counts.size(); ++i) {
    rows += counts[i];
    const auto& w = weights[i];
    LOL_CHECK(w.stacked.dim() == 2 && w.stacked.size(1) == x.size(1) &&
                  w.stacked.size(0) == weights[0].stacked.size(0),
              "sliced_linear: slice ", i, "'s weight ", w.stacked.sizes(), " does not fit x ",
              x.sizes());
    parts.insert(parts.end(), w.parts.begin(), w.parts.end());
    stacked.push_back(w.stacked);
    part_counts.push_back(static_cast<int64_t>(w.parts.size()));
  }
  LOL_CHECK(rows == x.size(0), "sliced_linear: slices cover ", rows, " rows of ", x.size(0));
  // The parts as a TensorList (variables); a std::vector would reach forward as a plain value.
  return SlicedLinearFunction::apply(x, torch::TensorList(parts), stacked, counts, part_counts);
}

}  // namespace lol
