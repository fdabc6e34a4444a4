#include "reference.h"

#include <cmath>

namespace lol::reference {
namespace {

using Weights = std::map<std::string, torch::Tensor>;

struct Context {
  const ModelConfig& c;
  const Weights& w;
  const Document& doc;
  int64_t n;
  torch::Tensor get(const std::string& name) const {
    auto it = w.find(name);
    TORCH_CHECK(it != w.end(), "reference: no tensor ", name);
    return it->second.to(torch::kFloat64);
  }
};

torch::Tensor rms(const torch::Tensor& x, double eps) {
  return x / torch::sqrt(x.pow(2).mean(-1, true) + eps);
}

torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& pos, double theta) {
  // x: (t, heads, dh); pairs (i, i + dh/2)
  const int64_t dh = x.size(2), half = dh / 2;
  auto out = x.clone();
  for (int64_t i = 0; i < half; ++i) {
    auto angle = pos * std::pow(theta, -2.0 * i / dh);  // (t)
    auto c = angle.cos().unsqueeze(1), s = angle.sin().unsqueeze(1);
    auto a = x.select(2, i), b = x.select(2, i + half);
    out.select(2, i).copy_(a * c - b * s);
    out.select(2, i + half).copy_(b * c + a * s);
  }
  return out;
}

// allowed(i, j) over the rows of x (positions `pos`, router-only flags `ro`), plus `extra`.
torch::Tensor attention(const Context& ctx, const std::string& p, const torch::Tensor& h,
                        const torch::Tensor& pos, const std::vector<bool>& ro,
                        const torch::Tensor& extra_allowed) {
  const int64_t t = h.size(0), H = ctx.c.n_heads, Hkv = ctx.c.n_kv_heads, dh = ctx.c.head_dim();
  auto q = rope(torch::matmul(h, ctx.get(p + "attn.q.weight").t()).view({t, H, dh}), pos,
                ctx.c.rope_theta);
  auto k = rope(torch::matmul(h, ctx.get(p + "attn.k.weight").t()).view({t, Hkv, dh}), pos,
                ctx.c.rope_theta);
  auto v = torch::matmul(h, ctx.get(p + "attn.v.weight").t()).view({t, Hkv, dh});
  auto out = torch::zeros({t, H, dh}, torch::kFloat64);
  for (int64_t head = 0; head < H; ++head) {
    const int64_t kvh = head / (H / Hkv);
    for (int64_t i = 0; i < t; ++i) {
      std::vector<int64_t> keys;
      for (int64_t j = 0; j <= i; ++j)
        if ((j == i || !ro[j]) && extra_allowed[i][j].item<bool>()) keys.push_back(j);
      auto idx = torch::tensor(keys, torch::kInt64);
      auto kk = k.select(1, kvh).index_select(0, idx);  // (m, dh)
      auto vv = v.select(1, kvh).index_select(0, idx);
      auto scores = torch::matmul(kk, q[i][head]) / std::sqrt(static_cast<double>(dh));
      out[i][head] = torch::matmul(torch::softmax(scores, 0), vv);
    }
  }
  return torch::matmul(out.view({t, H * dh}), ctx.get(p + "attn.o.weight").t());
}

torch::Tensor swiglu(const Context& ctx, const std::string& p, const torch::Tensor& h) {
  auto g = torch::matmul(h, ctx.get(p + "gate.weight").t());
  auto u = torch::matmul(h, ctx.get(p + "up.weight").t());
  return torch::matmul(torch::silu(g) * u, ctx.get(p + "down.weight").t());
}

// What the balancing bias is added to before selection: p (SPEC 1.4) or the logits themselves.
torch::Tensor scores(const ModelConfig& c, const torch::Tensor& logits,
                     const torch::Tensor& probs) {
  return c.balance_space == BalanceSpace::kLogits ? logits : probs;
}

torch::Tensor moe_ffn(const Context& ctx, const std::string& p, const torch::Tensor& h) {
  auto logits = torch::matmul(h, ctx.get(p + "router.weight").t());
  auto probs = torch::softmax(logits, -1);
  auto bias = ctx.get(p + "balance_bias");
  auto out = torch::zeros_like(h);
  for (int64_t i = 0; i < h.size(0); ++i) {
    auto sel = std::get<1>((scores(ctx.c, logits[i], probs[i]) + bias).topk(ctx.c.moe_top_k));
    for (int64_t j = 0; j < sel.size(0); ++j) {
      int64_t e = sel[j].item<int64_t>();
      out[i] +=
          probs[i][e] * swiglu(ctx, p + "experts." + std::to_string(e) + ".", h[i].unsqueeze(0))[0];
    }
  }
  return out;
}

struct Film {
  torch::Tensor ag, ab, fg, fb;
};

// One block on rows x (a window or the document) with the given extra mask.
torch::Tensor block(const Context& ctx, const std::string& p, const torch::Tensor& x,
                    const torch::Tensor& pos, const std::vector<bool>& ro,
                    const torch::Tensor& allowed, const Film* film, bool moe) {
  auto h = rms(x, ctx.c.norm_eps) * ctx.get(p + "attn_norm.weight");
  if (film) h = h * film->ag + film->ab;
  auto a = x + attention(ctx, p, h, pos, ro, allowed);
  auto h2 = rms(a, ctx.c.norm_eps) * ctx.get(p + "ffn_norm.weight");
  if (film) h2 = h2 * film->fg + film->fb;
  return a + (moe ? moe_ffn(ctx, p + "ffn.", h2) : swiglu(ctx, p + "ffn.", h2));
}

int64_t ordinal(int64_t i, int64_t P, int64_t W, int64_t delta) {
  if (P == 0) return (i + delta) / W;
  return i < P ? 0 : 1 + (i - P + delta) / W;
}

// The routed core of Algorithm 1: per depth, window after window, route then run the expert.
torch::Tensor routed_core(const Context& ctx, torch::Tensor x, const torch::Tensor& pos,
                          const std::vector<bool>& ro, int64_t P, int64_t D,
                          const ForcedPath* force,
                          const std::map<std::pair<int64_t, int64_t>, int64_t>* hint,
                          double tie_margin, std::vector<Route>& routes) {
  const auto& c = ctx.c;
  const int64_t n = ctx.n;
  auto router = ctx.get("router.weight");
  auto bias = ctx.get("router.balance_bias");
  for (int64_t l = 1; l <= D; ++l) {
    const int64_t delta = ((l - 1) * c.stride) % c.window;
    std::vector<int64_t> win(n);
    for (int64_t i = 0; i < n; ++i) win[i] = ordinal(i, P, c.window, delta);
    const int64_t K = win[n - 1] + 1;
    std::vector<torch::Tensor> mu(K);
    for (int64_t k = 0; k < K; ++k) {
      std::vector<int64_t> idx;
      for (int64_t i = 0; i < n; ++i)
        if (win[i] == k) idx.push_back(i);
      mu[k] = x.index_select(0, torch::tensor(idx, torch::kInt64)).mean(0);
    }
    Film film{ctx.get("core.film.attn.gamma")[l - 1], ctx.get("core.film.attn.beta")[l - 1],
              ctx.get("core.film.ffn.gamma")[l - 1], ctx.get("core.film.ffn.beta")[l - 1]};
    auto next = x.clone();
    for (int64_t k = 0; k < K; ++k) {
      torch::Tensor r;
      if (k == 0) {
        r = (ctx.get("router.depth_vectors")[l - 1] + x[0]) / 2;
      } else {
        r = torch::zeros_like(mu[0]);
        for (int64_t j = 0; j < k; ++j) r = r + mu[j];
        r = r / static_cast<double>(k);
      }
      auto R = router.size(0) == 1 ? router[0] : router[l - 1];
      auto logits = torch::matmul(R, r);
      auto probs = torch::softmax(logits, 0);
      const int64_t L = c.library_size;
      if (c.router_skip && c.router_skip_head) {
        // router_skip_head: p_skip = sigmoid(z_L - log L); the experts share the rest by softmax.
        const auto q = torch::sigmoid(logits[L] - std::log(static_cast<double>(L)));
        probs = torch::cat({torch::softmax(logits.narrow(0, 0, L), 0) * (1 - q), q.reshape({1})});
      }
      // One bias for the router, or row l of the (D, L) bias with balance_per_depth; the skip
      // (choice L, router_skip) takes router.skip_bias (entry l with balance_per_depth) where the
      // model steers it (router_skip_share), else none.
      auto depth_bias = bias.dim() == 2 ? bias[l - 1] : bias;
      if (c.router_skip) {
        auto on_skip = torch::zeros({1}, torch::kFloat64);
        if (c.router_skip_share > 0) {
          auto skip_bias = ctx.get("router.skip_bias");
          on_skip = skip_bias[c.balance_per_depth ? l - 1 : 0].reshape({1});
        }
        depth_bias = torch::cat({depth_bias, on_skip});
      }
      auto scored = scores(c, c.router_skip_head ? probs.log() : logits, probs) + depth_bias;
      // router_skip_window0 = false: window 0 is not offered the skip.
      const bool offered = c.router_skip && (c.router_skip_window0 || k > 0);
      if (c.router_skip && !offered) scored[L] = -std::numeric_limits<double>::infinity();
      // router_skip_target: the skip when p_skip > sigmoid(-b_skip), else the experts' best; the
      // margin is the experts'.
      const bool two_stage = c.router_skip_target;
      const auto ranked = two_stage ? scored.narrow(0, 0, L) : scored;
      auto sorted = std::get<0>(ranked.sort(0, /*descending=*/true));
      const bool skips = two_stage && offered &&
                         (probs[L] > torch::sigmoid(-depth_bias[L].to(probs.dtype()))).item<bool>();
      int64_t expert = skips ? L : ranked.argmax().item<int64_t>();
      double margin = ranked.size(0) > 1 ? (sorted[0] - sorted[1]).item<double>()
                                         : std::numeric_limits<double>::infinity();
      if (hint && margin < tie_margin) {
        auto it = hint->find({l, k});
        if (it != hint->end()) expert = it->second;
      }
      double gate_override = -1;
      bool has_gate = false;
      if (force) {
        if (auto* e = force->find(l, k)) {
          if (e->expert) expert = *e->expert;
          if (e->gate) {
            has_gate = true;
            gate_override = *e->gate;
          }
        }
      }
      // The gate stays a tensor so gradients reach the router through it (SPEC 1.4).
      // router_skip_renorm: a routed window's gate is its p among the experts.
      const bool skipped = c.router_skip && expert == c.library_size;
      auto gate = has_gate ? torch::tensor(gate_override, torch::kFloat64)
                  : c.router_skip_renorm && !skipped
                      ? probs[expert] / probs.narrow(0, 0, c.library_size).sum()
                      : probs[expert];
      std::vector<int64_t> idx;
      for (int64_t i = 0; i < n; ++i)
        if (win[i] == k) idx.push_back(i);
      auto idx_t = torch::tensor(idx, torch::kInt64);
      auto xs = x.index_select(0, idx_t);
      std::vector<bool> ro_w;
      for (auto i : idx) ro_w.push_back(ro[i]);
      const int64_t t = static_cast<int64_t>(idx.size());
      // The skip leaves the window's rows as they are. With router_skip_head it runs the best
      // other expert at a gate of value 0 whose gradient is that of g (1 - p_skip) in p_skip,
      // g the expert's gate among the experts, held fixed.
      const int64_t runs = !skipped             ? expert
                           : c.router_skip_head ? scored.narrow(0, 0, L).argmax().item<int64_t>()
                                                : -1;
      if (runs >= 0) {
        auto y = block(ctx, "library." + std::to_string(runs) + ".", xs, pos.index_select(0, idx_t),
                       ro_w, torch::ones({t, t}, torch::kBool), &film, false);
        auto update_gate = gate;
        if (skipped && two_stage) {
          update_gate = torch::zeros_like(gate);  // the target reads its gradient: none here
        } else if (skipped) {
          const auto experts_total = probs.narrow(0, 0, L).sum();
          update_gate =
              (probs[runs] / experts_total).detach() * (experts_total - experts_total.detach());
        }
        next.index_copy_(0, idx_t, xs + update_gate * (y - xs));
      }
      Route route{l, k, expert, gate.item<double>(), margin, {}};
      for (int64_t m = 0; m < c.route_choices(); ++m)
        route.probs.push_back(probs[m].item<double>());
      routes.push_back(route);
    }
    x = next;
  }
  return x;
}

// A fixed stack: layer i runs block i (looped: i mod R) over the whole document with its mask.
torch::Tensor stack_core(const Context& ctx, torch::Tensor x, const torch::Tensor& pos,
                         const std::vector<bool>& ro, int64_t P, int64_t D) {
  const auto& c = ctx.c;
  const int64_t n = ctx.n;
  const int64_t blocks = c.family == Family::kLooped ? c.loop_blocks : c.core_depth;
  for (int64_t i = 0; i < D; ++i) {
    auto allowed = torch::ones({n, n}, torch::kBool);
    const int64_t delta = (i * c.stride) % c.window;
    for (int64_t a = 0; a < n; ++a)
      for (int64_t b = 0; b <= a; ++b) {
        switch (c.core_attention) {
          case CoreAttention::kFull:
            break;
          case CoreAttention::kSliding:
            allowed[a][b] = a - b < c.window;
            break;
          case CoreAttention::kStrided:
            allowed[a][b] = ordinal(a, P, c.window, delta) == ordinal(b, P, c.window, delta);
            break;
        }
      }
    x = block(ctx, "core." + std::to_string(i % blocks) + ".", x, pos, ro, allowed, nullptr,
              c.family == Family::kMoe);
  }
  return x;
}

}  // namespace

