#include "analysis/paths.h"

#include "util/error.h"

namespace lol {

template <>
const std::vector<std::pair<ModeRule, const char*>>& enum_names<ModeRule>() {
  static const std::vector<std::pair<ModeRule, const char*>> names = {
      {ModeRule::kProbabilities, "probabilities"}, {ModeRule::kRouted, "routed"}};
  return names;
}

void ModePathBuilder::add(const SequenceRoutes& routes) {
  auto& cells = cells_[routes.label];
  ++sequences_[routes.label];
  for (const auto& w : routes.windows) {
    auto& cell = cells[{w.route.depth, w.route.window}];
    if (cell.sum.empty()) {
      cell.sum.assign(w.route.probs.size(), 0.0);
      cell.routed.assign(w.route.probs.size(), 0);
      cell.gate_sum.assign(w.route.probs.size(), 0.0);
    }
    LOL_CHECK(cell.sum.size() == w.route.probs.size(), "sequence ", routes.sequence, " depth ",
              w.route.depth, ": ", w.route.probs.size(),
              " probabilities where earlier windows had ", cell.sum.size());
    LOL_CHECK(w.route.expert >= 0 && w.route.expert < static_cast<int64_t>(cell.sum.size()),
              "sequence ", routes.sequence, " depth ", w.route.depth, ": expert ", w.route.expert,
              " is outside the ", cell.sum.size(), " experts");
    for (size_t m = 0; m < cell.sum.size(); ++m) cell.sum[m] += w.route.probs[m];
    ++cell.routed[static_cast<size_t>(w.route.expert)];
    cell.gate_sum[static_cast<size_t>(w.route.expert)] += w.route.gate;
    ++cell.count;
  }
}

std::vector<ModePath> ModePathBuilder::paths() const {
  std::vector<ModePath> out;
  for (const auto& [label, cells] : cells_) {
    ModePath p;
    p.label = label;
    p.rule = enum_name(rule_);
    p.sequences = sequences_.at(label);
    for (const auto& [key, cell] : cells) {
      size_t best = 0;
      double gate = 0;
      switch (rule_) {
        case ModeRule::kProbabilities:
          for (size_t m = 1; m < cell.sum.size(); ++m)
            if (cell.sum[m] > cell.sum[best]) best = m;
          gate = cell.sum[best] / static_cast<double>(cell.count);
          break;
        case ModeRule::kRouted:
          for (size_t m = 1; m < cell.sum.size(); ++m)
            if (cell.routed[m] > cell.routed[best] ||
                (cell.routed[m] == cell.routed[best] && cell.sum[m] > cell.sum[best]))
              best = m;
          gate = cell.gate_sum[best] / static_cast<double>(cell.routed[best]);
          break;
      }
      p.path.depths[key.first][key.second] = {static_cast<int64_t>(best), gate};
      p.counts[key] = cell.count;
    }
    out.push_back(std::move(p));
  }
  return out;
}

json ModePath::to_json() const {
  json j = path.to_json();
  for (auto& entry : j["entries"])
    entry["count"] = counts.at({entry["depth"].get<int64_t>(), entry["window"].get<int64_t>()});
  j["label"] = label;
  j["rule"] = rule;
  j["sequences"] = sequences;
  return j;
}

std::string label_file_name(const std::string& label) {
  std::string out;
  for (char ch : label) {
    const bool keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                      (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.';
    out += keep ? ch : '_';
  }
  if (out.empty() || out == "." || out == "..") out = "_" + out;
  return out;
}

}  // namespace lol
