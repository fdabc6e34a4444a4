#include "infer/decoder.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "util/error.h"
#include "util/op_profile.h"
#include "util/tensor.h"

namespace lol {
namespace {
int64_t parameter_bytes(const torch::nn::Module& m) {
  int64_t bytes = 0;
  for (const auto& p : m.parameters()) bytes += p.numel() * static_cast<int64_t>(p.element_size());
  return bytes;
}
int64_t parameter_count(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}
// A block's weights a step reads: everything but the MoE experts no row used.
int64_t block_bytes_read(Block block) {
  if (!block->moe) return parameter_bytes(*block);
  int64_t bytes = parameter_bytes(*block) - parameter_bytes(*block->moe->experts);
  const auto load = block->moe->last_load_on_host();
  for (size_t e = 0; e < load.size(); ++e)
    if (load[e] > 0) bytes += parameter_bytes(*block->moe->experts[e]);
  return bytes;
}
// The multiply-adds of a block's products per row, times two: every weight once, but of an
// MoE feed-forward only the top-k experts a row goes to (norm weights included: they are few).
double block_flops_per_row(Block block) {
  if (!block->moe) return 2.0 * static_cast<double>(parameter_count(*block));
  const auto& experts = *block->moe->experts;
  return 2.0 * static_cast<double>(parameter_count(*block) - parameter_count(experts) +
                                   block->moe->top_k * parameter_count(*experts[0]));
}
}  // namespace

// One block application in execution order (prelude blocks, the core's layers, coda blocks)
// with its cache and, for windowed layers, each sequence's window bookkeeping.
struct Decoder::Layer {
  CoreLayer spec;          // mask, depth, window, offset; the block unless routed
  std::string hook_name;   // prefill input: "prelude_in", "core_in", "coda_in"
  const char* phase = "";  // its profile region: "prelude", "core", "coda"
  int64_t hook_index = 0;
  std::unique_ptr<KVCache> cache;
  // Windowed layers (strided, routed): the current window ordinal of each sequence.
  std::vector<int64_t> ordinal;
  // Routed layers: the route and router state of each sequence's current window: the expert
  // whose block runs and the gate of its update (a skip: expert 0 at gate 0, RouteDecisions).
  std::vector<int64_t> expert;
  torch::Tensor gate;                    // (B)
  torch::Tensor window_sum, closed_sum;  // (B, d): current window's inputs; closed windows' means
  FilmRows film;                         // the depth's FiLM rows (views of the parameters)
  std::vector<int64_t> window_count;

