#include "model/block.h"

#include <algorithm>

#include "model/cpu_autograd.h"
#include "model/cpu_fast.h"
#include "model/expert_tiles.h"
#include "model/packed_gemm.h"
#include "model/router.h"
#include "model/sliced_linear.h"
#include "util/autocast.h"
#include "util/op_profile.h"

namespace lol {

torch::Tensor rms_normalize(const torch::Tensor& x, double eps) {
  if (cpu_fast_path({&x})) return rms_normalize_cpu(x, eps);
  if (cpu_autograd_path({&x})) return rms_normalize_autograd(x, eps);
  return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps);
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", torch::ones({dim}));
  roles.set("weight", ParamRole::kNormWeight);
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  return rms_normalize(x, eps) * weight;
}

FilmImpl::FilmImpl(int64_t depth, int64_t dim) {
  gamma = register_parameter("gamma", torch::ones({depth, dim}));
  beta = register_parameter("beta", torch::zeros({depth, dim}));
  roles.set("gamma", ParamRole::kFilmScale);
  roles.set("beta", ParamRole::kFilmShift);
}

namespace {
int64_t output_columns(const std::vector<torch::Tensor>& parts) {
  int64_t n = 0;
  for (const auto& p : parts) n += p.size(0);
  return n;
}
torch::nn::Linear linear(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}
// LibTorch's x W^T; under CPU autocast over autocast_rows(n) rows, zero rows added and dropped.
torch::Tensor autocast_linear(const torch::Tensor& x, const torch::Tensor& w) {
  if (x.dim() != 2 || !x.device().is_cpu() || !autocast_enabled(torch::kCPU))
    return torch::nn::functional::linear(x, w);
  const int64_t rows = x.size(0), padded = autocast_rows(rows);
  if (padded == rows) return torch::nn::functional::linear(x, w);
  return torch::nn::functional::linear(torch::constant_pad_nd(x, {0, 0, 0, padded - rows}), w)
      .narrow(0, 0, rows);
}
}  // namespace

int64_t autocast_rows(int64_t rows) {
  if (rows <= 64) return rows;
  int64_t power = 64;  // the largest power of two <= rows
  while (power * 2 <= rows) power *= 2;
  const int64_t step = power / 8;
  return (rows + step - 1) / step * step;
}

AttentionImpl::AttentionImpl(const ModelConfig& c)
    : heads(c.n_heads), kv_heads(c.n_kv_heads), head_dim(c.head_dim()) {
  q = register_module("q", linear(c.d_model, heads * head_dim));
  k = register_module("k", linear(c.d_model, kv_heads * head_dim));
  v = register_module("v", linear(c.d_model, kv_heads * head_dim));
  o = register_module("o", linear(heads * head_dim, c.d_model));
  for (const char* name : {"q.weight", "k.weight", "v.weight"}) roles.set(name, ParamRole::kMatrix);
  roles.set("o.weight", ParamRole::kResidualOutput);
}

FeedForwardImpl::FeedForwardImpl(int64_t dim, int64_t hidden) {
  gate = register_module("gate", linear(dim, hidden));
  up = register_module("up", linear(dim, hidden));
  down = register_module("down", linear(hidden, dim));
  roles.set("gate.weight", ParamRole::kMatrix);
  roles.set("up.weight", ParamRole::kMatrix);
  roles.set("down.weight", ParamRole::kResidualOutput);
}

torch::Tensor Projection::apply(const torch::Tensor& x, const std::vector<torch::Tensor>& parts) {
  if (torch::GradMode::is_enabled()) {
    // Under autocast the product is LibTorch's (it picks the precision); otherwise the
    // cached stack as one slice of a sliced product, gradients routed to the parts.
    if (x.dim() == 2 && !autocast_enabled(x.device().type()))
      return sliced_linear(x, {x.size(0)}, {{parts, stacked(parts)}});
    return autocast_linear(x, parts.size() == 1 ? parts[0] : torch::cat(parts, 0));
  }
  auto panels = panels_for(x, parts);
  if (panels.defined()) return packed_gemm(x.contiguous(), panels, output_columns(parts));
  std::lock_guard<std::mutex> lock(mutex_);
  return autocast_linear(x, weight(parts));
}

