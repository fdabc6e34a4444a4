#include "infer/decoder.h"

#include <chrono>

#include "util/error.h"

namespace lol {
namespace {
int64_t parameter_bytes(const torch::nn::Module& m) {
  int64_t bytes = 0;
  for (const auto& p : m.parameters()) bytes += p.numel() * static_cast<int64_t>(p.element_size());
  return bytes;
}
// A block's weights a token reads: everything but the MoE experts it did not use.
int64_t block_bytes_read(Block block) {
  if (!block->moe) return parameter_bytes(*block);
  int64_t bytes = parameter_bytes(*block) - parameter_bytes(*block->moe->experts);
  const auto& load = block->moe->last_load;
  for (size_t e = 0; e < load.size(); ++e)
    if (load[e] > 0) bytes += parameter_bytes(*block->moe->experts[e]);
  return bytes;
}
}  // namespace

// One block application in execution order, with its cache and, for windowed layers, the
// per-sequence window bookkeeping.
struct Decoder::Layer {
  enum class Kind { kFull, kSliding, kWindow, kRouted };
  Kind kind = Kind::kFull;
  std::string hook_name;  // prefill input: "prelude_in", "core_in", "coda_in"
  int64_t hook_index = 0;
  Block block{nullptr};  // fixed blocks
  int64_t depth = 0;     // routed / windowed core: 1-based depth
  int64_t delta = 0;     // window offset
  std::unique_ptr<KVCache> cache;
  // Windowed layers: the current window of each sequence.
  std::vector<int64_t> ordinal;
  // Routed layers: the route and router state of each sequence's current window.
  std::vector<int64_t> expert;
  torch::Tensor gate;                    // (B)
  torch::Tensor window_sum, closed_sum;  // (B, d)
  std::vector<int64_t> window_count;
};

Decoder::Decoder(LanguageModel model, torch::Device device, const ForcedPath* force)
    : model_(std::move(model)), device_(device), force_(force) {
  const auto& c = model_->config();
  if (force_) {
    LOL_CHECK(c.is_lol(), "a forced path needs a lol model");
    force_->validate(c.core_depth, c.library_size);
  }
}

Decoder::~Decoder() = default;

int64_t Decoder::core_state_bytes() const {
  int64_t bytes = 0;
  for (const auto& l : layers_) {
    if (l->kind != Layer::Kind::kWindow && l->kind != Layer::Kind::kRouted) continue;
    bytes += l->cache->bytes();
    if (l->kind == Layer::Kind::kRouted)
      bytes += (l->window_sum.numel() + l->closed_sum.numel() + l->gate.numel()) * 4 +
               static_cast<int64_t>(l->expert.size() * 3 * sizeof(int64_t));
  }
  return bytes;
}

int64_t Decoder::growing_cache_bytes() const {
  int64_t bytes = 0;
  for (const auto& l : layers_)
    if (l->kind == Layer::Kind::kFull || l->kind == Layer::Kind::kSliding)
      bytes += l->cache->bytes();
  return bytes;
}

DecodeOutput Decoder::prefill(const std::vector<Prompt>& prompts) {
  torch::NoGradGuard no_grad;
  model_->eval();
  const auto& c = model_->config();
  LOL_CHECK(!prompts.empty(), "prefill needs at least one prompt");
  const int64_t B = static_cast<int64_t>(prompts.size());
  // One row per prompt, padded at the end.
  int64_t width = 0;
  for (const auto& p : prompts) {
    LOL_CHECK(!p.tokens.empty(), "every prompt needs at least one token");
    width = std::max<int64_t>(width, static_cast<int64_t>(p.tokens.size()));
  }
  Batch batch;
  batch.tokens = torch::zeros({B, width}, torch::kInt64);
  batch.router_only = torch::zeros({B, width}, torch::kBool);
  batch.documents.resize(B);
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[b];
    const int64_t n = static_cast<int64_t>(p.tokens.size());
    for (int64_t i = 0; i < n; ++i) batch.tokens[b][i] = p.tokens[i];
    for (int64_t r : p.router_only) {
      LOL_CHECK(r >= 0 && r < n, "router-only position ", r, " is outside prompt ", b, " of ", n,
                " tokens");
      batch.router_only[b][r] = true;
    }
    batch.documents[b] = {DocumentSpan{0, n, p.prompt_len}};
  }
  Layout layout(batch, c.vocab_size, device_);
  std::map<std::pair<std::string, int64_t>, torch::Tensor> inputs;
  ForwardOptions options;
  options.force = force_;
  options.hook = [&](const std::string& name, int64_t index, const torch::Tensor& t) {
    if (name == "prelude_in" || name == "core_in" || name == "coda_in") inputs[{name, index}] = t;
  };
  auto result = model_->forward(layout, options);