  bool routed() const { return spec.mask == CoreLayer::Mask::kRouted; }
  // Whether the layer attends within windows (its cache holds one window) rather than over
  // the document (its cache grows with the context).
  bool windowed() const {
    switch (spec.mask) {
      case CoreLayer::Mask::kDocument:
      case CoreLayer::Mask::kSliding:
        return false;
      case CoreLayer::Mask::kStrided:
      case CoreLayer::Mask::kRouted:
        return true;
    }
    return false;
  }
  // Keys a query may reach back (0: unlimited within what the cache holds).
  int64_t band() const { return spec.mask == CoreLayer::Mask::kSliding ? spec.window : 0; }
};

namespace {
void check_force(const WindowRouting* routing, const ForcedPath* force, const ModelConfig& c) {
  if (!force) return;
  LOL_CHECK(routing != nullptr,
            "a forced path needs a core that routes windows (family lol); this is a ",
            enum_name(c.family), " model");
  routing->check(*force);
}
}  // namespace

Decoder::Decoder(LanguageModel model, torch::Device device, const ForcedPath* force)
    : model_(std::move(model)), device_(device), force_(force), routing_(model_->core().routing()) {
  check_force(routing_, force_, model_->config());
}

Decoder::~Decoder() = default;

int64_t Decoder::core_state_bytes() const {
  int64_t bytes = 0;
  for (const auto& l : layers_) {
    if (!l->windowed()) continue;
    bytes += l->cache->bytes();
    if (l->routed())
      bytes += (l->window_sum.numel() + l->closed_sum.numel() + l->gate.numel()) * 4 +
               static_cast<int64_t>(l->expert.size() * 3 * sizeof(int64_t));
  }
  return bytes;
}

int64_t Decoder::growing_cache_bytes() const {
  int64_t bytes = 0;
  for (const auto& l : layers_)
    if (!l->windowed()) bytes += l->cache->bytes();
  return bytes;
}

ForwardResult Decoder::forward_prompts(const Layout& layout, LayerInputs& inputs) {
  ForwardOptions options;
  options.force = force_;
  options.hook = [&](const std::string& name, int64_t index, const torch::Tensor& t) {
    if (name == "prelude_in" || name == "core_in" || name == "coda_in") inputs[{name, index}] = t;
  };
  return model_->forward(layout, options);
}

void Decoder::build_layers(int64_t B) {
  const auto& c = model_->config();
  auto options = torch::TensorOptions().dtype(torch::kFloat32).device(device_);
  layers_.clear();
  auto add = [&](const CoreLayer& spec, const char* hook, const char* phase, int64_t index) {
    auto l = std::make_unique<Layer>();
    l->spec = spec;
    l->hook_name = hook;
    l->phase = phase;
    l->hook_index = index;
    l->cache = std::make_unique<KVCache>(B, c.n_kv_heads, c.head_dim(), options,
                                         !l->windowed() && KVCache::streaming_helps());
    l->ordinal.assign(B, -1);
    if (l->routed()) {
      l->film = routing_->film(spec.depth);
      l->expert.assign(B, 0);
      l->gate = torch::zeros({B}, options);
      l->window_sum = torch::zeros({B, c.d_model}, options);
      l->closed_sum = torch::zeros({B, c.d_model}, options);
      l->window_count.assign(B, 0);
    }
    layers_.push_back(std::move(l));
  };
  auto fixed = [](torch::nn::ModuleList& list, size_t i) {
    return CoreLayer{CoreLayer::Mask::kDocument, 0, 0, 0, Block(list->ptr<BlockImpl>(i))};
  };
  for (size_t i = 0; i < model_->prelude->size(); ++i)
    add(fixed(model_->prelude, i), "prelude_in", "prelude", static_cast<int64_t>(i));
  for (const auto& spec : model_->core().layers(c.core_depth))
    add(spec, "core_in", "core", spec.depth);
  for (size_t i = 0; i < model_->coda->size(); ++i)
    add(fixed(model_->coda, i), "coda_in", "coda", static_cast<int64_t>(i));
}

void Decoder::fill_state(Layer& l, const Layout& layout, const torch::Tensor& x,
                         const Rotary& rotary, const RouteDecisions* decision,
                         const std::vector<RouteRecord>& records, int64_t b,
                         std::vector<RouteRecord>* routes) {
  const auto& doc = layout.documents()[b];
  const auto& ro = layout.router_only();
  // The keys and values of flat tokens [from, to) that later tokens may see (router-only
  // tokens are never stored), computed by `block` with `film`.
  auto keep_range = [&](int64_t from, int64_t to, Block block, const FilmRows* film) {
    std::vector<int64_t> rows, pos;
    for (int64_t t = from; t < to; ++t)
      if (!ro[t]) {
        rows.push_back(t);
        pos.push_back(t - doc.start);
      }
    if (rows.empty()) return;
    auto idx = int64_tensor(rows, device_);
    auto qkv = block->attention_inputs(x.index_select(0, idx), film);
    l.cache->append(b, rotary.select(idx).apply(qkv.k), qkv.v, pos);
  };
  if (!l.windowed()) {  // full and sliding attention keep the whole prompt
    keep_range(doc.start, doc.start + doc.length, l.spec.block, nullptr);
    return;
  }
  // Windowed: only the window holding the last prompt token stays.
  const auto& part = layout.windows(l.spec.window, l.spec.delta);
  const int64_t w = part.token_window[doc.start + doc.length - 1];
  const auto& win = part.windows[w];
  l.ordinal[b] = win.ordinal;
  if (!l.routed()) {
    keep_range(win.start, win.start + win.length, l.spec.block, nullptr);
    return;
  }
  l.expert[b] = decision->host().blocks[w];
  l.gate[b] = decision->update_gates()[w];
  keep_range(win.start, win.start + win.length, routing_->experts()[l.expert[b]], &l.film);
  l.window_sum[b] = x.narrow(0, win.start, win.length).sum(0);
  l.window_count[b] = win.length;
  // Closed windows: the sum of their means (r_k = closed_sum / k). Every window of the prompt
  // was routed: report them as this call's decisions.
  auto closed = torch::zeros_like(l.closed_sum[b]);
  for (int64_t j = w - win.ordinal; j < w; ++j)
    closed += x.narrow(0, part.windows[j].start, part.windows[j].length).mean(0);
  l.closed_sum[b] = closed;
  for (int64_t j = w - win.ordinal; j <= w; ++j) {
    routes->push_back(records[j]);
    if (j == w) routes->back().length = -1;  // still open: decoding may add tokens to it
  }
}

DecodeOutput Decoder::prefill(const std::vector<Prompt>& prompts) {
  torch::NoGradGuard no_grad;
  model_->eval();
  const auto& c = model_->config();
  LOL_CHECK(!prompts.empty(), "prefill needs at least one prompt");
  std::vector<std::vector<TokenSequence>> rows;
  for (const auto& p : prompts) {
    LOL_CHECK(!p.tokens.empty(), "every prompt needs at least one token");
    rows.push_back({p});
  }
  const int64_t B = static_cast<int64_t>(prompts.size());
  Layout layout(Batch::from_documents(rows), c.vocab_size, device_);
  LayerInputs inputs;
  auto result = forward_prompts(layout, inputs);
  build_layers(B);

  auto rotary = Rotary::at_positions(layout.positions(), c.head_dim(), c.rope_theta);
  std::map<int64_t, const RouteDecisions*> decision_of_depth;
  for (const auto& r : result.routes) decision_of_depth[r.depth] = &r;
  DecodeOutput out;
  for (auto& l : layers_) {
    const RouteDecisions* decision = l->routed() ? decision_of_depth.at(l->spec.depth) : nullptr;
    const auto records = decision ? decision->records(&layout) : std::vector<RouteRecord>{};
    const auto& x = inputs.at({l->hook_name, l->hook_index});  // (N, d)
    for (int64_t b = 0; b < B; ++b)
      fill_state(*l, layout, x, rotary, decision, records, b, &out.routes);
  }
  positions_.clear();
  std::vector<int64_t> last;
  for (const auto& doc : layout.documents()) {
    last.push_back(doc.start + doc.length - 1);
    positions_.push_back(doc.length);
  }
  // The layout clips a prompt window longer than the prompt; keep the caller's P so decoding
  // continues the prompt window (SPEC 1.3 with P given up front).
  prompt_lens_.clear();
  for (const auto& p : prompts) prompt_lens_.push_back(p.prompt_len);
  forces_.assign(prompts.size(), force_);
  out.logits = result.logits.index_select(0, int64_tensor(last, device_));
  for (const auto& doc : layout.documents())
    out.prompt_logits.push_back(result.logits.narrow(0, doc.start, doc.length));
  return out;
}

torch::Tensor Decoder::run_layer(Layer& l, const torch::Tensor& x, const Rotary& rotary,
                                 const std::vector<uint8_t>& router_only,
                                 std::vector<RouteRecord>* routes) {
  const int64_t B = batch();
  const auto& spec = l.spec;
  auto attend = [&](const BlockImpl::QKV& qkv, int64_t band) {
    auto out = l.cache->attend(rotary.apply(qkv.q), rotary.apply(qkv.k), qkv.v, positions_,
                               router_only, band);
    // Every query head against every key and value held, the new tokens' included: q.k, p.v.
    stats_.cache_bytes += l.cache->bytes();
    stats_.flops += 4.0 * static_cast<double>(qkv.q.size(1) * qkv.q.size(2)) *
                    static_cast<double>(l.cache->slots());
    return out;
  };
  // Which sequences open a window at this token (windowed layers).
  auto opening = [&] {
    std::vector<int64_t> rows;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t k = window_ordinal(positions_[b], prompt_lens_[b], spec.window, spec.delta);
      if (k != l.ordinal[b]) rows.push_back(b);
    }
    return rows;
  };
  if (!l.routed()) {
    if (l.windowed())
      for (int64_t b : opening()) {
        l.cache->clear(b);
        l.ordinal[b] = window_ordinal(positions_[b], prompt_lens_[b], spec.window, spec.delta);
      }
    auto y = run_slices(x, {{spec.block, 0, B}}, nullptr,
                        [&](const BlockImpl::QKV& qkv) { return attend(qkv, l.band()); });
    count_call(spec.block, B);
    return y;
  }

