#include "model/routed_rows.h"

#include <ATen/Parallel.h>

#include "model/cpu_fast.h"
#include "util/error.h"
#include "util/op_profile.h"

namespace lol {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Each window's rows summed in row order from zero, then divided by its length: the
// arithmetic of the index_add expression, to the bit; and each window's document's first row,
// gathered. Backward: every row of a window gets the window's mean gradient divided by its
// length, then each document's first row adds the first-row gradients of its windows in
// window order (no zero-filled (n, d) tensor, one gradient for the rows).
struct WindowSummariesFunction : torch::autograd::Function<WindowSummariesFunction> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& rows,
                               const torch::Tensor& lengths, const torch::Tensor& first_row) {
    profile_custom_function_forward();
    const int64_t windows = lengths.size(0), d = rows.size(1);
    const std::vector<int64_t> starts = window_starts(lengths);
    const int64_t* lp = lengths.data_ptr<int64_t>();
    auto means = torch::empty({windows, d}, rows.options());
    const float* xp = rows.data_ptr<float>();
    float* op = means.data_ptr<float>();
    at::parallel_for(0, windows, 1, [&](int64_t begin, int64_t end) {
      for (int64_t w = begin; w < end; ++w) {
        float* o = op + w * d;
        for (int64_t k = 0; k < d; ++k) o[k] = 0.0f;
        for (int64_t r = starts[w]; r < starts[w] + lp[w]; ++r)
          for (int64_t k = 0; k < d; ++k) o[k] += xp[r * d + k];
        const auto length = static_cast<float>(lp[w]);
        for (int64_t k = 0; k < d; ++k) o[k] /= length;
      }
    });
    ctx->saved_data["rows"] = rows.size(0);
    ctx->save_for_backward({lengths, first_row});
    return {means, rows.index_select(0, first_row)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &lengths = saved[0], &first_row = saved[1];
    const std::vector<int64_t> starts = window_starts(lengths);
    const int64_t* lp = lengths.data_ptr<int64_t>();
    const int64_t* fp = first_row.data_ptr<int64_t>();
    const int64_t windows = lengths.size(0);
    const auto dmeans = grads[0].defined() ? grads[0].contiguous() : torch::Tensor();
    const auto dfirst = grads[1].defined() ? grads[1].contiguous() : torch::Tensor();
    const int64_t d = (dmeans.defined() ? dmeans : dfirst).size(1);
    const auto options = (dmeans.defined() ? dmeans : dfirst).options();
    const int64_t n = ctx->saved_data["rows"].toInt();
    auto dx = dmeans.defined() ? torch::empty({n, d}, options) : torch::zeros({n, d}, options);
    float* xp = dx.data_ptr<float>();
    if (dmeans.defined()) {
      const float* gp = dmeans.data_ptr<float>();
      at::parallel_for(0, windows, 1, [&](int64_t begin, int64_t end) {
        for (int64_t w = begin; w < end; ++w) {
          const auto length = static_cast<float>(lp[w]);
          for (int64_t r = starts[w]; r < starts[w] + lp[w]; ++r)
            for (int64_t k = 0; k < d; ++k) xp[r * d + k] = gp[w * d + k] / length;
        }
      });
    }
    if (dfirst.defined()) {
      const float* gp = dfirst.data_ptr<float>();
      for (int64_t w = 0; w < windows; ++w)
        for (int64_t k = 0; k < d; ++k) xp[fp[w] * d + k] += gp[w * d + k];
    }
    return {dx, torch::Tensor(), torch::Tensor()};
  }

  // Windows tile the rows in order: each starts where the one before ends.
  static std::vector<int64_t> window_starts(const torch::Tensor& lengths) {
    std::vector<int64_t> starts(static_cast<size_t>(lengths.size(0)));
    const int64_t* lp = lengths.data_ptr<int64_t>();
    int64_t at = 0;
    for (size_t w = 0; w < starts.size(); ++w) {
      starts[w] = at;
      at += lp[w];
    }
    return starts;
  }
};

// A gather of rows whose backward is the gather by the inverse permutation.
struct PermuteRowsFunction : torch::autograd::Function<PermuteRowsFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& perm, const torch::Tensor& inverse) {
    profile_custom_function_forward();
    ctx->save_for_backward({inverse});
    return x.index_select(0, perm);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto inverse = ctx->get_saved_variables()[0];
    return {grads[0].index_select(0, inverse), torch::Tensor(), torch::Tensor()};
  }
};

