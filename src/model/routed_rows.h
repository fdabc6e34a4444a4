#pragma once
// The row movements of a routed depth (SPEC 1.4, 1.6) as autograd functions: each window's
// mean state for the router, the tokens put in expert order for the library's blocks, and the
// gated residual that brings the blocks' output back into token order.
//
// As LibTorch expressions these stream the hidden states several times and their backwards
// more: a window mean is an index_add (whose backward gathers), a permutation's backward is an
// index_add into a zero-filled tensor, and the gated residual in expert order, x_p + a (y - x_p),
// needs the gate gathered per token, three elementwise passes, a column reduction for the
// gate's gradient and one more permutation back. Here a permutation's backward is the inverse
// permutation (a gather, no zero fill), the gated residual is computed in token order from the
// blocks' output through the inverse permutation, so the tokens' own states need no gather,
// and on contiguous fp32 CPU tensors the residual and the window means are one pass each way.
// Other devices and dtypes take the LibTorch expressions (same values), and the gradient tests
// compare the two.
#include <torch/torch.h>

#include <vector>

namespace lol {

// rows (n, d) -> out (W, d), out[w] the mean of rows [starts[w], starts[w] + lengths[w]);
// the windows tile the rows in order. window_of_row (n) int64 and lengths_t (W) on the rows'
// device serve the expression path.
torch::Tensor window_means(const torch::Tensor& rows, const std::vector<int64_t>& starts,
                           const std::vector<int64_t>& lengths, const torch::Tensor& window_of_row,
                           const torch::Tensor& lengths_t);

// x (n, d) -> x[perm] (n, d); its backward is dy[inverse]. Both int64 (n) on x's device.
torch::Tensor permute_rows(const torch::Tensor& x, const torch::Tensor& perm,
                           const torch::Tensor& inverse);

// The gated residual of a routed depth in token order: out[i] = x[i] + a (y[inverse[i]] - x[i]),
// a = gates[window_of_row[i]], y (n, d) the blocks' output in expert order (x[perm] in,
// inverse undefined when perm is the identity), gates (W) one per window.
torch::Tensor routed_residual(const torch::Tensor& x, const torch::Tensor& y,
                              const torch::Tensor& gates, const torch::Tensor& window_of_row,
                              const torch::Tensor& inverse);

}  // namespace lol