  // Routed depth: close the windows that end, route the ones that open, then run each expert
  // on the rows that chose it.
  std::optional<ProfileScope> route_scope(std::in_place, "route");
  const auto opened = opening();
  std::vector<int64_t> ordinals;
  for (int64_t b : opened) {
    if (l.ordinal[b] >= 0)
      l.closed_sum[b] += l.window_sum[b] / static_cast<double>(l.window_count[b]);
    l.window_sum[b].zero_();
    l.window_count[b] = 0;
    l.cache->clear(b);
    l.ordinal[b] = window_ordinal(positions_[b], prompt_lens_[b], spec.window, spec.delta);
    ordinals.push_back(l.ordinal[b]);
  }
  // The opening windows, routed in one call per forced path among them.
  std::map<const ForcedPath*, std::vector<size_t>> by_force;
  for (size_t i = 0; i < opened.size(); ++i) by_force[forces_[opened[i]]].push_back(i);
  for (const auto& [force, members] : by_force) {
    std::vector<int64_t> rows_of, ordinals_of;
    for (size_t i : members) {
      rows_of.push_back(opened[i]);
      ordinals_of.push_back(ordinals[i]);
    }
    auto rows = int64_tensor(rows_of, device_);
    auto inputs = routing_->router_inputs(
        x.index_select(0, rows), l.closed_sum.index_select(0, rows), ordinals_of, spec.depth);
    auto decision = routing_->route(inputs, spec.depth, ordinals_of, force);
    auto records = routes ? decision.records() : std::vector<RouteRecord>{};
    const auto update_gates = decision.update_gates();
    for (size_t i = 0; i < rows_of.size(); ++i) {
      const int64_t b = rows_of[i];
      l.expert[b] = decision.host().blocks[i];
      l.gate[b] = update_gates[static_cast<int64_t>(i)];
      if (routes) {
        records[i].sequence = b;
        records[i].window = ordinals_of[i];
        records[i].position = positions_[b];
        routes->push_back(std::move(records[i]));
      }
    }
  }
  l.window_sum += x;
  for (int64_t b = 0; b < B; ++b) ++l.window_count[b];
  route_scope.reset();

