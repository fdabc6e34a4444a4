#pragma once
// The row movements of a routed depth (SPEC 1.4, 1.6) as autograd functions: each window's
// mean state and its document's first state for the router, the tokens put in expert order for the
// library's blocks, and the gated residual that brings the blocks' output back into token order.
//
// As LibTorch expressions these stream the hidden states several times and their backwards
// more: a window mean is an index_add (whose backward gathers), a gather of rows (the first
// states, a permutation) has for backward an index_add into a zero-filled tensor, and the gated
// residual in expert order, x_p + a (y - x_p), needs the gate gathered per token, three elementwise
// passes, a column reduction for the gate's gradient and one more permutation back. Here a
// permutation's backward is the inverse permutation (a gather, no zero fill), the gated residual is
// computed in token order from the blocks' output through the inverse permutation, so the tokens'
// own states need no gather, the window means and first states are one function whose backward
// writes the rows' gradient once, and on contiguous fp32 CPU tensors the residual and the window
// summaries are one pass each way. Other devices and dtypes take the LibTorch expressions (same
// values), and the gradient tests compare the two.
#include <torch/torch.h>

#include <vector>

#include "model/layout.h"

namespace lol {

// What the router reads of a routed depth's states (SPEC 1.4), for the windows w of `part`
// (which tile the rows in order): means[w] (W, d) the mean of its rows, firsts[w] (W, d) the
// row of its document's first token.
struct WindowSummaries {
  torch::Tensor means, firsts;
};
WindowSummaries window_summaries(const torch::Tensor& rows, const WindowPartition& part);

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