torch::Tensor Projection::panels_for(const torch::Tensor& x,
                                     const std::vector<torch::Tensor>& parts) {
  // Under CPU autocast the product belongs to LibTorch, which runs it in bf16.
  const bool packed = !torch::GradMode::is_enabled() && x.dim() == 2 && x.size(0) > 0 &&
                      x.device().is_cpu() && x.scalar_type() == torch::kFloat32 &&
                      parts[0].scalar_type() == torch::kFloat32 && packed_gemm_supported() &&
                      !autocast_enabled(torch::kCPU);
  if (!packed) return {};
  std::lock_guard<std::mutex> lock(mutex_);
  auto w = weight(parts);
  if (!panels_.defined()) panels_ = pack_panels(w);
  return panels_;
}

torch::Tensor Projection::stacked(const std::vector<torch::Tensor>& parts) {
  std::lock_guard<std::mutex> lock(mutex_);
  return weight(parts);
}

torch::Tensor Projection::weight(const std::vector<torch::Tensor>& parts) {
  torch::NoGradGuard no_grad;
  bool fresh = cached_.defined() && data_.size() == parts.size();
  for (size_t i = 0; fresh && i < parts.size(); ++i)
    fresh = data_[i] == parts[i].data_ptr() && versions_[i] == parts[i]._version();
  if (!fresh) {
    cached_ = parts.size() == 1 ? parts[0].detach() : torch::cat(parts, 0);
    panels_ = torch::Tensor();
    data_.clear();
    versions_.clear();
    for (const auto& p : parts) {
      data_.push_back(p.data_ptr());
      versions_.push_back(p._version());
    }
  }
  return cached_;
}

torch::Tensor swiglu(const torch::Tensor& both) {
  if (cpu_fast_path({&both}) && both.dim() == 2) return swiglu_cpu(both);
  if (cpu_autograd_path({&both}) && both.dim() == 2) return swiglu_autograd(both);
  const int64_t hidden = both.size(-1) / 2;
  return torch::silu(both.narrow(-1, 0, hidden)) * both.narrow(-1, hidden, hidden);
}

torch::Tensor gated_residual(const torch::Tensor& x, const torch::Tensor& y,
                             const torch::Tensor& gate) {
  if (cpu_fast_path({&x, &y, &gate}) && x.dim() == 2) return gated_residual_cpu(x, y, gate);
  return x + gate.unsqueeze(1) * (y - x);
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  // gate and up in one GEMM: (n, d) x (d, 2F)
  return down_proj.apply(swiglu(gate_up.apply(x, {gate->weight, up->weight})), {down->weight});
}

MoeFeedForwardImpl::MoeFeedForwardImpl(const ModelConfig& c)
    : balance_space(c.balance_space), top_k(c.moe_top_k) {
  experts = register_module("experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < c.moe_experts; ++e) {
    FeedForward expert(c.d_model, c.ffn_hidden);
    experts->push_back(expert);
    roles.add("experts." + std::to_string(e), expert->roles);
  }
  router = register_module("router", linear(c.d_model, c.moe_experts));
  roles.set("router.weight", ParamRole::kRouter);
  balance_bias = register_buffer("balance_bias", torch::zeros({c.moe_experts}));
}

