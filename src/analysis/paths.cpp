#include "analysis/paths.h"

#include "util/error.h"

namespace lol {

void ModePathBuilder::add(const SequenceRoutes& routes) {
  auto& cells = cells_[routes.label];
  ++sequences_[routes.label];
  for (const auto& w : routes.windows) {
    auto& cell = cells[{w.route.depth, w.route.window}];
    if (cell.sum.empty()) cell.sum.assign(w.route.probs.size(), 0.0);
    LOL_CHECK(cell.sum.size() == w.route.probs.size(), "sequence ", routes.sequence, " depth ",
              w.route.depth, ": ", w.route.probs.size(),
              " probabilities where earlier windows had ", cell.sum.size());
    for (size_t m = 0; m < cell.sum.size(); ++m) cell.sum[m] += w.route.probs[m];
    ++cell.count;
  }
}

std::vector<ModePath> ModePathBuilder::paths() const {
  std::vector<ModePath> out;
  for (const auto& [label, cells] : cells_) {
    ModePath p;
    p.label = label;
    p.sequences = sequences_.at(label);
    for (const auto& [key, cell] : cells) {
      size_t best = 0;
      for (size_t m = 1; m < cell.sum.size(); ++m)
        if (cell.sum[m] > cell.sum[best]) best = m;
      const double mean = cell.sum[best] / static_cast<double>(cell.count);
      p.path.depths[key.first][key.second] = {static_cast<int64_t>(best), mean};
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
