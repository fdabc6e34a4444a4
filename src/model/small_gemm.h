#pragma once
// y = x W^T for a few rows on the CPU, the shape of decoding (one to a few tokens per
// sequence or per expert). BLAS packs the whole weight matrix into its own layout on every
// call, which for a handful of rows costs more than the product; here the weight is packed
// once into panels of 8 output columns, (ceil(N/8), K, 8), and register-tiled AVX2+FMA kernels
// stream it. Measured on the development VM with the weights streamed from L3 as in decoding
// (d 256, this kernel on one thread, OpenBLAS on two): 1 row 1.8x, 4 rows 1.7x, 8 rows
// 0.7-1.2x by shape, 16 rows 0.4x (OpenBLAS's threads take over); so up to 8 rows. An 8-row
// tile in AVX-512VL's 32 registers won 1.45x on one shape and nothing end to end: not kept.
#include <torch/torch.h>

namespace lol {

constexpr int64_t kSmallGemmMaxRows = 8;

// Whether this CPU runs the kernels (x86-64 with AVX2 and FMA).
bool small_gemm_supported();
// (N, K) fp32 weight -> (ceil(N/8), K, 8) panels, zero-padded past N.
torch::Tensor pack_panels(const torch::Tensor& weight);
// x (M, K) fp32 contiguous on the CPU times the packed weight of n output columns: (M, n).
torch::Tensor small_gemm(const torch::Tensor& x, const torch::Tensor& panels, int64_t n);

}  // namespace lol