torch::Tensor MoeFeedForwardImpl::forward(const torch::Tensor& x) {
  // p = softmax(router(x)); experts chosen by top-k of p + bias (or log p + bias); each weighted
  // by its p (not renormalised, so top-1 still passes gradient to the router).
  const int64_t num_experts = static_cast<int64_t>(experts->size());
  auto probs = torch::softmax(router->forward(x), -1);  // (n, E)
  auto choice =
      std::get<1>(balanced_scores(probs, balance_bias, balance_space).topk(top_k, -1));  // (n, k)
  auto gates = probs.gather(1, choice);                                                  // (n, k)
  auto flat_gates = gates.reshape({-1});
  // The (token, slot) pairs grouped by expert: slot i * k + j is token i's j-th choice.
  if (expert_products(x.device()) == ExpertProducts::kTiled) {
    // In expert order on the device, each expert's pairs in tiles (model/expert_tiles.h): the
    // feed-forward's two products over the experts' stacked weights, nothing read on the host.
    const auto flat = choice.reshape({-1});
    const auto sorted = sort_into_tiles(flat, num_experts, expert_tile(flat.size(0), num_experts));
    const auto& slot = sorted.perm;
    const auto& tiles = sorted.tiles;
    const auto tokens = torch::div(slot, top_k, "floor");
    last_load = tiles.counts;
    std::vector<torch::Tensor> gate_up, down;
    for (int64_t e = 0; e < num_experts; ++e) {
      auto f = experts[e]->as<FeedForward>();
      gate_up.push_back(torch::cat({f->gate->weight, f->up->weight}, 0));
      down.push_back(f->down->weight);
    }
    auto hidden = swiglu(tiled_linear(x.index_select(0, tokens), tiles, torch::stack(gate_up)));
    auto y = tiled_linear(hidden, tiles, torch::stack(down)) *
             flat_gates.index_select(0, slot).unsqueeze(1);
    return torch::zeros_like(x).index_add(0, tokens, y.to(x.scalar_type()));
  }
  const auto by_expert = group_ids(choice.reshape({-1}), num_experts);
  const auto tokens = torch::div(by_expert.perm, top_k, "floor");
  last_load = torch::tensor(by_expert.counts, torch::kInt64);
  auto out = torch::zeros_like(x);
  int64_t offset = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t count = by_expert.counts[e];
    if (count == 0) continue;
    auto idx = tokens.narrow(0, offset, count);
    auto slot = by_expert.perm.narrow(0, offset, count);
    offset += count;
    auto y = experts[e]->as<FeedForward>()->forward(x.index_select(0, idx));
    out = out.index_add(0, idx,
                        (y * flat_gates.index_select(0, slot).unsqueeze(1)).to(out.scalar_type()));
  }
  return out;
}

std::vector<int64_t> MoeFeedForwardImpl::last_load_on_host() const {
  if (!last_load.defined()) return {};
  const auto host = last_load.to(torch::kCPU, torch::kInt64).contiguous();
  return std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
}

BlockImpl::BlockImpl(const ModelConfig& c, bool use_moe) {
  attn_norm = register_module("attn_norm", RMSNorm(c.d_model, c.norm_eps));
  attn = register_module("attn", Attention(c));
  ffn_norm = register_module("ffn_norm", RMSNorm(c.d_model, c.norm_eps));
  if (use_moe)
    moe = register_module("ffn", MoeFeedForward(c));
  else
    ffn = register_module("ffn", FeedForward(c.d_model, c.ffn_hidden));
  roles.add("attn_norm", attn_norm->roles);
  roles.add("attn", attn->roles);
  roles.add("ffn_norm", ffn_norm->roles);
  roles.add("ffn", use_moe ? moe->roles : ffn->roles);
}

torch::Tensor BlockImpl::sublayer_input(const torch::Tensor& normalized,
                                        const std::vector<int64_t>& counts,
                                        const std::vector<torch::Tensor>& norm_weights,
                                        const torch::Tensor* gamma, const torch::Tensor* beta) {
  bool fp32 = cpu_fp32_contiguous({&normalized, gamma, beta});
  for (const auto& w : norm_weights) fp32 = fp32 && cpu_fp32_contiguous({&w});
  if (fp32 && !torch::GradMode::is_enabled())
    return scale_shift_cpu(normalized, norm_weights, RowSlices(counts), gamma, beta);
  if (fp32) return scale_shift_autograd(normalized, norm_weights, counts, gamma, beta);
  auto one = [&](const torch::Tensor& rows, const torch::Tensor& w) {
    if (!gamma) return rows * w;
    return rows * w * *gamma + *beta;
  };
  if (counts.size() == 1) return one(normalized, norm_weights[0]);
  const RowSlices slices(counts);
  std::vector<torch::Tensor> parts;
  for (size_t i = 0; i < slices.size(); ++i)
    parts.push_back(one(normalized.narrow(0, slices.begin(i), slices.count(i)), norm_weights[i]));
  return torch::cat(parts, 0);
}