// out[i] = x[i] + a (y[inverse[i]] - x[i]), a = gates[window[i]]: per row, the arithmetic of
// gated_residual_cpu. Backward in one pass over the rows: dx = g - a g, dy[inverse[i]] = a g,
// and each row's g . (y - x) for its window's gate, summed in row order (the same bits on any
// number of threads).
struct RoutedResidualFunction : torch::autograd::Function<RoutedResidualFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& y,
                               const torch::Tensor& gates, const torch::Tensor& window,
                               const torch::Tensor& inverse) {
    profile_custom_function_forward();
    const int64_t n = x.size(0), d = x.size(1);
    auto out = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    const float* yp = y.data_ptr<float>();
    const float* gp = gates.data_ptr<float>();
    const int64_t* wp = window.data_ptr<int64_t>();
    const int64_t* ip = inverse.numel() > 0 ? inverse.data_ptr<int64_t>() : nullptr;
    float* op = out.data_ptr<float>();
    at::parallel_for(0, n, kCpuRowGrain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float a = gp[wp[r]];
        const float* xr = xp + r * d;
        const float* yr = yp + (ip ? ip[r] : r) * d;
        float* o = op + r * d;
        for (int64_t k = 0; k < d; ++k) o[k] = xr[k] + a * (yr[k] - xr[k]);
      }
    });
    ctx->save_for_backward({x, y, gates, window, inverse});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &y = saved[1], &gates = saved[2], &window = saved[3],
               &inverse = saved[4];
    const auto dout = grads[0].contiguous();
    const int64_t n = x.size(0), d = x.size(1);
    auto dx = torch::empty_like(x), dy = torch::empty_like(y);
    std::vector<float> dots(static_cast<size_t>(n));
    const float* xp = x.data_ptr<float>();
    const float* yp = y.data_ptr<float>();
    const float* gp = gates.data_ptr<float>();
    const float* up = dout.data_ptr<float>();
    const int64_t* wp = window.data_ptr<int64_t>();
    const int64_t* ip = inverse.numel() > 0 ? inverse.data_ptr<int64_t>() : nullptr;
    float* dxp = dx.data_ptr<float>();
    float* dyp = dy.data_ptr<float>();
    at::parallel_for(0, n, kCpuRowGrain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float a = gp[wp[r]];
        const int64_t at = ip ? ip[r] : r;
        const float* __restrict g = up + r * d;
        const float* __restrict xr = xp + r * d;
        const float* __restrict yr = yp + at * d;
        float* __restrict dxr = dxp + r * d;
        float* __restrict dyr = dyp + at * d;
        float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t k = 0;
        for (; k + 8 <= d; k += 8)
          for (int j = 0; j < 8; ++j) partial[j] += g[k + j] * (yr[k + j] - xr[k + j]);
        float total = 0;
        for (int j = 0; j < 8; ++j) total += partial[j];
        for (; k < d; ++k) total += g[k] * (yr[k] - xr[k]);
        dots[static_cast<size_t>(r)] = total;
        for (k = 0; k < d; ++k) {
          const float ag = a * g[k];
          dxr[k] = g[k] - ag;
          dyr[k] = ag;
        }
      }
    });
    auto dgates = torch::zeros({gates.size(0)}, torch::dtype(torch::kFloat64));
    double* dg = dgates.data_ptr<double>();
    for (int64_t r = 0; r < n; ++r) dg[wp[r]] += dots[static_cast<size_t>(r)];
    return {dx, dy, dgates.to(gates.scalar_type()), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

WindowSummaries window_summaries(const torch::Tensor& rows, const WindowPartition& part) {
  LOL_CHECK(rows.dim() == 2 && part.token_window_t.numel() == rows.size(0),
            "window_summaries: rows (n, d) and a window per row");
  if (cpu_fp32_contiguous({&rows}) && part.lengths_t.is_cpu() && part.first_token_t.is_cpu()) {
    const auto out = WindowSummariesFunction::apply(rows, part.lengths_t, part.first_token_t);
    return {out[0], out[1]};
  }
  const int64_t windows = part.lengths_t.size(0);
  return {torch::zeros({windows, rows.size(1)}, rows.options())
                  .index_add(0, part.token_window_t, rows) /
              part.lengths_t.to(rows.scalar_type()).unsqueeze(1),
          rows.index_select(0, part.first_token_t)};
}

torch::Tensor permute_rows(const torch::Tensor& x, const torch::Tensor& perm,
                           const torch::Tensor& inverse) {
  if (!torch::GradMode::is_enabled() || !x.requires_grad()) return x.index_select(0, perm);
  return PermuteRowsFunction::apply(x, perm, inverse);
}

torch::Tensor routed_residual(const torch::Tensor& x, const torch::Tensor& y,
                              const torch::Tensor& gates, const torch::Tensor& window_of_row,
                              const torch::Tensor& inverse) {
  LOL_CHECK(x.dim() == 2 && y.sizes() == x.sizes() && gates.dim() == 1 &&
                window_of_row.numel() == x.size(0) &&
                (!inverse.defined() || inverse.numel() == x.size(0)),
            "routed_residual: x and y (n, d), gates (W), a window and an inverse entry per row");
  const auto g = gates.contiguous();
  if (cpu_fp32_contiguous({&x, &y, &g}) && window_of_row.is_contiguous() &&
      (!inverse.defined() || inverse.is_contiguous()))
    // An empty inverse for the identity (LibTorch 1.13's apply rejects undefined inputs).
    return RoutedResidualFunction::apply(
        x, y, g, window_of_row, inverse.defined() ? inverse : torch::empty({0}, torch::kInt64));
  const auto y_tokens = inverse.defined() ? y.index_select(0, inverse) : y;
  return x + g.index_select(0, window_of_row).unsqueeze(1) * (y_tokens - x);
}

}  // namespace lol
