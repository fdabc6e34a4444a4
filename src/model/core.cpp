#include "model/core.h"

#include <optional>

#include "model/routed_rows.h"
#include "util/op_profile.h"
#include "util/tensor.h"

namespace lol {

std::unique_ptr<Core> make_core(const ModelConfig& config, torch::nn::Module& model,
                                ParamRoles& roles) {
  switch (config.family) {
    case Family::kLol:
      return std::make_unique<LolCore>(config, model, roles);
    case Family::kDense:
    case Family::kLooped:
    case Family::kMoe:
      return std::make_unique<StackCore>(config, model, roles);
  }
  fail("make_core: family ", static_cast<int>(config.family), " has no core");
}

void add_core_stats(const ModelConfig& config, int64_t seq_len, int64_t depth, ModelStats& stats) {
  switch (config.family) {
    case Family::kLol:
      return LolCore::add_stats(config, seq_len, depth, stats);
    case Family::kDense:
    case Family::kLooped:
    case Family::kMoe:
      return StackCore::add_stats(config, seq_len, depth, stats);
  }
}

const AttentionPlan& layer_plan(const CoreLayer& layer, const Layout& layout) {
  switch (layer.mask) {
    case CoreLayer::Mask::kDocument:
      return layout.document_plan();
    case CoreLayer::Mask::kSliding:
      return layout.sliding_plan(layer.window);
    case CoreLayer::Mask::kStrided:
    case CoreLayer::Mask::kRouted:
      return layout.windows(layer.window, layer.delta).plan;
  }
  fail("layer_plan: unknown mask");
}

namespace {
int64_t executed_depth(const ForwardOptions& options, int64_t depth, bool can_extrapolate) {
  if (options.executed_depth < 0) return depth;
  LOL_CHECK(options.executed_depth <= depth || (can_extrapolate && options.extrapolate_depth),
            "executed core depth ", options.executed_depth, " exceeds the model's core_depth ",
            depth);
  LOL_CHECK(options.executed_depth <= 1024, "executed core depth ", options.executed_depth,
            " is above 1024");
  return options.executed_depth;
}
}  // namespace

// ---- lol -------------------------------------------------------------------------------

LolCore::LolCore(const ModelConfig& config, torch::nn::Module& model, ParamRoles& roles)
    : config_(config) {
  library_ = model.register_module("library", torch::nn::ModuleList());
  for (int64_t m = 0; m < config.library_size; ++m) {
    Block expert(config);
    library_->push_back(expert);
    roles.add("library." + std::to_string(m), expert->roles);
  }
  // core.film.{attn,ffn}.{gamma,beta}
  auto core = model.register_module("core", std::make_shared<torch::nn::Module>());
  auto film = core->register_module("film", std::make_shared<torch::nn::Module>());
  film_attn_ = film->register_module("attn", Film(config.core_depth, config.d_model));
  film_ffn_ = film->register_module("ffn", Film(config.core_depth, config.d_model));
  roles.add("core.film.attn", film_attn_->roles);
  roles.add("core.film.ffn", film_ffn_->roles);
  router_ = model.register_module("router", Router(config));
  roles.add("router", router_->roles);
}

FilmRows LolCore::film(int64_t l) const {
  return FilmRows{film_attn_->gamma[l - 1], film_attn_->beta[l - 1], film_ffn_->gamma[l - 1],
                  film_ffn_->beta[l - 1]};
}

std::vector<Block> LolCore::blocks() const {
  std::vector<Block> out;
  for (size_t m = 0; m < library_->size(); ++m) out.emplace_back(library_->ptr<BlockImpl>(m));
  return out;
}

std::vector<CoreLayer> LolCore::layers(int64_t depth) const {
  std::vector<CoreLayer> out;
  for (int64_t l = 1; l <= depth; ++l)
    out.push_back({CoreLayer::Mask::kRouted, l, config_.window,
                   window_offset(l, config_.window, config_.stride), Block(nullptr)});
  return out;
}

void LolCore::check(const ForcedPath& path) const {
  path.validate(config_.core_depth, config_.library_size, config_.router_skip);
}

torch::Tensor LolCore::router_inputs(const torch::Tensor& first_states,
                                     const torch::Tensor& closed_mean_sums,
                                     const std::vector<int64_t>& ordinals, int64_t depth) const {
  return router_->decode_inputs(first_states, closed_mean_sums, ordinals, depth);
}

RouteDecisions LolCore::route(const torch::Tensor& inputs, int64_t depth,
                              const std::vector<int64_t>& ordinals, const ForcedPath* force) const {
  auto probs = router_->probabilities(inputs, depth, /*add_noise=*/false);
  return select_experts(probs, router_->depth_bias(depth), router_->balance_space, depth,
                        int64_tensor(ordinals, probs.device()), force, router_->skip_rule());
}

torch::Tensor LolCore::forward(const torch::Tensor& x_in, const Layout& layout,
                               const Rotary& rotary, const ForwardOptions& options,
                               std::vector<RouteDecisions>* routes) {
  if (options.force) check(*options.force);
  torch::Tensor x = x_in;
  // Tiled products: the library's stacked weights, made once and shared by every depth.
  const auto stacks = std::make_shared<std::map<const void*, torch::Tensor>>();
  for (const auto& layer : layers(executed_depth(options, config_.core_depth, true))) {
    const int64_t l = layer.depth;
    const int64_t p = (l - 1) % config_.core_depth + 1;  // the depth whose parameters run
    const auto& part = layout.windows(layer.window, layer.delta);
    if (options.hook) options.hook("core_in", l, x);
    std::optional<ProfileScope> scope(std::in_place, "route");
    RouteDecisions decision =
        router_->route(x, p, part, layout, options.router_noise, options.force);
    decision.depth = l;
    if (options.hook) {
      options.hook("router_input", l, decision.router_inputs);
      options.hook("router_probs", l, decision.probs);
    }

    // Order tokens by expert (stable, so each expert's windows stay in flat order): with the
    // rows per expert read on the host (slices), or on the device only (tiles). Skipped windows
    // run expert 0 at update gate 0 (RouteDecisions::block_ids).
    scope.emplace("permute");
    const auto expert_of_token = decision.block_ids().index_select(0, part.token_window_t);
    FilmRows rows = film(p);
    std::optional<TiledRows> tiled;
    std::optional<RowGroups> groups;
    if (expert_products(x.device()) == ExpertProducts::kTiled)
      tiled = group_rows_tiled(expert_of_token, blocks(),
                               expert_tile(x.size(0), config_.library_size), stacks);
    else
      groups = group_rows(expert_of_token, blocks());
    const auto& perm = tiled ? tiled->perm : groups->perm;
    const auto& inverse = tiled ? tiled->inverse : groups->inverse;
    const bool identity = groups && groups->identity;
    auto xp = identity ? x : permute_rows(x, perm, inverse);
    auto rotary_rows = rotary.select(perm);
    scope.reset();
    auto yp = tiled ? run_blocks(xp, *tiled, rotary_rows, part.plan, &rows)
                    : run_blocks(xp, groups->slices, rotary_rows, part.plan, &rows, perm, inverse);
    // s = H + alpha * (E(H) - H) in token order, alpha per window broadcast to its tokens.
    scope.emplace("permute");
    // router_skip_target in training: the gates pass through the node that teaches the skip head.
    const auto gates = decision.head_logits.defined()
                           ? skip_target(decision, config_.router_skip_share)
                           : decision.update_gates();
    x = routed_residual(x, yp, gates, part.token_window_t, identity ? torch::Tensor() : inverse);
    scope.reset();
    if (options.hook) options.hook("core_depth_out", l, x);
    if (routes) routes->push_back(std::move(decision));
  }
  return x;
}

void LolCore::count_loads(const std::vector<RouteDecisions>& routes, BalanceLoads& loads) const {
  // One load for the router, or one per routed depth (balance_per_depth): rows of L experts.
  const int64_t L = config_.library_size;
  const int64_t rows = config_.balance_per_depth ? config_.core_depth : 1;
  loads.loads.resize(rows);
  for (auto& load : loads.loads) load.resize(L, 0.0);
  if (config_.router_skip) {
    loads.counted.resize(rows, 0.0);
    loads.skipped.resize(rows, 0.0);
  }
  if (routes.empty()) return;
  // On the device, then one transfer: per (row, expert) the windows (or tokens) it took, how
  // many decisions kept the router's own top choice, and per row the windows counted and
  // skipped.
  std::vector<torch::Tensor> slots, weights, agreed, counted, skipped;
  std::vector<int64_t> skip_rows;  // the row of each route that has a skip
  for (const auto& r : routes) {
    const auto& part = *r.partition;
    // windows: 1 per decision; tokens: its non-padding tokens; gates: its gate alpha, the share
    // of the block's update the window took (a window run at a gate near 0 carries no load).
    torch::Tensor weight;
    switch (config_.balance_count) {
      case BalanceCount::kTokens:
        weight = part.lengths_t.to(torch::kFloat64);
        break;
      case BalanceCount::kGates:
        weight = r.gates.detach().to(torch::kFloat64);
        break;
      case BalanceCount::kWindows:
        weight = torch::ones({r.experts.size(0)},
                             torch::dtype(torch::kFloat64).device(r.experts.device()));
        break;
    }
    const auto in_load = config_.balance_window0
                             ? torch::ones_like(part.ordinals_t, torch::kFloat64)
                             : (part.ordinals_t != 0).to(torch::kFloat64);
    weight = weight * in_load;
    const int64_t row = rows > 1 ? (r.depth - 1) % config_.core_depth : 0;
    if (r.skip >= 0) {
      // A skip is no load: it adds 0 to expert 0's slot. It counts toward the skip's share.
      const auto skips = (r.experts == r.skip).to(torch::kFloat64) * in_load;
      weight = weight * (1 - skips);
      skip_rows.push_back(row);
      counted.push_back(in_load.sum());
      skipped.push_back(skips.sum());
    }
    slots.push_back(r.block_ids() + row * L);
    weights.push_back(weight);
    agreed.push_back(r.probs.detach().argmax(1) == r.experts);
    loads.decisions += r.experts.size(0);
  }
  const auto all = torch::cat(slots);
  const auto f64 = torch::dtype(torch::kFloat64).device(all.device());
  std::vector<torch::Tensor> parts = {
      torch::zeros({rows * L}, f64).index_add_(0, all, torch::cat(weights)),
      torch::cat(agreed).sum().to(torch::kFloat64).reshape({1})};
  if (!skip_rows.empty()) {
    // (counted, skipped) of each row: a (rows, 2) table, flattened row by row.
    const auto pairs = torch::stack({torch::stack(counted), torch::stack(skipped)}, 1);
    const auto index = torch::tensor(skip_rows, torch::kLong).to(all.device());
    parts.push_back(torch::zeros({rows, 2}, f64).index_add_(0, index, pairs).view({-1}));
  }
  const auto host = torch::cat(parts).to(torch::kCPU);
  const double* c = host.data_ptr<double>();
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t m = 0; m < L; ++m) loads.loads[row][m] += c[row * L + m];
  loads.agreements += static_cast<int64_t>(c[rows * L]);
  if (!skip_rows.empty())
    for (int64_t row = 0; row < rows; ++row) {
      loads.counted[row] += c[rows * L + 1 + 2 * row];
      loads.skipped[row] += c[rows * L + 2 + 2 * row];
    }
}