  // The rows grouped by expert, each group one slice of a single pass; attention runs in the
  // cache's row order.
  const FilmRows& film = l.film;
  const RowGroups groups = group_rows(l.expert, routing_->experts(), device_);
  for (const auto& s : groups.slices) count_call(s.block, s.count);
  if (groups.identity) {
    auto y = run_slices(x, groups.slices, &film,
                        [&](const BlockImpl::QKV& qkv) { return attend(qkv, 0); });
    return gated_residual(x, y, l.gate);
  }
  const auto& perm = groups.perm;
  const auto& inverse = groups.inverse;
  auto xs = x.index_select(0, perm);
  auto ys = run_slices(xs, groups.slices, &film, [&](const BlockImpl::QKV& qkv) {
    auto att = attend(BlockImpl::QKV{qkv.q.index_select(0, inverse), qkv.k.index_select(0, inverse),
                                     qkv.v.index_select(0, inverse)},
                      0);
    return att.index_select(0, perm);
  });
  return gated_residual(x, ys.index_select(0, inverse), l.gate);
}

void Decoder::count_call(const Block& block, int64_t rows) {
  BlockCost cost;
  if (block->moe) {
    cost = {block_bytes_read(block), block_flops_per_row(block)};
  } else {
    auto it = costs_.find(block.get());
    if (it == costs_.end())
      it = costs_
               .emplace(block.get(), BlockCost{block_bytes_read(block), block_flops_per_row(block)})
               .first;
    cost = it->second;
  }
  stats_.block_calls += 1;
  stats_.weight_bytes += cost.bytes;
  stats_.flops += cost.flops_per_row * static_cast<double>(rows);
}

DecodeOutput Decoder::admit(const std::vector<Prompt>& prompts) {
  return admit(prompts, force_);
}

