#include "model/cpu_autograd.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "model/cpu_fast.h"
#include "util/op_profile.h"

namespace lol {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct RmsNormalizeFunction : torch::autograd::Function<RmsNormalizeFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, double eps) {
    profile_custom_function_forward();
    torch::Tensor inv;
    auto y = rms_normalize_cpu(x, eps, &inv);  // the inference path's arithmetic, to the bit
    ctx->save_for_backward({y, inv});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &y = saved[0], &inv = saved[1];
    const auto dy = grads[0].contiguous();
    const int64_t d = y.size(-1), n = y.numel() / d;
    auto dx = torch::empty_like(y);
    const float* yp = y.data_ptr<float>();
    const float* ip = inv.data_ptr<float>();
    const float* gp = dy.data_ptr<float>();
    float* xp = dx.data_ptr<float>();
    at::parallel_for(0, n, kCpuRowGrain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* yr = yp + r * d;
        const float* gr = gp + r * d;
        const float mean = dot(gr, yr, d) / static_cast<float>(d);
        const float inv_r = ip[r];
        float* out = xp + r * d;
        for (int64_t k = 0; k < d; ++k) out[k] = inv_r * (gr[k] - yr[k] * mean);
      }
    });
    return {dx, torch::Tensor()};
  }
};

// y = x * w_s [* gamma] [+ beta] on the rows of slice s (each of d); gamma or beta empty when
// absent (LibTorch 1.13's Function::apply rejects undefined inputs).
struct ScaleShiftFunction : torch::autograd::Function<ScaleShiftFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, torch::TensorList ws,
                               const torch::Tensor& gamma, const torch::Tensor& beta,
                               std::vector<int64_t> counts) {
    profile_custom_function_forward();
    const bool film = gamma.numel() > 0, shift = beta.numel() > 0;
    std::vector<torch::Tensor> saved{x, gamma};
    saved.insert(saved.end(), ws.begin(), ws.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["film"] = film;
    ctx->saved_data["shift"] = shift;
    ctx->saved_data["counts"] = counts;
    // The inference path's arithmetic, to the bit.
    return scale_shift_cpu(x, ws.vec(), RowSlices(counts), film ? &gamma : nullptr,
                           shift ? &beta : nullptr);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &gamma = saved[1];
    const bool film = ctx->saved_data["film"].toBool(), shift = ctx->saved_data["shift"].toBool();
    const auto counts = ctx->saved_data["counts"].toIntVector();
    const auto dy = grads[0].contiguous();
    const int64_t d = x.size(-1);
    auto dx = torch::empty_like(x);
    // Column sums over fixed chunks of rows within each slice, added in chunk order: the same
    // bits on any number of threads. Per chunk: d w (its slice's), d gamma, d beta.
    struct Chunk {
      int64_t slice, begin, end;
    };
    std::vector<Chunk> chunks;
    const RowSlices slices(counts);
    for (size_t s = 0; s < slices.size(); ++s)
      for (int64_t r = slices.begin(s); r < slices.end(s); r += kCpuRowGrain)
        chunks.push_back({static_cast<int64_t>(s), r, std::min(slices.end(s), r + kCpuRowGrain)});
    const int64_t num_chunks = static_cast<int64_t>(chunks.size());
    std::vector<float> partial(static_cast<size_t>(num_chunks * 3 * d), 0.0f);
    const float* xp = x.data_ptr<float>();
    const float* gp = film ? gamma.data_ptr<float>() : nullptr;
    const float* dp = dy.data_ptr<float>();
    float* out = dx.data_ptr<float>();
    at::parallel_for(0, num_chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const auto& chunk = chunks[static_cast<size_t>(c)];
        const float* wp = saved[2 + static_cast<size_t>(chunk.slice)].data_ptr<float>();
        float* __restrict dw = partial.data() + c * 3 * d;
        float* __restrict dg = dw + d;
        float* __restrict db = dg + d;
        for (int64_t r = chunk.begin; r < chunk.end; ++r) {
          const float* __restrict xr = xp + r * d;
          const float* __restrict g = dp + r * d;
          float* __restrict o = out + r * d;
          if (gp) {
            for (int64_t k = 0; k < d; ++k) {
              const float dxw = g[k] * gp[k];  // y = (x w) gamma + beta: d(x w) = dy gamma
              o[k] = dxw * wp[k];
              dw[k] += dxw * xr[k];
              dg[k] += g[k] * (xr[k] * wp[k]);
              db[k] += g[k];
            }
          } else {
            for (int64_t k = 0; k < d; ++k) {
              o[k] = g[k] * wp[k];
              dw[k] += g[k] * xr[k];
              db[k] += g[k];
            }
          }
        }
      }
    });
    std::vector<torch::Tensor> dws;
    for (size_t s = 0; s < counts.size(); ++s) dws.push_back(torch::zeros({d}, x.options()));
    auto dg = torch::zeros({d}, x.options()), db = torch::zeros({d}, x.options());
    float *gsum = dg.data_ptr<float>(), *bsum = db.data_ptr<float>();
    for (int64_t c = 0; c < num_chunks; ++c) {
      const float* part = partial.data() + c * 3 * d;
      float* wsum =
          dws[static_cast<size_t>(chunks[static_cast<size_t>(c)].slice)].data_ptr<float>();
      for (int64_t k = 0; k < d; ++k) {
        wsum[k] += part[k];
        gsum[k] += part[d + k];
        bsum[k] += part[2 * d + k];
      }
    }
    variable_list result{dx};
    result.insert(result.end(), dws.begin(), dws.end());
    result.push_back(film ? dg : torch::Tensor());
    result.push_back(shift ? db : torch::Tensor());
    result.emplace_back();  // counts
    return result;
  }
};