std::vector<torch::Tensor> LolCore::skip_biases() const {
  const auto& bias = router_->skip_bias;
  if (!bias.defined()) return {};
  std::vector<torch::Tensor> out;
  for (int64_t l = 0; l < bias.size(0); ++l) out.push_back(bias.narrow(0, l, 1));
  return out;
}

std::vector<torch::Tensor> LolCore::balance_biases() const {
  // Rows of the (D, L) buffer are views: the trainer's in-place update moves the buffer.
  const auto& bias = router_->balance_bias;
  if (bias.dim() == 1) return {bias};
  std::vector<torch::Tensor> out;
  for (int64_t l = 0; l < bias.size(0); ++l) out.push_back(bias[l]);
  return out;
}

// ---- dense, looped, moe ----------------------------------------------------------------

StackCore::StackCore(const ModelConfig& config, torch::nn::Module& model, ParamRoles& roles)
    : config_(config) {
  core_ = model.register_module("core", torch::nn::ModuleList());
  const int64_t count = config.family == Family::kLooped ? config.loop_blocks : config.core_depth;
  for (int64_t i = 0; i < count; ++i) {
    Block block(config, config.family == Family::kMoe);
    core_->push_back(block);
    roles.add("core." + std::to_string(i), block->roles);
  }
}