std::vector<torch::Tensor> BlockImpl::qkv_weights() const {
  return {attn->q->weight, attn->k->weight, attn->v->weight};
}

torch::Tensor BlockImpl::project_qkv(const torch::Tensor& h) {
  return qkv.apply(h, qkv_weights());
}

BlockImpl::QKV BlockImpl::split_qkv(const torch::Tensor& fused) const {
  const int64_t n = fused.size(0);
  const int64_t q_cols = attn->heads * attn->head_dim, kv_cols = attn->kv_heads * attn->head_dim;
  auto parts = fused.split_with_sizes({q_cols, kv_cols, kv_cols}, -1);
  return QKV{parts[0].reshape({n, attn->heads, attn->head_dim}),
             parts[1].reshape({n, attn->kv_heads, attn->head_dim}),
             parts[2].reshape({n, attn->kv_heads, attn->head_dim})};
}

BlockImpl::QKV BlockImpl::attention_inputs(const torch::Tensor& x, const FilmRows* film) {
  return split_qkv(project_qkv(
      sublayer_input(rms_normalize(x, attn_norm->eps), {x.size(0)}, {attn_norm->weight},
                     film ? &film->attn_gamma : nullptr, film ? &film->attn_beta : nullptr)));
}

namespace {
// The counting pass over ids on the host: a stable order by id, its inverse on `device`.
IdGroups count_groups(const int64_t* id, int64_t n, int64_t groups, torch::Device device) {
  IdGroups g;
  g.counts.assign(groups, 0);
  for (int64_t r = 0; r < n; ++r) {
    TORCH_CHECK(id[r] >= 0 && id[r] < groups, "group_ids: id ", id[r], " is outside 0..",
                groups - 1);
    g.counts[id[r]]++;
  }
  std::vector<int64_t> next(groups, 0);
  for (int64_t m = 1; m < groups; ++m) next[m] = next[m - 1] + g.counts[m - 1];
  auto perm = torch::empty({n}, torch::kInt64), inverse = torch::empty({n}, torch::kInt64);
  int64_t* p = perm.data_ptr<int64_t>();
  int64_t* q = inverse.data_ptr<int64_t>();
  g.identity = true;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t at = next[id[r]]++;
    p[at] = r;
    q[r] = at;
    g.identity = g.identity && at == r;
  }
  g.perm = perm.to(device);
  g.inverse = inverse.to(device);
  return g;
}

// perm (n) int64 -> its inverse, on perm's device.
torch::Tensor inverse_permutation(const torch::Tensor& perm) {
  return torch::empty_like(perm).scatter_(0, perm, torch::arange(perm.size(0), perm.options()));
}

RowGroups with_slices(IdGroups ids, const std::vector<Block>& blocks) {
  RowGroups g;
  static_cast<IdGroups&>(g) = std::move(ids);
  int64_t offset = 0;
  for (size_t m = 0; m < blocks.size(); ++m) {
    if (g.counts[m] > 0) g.slices.push_back({blocks[m], offset, g.counts[m]});
    offset += g.counts[m];
  }
  return g;
}
}  // namespace

