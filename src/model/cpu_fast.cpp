#include "model/cpu_fast.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

#include "util/autocast.h"

namespace lol {

bool cpu_fp32_contiguous(std::initializer_list<const torch::Tensor*> tensors) {
  for (const auto* t : tensors)
    if (t && (!t->device().is_cpu() || t->scalar_type() != torch::kFloat32 || !t->is_contiguous()))
      return false;
  return true;
}

bool cpu_fast_path(std::initializer_list<const torch::Tensor*> tensors) {
  return !torch::GradMode::is_enabled() && cpu_fp32_contiguous(tensors);
}

torch::Tensor widen_for_cpu_kernels(const torch::Tensor& x) {
  const auto type = x.scalar_type();
  if (!x.device().is_cpu() || (type != torch::kBFloat16 && type != torch::kFloat16) ||
      !autocast_enabled(torch::kCPU))
    return x;
  return x.to(torch::kFloat32);
}

namespace {
LOL_CPU_CLONES
void swiglu_rows(const float* both, int64_t rows, int64_t hidden, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = both + r * 2 * hidden;
    const float* up = gate + hidden;
    float* o = out + r * hidden;
    for (int64_t k = 0; k < hidden; ++k) o[k] = gate[k] / (1.0f + exp_approx(-gate[k])) * up[k];
  }
}
}  // namespace

torch::Tensor swiglu_cpu(const torch::Tensor& both) {
  const int64_t n = both.size(0), hidden = both.size(1) / 2;
  auto y = torch::empty({n, hidden}, both.options());
  const float* bp = both.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, n, kCpuRowGrain, [&](int64_t begin, int64_t end) {
    swiglu_rows(bp + begin * 2 * hidden, end - begin, hidden, yp + begin * hidden);
  });
  return y;
}

torch::Tensor gated_residual_cpu(const torch::Tensor& x, const torch::Tensor& y,
                                 const torch::Tensor& gate) {
  const int64_t n = x.size(0), d = x.size(1);
  TORCH_CHECK(y.sizes() == x.sizes() && gate.dim() == 1 && gate.size(0) == n,
              "gated_residual: x and y (n, d) and gate (n)");
  auto out = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* yp = y.data_ptr<float>();
  const float* gp = gate.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, n, kCpuRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t i = r * d; i < (r + 1) * d; ++i) op[i] = xp[i] + gp[r] * (yp[i] - xp[i]);
  });
  return out;
}

bool rotary_cpu_layout(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return cpu_fp32_contiguous({&cos, &sin}) && x.device().is_cpu() &&
         x.scalar_type() == torch::kFloat32 && x.dim() == 3 && x.stride(2) == 1 &&
         x.size(2) % 2 == 0;
}

bool rotary_fast_path(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return !torch::GradMode::is_enabled() && rotary_cpu_layout(x, cos, sin);
}

torch::Tensor rms_normalize_cpu(const torch::Tensor& x, double eps, torch::Tensor* inv_rms) {
  const int64_t d = x.size(-1), n = x.numel() / d;
  auto y = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  float* ip = nullptr;
  if (inv_rms) {
    *inv_rms = torch::empty({n}, x.options());
    ip = inv_rms->data_ptr<float>();
  }
  at::parallel_for(0, n, kCpuRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = xp + r * d;
      const float sum = dot(row, row, d);
      const float inv = 1.0f / std::sqrt(sum / static_cast<float>(d) + static_cast<float>(eps));
      if (ip) ip[r] = inv;
      float* out = yp + r * d;
      for (int64_t k = 0; k < d; ++k) out[k] = row[k] * inv;
    }
  });
  return y;
}

torch::Tensor scale_shift_cpu(const torch::Tensor& x, const std::vector<torch::Tensor>& scales,
                              const RowSlices& slices, const torch::Tensor* gamma,
                              const torch::Tensor* beta) {
  const int64_t d = x.size(-1), n = x.numel() / d;
  auto y = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  std::vector<const float*> wps;
  for (const auto& w : scales) wps.push_back(w.data_ptr<float>());
  const float* gp = gamma ? gamma->data_ptr<float>() : nullptr;
  const float* bp = beta ? beta->data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, n, kCpuRowGrain, [&](int64_t begin, int64_t end) {
    size_t s = slices.slice_of(begin);
    for (int64_t r = begin; r < end; ++r) {
      while (r >= slices.end(s)) ++s;
      const float* wp = wps[s];
      const float* row = xp + r * d;
      float* out = yp + r * d;
      if (gp)
        for (int64_t k = 0; k < d; ++k) out[k] = row[k] * wp[k] * gp[k] + (bp ? bp[k] : 0.0f);
      else
        for (int64_t k = 0; k < d; ++k) out[k] = row[k] * wp[k] + (bp ? bp[k] : 0.0f);
    }
  });
  return y;
}

torch::Tensor rotary_cpu(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                         bool inverse) {
  const float sign = inverse ? -1.0f : 1.0f;
  const int64_t n = x.size(0), heads = x.size(1), dh = x.size(2), half = dh / 2;
  const int64_t row_stride = x.stride(0),
                head_stride = x.stride(1);  // q, k: views of a fused q|k|v
  auto y = torch::empty({n, heads, dh}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, n, kCpuRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* c = cp + r * half;
      const float* s = sp + r * half;
      for (int64_t h = 0; h < heads; ++h) {
        const float* x1 = xp + r * row_stride + h * head_stride;
        const float* x2 = x1 + half;
        float* y1 = yp + (r * heads + h) * dh;
        float* y2 = y1 + half;
        for (int64_t k = 0; k < half; ++k) {
          const float sk = sign * s[k];  // exact: the forward rotation keeps its bits
          y1[k] = x1[k] * c[k] - x2[k] * sk;
          y2[k] = x2[k] * c[k] + x1[k] * sk;
        }
      }
    }
  });
  return y;
}

}  // namespace lol
