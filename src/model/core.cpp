#include "model/core.h"

namespace lol {

std::unique_ptr<Core> make_core(const ModelConfig& config, torch::nn::Module& model) {
  if (config.family == "lol") return std::make_unique<LolCore>(config, model);
  return std::make_unique<StackCore>(config, model);  // dense, looped, moe
}

namespace {
int64_t executed_depth(const ForwardOptions& options, int64_t depth) {
  if (options.core_depth < 0) return depth;
  LOL_CHECK(options.core_depth <= depth, "executed core depth ", options.core_depth,
            " exceeds the model's core_depth ", depth);
  return options.core_depth;
}
}  // namespace

LolCore::LolCore(const ModelConfig& config, torch::nn::Module& model) : config_(config) {
  library = model.register_module("library", torch::nn::ModuleList());
  for (int64_t m = 0; m < config.library_size; ++m) library->push_back(Block(config));
  // core.film.{attn,ffn}.{gamma,beta}
  auto core = model.register_module("core", std::make_shared<torch::nn::Module>());
  auto film = core->register_module("film", std::make_shared<torch::nn::Module>());
  film_attn = film->register_module("attn", Film(config.core_depth, config.d_model));
  film_ffn = film->register_module("ffn", Film(config.core_depth, config.d_model));
  router = model.register_module("router", Router(config));
}

FilmRows LolCore::film_rows(int64_t l) const {
  return FilmRows{film_attn->gamma[l - 1], film_attn->beta[l - 1], film_ffn->gamma[l - 1],
                  film_ffn->beta[l - 1]};
}

std::vector<Block> LolCore::blocks() const {
  std::vector<Block> out;
  for (size_t m = 0; m < library->size(); ++m) out.emplace_back(library->ptr<BlockImpl>(m));
  return out;
}

torch::Tensor LolCore::forward(const torch::Tensor& x_in, const Layout& layout,
                               const Rotary& rotary, const ForwardOptions& options,
                               std::vector<RouteDecisions>* routes) {
  const int64_t depth_count = executed_depth(options, config_.core_depth);
  if (options.force) options.force->validate(config_.core_depth, config_.library_size);
  const int64_t n = layout.num_tokens();
  const auto device = x_in.device();
  torch::Tensor x = x_in;
  for (int64_t l = 1; l <= depth_count; ++l) {
    const auto& part =
        layout.windows(config_.window, window_offset(l, config_.window, config_.stride));
    if (options.hook) options.hook("core_in", l, x);
    RouteDecisions decision =
        router->route(x, l, part, layout, options.router_noise, options.force);
    if (options.hook) {
      options.hook("router_input", l, decision.router_inputs);
      options.hook("router_probs", l, decision.probs);
    }

    // Order tokens by expert (stable, so each expert's windows stay in flat order).
    std::vector<int64_t> expert_of_token(n);
    for (int64_t t = 0; t < n; ++t) expert_of_token[t] = decision.experts[part.token_window[t]];
    const RowGroups groups = group_rows(expert_of_token, blocks());
    auto perm_t = torch::tensor(groups.perm, torch::kInt64).to(device);
    auto inverse_t = torch::tensor(groups.inverse, torch::kInt64).to(device);
    FilmRows film = film_rows(l);
    auto xp = x.index_select(0, perm_t);
    auto yp =
        run_blocks(xp, groups.slices, rotary.select(perm_t), part.plan, &film, perm_t, inverse_t);
    // s = H + alpha * (E(H) - H), alpha per window broadcast to its tokens.
    auto alpha = decision.gates.index_select(0, part.token_window_t.index_select(0, perm_t));
    auto sp = xp + alpha.unsqueeze(1) * (yp - xp);
    x = sp.index_select(0, inverse_t);
    if (options.hook) options.hook("core_depth_out", l, x);
    if (routes) routes->push_back(std::move(decision));
  }
  return x;
}

StackCore::StackCore(const ModelConfig& config, torch::nn::Module& model) : config_(config) {
  core = model.register_module("core", torch::nn::ModuleList());
  const int64_t count = config.family == "looped" ? config.loop_blocks : config.core_depth;
  for (int64_t i = 0; i < count; ++i) core->push_back(Block(config, config.family == "moe"));
}

std::vector<Block> StackCore::blocks() const {
  std::vector<Block> out;
  for (size_t i = 0; i < core->size(); ++i) out.emplace_back(core->ptr<BlockImpl>(i));
  return out;
}

const AttentionPlan& StackCore::plan_for_layer(const Layout& layout, int64_t layer) const {
  if (config_.core_attention == "sliding") return layout.sliding_plan(config_.window);
  if (config_.core_attention == "strided")
    return layout.windows(config_.window, window_offset(layer + 1, config_.window, config_.stride))
        .plan;
  return layout.document_plan();
}

torch::Tensor StackCore::forward(const torch::Tensor& x_in, const Layout& layout,
                                 const Rotary& rotary, const ForwardOptions& options,
                                 std::vector<RouteDecisions>* /*routes*/) {
  const int64_t depth_count = executed_depth(options, config_.core_depth);
  torch::Tensor x = x_in;
  const int64_t n = layout.num_tokens();
  for (int64_t i = 0; i < depth_count; ++i) {
    Block block = core->ptr<BlockImpl>(i % static_cast<int64_t>(core->size()));
    if (options.hook) options.hook("core_in", i + 1, x);
    x = run_blocks(x, {{block, 0, n}}, rotary, plan_for_layer(layout, i), nullptr);
    if (options.hook) options.hook("core_depth_out", i + 1, x);
  }
  return x;
}

}  // namespace lol