IdGroups group_ids(const torch::Tensor& ids, int64_t groups, RowGrouping how) {
  TORCH_CHECK(ids.dim() == 1 && ids.scalar_type() == torch::kInt64,
              "group_ids: ids must be a 1-D int64 tensor");
  const int64_t n = ids.size(0);
  if (how == RowGrouping::kAuto) how = ids.is_cpu() ? RowGrouping::kCount : RowGrouping::kSort;
  if (how == RowGrouping::kCount) {
    auto host = ids.to(torch::kCPU).contiguous();
    return count_groups(host.data_ptr<int64_t>(), n, groups, ids.device());
  }
  // The counts are the one transfer; the order is a stable sort on the device.
  IdGroups g;
  g.counts.assign(groups, 0);
  auto on_host = torch::bincount(ids, {}, groups).to(torch::kCPU).contiguous();
  TORCH_CHECK(on_host.size(0) == groups, "group_ids: an id is outside 0..", groups - 1);
  std::copy_n(on_host.data_ptr<int64_t>(), groups, g.counts.begin());
  g.perm = std::get<1>(ids.sort(/*stable=*/true, 0, /*descending=*/false));
  g.inverse = inverse_permutation(g.perm);
  g.identity =
      std::count_if(g.counts.begin(), g.counts.end(), [](int64_t c) { return c > 0; }) <= 1;
  return g;
}

RowGroups group_rows(const torch::Tensor& block_of_row, const std::vector<Block>& blocks,
                     RowGrouping how) {
  return with_slices(group_ids(block_of_row, static_cast<int64_t>(blocks.size()), how), blocks);
}

TiledRows group_rows_tiled(const torch::Tensor& block_of_row, const std::vector<Block>& blocks,
                           int64_t tile,
                           std::shared_ptr<std::map<const void*, torch::Tensor>> stacks) {
  TiledRows t;
  static_cast<SortedTiles&>(t) =
      sort_into_tiles(block_of_row, static_cast<int64_t>(blocks.size()), tile);
  t.inverse = inverse_permutation(t.perm);
  t.blocks = blocks;
  t.stacks = stacks ? std::move(stacks) : std::make_shared<std::map<const void*, torch::Tensor>>();
  return t;
}

RowGroups group_rows(const std::vector<int64_t>& block_of_row, const std::vector<Block>& blocks,
                     torch::Device device) {
  return with_slices(count_groups(block_of_row.data(), static_cast<int64_t>(block_of_row.size()),
                                  static_cast<int64_t>(blocks.size()), device),
                     blocks);
}

