#pragma once
// Transformer blocks (SPEC 1.1): pre-norm, bias-free, RMSNorm, rotary GQA attention, SwiGLU,
// and the token-routed MoE feed-forward of the moe family. Children are registered under the
// canonical checkpoint names (attn_norm, attn.q, ffn.gate, ...).
#include <torch/torch.h>

#include <functional>
#include <map>
#include <mutex>
#include <optional>

#include "model/attention.h"
#include "model/config.h"
#include "model/expert_tiles.h"
#include "model/param_role.h"

namespace lol {

struct RMSNormImpl : torch::nn::Module {
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;  // (d)
  double eps;
  ParamRoles roles;
};
TORCH_MODULE(RMSNorm);

// x / sqrt(mean(x^2) + eps), without the learned weight.
torch::Tensor rms_normalize(const torch::Tensor& x, double eps);

// silu(gate) * up of a fused gate|up product (n, 2F) -> (n, F).
torch::Tensor swiglu(const torch::Tensor& both);

// The routed core's gated residual, x + gate * (y - x) per row: x, y (n, d), gate (n).
torch::Tensor gated_residual(const torch::Tensor& x, const torch::Tensor& y,
                             const torch::Tensor& gate);

// Depth-dependent scale and shift after a core norm: gamma[l] * x + beta[l] (SPEC 1.1).
struct FilmImpl : torch::nn::Module {
  FilmImpl(int64_t depth, int64_t dim);
  torch::Tensor gamma, beta;  // (D, d)
  ParamRoles roles;
};
TORCH_MODULE(Film);

// The FiLM rows of one routed depth for both sublayers.
struct FilmRows {
  torch::Tensor attn_gamma, attn_beta, ffn_gamma, ffn_beta;  // (d) each
};

struct AttentionImpl : torch::nn::Module {
  explicit AttentionImpl(const ModelConfig& c);
  torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  int64_t heads, kv_heads, head_dim;
  ParamRoles roles;
};
TORCH_MODULE(Attention);

// The rows a product under CPU autocast runs with, for `rows` real ones. LibTorch hands those
// bf16 products to oneDNN, which compiles a kernel for every new shape (a few milliseconds,
// then cached), and a routed depth's slices change their row counts at every step: compiling
// would cost more than the products. Above 64 rows the count is rounded up to a multiple of an
// eighth of the largest power of two not above it (at most 1/8 more rows, eight sizes per power
// of two: a bounded set of shapes per weight); up to 64 it is kept.
int64_t autocast_rows(int64_t rows);

// y = x W^T, W one weight or several stacked along their output dimension so one GEMM serves
// them all (q|k|v, gate|up). The stack is cached until any part changes (tensor version
// counters), so decoding does not copy the weights at every token; and fp32 rows on a CPU with
// AVX2 go to the packed kernel of model/packed_gemm.h over a panel copy cached the same way.
// With gradients on, the product is the sliced product of model/sliced_linear.h over the
// cached stack, which routes gradients to the parts (under autocast, LibTorch's linear over a
// stack rebuilt with autograd; on a CPU with its rows padded, see autocast_rows).
// The caches are filled under a lock, so threads may share one model for inference.
class Projection {
 public:
  torch::Tensor apply(const torch::Tensor& x, const std::vector<torch::Tensor>& parts);
  // The cached panels of the stack when x may take the packed kernel (no gradients, fp32 rows
  // on a CPU with AVX2, no CPU autocast), else an undefined tensor.
  torch::Tensor panels_for(const torch::Tensor& x, const std::vector<torch::Tensor>& parts);
  // The cached stack of the parts' values (no autograd history).
  torch::Tensor stacked(const std::vector<torch::Tensor>& parts);

 private:
  torch::Tensor weight(const std::vector<torch::Tensor>& parts);  // stacked(), lock held
  std::mutex mutex_;
  torch::Tensor cached_, panels_;
  std::vector<const void*> data_;
  std::vector<uint32_t> versions_;
};

struct FeedForwardImpl : torch::nn::Module {
  FeedForwardImpl(int64_t dim, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);  // down(silu(gate(x)) * up(x))
  torch::nn::Linear gate{nullptr}, up{nullptr}, down{nullptr};
  Projection gate_up, down_proj;
  ParamRoles roles;
};
TORCH_MODULE(FeedForward);

// Top-k token routing over FFN experts with loss-free balancing bias (moe family).
struct MoeFeedForwardImpl : torch::nn::Module {
  explicit MoeFeedForwardImpl(const ModelConfig& c);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::ModuleList experts{nullptr};
  torch::nn::Linear router{nullptr};  // (E, d)
  torch::Tensor balance_bias;         // (E) buffer, moved by the trainer, not by gradient
  BalanceSpace balance_space;
  int64_t top_k;
  // Tokens per expert in the latest forward, (E) int64 (undefined: none; on the model's device
  // when the tiled products counted them there), and the same on the host (empty: none).
  torch::Tensor last_load;
  std::vector<int64_t> last_load_on_host() const;
  ParamRoles roles;
};
TORCH_MODULE(MoeFeedForward);

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const ModelConfig& c, bool moe = false);

  // The projections before attention: q (n, H, dh), k and v (n, Hkv, dh), before rotary.
  struct QKV {
    torch::Tensor q, k, v;
  };
  QKV attention_inputs(const torch::Tensor& x, const FilmRows* film);
  // The fused q|k|v projection alone, (n, (H + 2 Hkv) dh), of rows already through
  // sublayer_input(attn_norm, ...), and its split into q, k and v.
  torch::Tensor project_qkv(const torch::Tensor& h);
  std::vector<torch::Tensor> qkv_weights() const;  // q, k, v: the stack project_qkv multiplies by
  QKV split_qkv(const torch::Tensor& fused) const;

  // A sublayer's normed input from rows already divided by their RMS: h * w, or with FiLM
  // (h * w) * gamma + beta, w the norm weight of the block a slice of rows runs (counts tile
  // the rows in order, one weight each). Every path computes it this way, so prefill, decoding
  // and training round alike.
  static torch::Tensor sublayer_input(const torch::Tensor& normalized,
                                      const std::vector<int64_t>& counts,
                                      const std::vector<torch::Tensor>& norm_weights,
                                      const torch::Tensor* gamma, const torch::Tensor* beta);

  RMSNorm attn_norm{nullptr}, ffn_norm{nullptr};
  Attention attn{nullptr};
  Projection qkv, out_proj;
  FeedForward ffn{nullptr};
  MoeFeedForward moe{nullptr};  // registered as "ffn" in place of the dense FFN
  ParamRoles roles;
};
TORCH_MODULE(Block);

