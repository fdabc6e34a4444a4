#pragma once
// Fused CPU loops for inference. A decode step works on a few rows, where each LibTorch op
// costs more in dispatch than in arithmetic: RMS normalisation is five ops, a rotary
// rotation a dozen. Without gradients, on contiguous fp32 CPU tensors, these loops do the
// same arithmetic in one pass (rows split over the threads when there are many, as in
// prefill); otherwise callers use the LibTorch expressions, which autograd and other devices
// need. Results agree with those expressions to float rounding.
#include <torch/torch.h>

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

// Whether every tensor given (null ones skipped) is a contiguous fp32 CPU tensor.
bool cpu_fp32_contiguous(std::initializer_list<const torch::Tensor*> tensors);
// Whether every tensor given may take the fused CPU path: no grad mode, cpu_fp32_contiguous.
bool cpu_fast_path(std::initializer_list<const torch::Tensor*> tensors);

// x (n, d) -> x / sqrt(mean(x^2) + eps), row by row; inv_rms, when given, receives each
// row's 1 / sqrt(mean(x^2) + eps) (n).
torch::Tensor rms_normalize_cpu(const torch::Tensor& x, double eps,
                                torch::Tensor* inv_rms = nullptr);
// x (n, d) * scale (d) [* gamma (d)] [+ beta (d)]: a norm's weight and FiLM in one pass.
torch::Tensor scale_shift_cpu(const torch::Tensor& x, const torch::Tensor& scale,
                              const torch::Tensor* gamma, const torch::Tensor* beta);
// SwiGLU of a fused gate|up product (n, 2F) -> silu(gate) * up (n, F).
torch::Tensor swiglu_cpu(const torch::Tensor& both);
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
