#include "model/router.h"

#include <cmath>
#include <limits>

#include "util/files.h"

namespace lol {

const ForcedPath::Entry* ForcedPath::find(int64_t depth, int64_t ordinal) const {
  auto d = depths.find(depth);
  if (d == depths.end() || d->second.empty()) return nullptr;
  const auto& entries = d->second;
  const int64_t last = entries.rbegin()->first;
  auto e = entries.find(std::min(ordinal, last));
  return e == entries.end() ? nullptr : &e->second;
}

void ForcedPath::validate(int64_t core_depth, int64_t library_size) const {
  for (const auto& [depth, entries] : depths) {
    LOL_CHECK(depth >= 1 && depth <= core_depth, "forced path: depth ", depth,
              " is outside the core depths 1..", core_depth);
    for (const auto& [ordinal, entry] : entries) {
      if (entry.expert)
        LOL_CHECK(*entry.expert >= 0 && *entry.expert < library_size, "forced path: depth ", depth,
                  " window ", ordinal, ": expert ", *entry.expert, " is outside the library 0..",
                  library_size - 1);
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

RouterImpl::RouterImpl(const ModelConfig& c) : noise_std(c.router_noise_std) {
  const int64_t copies = c.router_tied ? 1 : c.core_depth;
  weight = register_parameter("weight", torch::zeros({copies, c.library_size, c.d_model}));
  depth_vectors = register_parameter("depth_vectors", torch::zeros({c.core_depth, c.d_model}));
  balance_bias = register_buffer("balance_bias", torch::zeros({c.library_size}));
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
}  // namespace

torch::Tensor RouterImpl::decode_inputs(const torch::Tensor& first_states,
                                        const torch::Tensor& closed_mean_sums,
                                        const std::vector<int64_t>& ordinals, int64_t depth) const {
  auto ordinal_t = torch::tensor(ordinals, torch::kInt64).to(first_states.device());
  auto prefix_means =
      closed_mean_sums / ordinal_t.clamp_min(1).to(closed_mean_sums.scalar_type()).unsqueeze(1);
  return window_inputs(first_states, prefix_means, ordinal_t, depth_vectors[depth - 1]);
}

RouteDecisions RouterImpl::route(const torch::Tensor& states, int64_t depth,
                                 const WindowPartition& part, const Layout& layout, bool add_noise,
                                 const ForcedPath* force) const {
  const int64_t num_windows = static_cast<int64_t>(part.windows.size());
  const int64_t d = states.size(1);

  // mu_k: mean state of each window (router-only tokens included; there is no padding).
  auto sums =
      torch::zeros({num_windows, d}, states.options()).index_add(0, part.token_window_t, states);
  auto mu = sums / part.lengths_t.to(states.scalar_type()).unsqueeze(1);

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
  auto inputs = window_inputs(states.index_select(0, part.first_token_t), prefix_mean,
                              part.ordinals_t, depth_vectors[depth - 1]);  // (Nw, d)

  auto probs = probabilities(inputs, depth, add_noise);
  RouteDecisions out = select_experts(probs, balance_bias, depth, part.ordinals, force);
  out.partition = &part;
  out.router_inputs = inputs;
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
  std::vector<RouteRecord> out(experts.size());
  for (size_t w = 0; w < experts.size(); ++w) {
    auto& r = out[w];
    const auto row = static_cast<int64_t>(w);
    r.depth = depth;
    r.expert = experts[w];
    r.router_choice = router_choice[w];
    r.gate = gd[row];
    r.margin = margins[w];
    r.forced_expert = forced_expert[w] != 0;
    r.forced_gate = forced_gate[w] != 0;
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
  auto router_matrix = weight[weight.size(0) == 1 ? 0 : depth - 1];  // (L, d)
  auto logits = torch::matmul(inputs, router_matrix.t());            // (n, L)
  // Noise comes from the CPU generator whatever the device (a few numbers per window), so a
  // run's randomness is one generator that checkpoints save and restore.
  if (add_noise && noise_std > 0)
    logits =
        logits +
        torch::randn(logits.sizes(), torch::kFloat32).to(logits.device(), logits.scalar_type()) *
            noise_std;
  return torch::softmax(logits, -1);
}

RouteDecisions select_experts(const torch::Tensor& probs, const torch::Tensor& bias, int64_t depth,
                              const std::vector<int64_t>& ordinals, const ForcedPath* force) {
  const int64_t num_windows = probs.size(0);
  const auto device = probs.device();
  RouteDecisions out;
  out.depth = depth;
  out.probs = probs;
  auto biased = (probs.detach() + bias).to(torch::kCPU).to(torch::kFloat64).contiguous();
  const int64_t L = biased.size(1);
  const double* b = biased.data_ptr<double>();
  std::vector<int64_t> chosen(num_windows);
  std::vector<double> forced_gate_values(num_windows, 0.0);
  out.forced_expert.assign(num_windows, 0);
  out.forced_gate.assign(num_windows, 0);
  out.margins.assign(num_windows, std::numeric_limits<double>::infinity());
  out.router_choice.resize(num_windows);
  bool any_forced_gate = false;
  for (int64_t w = 0; w < num_windows; ++w) {
    int64_t best = 0;
    for (int64_t m = 1; m < L; ++m)
      if (b[w * L + m] > b[w * L + best]) best = m;
    double second = -std::numeric_limits<double>::infinity();
    for (int64_t m = 0; m < L; ++m)
      if (m != best) second = std::max(second, b[w * L + m]);
    if (L > 1) out.margins[w] = b[w * L + best] - second;
    out.router_choice[w] = best;
    chosen[w] = best;
    if (!force) continue;
    if (const auto* entry = force->find(depth, ordinals[w])) {
      if (entry->expert) {
        chosen[w] = *entry->expert;
        out.forced_expert[w] = 1;
      }
      if (entry->gate) {
        forced_gate_values[w] = *entry->gate;
        out.forced_gate[w] = 1;
        any_forced_gate = true;
      }
    }
  }
  out.experts = chosen;
  // alpha = p_rho: the only path from the loss to the router (no gradient through argmax).
  auto gates =
      probs.gather(1, torch::tensor(chosen, torch::kInt64).to(device).unsqueeze(1)).squeeze(1);
  if (any_forced_gate) {
    auto mask = torch::tensor(std::vector<int64_t>(out.forced_gate.begin(), out.forced_gate.end()),
                              torch::kInt64)
                    .to(device)
                    .to(torch::kBool);
    auto values =
        torch::tensor(forced_gate_values, torch::kFloat64).to(device).to(gates.scalar_type());
    gates = torch::where(mask, values, gates);
  }
  out.gates = gates;
  return out;
}

}  // namespace lol
