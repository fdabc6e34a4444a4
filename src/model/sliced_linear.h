#pragma once
// A routed depth's products under gradients: each slice of rows (the tokens of the windows
// that chose one expert) times its own expert's weight, all slices written into one output.
// As LibTorch expressions this is a split of the input, one linear per slice over a cat of the
// weight's parts (q|k|v, gate|up) and a cat of the slices' outputs; the backward then
// concatenates the slices' input gradients, transposes each weight gradient and copies it
// before accumulating. This function writes every slice's product into its rows of one
// output and its gradients straight into their places: one autograd node per product.
// Used with gradients on, on any device (LibTorch's mm into row views), without autocast.
#include <torch/torch.h>

#include <vector>

namespace lol {

// One slice's weight: its parts (out_j, in), the tensors gradients flow to, and their stack
// by rows (sum of out_j, in), which the products use (a cache of the parts' values, no grad).
struct SlicedWeight {
  std::vector<torch::Tensor> parts;
  torch::Tensor stacked;
};

// x (n, in) -> y (n, out): rows [offset_i, offset_i + counts[i]) times weights[i].stacked^T,
// slices tiling the rows in order. Every slice's stack has the same out.
torch::Tensor sliced_linear(const torch::Tensor& x, const std::vector<int64_t>& counts,
                            const std::vector<SlicedWeight>& weights);

}  // namespace lol