  // The layers in execution order, each with an empty cache.
  layers_.clear();
  positions_.assign(B, 0);
  prompt_lens_.assign(B, 0);
  auto options_f = torch::TensorOptions().dtype(torch::kFloat32).device(device_);
  auto make_layer = [&](Layer::Kind kind, const std::string& hook, int64_t index) {
    auto l = std::make_unique<Layer>();
    l->kind = kind;
    l->hook_name = hook;
    l->hook_index = index;
    l->cache = std::make_unique<KVCache>(B, c.n_kv_heads, c.head_dim(), options_f);
    l->ordinal.assign(B, -1);
    return l;
  };
  for (int64_t i = 0; i < c.n_prelude; ++i) {
    auto l = make_layer(Layer::Kind::kFull, "prelude_in", i);
    l->block = Block(model_->prelude->ptr<BlockImpl>(i));
    layers_.push_back(std::move(l));
  }
  if (c.is_lol()) {
    for (int64_t d = 1; d <= c.core_depth; ++d) {
      auto l = make_layer(Layer::Kind::kRouted, "core_in", d);
      l->depth = d;
      l->delta = ((d - 1) * c.stride) % c.window;
      l->expert.assign(B, 0);
      l->gate = torch::zeros({B}, options_f);
      l->window_sum = torch::zeros({B, c.d_model}, options_f);
      l->closed_sum = torch::zeros({B, c.d_model}, options_f);
      l->window_count.assign(B, 0);
      layers_.push_back(std::move(l));
    }
  } else {
    auto blocks = model_->core().blocks();
    for (int64_t d = 1; d <= c.core_depth; ++d) {
      const auto kind = c.core_attention == "sliding"   ? Layer::Kind::kSliding
                        : c.core_attention == "strided" ? Layer::Kind::kWindow
                                                        : Layer::Kind::kFull;
      auto l = make_layer(kind, "core_in", d);
      l->block = blocks[(d - 1) % blocks.size()];
      l->depth = d;
      l->delta = ((d - 1) * c.stride) % c.window;
      layers_.push_back(std::move(l));
    }
  }
  for (int64_t i = 0; i < c.n_coda; ++i) {
    auto l = make_layer(Layer::Kind::kFull, "coda_in", i);
    l->block = Block(model_->coda->ptr<BlockImpl>(i));
    layers_.push_back(std::move(l));
  }

  // Fill each layer's state from its inputs over the prompt.
  auto rotary = Rotary::at_positions(layout.positions(), c.head_dim(), c.rope_theta);
  const auto& docs = layout.documents();
  const auto& ro = layout.router_only();
  DecodeOutput out;
  std::map<int64_t, const RouteDecisions*> decision_of_depth;
  for (const auto& r : result.routes) decision_of_depth[r.depth] = &r;
  for (auto& lp : layers_) {
    Layer& l = *lp;
    const auto& x = inputs.at({l.hook_name, l.hook_index});  // (N, d)
    // Which flat tokens of each sequence the layer's cache holds after the prompt.
    auto keep_range = [&](int64_t b, int64_t from, int64_t to, Block block, const FilmRows* film) {
      std::vector<int64_t> rows, pos;
      for (int64_t t = from; t < to; ++t)
        if (!ro[t]) {
          rows.push_back(t);
          pos.push_back(t - docs[b].start);
        }
      if (rows.empty()) return;
      auto idx = torch::tensor(rows, torch::kInt64).to(device_);
      auto qkv = block->attention_inputs(x.index_select(0, idx), film);
      auto rot = rotary.select(idx);
      l.cache->append(b, rot.apply(qkv.k), qkv.v, pos);
    };
    for (int64_t b = 0; b < B; ++b) {
      const auto& doc = docs[b];
      const int64_t end = doc.start + doc.length;
      if (l.kind == Layer::Kind::kFull || l.kind == Layer::Kind::kSliding) {
        keep_range(b, doc.start, end, l.block, nullptr);
        continue;
      }
      // Windowed: only the window holding the last prompt token stays.
      const auto& part = layout.windows(c.window, l.delta);
      const int64_t w = part.token_window[end - 1];
      const auto& win = part.windows[w];
      l.ordinal[b] = win.ordinal;
      if (l.kind == Layer::Kind::kWindow) {
        keep_range(b, win.start, win.start + win.length, l.block, nullptr);
        continue;
      }
      const RouteDecisions& decision = *decision_of_depth.at(l.depth);
      auto& lol_core = dynamic_cast<LolCore&>(model_->core());
      l.expert[b] = decision.experts[w];
      l.gate[b] = decision.gates[w];
      FilmRows film = lol_core.film_rows(l.depth);
      keep_range(b, win.start, win.start + win.length,
                 Block(lol_core.library->ptr<BlockImpl>(l.expert[b])), &film);
      l.window_sum[b] = x.narrow(0, win.start, win.length).sum(0);
      l.window_count[b] = win.length;
      // Closed windows: the sum of their means (r_k = closed_sum / k).
      auto closed = torch::zeros({c.d_model}, options_f);
      for (int64_t j = w - win.ordinal; j < w; ++j)
        closed += x.narrow(0, part.windows[j].start, part.windows[j].length).mean(0);
      l.closed_sum[b] = closed;
      // Every window of the prompt was routed: report them as this call's decisions.
      auto probs = decision.probs.to(torch::kCPU, torch::kFloat64).contiguous();
      auto gates = decision.gates.to(torch::kCPU, torch::kFloat64);
      for (int64_t j = w - win.ordinal; j <= w; ++j) {
        DecodeRoute route{b,
                          l.depth,
                          part.windows[j].ordinal,
                          part.windows[j].start - doc.start,
                          decision.experts[j],
                          decision.router_choice[j],
                          gates[j].item<double>(),
                          decision.margins[j],
                          decision.forced_expert[j] != 0,
                          decision.forced_gate[j] != 0,
                          {}};
        auto p = probs[j];
        route.probs.assign(p.data_ptr<double>(), p.data_ptr<double>() + p.numel());
        out.routes.push_back(route);
      }
    }
  }
  std::vector<int64_t> last;
  for (int64_t b = 0; b < B; ++b) {
    last.push_back(docs[b].start + docs[b].length - 1);
    positions_[b] = docs[b].length;
    // The layout clips a prompt window longer than the prompt; keep the caller's P so decoding
    // continues the prompt window (SPEC 1.3 with P given up front).
    prompt_lens_[b] = prompts[b].prompt_len;
  }
  out.logits = result.logits.index_select(0, torch::tensor(last, torch::kInt64).to(device_));
  return out;
}