namespace {
torch::Tensor cat_rows(std::vector<torch::Tensor>& parts) {
  return parts.size() == 1 ? parts[0] : torch::cat(parts, 0);
}

std::vector<int64_t> slice_counts(const std::vector<BlockSlice>& slices, int64_t rows) {
  std::vector<int64_t> counts;
  int64_t next = 0;
  for (const auto& s : slices) {
    TORCH_CHECK(s.offset == next, "block slices must tile the rows in order");
    next += s.count;
    counts.push_back(s.count);
  }
  TORCH_CHECK(next == rows, "block slices must cover every row");
  return counts;
}

// A block's projection of one kind and the weights it stacks.
struct ProjectionRef {
  Projection* projection;
  std::vector<torch::Tensor> parts;
};
// Each slice's rows of x through its own block's projection (`of`), in row order. With
// gradients on (no autocast), one sliced product (model/sliced_linear.h). Without: when every
// slice may take the packed few-row kernel (decoding: a routed depth's experts with a row or a
// few each), one grouped product serves them all; otherwise one product per slice.
torch::Tensor project_slices(const torch::Tensor& x, const std::vector<BlockSlice>& slices,
                             const std::vector<int64_t>& counts,
                             const std::function<ProjectionRef(BlockImpl&)>& of) {
  ProfileScope scope("proj");
  std::vector<ProjectionRef> refs;
  for (const auto& s : slices) refs.push_back(of(*s.block.ptr()));
  if (torch::GradMode::is_enabled() && !autocast_enabled(x.device().type())) {
    std::vector<SlicedWeight> weights;
    for (auto& r : refs) weights.push_back({r.parts, r.projection->stacked(r.parts)});
    return sliced_linear(x, counts, weights);
  }
  const auto rows =
      slices.size() == 1 ? std::vector<torch::Tensor>{x} : x.split_with_sizes(counts, 0);
  if (slices.size() > 1) {
    std::vector<torch::Tensor> xs, panels;
    for (size_t i = 0; i < slices.size(); ++i) {
      auto p = refs[i].projection->panels_for(rows[i], refs[i].parts);
      if (!p.defined()) break;
      panels.push_back(p);
      xs.push_back(rows[i].contiguous());
    }
    if (panels.size() == slices.size())
      return grouped_packed_gemm(xs, panels, output_columns(refs[0].parts));
  }
  std::vector<torch::Tensor> parts;
  for (size_t i = 0; i < slices.size(); ++i)
    parts.push_back(refs[i].projection->apply(rows[i], refs[i].parts));
  return cat_rows(parts);
}

// One layer over rows whose blocks `rows` knows (slices, or tiles of a routed depth): the
// attention sublayer with each row's norm weight, FiLM and projections, attention over all
// rows between them; then the feed-forward, SwiGLU's gate over all rows at once between the
// products (or, when `moe` is set, its feed-forward whole).
struct LayerRows {
  const BlockImpl* first;  // any of the blocks: eps and the q|k|v split are shared
  // normalized rows -> the sublayer's input (norm weight, then FiLM when given).
  std::function<torch::Tensor(const torch::Tensor&, bool attention)> sublayer_input;
  std::function<torch::Tensor(const torch::Tensor&,
                              const std::function<ProjectionRef(BlockImpl&)>&)>
      project;
  std::function<torch::Tensor(const torch::Tensor&)> moe;  // null: the SwiGLU products
};

torch::Tensor run_layer(const torch::Tensor& x, const LayerRows& rows,
                        const AttendFn& attend_rows) {
  const double eps = rows.first->attn_norm->eps;
  auto sublayer_inputs = [&](const torch::Tensor& h, bool attention) {
    ProfileScope scope("norm");
    return rows.sublayer_input(rms_normalize(h, eps), attention);
  };
  auto qkv = widen_for_cpu_kernels(rows.project(sublayer_inputs(x, true), [](BlockImpl& b) {
    return ProjectionRef{&b.qkv, b.qkv_weights()};
  }));
  torch::Tensor attended;
  {
    ProfileScope scope("attend");
    attended = attend_rows(rows.first->split_qkv(qkv));
  }
  auto a = x + rows.project(attended, [](BlockImpl& b) {
    return ProjectionRef{&b.out_proj, {b.attn->o->weight}};
  });
  auto inputs = sublayer_inputs(a, false);
  if (rows.moe) {
    ProfileScope scope("moe");
    return a + rows.moe(inputs);
  }
  auto gate_up = widen_for_cpu_kernels(rows.project(inputs, [](BlockImpl& b) {
    return ProjectionRef{&b.ffn->gate_up, {b.ffn->gate->weight, b.ffn->up->weight}};
  }));
  torch::Tensor hidden_act;
  {
    ProfileScope scope("swiglu");
    hidden_act = swiglu(gate_up);
  }
  return a + rows.project(hidden_act, [](BlockImpl& b) {
    return ProjectionRef{&b.ffn->down_proj, {b.ffn->down->weight}};
  });
}

const torch::Tensor* film_gamma(const FilmRows* film, bool attention) {
  return film ? (attention ? &film->attn_gamma : &film->ffn_gamma) : nullptr;
}
const torch::Tensor* film_beta(const FilmRows* film, bool attention) {
  return film ? (attention ? &film->attn_beta : &film->ffn_beta) : nullptr;
}
}  // namespace

