#pragma once
// y = x W^T for a few rows on the CPU, the shape of decoding (one to a few tokens per
// sequence or per expert). BLAS packs the whole weight matrix into its own layout on every
// call, which for a handful of rows costs more than the product; here the weight is packed
// once into panels of 8 output columns, (ceil(N/8), K, 8), and register-tiled AVX2+FMA kernels
// stream it. Measured on the development VM (d 256, one thread): 1 row 2.3x, 4 rows 2.1x,
// 8 rows 1.1x faster than OpenBLAS; above 16 rows BLAS wins and is used.
#include <torch/torch.h>

namespace lol {

constexpr int64_t kSmallGemmMaxRows = 16;

// Whether this CPU runs the kernels (x86-64 with AVX2 and FMA).
bool small_gemm_supported();
// (N, K) fp32 weight -> (ceil(N/8), K, 8) panels, zero-padded past N.
torch::Tensor pack_panels(const torch::Tensor& weight);
// x (M, K) fp32 contiguous on the CPU times the packed weight of n output columns: (M, n).
torch::Tensor small_gemm(const torch::Tensor& x, const torch::Tensor& panels, int64_t n);

}  // namespace lol
