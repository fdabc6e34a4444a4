#pragma once
// Fused CPU autograd functions for training. LibTorch's expressions for RMS normalisation
// (pow, mean, add, rsqrt, mul), a norm's weight and FiLM (two products and a sum, each with a
// column reduction backward), rotary embedding (two narrows, four products, a sum, a
// difference and a cat) and SwiGLU (silu of one half times the other, two narrows) each
// stream the activations several times forward and more in the backward: the backward of each
// narrow fills a zero tensor of all 2F columns and autograd adds the two. These functions
// compute the same values in one pass each way (forward: the inference loops of
// model/cpu_fast.h, to the bit; SwiGLU's sigmoid by the vectorised exp_approx there) and keep
// fewer tensors alive. Used with gradients on contiguous fp32 CPU tensors; the LibTorch
// expressions serve every other case, and the gradient tests compare the two.
#include <torch/torch.h>

namespace lol {

// Whether every tensor given (null ones skipped) may take the fused training functions:
// gradients on, contiguous fp32 CPU tensors (cpu_fp32_contiguous in model/cpu_fast.h).
bool cpu_autograd_path(std::initializer_list<const torch::Tensor*> tensors);

// x (n, d) -> x / sqrt(mean(x^2) + eps), row by row; its backward is one pass,
// dx = r (dy - y mean(dy y)) with r the row's 1 / rms.
torch::Tensor rms_normalize_autograd(const torch::Tensor& x, double eps);

// x (n, d) * ws[s] (d) on the rows of slice s (counts tile the rows in order) [* gamma (d)]
// [+ beta (d)]: the blocks' norm weights and FiLM (see scale_shift_cpu); its backward is one
// pass for dx and the column sums (each slice's own for its weight).
torch::Tensor scale_shift_autograd(const torch::Tensor& x, const std::vector<torch::Tensor>& ws,
                                   const std::vector<int64_t>& counts, const torch::Tensor* gamma,
                                   const torch::Tensor* beta);

// SwiGLU of a fused gate|up product (n, 2F) -> silu(gate) * up (n, F); its backward writes
// d(gate|up) in one pass.
torch::Tensor swiglu_autograd(const torch::Tensor& both);

// Rotary rotation (see rotary_cpu) of x (n, heads, dh) whose last dimension is contiguous, by
// cos/sin (n, dh/2) (no gradient); its backward rotates the gradient back.
torch::Tensor rotary_autograd(const torch::Tensor& x, const torch::Tensor& cos,
                              const torch::Tensor& sin);

}  // namespace lol