std::vector<Block> StackCore::blocks() const {
  std::vector<Block> out;
  for (size_t i = 0; i < core_->size(); ++i) out.emplace_back(core_->ptr<BlockImpl>(i));
  return out;
}

std::vector<CoreLayer> StackCore::layers(int64_t depth) const {
  const auto blocks_owned = blocks();
  std::vector<CoreLayer> out;
  for (int64_t l = 1; l <= depth; ++l) {
    CoreLayer layer{CoreLayer::Mask::kDocument, l, config_.window, 0,
                    blocks_owned[(l - 1) % static_cast<int64_t>(blocks_owned.size())]};
    switch (config_.core_attention) {
      case CoreAttention::kFull:
        break;
      case CoreAttention::kSliding:
        layer.mask = CoreLayer::Mask::kSliding;
        break;
      case CoreAttention::kStrided:
        layer.mask = CoreLayer::Mask::kStrided;
        layer.delta = window_offset(l, config_.window, config_.stride);
        break;
    }
    out.push_back(layer);
  }
  return out;
}

torch::Tensor StackCore::forward(const torch::Tensor& x_in, const Layout& layout,
                                 const Rotary& rotary, const ForwardOptions& options,
                                 std::vector<RouteDecisions>* /*routes*/) {
  LOL_CHECK(options.force == nullptr,
            "a forced path needs a core that routes windows (family lol); this is a ",
            enum_name(config_.family), " model");
  for (auto b : blocks())
    if (b->moe)
      b->moe->last_load = torch::Tensor();  // layers beyond the executed depth count nothing
  torch::Tensor x = x_in;
  const int64_t n = layout.num_tokens();
  for (const auto& layer : layers(executed_depth(options, config_.core_depth, false))) {
    if (options.hook) options.hook("core_in", layer.depth, x);
    x = run_blocks(x, {{layer.block, 0, n}}, rotary, layer_plan(layer, layout), nullptr);
    if (options.hook) options.hook("core_depth_out", layer.depth, x);
  }
  return x;
}