torch::Tensor Decoder::run_layer(Layer& l, const torch::Tensor& x, const Rotary& rotary,
                                 const std::vector<uint8_t>& router_only,
                                 std::vector<DecodeRoute>* routes) {
  const auto& c = model_->config();
  const int64_t B = batch();
  auto attend = [&](const BlockImpl::QKV& qkv, int64_t band) {
    return l.cache->attend(rotary.apply(qkv.q), rotary.apply(qkv.k), qkv.v, positions_, router_only,
                           band);
  };
  if (l.kind != Layer::Kind::kRouted) {
    if (l.kind == Layer::Kind::kWindow)
      for (int64_t b = 0; b < B; ++b) {
        const int64_t k = window_ordinal(positions_[b], prompt_lens_[b], c.window, l.delta);
        if (k != l.ordinal[b]) {
          l.cache->clear(b);
          l.ordinal[b] = k;
        }
      }
    const int64_t band = l.kind == Layer::Kind::kSliding ? c.window : 0;
    auto y = run_slices(x, {{l.block, 0, B}}, nullptr,
                        [&](const BlockImpl::QKV& qkv) { return attend(qkv, band); });
    stats_.block_calls += 1;
    stats_.weight_bytes += block_bytes_read(l.block);
    return y;
  }

  // Routed depth: open windows where the ordinal changed, route them, then run each expert
  // on the rows that chose it.
  auto& lol_core = dynamic_cast<LolCore&>(model_->core());
  std::vector<int64_t> opening, ordinals;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t k = window_ordinal(positions_[b], prompt_lens_[b], c.window, l.delta);
    if (k == l.ordinal[b]) continue;
    if (l.ordinal[b] >= 0)
      l.closed_sum[b] += l.window_sum[b] / static_cast<double>(l.window_count[b]);
    l.window_sum[b].zero_();
    l.window_count[b] = 0;
    l.cache->clear(b);
    l.ordinal[b] = k;
    opening.push_back(b);
    ordinals.push_back(k);
  }
  if (!opening.empty()) {
    auto rows = torch::tensor(opening, torch::kInt64).to(device_);
    auto ord = torch::tensor(ordinals, torch::kInt64).to(device_);
    auto first = (x.index_select(0, rows) + lol_core.router->depth_vectors[l.depth - 1]) / 2;
    auto prefix =
        l.closed_sum.index_select(0, rows) / ord.clamp_min(1).to(torch::kFloat32).unsqueeze(1);
    auto inputs = torch::where((ord == 0).unsqueeze(1), first, prefix);
    auto probs = lol_core.router->probabilities(inputs, l.depth, false);
    auto decision = select_experts(probs, lol_core.router->balance_bias, l.depth, ordinals, force_);
    auto p64 = probs.to(torch::kCPU, torch::kFloat64).contiguous();
    auto g64 = decision.gates.to(torch::kCPU, torch::kFloat64);
    for (size_t i = 0; i < opening.size(); ++i) {
      const int64_t b = opening[i];
      l.expert[b] = decision.experts[i];
      l.gate[b] = decision.gates[static_cast<int64_t>(i)];
      if (routes) {
        DecodeRoute route{b,
                          l.depth,
                          ordinals[i],
                          positions_[b],
                          decision.experts[i],
                          decision.router_choice[i],
                          g64[static_cast<int64_t>(i)].item<double>(),
                          decision.margins[i],
                          decision.forced_expert[i] != 0,
                          decision.forced_gate[i] != 0,
                          {}};
        auto p = p64[static_cast<int64_t>(i)];
        route.probs.assign(p.data_ptr<double>(), p.data_ptr<double>() + p.numel());
        routes->push_back(route);
      }
    }
  }
  l.window_sum += x;
  for (int64_t b = 0; b < B; ++b) ++l.window_count[b];

  // The rows grouped by expert, each group one slice of a single pass; attention runs in the
  // cache's row order.
  FilmRows film = lol_core.film_rows(l.depth);
  const RowGroups groups = group_rows(l.expert, lol_core.blocks());
  for (const auto& s : groups.slices) {
    stats_.block_calls += 1;
    stats_.weight_bytes += parameter_bytes(*s.block);
  }
  if (groups.identity) {
    auto y = run_slices(x, groups.slices, &film,
                        [&](const BlockImpl::QKV& qkv) { return attend(qkv, 0); });
    return x + l.gate.unsqueeze(1) * (y - x);
  }
  auto perm = torch::tensor(groups.perm, torch::kInt64).to(device_);
  auto inverse = torch::tensor(groups.inverse, torch::kInt64).to(device_);
  auto xs = x.index_select(0, perm);
  auto ys = run_slices(xs, groups.slices, &film, [&](const BlockImpl::QKV& qkv) {
    auto att = attend(BlockImpl::QKV{qkv.q.index_select(0, inverse), qkv.k.index_select(0, inverse),
                                     qkv.v.index_select(0, inverse)},
                      0);
    return att.index_select(0, perm);
  });
  return x + l.gate.unsqueeze(1) * (ys.index_select(0, inverse) - x);
}

