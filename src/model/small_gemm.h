#pragma once
// y = x W^T for the few rows of decoding (one token per sequence, or per expert) on the CPU.
// BLAS packs the whole weight matrix into its own layout on every call, which for a handful
// of rows costs more than the product; here the weight is packed once into panels of 8 output
// columns, (ceil(N/8), K, 8), and register-tiled AVX2+FMA kernels stream it: groups of three
// panels stay in L1 while the rows pass, and large enough products split the groups over the
// threads (at::parallel_for; from ~32 kFLOP, so even one row is split: with OpenMP workers
// spinning briefly between regions, waking one costs a microsecond or two). Measured on the
// development VM (d 256, both on two threads, weights streamed from L3; docs/performance.md):
// 1 row 5-7x OpenBLAS, 4-12 rows 2.5-5x, 16-24 rows 1.1-1.6x, 32 rows 0.8-1.2x by shape,
// 64 rows 0.6-1x; so up to 32 rows.
#include <torch/torch.h>

namespace lol {

constexpr int64_t kSmallGemmMaxRows = 32;

// Whether this CPU runs the kernels (x86-64 with AVX2 and FMA).
bool small_gemm_supported();
// (N, K) fp32 weight -> (ceil(N/8), K, 8) panels, zero-padded past N.
torch::Tensor pack_panels(const torch::Tensor& weight);
// x (M, K) fp32 contiguous on the CPU times the packed weight of n output columns: (M, n).
torch::Tensor small_gemm(const torch::Tensor& x, const torch::Tensor& panels, int64_t n);
// Several such products of one shape at once: xs[g] (M_g, K) times panels[g], each of n output
// columns, stacked in order as the rows of one (sum M_g, n) result. Every group's panels are
// spread over the threads together, so the experts of a routed depth cost one parallel region
// per projection rather than one each, and both threads stream weights even when each expert
// has a row or two. Each column of each group is summed as small_gemm sums it: the same bits.
torch::Tensor grouped_small_gemm(const std::vector<torch::Tensor>& xs,
                                 const std::vector<torch::Tensor>& panels, int64_t n);

}  // namespace lol