DecodeOutput Decoder::admit(const std::vector<Prompt>& prompts, const ForcedPath* force) {
  check_force(routing_, force, model_->config());
  Decoder incoming(model_, device_, force);
  auto out = incoming.prefill(prompts);
  if (layers_.empty() || batch() == 0) {
    layers_ = std::move(incoming.layers_);
    positions_ = std::move(incoming.positions_);
    prompt_lens_ = std::move(incoming.prompt_lens_);
    forces_ = std::move(incoming.forces_);
    return out;
  }
  const int64_t offset = batch();
  auto append = [](std::vector<int64_t>& to, const std::vector<int64_t>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = *layers_[i];
    const Layer& o = *incoming.layers_[i];
    l.cache->append_rows(*o.cache);
    append(l.ordinal, o.ordinal);
    if (!l.routed()) continue;
    append(l.expert, o.expert);
    append(l.window_count, o.window_count);
    l.gate = torch::cat({l.gate, o.gate});
    l.window_sum = torch::cat({l.window_sum, o.window_sum});
    l.closed_sum = torch::cat({l.closed_sum, o.closed_sum});
  }
  append(positions_, incoming.positions_);
  append(prompt_lens_, incoming.prompt_lens_);
  forces_.insert(forces_.end(), incoming.forces_.begin(), incoming.forces_.end());
  for (auto& r : out.routes) r.sequence += offset;
  return out;
}

void Decoder::retain(const std::vector<int64_t>& keep) {
  LOL_CHECK(!keep.empty(), "retain needs at least one sequence");
  for (size_t i = 0; i < keep.size(); ++i)
    LOL_CHECK(keep[i] >= 0 && keep[i] < batch() && (i == 0 || keep[i] > keep[i - 1]),
              "retain: sequence indices must be increasing and within the batch of ", batch());
  auto pick = [&](std::vector<int64_t>& v) { v = kept_rows(v, keep); };
  pick(positions_);
  pick(prompt_lens_);
  forces_ = kept_rows(forces_, keep);
  auto idx = int64_tensor(keep, device_);
  for (auto& l : layers_) {
    l->cache->retain(keep);
    pick(l->ordinal);
    if (!l->routed()) continue;
    pick(l->expert);
    pick(l->window_count);
    l->gate = l->gate.index_select(0, idx);
    l->window_sum = l->window_sum.index_select(0, idx);
    l->closed_sum = l->closed_sum.index_select(0, idx);
  }
}

Rotary Decoder::rotary_at(const std::vector<int64_t>& positions) {
  const int64_t needed = *std::max_element(positions.begin(), positions.end()) + 1;
  const int64_t have = rotary_table_.cos.defined() ? rotary_table_.cos.size(0) : 0;
  if (needed > have) {
    const auto& c = model_->config();
    const int64_t n = std::max<int64_t>({needed, 2 * have, 256});
    rotary_table_ = Rotary::at_positions(
        torch::arange(n, torch::dtype(torch::kInt64).device(device_)), c.head_dim(), c.rope_theta);
  }
  return rotary_table_.select(int64_tensor(positions, device_));
}

DecodeOutput Decoder::step(const std::vector<int64_t>& tokens,
                           const std::vector<uint8_t>& router_only_in) {
  torch::NoGradGuard no_grad;
  const auto& c = model_->config();
  const int64_t B = batch();
  LOL_CHECK(B > 0, "decode step before prefill");
  LOL_CHECK(static_cast<int64_t>(tokens.size()) == B, "decode step needs one token per sequence (",
            B, "), got ", tokens.size());
  for (auto t : tokens)
    LOL_CHECK(t >= 0 && t < c.vocab_size, "token id ", t, " is outside the vocabulary [0, ",
              c.vocab_size, ")");
  std::vector<uint8_t> router_only =
      router_only_in.empty() ? std::vector<uint8_t>(B, 0) : router_only_in;
  DecodeOutput out;
  stats_ = StepStats{};
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  auto t0 = Clock::now();
  torch::Tensor x;
  Rotary rotary;
  {
    ProfileScope scope("embed");
    x = model_->embed->forward(int64_tensor(tokens, device_));  // (B, d)
    // Every layer rotates at the same positions this step.
    rotary = rotary_at(positions_);
  }
  for (auto& l : layers_) {
    auto t = Clock::now();
    ProfileScope scope(l->phase);
    x = run_layer(*l, x, rotary, router_only, &out.routes);
    if (l->hook_name == "core_in") stats_.core_seconds += seconds_since(t);
  }
  const auto& head = model_->lm_head ? model_->lm_head->weight : model_->embed->weight;
  {
    ProfileScope scope("head");
    out.logits = head_.apply(model_->norm->forward(x), {head});
  }
  stats_.weight_bytes += head.numel() * static_cast<int64_t>(head.element_size());
  stats_.flops += 2.0 * static_cast<double>(head.numel() * B);
  stats_.other_seconds = seconds_since(t0) - stats_.core_seconds;
  for (auto& p : positions_) ++p;
  return out;
}

}  // namespace lol
