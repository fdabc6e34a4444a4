#include "model/router.h"

#include <cmath>
#include <limits>

#include "model/routed_rows.h"
#include "util/files.h"
#include "util/tensor.h"

namespace lol {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

const ForcedPath::Entry* ForcedPath::find(int64_t depth, int64_t ordinal) const {
  auto d = depths.find(depth);
  if (d == depths.end() || d->second.empty()) return nullptr;
  const auto& entries = d->second;
  const int64_t last = entries.rbegin()->first;
  auto e = entries.find(std::min(ordinal, last));
  return e == entries.end() ? nullptr : &e->second;
}

void ForcedPath::validate(int64_t core_depth, int64_t library_size, bool skip) const {
  const int64_t choices = library_size + (skip ? 1 : 0);
  for (const auto& [depth, entries] : depths) {
    LOL_CHECK(depth >= 1 && depth <= core_depth, "forced path: depth ", depth,
              " is outside the core depths 1..", core_depth);
    for (const auto& [ordinal, entry] : entries) {
      if (entry.expert)
        LOL_CHECK(*entry.expert >= 0 && *entry.expert < choices, "forced path: depth ", depth,
                  " window ", ordinal, ": expert ", *entry.expert, " is outside the library 0..",
                  library_size - 1,
                  skip ? " and the skip " + std::to_string(library_size)
                       : std::string(" (the model has no skip choice)"));
    }
  }
}

ForcedPath ForcedPath::from_json(const json& object) {
  LOL_CHECK(object.is_object() && object.contains("entries") && object["entries"].is_array(),
            "forced path must be an object with an \"entries\" array");
  ForcedPath path;
  int64_t index = 0;
  for (const auto& item : object["entries"]) {
    auto where = "forced path entry " + std::to_string(index++);
    LOL_CHECK(item.is_object(), where, " must be an object");
    for (const auto& [key, value] : item.items())
      LOL_CHECK(
          key == "depth" || key == "window" || key == "expert" || key == "gate" || key == "count",
          where, ": unknown key '", key, "'");
    // "count" (observations behind a mode-path entry, `lol path extract`) is information only.
    LOL_CHECK(!item.contains("count") ||
                  (item["count"].is_number_integer() && item["count"].get<int64_t>() >= 0),
              where, ": \"count\" must be an integer >= 0");
    LOL_CHECK(item.contains("depth") && item["depth"].is_number_integer(), where,
              ": \"depth\" must be an integer (1-based)");
    LOL_CHECK(item.contains("window") && item["window"].is_number_integer() &&
                  item["window"].get<int64_t>() >= 0,
              where, ": \"window\" must be an integer >= 0");
    Entry entry;
    if (item.contains("expert")) {
      LOL_CHECK(item["expert"].is_number_integer(), where, ": \"expert\" must be an integer");
      entry.expert = item["expert"].get<int64_t>();
    }
    if (item.contains("gate")) {
      LOL_CHECK(item["gate"].is_number() && std::isfinite(item["gate"].get<double>()), where,
                ": \"gate\" must be a finite number");
      entry.gate = item["gate"].get<double>();
    }
    LOL_CHECK(entry.expert || entry.gate, where, ": needs \"expert\", \"gate\" or both");
    auto& slot = path.depths[item["depth"].get<int64_t>()][item["window"].get<int64_t>()];
    slot = entry;
  }
  return path;
}

ForcedPath ForcedPath::load(const std::string& path) {
  return read_json_file(path, from_json);
}

json ForcedPath::to_json() const {
  json entries = json::array();
  for (const auto& [depth, by_ordinal] : depths)
    for (const auto& [ordinal, entry] : by_ordinal) {
      json item = {{"depth", depth}, {"window", ordinal}};
      if (entry.expert) item["expert"] = *entry.expert;
      if (entry.gate) item["gate"] = *entry.gate;
      entries.push_back(item);
    }
  return json{{"entries", entries}};
}

RouterImpl::RouterImpl(const ModelConfig& c)
    : balance_space(c.balance_space),
      skip(c.router_skip),
      skip_renorm(c.router_skip_renorm),
      skip_head(c.router_skip_head),
      skip_target(c.router_skip_target),
      skip_window0(c.router_skip_window0),
      noise_std(c.router_noise_std) {
  const int64_t copies = c.router_tied ? 1 : c.core_depth;
  weight = register_parameter("weight", torch::zeros({copies, c.route_choices(), c.d_model}));
  depth_vectors = register_parameter("depth_vectors", torch::zeros({c.core_depth, c.d_model}));
  balance_bias = register_buffer("balance_bias", c.balance_per_depth
                                                     ? torch::zeros({c.core_depth, c.library_size})
                                                     : torch::zeros({c.library_size}));
  if (c.router_skip_share > 0)
    skip_bias = register_buffer("skip_bias",
                                torch::zeros({c.balance_per_depth ? c.core_depth : int64_t{1}}));
  roles.set("weight", ParamRole::kRouter);
  roles.set("depth_vectors", ParamRole::kDepthVector);
}

namespace {
// SPEC 1.4: r_0 = (first state + e[l]) / 2, r_k = the mean of the k closed windows' means.
torch::Tensor window_inputs(const torch::Tensor& first_states, const torch::Tensor& prefix_means,
                            const torch::Tensor& ordinals, const torch::Tensor& depth_vector) {
  return torch::where((ordinals == 0).unsqueeze(1), (first_states + depth_vector) / 2,
                      prefix_means);
}

// The skip head's log-odds against the experts together, z_L - log L (odds e^z_L / L), of the
// skip's logits (any shape) and L experts.
torch::Tensor skip_head_log_odds(const torch::Tensor& skip_logits, int64_t experts) {
  return skip_logits - std::log(static_cast<double>(experts));
}
}  // namespace

torch::Tensor RouterImpl::depth_bias(int64_t depth) const {
  auto experts = balance_bias.dim() == 2 ? balance_bias[depth - 1] : balance_bias;
  if (!skip) return experts;
  auto on_skip = !skip_bias.defined()     ? experts.new_zeros({1})
                 : skip_bias.size(0) == 1 ? skip_bias
                                          : skip_bias.narrow(0, depth - 1, 1);
  return torch::cat({experts, on_skip});
}

torch::Tensor RouterImpl::decode_inputs(const torch::Tensor& first_states,
                                        const torch::Tensor& closed_mean_sums,
                                        const std::vector<int64_t>& ordinals, int64_t depth) const {
  auto ordinal_t = int64_tensor(ordinals, first_states.device());
  auto prefix_means =
      closed_mean_sums / ordinal_t.clamp_min(1).to(closed_mean_sums.scalar_type()).unsqueeze(1);
  return window_inputs(first_states, prefix_means, ordinal_t, depth_vectors[depth - 1]);
}

RouteDecisions RouterImpl::route(const torch::Tensor& states, int64_t depth,
                                 const WindowPartition& part, const Layout& layout, bool add_noise,
                                 const ForcedPath* force) const {
  const int64_t d = states.size(1);

  // mu_k: mean state of each window (router-only tokens included; there is no padding), and
  // the state of each window's document's first token.
  const auto summaries = window_summaries(states, part);
  const auto& mu = summaries.means;

  // r_k = mean of mu_0..mu_{k-1} within the document: cumulative sums over a
  // (documents, max windows) grid, so no sum runs across documents.
  const int64_t num_docs = static_cast<int64_t>(layout.documents().size());
  auto grid = torch::zeros({num_docs * part.max_windows, d}, states.options())
                  .index_copy(0, part.slots_t, mu)
                  .view({num_docs, part.max_windows, d})
                  .cumsum(1)
                  .view({num_docs * part.max_windows, d});
  auto prefix_mean = grid.index_select(0, part.slot_prev_t) /
                     part.ordinals_t.clamp_min(1).to(states.scalar_type()).unsqueeze(1);
  auto inputs = window_inputs(summaries.firsts, prefix_mean, part.ordinals_t,
                              depth_vectors[depth - 1]);  // (Nw, d)

  auto probs = probabilities(inputs, depth, add_noise);
  RouteDecisions out = select_experts(probs, depth_bias(depth), balance_space, depth,
                                      part.ordinals_t, force, skip_rule());
  out.partition = &part;
  out.router_inputs = inputs;
  if (skip_target && torch::GradMode::is_enabled() && weight.requires_grad()) {
    const int64_t experts = weight.size(1) - 1;
    out.head_logits = skip_head_log_odds(
        torch::mv(inputs.detach(), weight[weight.size(0) == 1 ? 0 : depth - 1][experts]), experts);
  }
  return out;
}

json RouteRecord::to_json() const {
  json j = {{"sequence", sequence},
            {"depth", depth},
            {"window", window},
            {"position", position},
            {"expert", expert},
            {"gate", gate},
            {"probs", probs},
            {"router_choice", router_choice},
            {"forced_expert", forced_expert},
            {"forced_gate", forced_gate}};
  if (length >= 0) j["length"] = length;
  j["margin"] = std::isfinite(margin) ? json(margin) : json(nullptr);
  return j;
}

RouteRecord RouteRecord::from_json(const json& j) {
  LOL_CHECK(j.is_object(), "a route must be a JSON object");
  auto integer = [&](const char* key) {
    LOL_CHECK(j.contains(key) && j[key].is_number_integer(), "route: \"", key,
              "\" must be an integer");
    return j[key].get<int64_t>();
  };
  auto number = [&](const char* key) {
    LOL_CHECK(j.contains(key) && j[key].is_number(), "route: \"", key, "\" must be a number");
    return j[key].get<double>();
  };
  auto flag = [&](const char* key) {
    LOL_CHECK(j.contains(key) && j[key].is_boolean(), "route: \"", key, "\" must be true or false");
    return j[key].get<bool>();
  };
  RouteRecord r;
  if (j.contains("sequence")) r.sequence = integer("sequence");
  r.depth = integer("depth");
  r.window = integer("window");
  r.position = integer("position");
  if (j.contains("length")) r.length = integer("length");
  r.expert = integer("expert");
  r.router_choice = integer("router_choice");
  r.gate = number("gate");
  LOL_CHECK(j.contains("margin") && (j["margin"].is_null() || j["margin"].is_number()),
            "route: \"margin\" must be a number or null");
  r.margin =
      j["margin"].is_null() ? std::numeric_limits<double>::infinity() : j["margin"].get<double>();
  r.forced_expert = flag("forced_expert");
  r.forced_gate = flag("forced_gate");
  LOL_CHECK(j.contains("probs") && j["probs"].is_array(), "route: \"probs\" must be an array");
  for (const auto& p : j["probs"]) {
    LOL_CHECK(p.is_number(), "route: \"probs\" must hold numbers");
    r.probs.push_back(p.get<double>());
  }
  return r;
}

std::vector<RouteRecord> RouteDecisions::records(const Layout* layout) const {
  auto p = probs.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  auto g = gates.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  const int64_t L = p.size(1);
  const double* pd = p.data_ptr<double>();
  const double* gd = g.data_ptr<double>();
  const auto& h = host();
  std::vector<RouteRecord> out(h.experts.size());
  for (size_t w = 0; w < h.experts.size(); ++w) {
    auto& r = out[w];
    const auto row = static_cast<int64_t>(w);
    r.depth = depth;
    r.expert = h.experts[w];
    r.router_choice = h.router_choice[w];
    r.gate = gd[row];
    r.margin = h.margins[w];
    r.forced_expert = h.forced_expert[w] != 0;
    r.forced_gate = h.forced_gate[w] != 0;
    r.probs.assign(pd + row * L, pd + (row + 1) * L);
    if (layout && partition) {
      const auto& win = partition->windows[w];
      r.sequence = win.document;
      r.window = win.ordinal;
      r.position = win.start - layout->documents()[win.document].start;
      r.length = win.length;
    }
  }
  return out;
}

torch::Tensor RouterImpl::probabilities(const torch::Tensor& inputs, int64_t depth,
                                        bool add_noise) const {
  auto router_matrix = weight[weight.size(0) == 1 ? 0 : depth - 1];  // (C, d)
  auto logits = torch::matmul(inputs, router_matrix.t());            // (n, C)
  // Noise comes from the CPU generator whatever the device (a few numbers per window), so a
  // run's randomness is one generator that checkpoints save and restore. To a GPU it goes from
  // pinned memory without waiting for the stream (a pageable copy would synchronise the host
  // with the device at every routed depth).
  if (add_noise && noise_std > 0) {
    auto noise = torch::randn(logits.sizes(), torch::kFloat32);
    if (logits.device().is_cuda()) noise = noise.pin_memory();
    logits = logits + noise.to(logits.device(), logits.scalar_type(),
                               /*non_blocking=*/logits.device().is_cuda()) *
                          noise_std;
  }
  if (!(skip && skip_head)) return torch::softmax(logits, -1);
  // The skip's odds against the experts together are e^z / L, whatever the experts' logits: at
  // zero logits every choice has 1 / (L + 1), as with the softmax. 1 - p_skip as sigmoid(-z'), not
  // 1 - sigmoid(z'), which rounds to 0 once z' passes ~17.
  const int64_t experts = logits.size(1) - 1;
  auto z_skip = skip_head_log_odds(logits.narrow(1, experts, 1), experts);
  return torch::cat({torch::softmax(logits.narrow(1, 0, experts), -1) * torch::sigmoid(-z_skip),
                     torch::sigmoid(z_skip)},
                    1);
}

torch::Tensor balanced_scores(const torch::Tensor& probs, const torch::Tensor& bias,
                              BalanceSpace space) {
  // log p = z - logsumexp(z) is a shift of each row's logits: the ranking of z + b.
  return space == BalanceSpace::kLogits ? probs.detach().log() + bias : probs.detach() + bias;
}

RouteDecisions select_experts(const torch::Tensor& probs, const torch::Tensor& bias,
                              BalanceSpace space, int64_t depth, const torch::Tensor& ordinals,
                              const ForcedPath* force, SkipRule skip_rule) {
  const bool skip = skip_rule.skip;
  const int64_t num_windows = probs.size(0), L = probs.size(1);
  LOL_CHECK(bias.dim() == 1 && bias.size(0) == L, "select_experts: ", L,
            " route choices need a bias of ", L, ", got ", bias.sizes());
  const auto device = probs.device();
  RouteDecisions out;
  out.depth = depth;
  out.skip = skip ? L - 1 : -1;
  out.probs = probs;
  auto biased = balanced_scores(probs, bias, space);
  if (skip) {
    out.skip_offered = skip_rule.window0 ? torch::ones_like(ordinals, torch::kBool) : ordinals != 0;
    // A window the skip is not offered to ranks the experts alone.
    if (!skip_rule.window0)
      biased.select(1, L - 1).masked_fill_(out.skip_offered.logical_not(),
                                           -std::numeric_limits<double>::infinity());
  }
  // The experts' best balanced score (the first maximum, on every device) is what a skipped
  // window falls back to (router_skip_head) and, with the target, what a window not skipping runs.
  const bool two_stage = skip && skip_rule.target;
  if (skip && (skip_rule.head || skip_rule.target))
    out.fallback = biased.narrow(1, 0, L - 1).argmax(1);
  out.router_choice =
      two_stage ? torch::where((probs.detach().select(1, L - 1) > torch::sigmoid(-bias[L - 1]))
                                   .logical_and(out.skip_offered),
                               torch::full_like(out.fallback, L - 1), out.fallback)
                : biased.argmax(1);
  const auto ranked = two_stage ? biased.narrow(1, 0, L - 1) : biased;
  if (ranked.size(1) > 1) {
    auto top = std::get<0>(ranked.topk(2, 1)).to(torch::kFloat64);
    out.margins = top.select(1, 0) - top.select(1, 1);
  } else {
    out.margins = torch::full({num_windows}, std::numeric_limits<double>::infinity(),
                              torch::dtype(torch::kFloat64).device(device));
  }
  out.experts = out.router_choice;
  out.forced_expert = torch::zeros({num_windows}, torch::dtype(torch::kBool).device(device));
  out.forced_gate = torch::zeros_like(out.forced_expert);
  torch::Tensor forced_gates;
  const std::map<int64_t, ForcedPath::Entry>* entries = nullptr;
  if (force) {
    auto it = force->depths.find(depth);
    if (it != force->depths.end() && !it->second.empty()) entries = &it->second;
  }
  if (entries) {
    // The depth's entries as tables over ordinals 0..last (-1 / NaN: not forced); an ordinal
    // beyond the last takes the last (ForcedPath::find).
    const int64_t last = entries->rbegin()->first;
    std::vector<int64_t> expert(last + 1, -1);
    std::vector<double> gate(last + 1, std::numeric_limits<double>::quiet_NaN());
    for (const auto& [ordinal, entry] : *entries) {
      if (entry.expert) expert[ordinal] = *entry.expert;
      if (entry.gate) gate[ordinal] = *entry.gate;
    }
    auto at = ordinals.clamp_max(last);
    auto forced_experts = int64_tensor(expert, device).index_select(0, at);
    forced_gates = torch::tensor(gate, torch::kFloat64).to(device).index_select(0, at);
    out.forced_expert = forced_experts >= 0;
    out.forced_gate = forced_gates.isnan().logical_not();
    out.experts = torch::where(out.forced_expert, forced_experts, out.router_choice);
  }
  // alpha = p_rho: the only path from the loss to the router (no gradient through argmax). With
  // the skip left out of the gate, a routed window's alpha is p_rho over the experts' total,
  // p_rho / (1 - p_skip) (summed, so that it stays exact when p_skip rounds to 1), the softmax of
  // the experts' logits alone; a skipped window's reported gate stays its p.
  out.gates = probs.gather(1, out.experts.unsqueeze(1)).squeeze(1);
  const auto experts_total =
      skip && (skip_rule.renorm || skip_rule.head)
          ? probs.narrow(1, 0, L - 1).sum(1).clamp_min(std::numeric_limits<float>::min())
          : torch::Tensor();
  if (skip && skip_rule.renorm)
    out.gates = torch::where(out.experts == L - 1, out.gates, out.gates / experts_total);
  if (forced_gates.defined())
    out.gates = torch::where(out.forced_gate, forced_gates.to(out.gates.scalar_type()), out.gates);
  if (skip && skip_rule.head) {
    // The update a skipped window did not make, as a gate of value exactly 0 (t - t.detach())
    // whose gradient is that of g (1 - p_skip) in p_skip, g the fallback's gate among the experts
    // held fixed: the skip's logit learns whether running the fallback would have lowered the
    // loss; the experts' logits learn from routed windows as before. With the target, a plain 0:
    // the head learns from skip_target instead.
    out.fallback_gates =
        (probs.gather(1, out.fallback.unsqueeze(1)).squeeze(1) / experts_total).detach();
    out.probe_gates = skip_rule.target
                          ? torch::zeros_like(out.fallback_gates)
                          : out.fallback_gates * (experts_total - experts_total.detach());
  }
  return out;
}

namespace {
// skip_target's node: the gates pass through; the head's logits get the target's gradient.
struct SkipTargetFunction : torch::autograd::Function<SkipTargetFunction> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& gates,
                               const torch::Tensor& head_logits, const torch::Tensor& weights,
                               const torch::Tensor& offered, double share) {
    ctx->set_materialize_grads(false);
    ctx->saved_data["share"] = share;
    ctx->save_for_backward({head_logits.detach(), weights, offered});
    return {gates.clone(), torch::zeros({}, head_logits.options())};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& z = saved[0];
    const auto& weights = saved[1];
    const auto& offered = saved[2];
    torch::Tensor grad_logits;
    if (grads[1].defined()) {
      // b = -g a in float64, ranked with a stable sort: the same labels on every device. The
      // windows the skip is not offered to rank last and take no gradient.
      auto benefit = grads[0].defined()
                         ? -(weights.to(torch::kFloat64) * grads[0].to(torch::kFloat64))
                         : torch::zeros(weights.sizes(), weights.options().dtype(torch::kFloat64));
      benefit = benefit.masked_fill(offered.logical_not(), std::numeric_limits<double>::infinity());
      // The picked count round(share n), n the windows offered, and each window's rank, on the
      // device: nothing waits for it.
      const auto picked =
          (offered.sum().to(torch::kFloat64) * ctx->saved_data["share"].toDouble() + 0.5).floor();
      const auto order = std::get<1>(benefit.sort(/*stable=*/true, 0, /*descending=*/false));
      const auto rank = torch::empty_like(order).scatter_(
          0, order, torch::arange(order.size(0), order.options()));
      const auto labels = (rank.to(torch::kFloat64) < picked).to(z.scalar_type());
      grad_logits = grads[1] * (torch::sigmoid(z) - labels) * offered.to(z.scalar_type());
    }
    return {grads[0], grad_logits, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};
}  // namespace

torch::Tensor skip_row_scale(const ModelConfig& c, double scale) {
  LOL_CHECK(c.router_skip, "skip_row_scale: a router with a skip (router_skip)");
  auto out = torch::ones({1, c.route_choices(), 1}, torch::kFloat32);
  out[0][c.library_size] = scale;
  return out;
}

torch::Tensor skip_target(RouteDecisions& decisions, double share) {
  LOL_CHECK(decisions.head_logits.defined() && decisions.fallback_gates.defined() &&
                decisions.skip_offered.defined(),
            "skip_target: the decisions of a router with a skip head in training");
  const auto update = decisions.update_gates();
  // The gate each window's update has, or for a skipped window would have had.
  const auto weights =
      torch::where(decisions.experts == decisions.skip, decisions.fallback_gates, update).detach();
  auto out = SkipTargetFunction::apply(update, decisions.head_logits, weights,
                                       decisions.skip_offered, share);
  decisions.target_carrier = out[1];
  return out[0];
}

torch::Tensor RouteDecisions::block_ids() const {
  if (skip < 0) return experts;
  return torch::where(experts == skip, fallback.defined() ? fallback : torch::zeros_like(experts),
                      experts);
}

torch::Tensor RouteDecisions::update_gates() const {
  if (skip < 0) return gates;
  return torch::where(experts == skip,
                      probe_gates.defined() ? probe_gates : torch::zeros_like(gates), gates);
}

const RouteDecisions::Host& RouteDecisions::host() const {
  if (host_) return *host_;
  // One transfer: the integers and flags are exact in float64.
  auto all = torch::stack({experts.to(torch::kFloat64), router_choice.to(torch::kFloat64),
                           margins.to(torch::kFloat64), forced_expert.to(torch::kFloat64),
                           forced_gate.to(torch::kFloat64), block_ids().to(torch::kFloat64)})
                 .to(torch::kCPU)
                 .contiguous();
  const int64_t n = all.size(1);
  const double* v = all.data_ptr<double>();
  auto copy = std::make_shared<Host>();
  for (int64_t w = 0; w < n; ++w) {
    const auto expert = static_cast<int64_t>(v[w]);
    copy->experts.push_back(expert);
    copy->blocks.push_back(static_cast<int64_t>(v[5 * n + w]));
    copy->router_choice.push_back(static_cast<int64_t>(v[n + w]));
    copy->margins.push_back(v[2 * n + w]);
    copy->forced_expert.push_back(v[3 * n + w] != 0);
    copy->forced_gate.push_back(v[4 * n + w] != 0);
  }
  host_ = std::move(copy);
  return *host_;
}

}  // namespace lol
