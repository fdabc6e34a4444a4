#pragma once
// y = x W^T without gradients on the CPU (decoding, prefill, evaluation). The weight is packed
// once into panels of 8 output columns, (ceil(N/8), K, 8), for register-tiled AVX2+FMA kernels
// (16 columns, (ceil(N/16), K, 16), for AVX-512 ones where the CPU has it: the same bits) that
// stream it: groups of three panels stay in L1 while the rows pass, and large enough
// products split the groups over the threads (at::parallel_for; from ~32 kFLOP, so even one
// row is split: with OpenMP workers spinning briefly between regions, waking one costs a
// microsecond or two). BLAS instead packs the whole weight on every call, which for a few rows
// costs more than the product, and runs on its own thread pool, which contends with OpenMP's
// when inference alternates the two. Measured on the development VM (d 256; docs/performance.md):
// one row 5-7x OpenBLAS; 16-4096 rows 200-230 GFLOP/s on two threads against OpenBLAS's 56-115
// when alternating with other operators (230 on its own at 4096 rows, where the two are even).
#include <torch/torch.h>

namespace lol {

// Whether this CPU runs the kernels (x86-64 with AVX2 and FMA).
bool packed_gemm_supported();
// The widest panels this CPU's kernels take: 16 columns with AVX-512, 8 with AVX2, else 0.
int64_t panel_width_supported();
// (N, K) fp32 weight -> (ceil(N/W), K, W) panels of W columns, zero-padded past N; W = 0 picks
// panel_width_supported(). Either width gives every column the same bits (tests use both).
torch::Tensor pack_panels(const torch::Tensor& weight, int64_t width = 0);
// x (M, K) fp32 contiguous on the CPU times the packed weight of n output columns: (M, n).
torch::Tensor packed_gemm(const torch::Tensor& x, const torch::Tensor& panels, int64_t n);
// Several such products of one shape at once: xs[g] (M_g, K) times panels[g], each of n output
// columns, stacked in order as the rows of one (sum M_g, n) result. Every group's panels are
// spread over the threads together, so the experts of a routed depth cost one parallel region
// per projection rather than one each, and both threads stream weights even when each expert
// has a row or two. Each column of each group is summed as packed_gemm sums it: the same bits.
torch::Tensor grouped_packed_gemm(const std::vector<torch::Tensor>& xs,
                                  const std::vector<torch::Tensor>& panels, int64_t n);

}  // namespace lol
