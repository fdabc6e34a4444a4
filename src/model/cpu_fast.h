#pragma once
// Fused CPU loops for inference. A decode step works on a few rows, where each LibTorch op
// costs more in dispatch than in arithmetic: RMS normalisation is five ops, a rotary
// rotation a dozen. Without gradients, on contiguous fp32 CPU tensors, these loops do the
// same arithmetic in one pass (rows split over the threads when there are many, as in
// prefill); otherwise callers use the LibTorch expressions, which autograd and other devices
// need. Results agree with those expressions to float rounding.
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "model/row_slices.h"
#include "util/cpu_clones.h"

namespace lol {

// Forces inlining, so that helpers called from a function compiled for wider vectors (the
// attention kernel's target clones) are compiled for them too.
#if defined(__GNUC__) || defined(__clang__)
#define LOL_ALWAYS_INLINE __attribute__((always_inline)) inline
#else
#define LOL_ALWAYS_INLINE inline
#endif

// Rows per thread chunk of the row loops here and in model/cpu_autograd.h: a decode step's few
// rows stay on the calling thread.
constexpr int64_t kCpuRowGrain = 64;

// a . b over n floats with eight running sums, so the loop vectorises without reassociating
// one reduction. Always inlined (see LOL_ALWAYS_INLINE).
LOL_ALWAYS_INLINE float dot(const float* a, const float* b, int64_t n) {
  float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) partial[j] += a[i + j] * b[i + j];
  float total = 0;
  for (int j = 0; j < 8; ++j) total += partial[j];
  for (; i < n; ++i) total += a[i] * b[i];
  return total;
}

// e^x without calls or branches, so that loops over it vectorise (std::exp does not): 2^n e^r,
// n = round(x / ln 2), r = x - n ln 2 (|r| <= ln 2 / 2, ln 2 in two parts) and e^r by its Taylor
// polynomial to degree 7 (truncation below 6e-9 relative). Within 7.4e-8 relative of std::exp
// (one float ulp) on [-87, 88]; exactly 0 below -87.3 (masked scores of -inf give 0); x above
// 88 is taken as 88 (finite, 1.6e38). Always inlined (see LOL_ALWAYS_INLINE).
LOL_ALWAYS_INLINE float exp_approx(float x) {
  const float clamped = x > 88.0f ? 88.0f : (x < -87.3f ? -87.3f : x);
  // Adding 1.5 * 2^23 rounds to an integer in the low mantissa bits (round to nearest even).
  const float shifted = clamped * 1.44269504088896341f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  const float r = (clamped - n * 0.693359375f) + n * 2.12194440e-4f;  // ln 2 = hi - lo
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  const int32_t exponent = (bits - 0x4B400000 + 127) << 23;  // 2^n as a float's bits
  float scale;
  std::memcpy(&scale, &exponent, sizeof scale);
  return x < -87.3f ? 0.0f : p * scale;
}

// out[i] = e^(in[i] - shift) over n values (in may be out), returning their sum, added in eight
// lanes as dot() does, so every vector width adds alike.
LOL_ALWAYS_INLINE float exp_shifted_sum(const float* in, float* out, int64_t n, float shift) {
  float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) partial[j] += out[i + j] = exp_approx(in[i + j] - shift);
  float total = 0;
  for (int j = 0; j < 8; ++j) total += partial[j];
  for (; i < n; ++i) total += out[i] = exp_approx(in[i] - shift);
  return total;
}

// The largest of n values (-inf for none), in eight lanes so the loop vectorises.
LOL_ALWAYS_INLINE float max_of(const float* in, int64_t n) {
  float best[8];
  for (int j = 0; j < 8; ++j) best[j] = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) best[j] = in[i + j] > best[j] ? in[i + j] : best[j];
  float m = best[0];
  for (int j = 1; j < 8; ++j) m = best[j] > m ? best[j] : m;
  for (; i < n; ++i) m = in[i] > m ? in[i] : m;
  return m;
}

// out = softmax(in) over n scores, in may be out; -inf scores get 0 (at least one must be
// finite).
LOL_ALWAYS_INLINE void softmax_row(const float* in, float* out, int64_t n) {
  const float inv = 1.0f / exp_shifted_sum(in, out, n, max_of(in, n));
  for (int64_t i = 0; i < n; ++i) out[i] *= inv;
}

// Whether every tensor given (null ones skipped) is a contiguous fp32 CPU tensor.
bool cpu_fp32_contiguous(std::initializer_list<const torch::Tensor*> tensors);
// Whether every tensor given may take the fused CPU path: no grad mode, cpu_fp32_contiguous.
bool cpu_fast_path(std::initializer_list<const torch::Tensor*> tensors);
// A product's output made ready for the fused CPU kernels: under CPU autocast LibTorch's
// products return bf16 (or fp16), and the kernels (attention, SwiGLU, rotary) work in fp32, as
// autocast itself runs softmax and the like; so a reduced-precision CPU tensor is widened once here
// rather than sent down the composite paths (which materialise attention's scores, in bf16).
// Anything else (no CPU autocast, another device, fp32) is returned as it is.
torch::Tensor widen_for_cpu_kernels(const torch::Tensor& x);

// x (n, d) -> x / sqrt(mean(x^2) + eps), row by row; inv_rms, when given, receives each
// row's 1 / sqrt(mean(x^2) + eps) (n).
torch::Tensor rms_normalize_cpu(const torch::Tensor& x, double eps,
                                torch::Tensor* inv_rms = nullptr);
// x (n, d) * scales[s] (d) on the rows of slice s [* gamma (d)] [+ beta (d)]: the norm weights
// of the blocks the slices run and FiLM, in one pass.
torch::Tensor scale_shift_cpu(const torch::Tensor& x, const std::vector<torch::Tensor>& scales,
                              const RowSlices& slices, const torch::Tensor* gamma,
                              const torch::Tensor* beta);
// SwiGLU of a fused gate|up product (n, 2F) -> silu(gate) * up (n, F).
torch::Tensor swiglu_cpu(const torch::Tensor& both);
// x + gate[r] * (y - x) on each row r of x, y (n, d); gate (n).
torch::Tensor gated_residual_cpu(const torch::Tensor& x, const torch::Tensor& y,
                                 const torch::Tensor& gate);
// Rotary rotation of x (n, heads, dh) by cos/sin (n, dh/2): halves (x1, x2) ->
// (x1 c - x2 s, x2 c + x1 s), or with `inverse` the rotation back, (x1 c + x2 s, x2 c - x1 s)
// (the gradient of the forward one). x may be a strided view whose last dimension is
// contiguous (q or k cut from a fused q|k|v); the result is contiguous.
// rotary_cpu_layout: the tensors suit the loop; rotary_fast_path: and no gradients are wanted.
bool rotary_cpu_layout(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
bool rotary_fast_path(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
torch::Tensor rotary_cpu(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                         bool inverse = false);

}  // namespace lol