DecodeOutput Decoder::admit(const std::vector<Prompt>& prompts) {
  if (layers_.empty() || batch() == 0) return prefill(prompts);
  Decoder incoming(model_, device_, force_);
  auto out = incoming.prefill(prompts);
  const int64_t offset = batch();
  auto append = [](std::vector<int64_t>& to, const std::vector<int64_t>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = *layers_[i];
    const Layer& o = *incoming.layers_[i];
    l.cache->append_rows(*o.cache);
    append(l.ordinal, o.ordinal);
    if (l.kind != Layer::Kind::kRouted) continue;
    append(l.expert, o.expert);
    append(l.window_count, o.window_count);
    l.gate = torch::cat({l.gate, o.gate});
    l.window_sum = torch::cat({l.window_sum, o.window_sum});
    l.closed_sum = torch::cat({l.closed_sum, o.closed_sum});
  }
  append(positions_, incoming.positions_);
  append(prompt_lens_, incoming.prompt_lens_);
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
  auto idx = torch::tensor(keep, torch::kInt64).to(device_);
  for (auto& l : layers_) {
    l->cache->retain(keep);
    pick(l->ordinal);
    if (l->kind != Layer::Kind::kRouted) continue;
    pick(l->expert);
    pick(l->window_count);
    l->gate = l->gate.index_select(0, idx);
    l->window_sum = l->window_sum.index_select(0, idx);
    l->closed_sum = l->closed_sum.index_select(0, idx);
  }
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
  auto x = model_->embed->forward(torch::tensor(tokens, torch::kInt64).to(device_));  // (B, d)
  // Every layer rotates at the same positions this step.
  const auto rotary = Rotary::at_positions(torch::tensor(positions_, torch::kInt64).to(device_),
                                           c.head_dim(), c.rope_theta);
  for (auto& l : layers_) {
    auto t = Clock::now();
    x = run_layer(*l, x, rotary, router_only, &out.routes);
    if (l->hook_name == "core_in") stats_.core_seconds += seconds_since(t);
  }
  x = model_->norm->forward(x);
  const auto& head = model_->lm_head ? model_->lm_head->weight : model_->embed->weight;
  out.logits = head_.apply(x, {head});
  stats_.weight_bytes += head.numel() * static_cast<int64_t>(head.element_size());
  stats_.other_seconds = seconds_since(t0) - stats_.core_seconds;
  for (auto& p : positions_) ++p;
  return out;
}

}  // namespace lol
