// Interventions on a mode path (docs/analysis.md).
#include "analysis/interventions.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace lol {

template <>
const std::vector<std::pair<Intervention, const char*>>& enum_names<Intervention>() {
  static const std::vector<std::pair<Intervention, const char*>> names = {
      {Intervention::kDescriptor, "descriptor"},
      {Intervention::kFiller, "filler"},
      {Intervention::kFull, "full"},
      {Intervention::kExpertOnly, "id"},
      {Intervention::kGateOnly, "gate"},
      {Intervention::kPermute, "permute"},
      {Intervention::kRandom, "random"},
      {Intervention::kDepths, "depths"},
      {Intervention::kUnbiased, "unbiased"}};
  return names;
}

namespace {

ForcedPath keep_only(const ForcedPath& path, bool experts, bool gates) {
  ForcedPath out;
  for (const auto& [depth, entries] : path.depths)
    for (const auto& [ordinal, entry] : entries) {
      ForcedPath::Entry e;
      if (experts) e.expert = entry.expert;
      if (gates) e.gate = entry.gate;
      if (e.expert || e.gate) out.depths[depth][ordinal] = e;
    }
  return out;
}

}  // namespace

ForcedPath experts_only(const ForcedPath& path) {
  return keep_only(path, true, false);
}
ForcedPath gates_only(const ForcedPath& path) {
  return keep_only(path, false, true);
}

ForcedPath permute_depths(const ForcedPath& path, uint64_t seed) {
  std::vector<int64_t> depths;
  for (const auto& [depth, entries] : path.depths) depths.push_back(depth);
  std::mt19937_64 rng(seed);
  ForcedPath out = path;
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::vector<int64_t> order = depths;
    std::shuffle(order.begin(), order.end(), rng);
    ForcedPath candidate;
    for (size_t i = 0; i < depths.size(); ++i)
      candidate.depths[depths[i]] = path.depths.at(order[i]);
    bool changed = false;
    for (const auto& [depth, entries] : candidate.depths)
      for (const auto& [ordinal, entry] : entries) {
        const auto* before = path.find(depth, ordinal);
        changed |= !before || before->expert != entry.expert;
      }
    if (changed) return candidate;
  }
  return out;
}

ForcedPath random_experts(const ForcedPath& path, int64_t library_size, uint64_t seed) {
  LOL_CHECK(library_size >= 1, "random path: library size must be >= 1");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> expert(0, library_size - 1);
  ForcedPath out = path;
  for (auto& [depth, entries] : out.depths)
    for (auto& [ordinal, entry] : entries) entry.expert = expert(rng);
  return out;
}

ForcedPath replace_depths(const ForcedPath& path, const ForcedPath& donor, int64_t first,
                          int64_t last) {
  LOL_CHECK(first >= 1 && first <= last, "depth range ", first, "-", last, " is empty");
  ForcedPath out = path;
  for (int64_t l = first; l <= last; ++l) {
    out.depths.erase(l);
    auto it = donor.depths.find(l);
    if (it != donor.depths.end()) out.depths[l] = it->second;
  }
  return out;
}

}  // namespace lol