void StackCore::count_loads(const std::vector<RouteDecisions>& /*routes*/,
                            BalanceLoads& loads) const {
  const auto biased = balance_biases();
  if (biased.empty()) return;
  const auto owned = blocks();
  loads.loads.resize(owned.size());
  // Tokens per expert in each executed block's last forward (blocks past the executed depth
  // hold none), read in one transfer: on a GPU the tiled products leave the loads there.
  std::vector<size_t> counted;
  std::vector<torch::Tensor> last;
  for (size_t i = 0; i < owned.size(); ++i) {
    loads.loads[i].resize(static_cast<size_t>(config_.moe_experts), 0.0);
    if (!owned[i]->moe->last_load.defined()) continue;
    counted.push_back(i);
    last.push_back(owned[i]->moe->last_load);
  }
  if (last.empty()) return;
  const auto host = torch::stack(last).to(torch::kCPU, torch::kFloat64).contiguous();
  const double* p = host.data_ptr<double>();
  for (const size_t i : counted)
    for (auto& l : loads.loads[i]) l += *p++;
}

std::vector<torch::Tensor> StackCore::balance_biases() const {
  std::vector<torch::Tensor> out;
  for (const auto& b : blocks())
    if (b->moe) out.push_back(b->moe->balance_bias);
  return out;
}

// ---- sizes from the config alone -------------------------------------------------------

void LolCore::add_stats(const ModelConfig& c, int64_t seq_len, int64_t depth, ModelStats& s) {
  const int64_t d = c.d_model;
  const auto plain = block_cost(c, false);
  const int64_t router =
      (c.router_tied ? 1 : c.core_depth) * c.route_choices() * d + c.core_depth * d;
  const int64_t film = 4 * c.core_depth * d;
  s.stored_params += c.library_size * plain.params + router + film;
  s.active_params += std::min(depth, c.library_size) * plain.params_active + router + film;
  s.executed_matmul_params += depth * (plain.matmul_active + c.route_choices() * d);
  s.attention_flops_per_token +=
      depth * attention_flops_per_key(c) * mean_keys(c, seq_len, true, 0);
  // Per depth: K/V of the current window, its running sum, the closed-window sum, route.
  s.core_cache_bytes = depth * (c.window * kv_bytes_per_token_layer(c) + 2 * d * 4 + 16);
}

void StackCore::add_stats(const ModelConfig& c, int64_t seq_len, int64_t depth, ModelStats& s) {
  const bool moe = c.family == Family::kMoe;
  const auto block = block_cost(c, moe);
  const int64_t distinct = c.family == Family::kLooped ? c.loop_blocks : c.core_depth;
  s.stored_params += distinct * block.params;
  s.active_params += std::min(depth, distinct) * block.params_active;
  s.executed_matmul_params += depth * block.matmul_active;
  const bool windowed = c.core_attention == CoreAttention::kStrided;
  const int64_t band = c.core_attention == CoreAttention::kSliding ? c.window : 0;
  s.attention_flops_per_token +=
      depth * attention_flops_per_key(c) * mean_keys(c, seq_len, windowed, band);
  if (windowed || band > 0)
    s.core_cache_bytes = depth * c.window * kv_bytes_per_token_layer(c);
  else
    s.fixed_cache_bytes_per_token += depth * kv_bytes_per_token_layer(c);
}

}  // namespace lol