torch::Tensor run_slices(const torch::Tensor& x, std::vector<BlockSlice> slices,
                         const FilmRows* film, const AttendFn& attend_rows) {
  const auto counts = slice_counts(slices, x.size(0));
  LayerRows rows;
  rows.first = slices.front().block.get();
  rows.sublayer_input = [&](const torch::Tensor& normalized, bool attention) {
    std::vector<torch::Tensor> weights;
    for (const auto& s : slices)
      weights.push_back(attention ? s.block->attn_norm->weight : s.block->ffn_norm->weight);
    return BlockImpl::sublayer_input(normalized, counts, weights, film_gamma(film, attention),
                                     film_beta(film, attention));
  };
  rows.project = [&](const torch::Tensor& in, const std::function<ProjectionRef(BlockImpl&)>& of) {
    return project_slices(in, slices, counts, of);
  };
  bool any_moe = false;
  for (auto& s : slices) any_moe = any_moe || s.block->moe;
  if (any_moe)
    rows.moe = [&](const torch::Tensor& inputs) {
      std::vector<torch::Tensor> parts;
      for (auto& s : slices) {
        auto part = inputs.narrow(0, s.offset, s.count);
        parts.push_back(s.block->moe ? s.block->moe->forward(part) : s.block->ffn->forward(part));
      }
      return cat_rows(parts);
    };
  return run_layer(x, rows, attend_rows);
}

torch::Tensor run_tiled(const torch::Tensor& x, const TiledRows& tiled, const FilmRows* film,
                        const AttendFn& attend_rows) {
  LOL_CHECK(!tiled.blocks.empty() && tiled.expert.numel() == x.size(0),
            "run_tiled: the library's blocks and an expert per row");
  LayerRows rows;
  rows.first = tiled.blocks.front().get();
  // One stack of the library's weights per member, shared by the forward's depths.
  auto stacked = [&](const void* member, const std::function<torch::Tensor(BlockImpl&)>& of) {
    auto& cache = *tiled.stacks;
    auto it = cache.find(member);
    if (it == cache.end()) {
      std::vector<torch::Tensor> weights;
      for (const auto& b : tiled.blocks) weights.push_back(of(*b.ptr()));
      it = cache.emplace(member, torch::stack(weights)).first;
    }
    return it->second;
  };
  // Each row's norm weight gathered by its expert (no slices: their sizes are not on the host).
  rows.sublayer_input = [&](const torch::Tensor& normalized, bool attention) {
    const auto& first = *rows.first;
    auto weight =
        attention ? stacked(first.attn_norm.get(), [](BlockImpl& b) { return b.attn_norm->weight; })
                  : stacked(first.ffn_norm.get(), [](BlockImpl& b) { return b.ffn_norm->weight; });
    auto out = normalized * weight.index_select(0, tiled.expert);
    if (film) out = out * *film_gamma(film, attention) + *film_beta(film, attention);
    return out;
  };
  rows.project = [&](const torch::Tensor& in, const std::function<ProjectionRef(BlockImpl&)>& of) {
    ProfileScope scope("proj");
    const auto weight = stacked(of(*tiled.blocks.front().ptr()).projection, [&](BlockImpl& b) {
      auto parts = of(b).parts;
      return parts.size() == 1 ? parts[0] : torch::cat(parts, 0);
    });
    return tiled_linear(in, tiled.tiles, weight);
  };
  for (const auto& b : tiled.blocks)
    LOL_CHECK(!b->moe, "run_tiled: a block with a MoE feed-forward cannot take tiled products");
  return run_layer(x, rows, attend_rows);
}

torch::Tensor run_blocks(const torch::Tensor& x, std::vector<BlockSlice> slices,
                         const Rotary& rotary, const AttentionPlan& plan, const FilmRows* film,
                         const torch::Tensor& perm, const torch::Tensor& inverse_perm) {
  return run_slices(x, slices, film, [&](const BlockImpl::QKV& qkv) {
    return attend(rotary.apply(qkv.q), rotary.apply(qkv.k), qkv.v, plan, perm, inverse_perm);
  });
}

torch::Tensor run_blocks(const torch::Tensor& x, const TiledRows& tiled, const Rotary& rotary,
                         const AttentionPlan& plan, const FilmRows* film) {
  return run_tiled(x, tiled, film, [&](const BlockImpl::QKV& qkv) {
    return attend(rotary.apply(qkv.q), rotary.apply(qkv.k), qkv.v, plan, tiled.perm, tiled.inverse);
  });
}

}  // namespace lol