// d(gate|up) of SwiGLU's rows from the upstream gradient, the sigmoid recomputed:
// silu'(x) = s (1 + x (1 - s)), s = sigmoid(x); d up = dy silu(gate).
LOL_CPU_CLONES
void swiglu_backward_rows(const float* both, const float* dy, int64_t rows, int64_t hidden,
                          float* d_both) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = both + r * 2 * hidden;
    const float* up = gate + hidden;
    const float* g = dy + r * hidden;
    float* d_gate = d_both + r * 2 * hidden;
    float* d_up = d_gate + hidden;
    for (int64_t k = 0; k < hidden; ++k) {
      const float s = 1.0f / (1.0f + exp_approx(-gate[k]));
      d_gate[k] = g[k] * up[k] * (s * (1.0f + gate[k] * (1.0f - s)));
      d_up[k] = g[k] * (gate[k] * s);
    }
  }
}

struct SwigluFunction : torch::autograd::Function<SwigluFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& both) {
    profile_custom_function_forward();
    ctx->save_for_backward({both});
    return swiglu_cpu(both);  // the inference path's arithmetic, to the bit
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto both = ctx->get_saved_variables()[0];
    const int64_t n = both.size(0), hidden = both.size(1) / 2;
    const auto dy = grads[0].contiguous();
    auto d_both = torch::empty_like(both);
    const float* bp = both.data_ptr<float>();
    const float* gp = dy.data_ptr<float>();
    float* dp = d_both.data_ptr<float>();
    at::parallel_for(0, n, kCpuRowGrain, [&](int64_t begin, int64_t end) {
      swiglu_backward_rows(bp + begin * 2 * hidden, gp + begin * hidden, end - begin, hidden,
                           dp + begin * 2 * hidden);
    });
    return {d_both};
  }
};

struct RotaryFunction : torch::autograd::Function<RotaryFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& cos, const torch::Tensor& sin) {
    profile_custom_function_forward();
    ctx->save_for_backward({cos, sin});
    return rotary_cpu(x, cos, sin);  // the inference path's arithmetic, to the bit
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    // A rotation's gradient is the rotation back.
    const auto dy = grads[0].stride(2) == 1 ? grads[0] : grads[0].contiguous();
    return {rotary_cpu(dy, saved[0], saved[1], /*inverse=*/true), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool cpu_autograd_path(std::initializer_list<const torch::Tensor*> tensors) {
  return torch::GradMode::is_enabled() && cpu_fp32_contiguous(tensors);
}

torch::Tensor rms_normalize_autograd(const torch::Tensor& x, double eps) {
  return RmsNormalizeFunction::apply(x, eps);
}

torch::Tensor scale_shift_autograd(const torch::Tensor& x, const std::vector<torch::Tensor>& ws,
                                   const std::vector<int64_t>& counts, const torch::Tensor* gamma,
                                   const torch::Tensor* beta) {
  const auto none = torch::empty({0}, x.options());
  return ScaleShiftFunction::apply(x, torch::TensorList(ws), gamma ? *gamma : none,
                                   beta ? *beta : none, counts);
}

torch::Tensor rotary_autograd(const torch::Tensor& x, const torch::Tensor& cos,
                              const torch::Tensor& sin) {
  return RotaryFunction::apply(x, cos, sin);
}

torch::Tensor swiglu_autograd(const torch::Tensor& both) {
  return SwigluFunction::apply(both);
}

}  // namespace lol
