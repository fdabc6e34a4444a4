#pragma once
// Attention over segments on the CPU in fp32 without the padded buckets: each (segment, key
// head) is one task that gathers its rows into cache-sized buffers and runs, per block of
// queries, scores = Q K^T over the keys the block can see (causal: none after its last query;
// band: none before its first query's window), the mask and softmax in place, and P V; the
// backward recomputes P block by block (nothing of size n x n is kept) and accumulates dK and
// dV of the task in its buffers. The products are single-threaded BLAS calls (sgemm_) on the
// buffers; the tasks are spread over the threads by cost. Against the LibTorch expressions of
// attend() (gathers, a (segments, heads, capacity, capacity) score tensor, masked_fill,
// softmax, and their autograd), it skips the padded and masked squares and keeps every score
// in cache; on LibTorch 1.13 it also avoids bmm's walk over small matrices one select at a
// time. Same masking rules (SPEC 1.2), same results to float rounding
// (`SegmentAttention.*` checks forward and gradients against attend()'s expressions).
#include <torch/torch.h>

#include <vector>

#include "model/attention.h"

namespace lol {

// Whether attend() may take this path: CPU fp32 tensors whose last dimension is contiguous, a
// BLAS with sgemm_ in the process, and the kernel not switched off (LOL_ATTENTION_KERNEL=0, or
// set_segment_attention_enabled(false), which the tests use to compare the two paths).
bool segment_attention_supported(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v);
void set_segment_attention_enabled(bool enabled);

// q (n, H, dh), k/v (n, Hkv, dh) in row order; row r holds flat token perm[r] when
// inverse_perm (flat token -> row) is defined, else rows are flat tokens. The plan gives the
// segments, the keys other tokens may see and the band. Returns (n, H * dh) in row order;
// differentiable in q, k and v.
torch::Tensor segment_attention(const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& v, const AttentionPlan& plan,
                                const torch::Tensor& inverse_perm);

}  // namespace lol