Output forward(const ModelConfig& c, const Weights& w, const Document& doc, const ForcedPath* force,
               int64_t depth, const std::map<std::pair<int64_t, int64_t>, int64_t>* hint,
               double tie_margin) {
  const int64_t n = static_cast<int64_t>(doc.tokens.size());
  Context ctx{c, w, doc, n};
  std::vector<bool> ro = doc.router_only.empty() ? std::vector<bool>(n, false) : doc.router_only;
  const int64_t P = std::min(doc.prompt_len, n);
  const int64_t D = depth < 0 ? c.core_depth : depth;
  auto pos = torch::arange(n, torch::kFloat64);
  auto causal_all = torch::ones({n, n}, torch::kBool);
  auto x = ctx.get("embed.weight").index_select(0, torch::tensor(doc.tokens, torch::kInt64));
  for (int64_t i = 0; i < c.n_prelude; ++i)
    x = block(ctx, "prelude." + std::to_string(i) + ".", x, pos, ro, causal_all, nullptr, false);

  Output out;
  switch (c.family) {
    case Family::kLol:
      x = routed_core(ctx, x, pos, ro, P, D, force, hint, tie_margin, out.routes);
      break;
    case Family::kDense:
    case Family::kLooped:
    case Family::kMoe:
      x = stack_core(ctx, x, pos, ro, P, D);
      break;
  }
  for (int64_t i = 0; i < c.n_coda; ++i)
    x = block(ctx, "coda." + std::to_string(i) + ".", x, pos, ro, causal_all, nullptr, false);
  x = rms(x, c.norm_eps) * ctx.get("norm.weight");
  auto head = c.tie_embeddings ? ctx.get("embed.weight") : ctx.get("lm_head.weight");
  out.logits = torch::matmul(x, head.t());
  return out;
}

}  // namespace lol::reference