// One slice of rows that one block processes: rows [offset, offset + count) of x.
struct BlockSlice {
  Block block;
  int64_t offset = 0;
  int64_t count = 0;
};

// Rows grouped by an id in 0..groups-1 (the expert each chose), stably: perm[r] is the
// original row placed at r, inverse undoes it (both int64 on the ids' device), counts[g] the
// rows of group g, placed in group order. Only the counts come to the host (slices of rows
// need them). On a CPU the grouping is a counting pass over the ids; on other devices a stable
// sort there (kSort asks for it anywhere, so tests check it against the counting pass).
struct IdGroups {
  torch::Tensor perm, inverse;
  std::vector<int64_t> counts;
  bool identity = false;  // perm is known to be 0..n-1 (one group used, or rows already grouped)
};
enum class RowGrouping { kAuto, kCount, kSort };
// ids: (n) int64, each in 0..groups-1.
IdGroups group_ids(const torch::Tensor& ids, int64_t groups, RowGrouping how = RowGrouping::kAuto);

// group_ids by the block each row runs, with a slice per block used.
struct RowGroups : IdGroups {
  std::vector<BlockSlice> slices;
};
RowGroups group_rows(const torch::Tensor& block_of_row, const std::vector<Block>& blocks,
                     RowGrouping how = RowGrouping::kAuto);
// The same from ids on the host (the decoder's per-row experts), perm and inverse on `device`.
RowGroups group_rows(const std::vector<int64_t>& block_of_row, const std::vector<Block>& blocks,
                     torch::Device device);

// A routed depth's rows grouped by expert on the device only (no host read, for the tiled
// products of model/expert_tiles.h): perm and inverse as in IdGroups, each grouped row's
// expert (ascending), the tiles, and the whole library in expert order.
struct TiledRows : SortedTiles {
  torch::Tensor inverse;
  std::vector<Block> blocks;
  // The library's weights stacked by expert (experts, ...), by the first block's member they
  // stack: made by the first depth of a forward that needs them and shared by its other
  // depths, so a forward (and what its backward keeps) holds one copy of the library, not one
  // per depth.
  std::shared_ptr<std::map<const void*, torch::Tensor>> stacks;
};
// ids (n) int64 on any device, each in 0..blocks.size()-1 (not checked: that would read them).
// `stacks`: the forward's shared stacks (null: new ones).
TiledRows group_rows_tiled(const torch::Tensor& block_of_row, const std::vector<Block>& blocks,
                           int64_t tile,
                           std::shared_ptr<std::map<const void*, torch::Tensor>> stacks = nullptr);

// Attention between the projections and the rest of a layer: q (n, H, dh), k and v
// (n, Hkv, dh) before rotary, in the rows' order -> (n, H * dh).
using AttendFn = std::function<torch::Tensor(const BlockImpl::QKV&)>;

// Runs blocks over disjoint row slices that together cover x, with one attention call over
// all rows between the per-slice projections and the per-slice output projection and
// feed-forward. Work that does not depend on the block (RMS normalisation, SwiGLU, residuals)
// runs once over all rows. A dense layer is one slice; a routed depth one slice per expert.
torch::Tensor run_slices(const torch::Tensor& x, std::vector<BlockSlice> slices,
                         const FilmRows* film, const AttendFn& attend_rows);

// run_slices over rows in tiles: each row's norm weight and products those of its expert,
// every product one tiled_linear over the library's stacked weights. No MoE blocks.
torch::Tensor run_tiled(const torch::Tensor& x, const TiledRows& tiled, const FilmRows* film,
                        const AttendFn& attend_rows);

// run_slices with attention over a plan (training and prefill): perm / inverse_perm as in attend().
torch::Tensor run_blocks(const torch::Tensor& x, std::vector<BlockSlice> slices,
                         const Rotary& rotary, const AttentionPlan& plan, const FilmRows* film,
                         const torch::Tensor& perm = {}, const torch::Tensor& inverse_perm = {});
// run_tiled with attention over a plan, x in the tiled rows' order (perm).
torch::Tensor run_blocks(const torch::Tensor& x, const TiledRows& tiled, const Rotary& rotary,
                         const AttentionPlan& plan, const FilmRows* film);

}  // namespace lol
