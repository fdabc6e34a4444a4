#pragma once
// Interventions on a mode path (docs/analysis.md): transforms that ask which part of a label's
// forced path carries the label. Each is a pure function of the path (and a seed), so the
// conditions `lol path eval` compares are reproducible and testable on their own.
#include <cstdint>
#include <string>
#include <vector>

#include "model/router.h"
#include "util/enums.h"

namespace lol {

// What is forced (or given) when a label is evaluated.
enum class Intervention {
  kDescriptor,  // the true descriptor in the prompt, nothing forced: the trained behaviour
  kFiller,      // the neutral filler, nothing forced: what the router does unprompted
  kFull,        // filler + the mode path, expert and gate forced (SPEC 3.6)
  kExpertOnly,  // filler + the path's experts, gates from the router
  kGateOnly,    // filler + the path's gates, experts from the router
  kPermute,     // filler + the path with its depths permuted: same experts, same counts,
                // other order
  kRandom,      // filler + uniformly random experts with the path's gates: the control
  kDepths,      // filler + the path with one depth range taken from another label's path
  kUnbiased,    // the true descriptor, nothing forced, the balancing bias set to zero: the
                // router's own preferences (argmax of p) decide every window
};
template <>
const std::vector<std::pair<Intervention, const char*>>& enum_names<Intervention>();

// The path with only experts (gates left to the router) or only gates forced.
ForcedPath experts_only(const ForcedPath& path);
ForcedPath gates_only(const ForcedPath& path);

// The path's entries moved between depths by one permutation of the forced depths: depth l
// takes the entries (expert and gate, every ordinal) of depth pi(l). Every ordinal keeps its
// multiset of experts; the order along depth changes. Among up to 100 seeded draws the first
// that changes some expert is taken (a path whose depths all agree cannot change: returned
// as is).
ForcedPath permute_depths(const ForcedPath& path, uint64_t seed);

// Every entry's expert replaced by a uniform draw from the library (seeded), its gate kept.
ForcedPath random_experts(const ForcedPath& path, int64_t library_size, uint64_t seed);

// The path with depths first..last (1-based, inclusive) replaced by the donor's entries there
// (removed where the donor has none).
ForcedPath replace_depths(const ForcedPath& path, const ForcedPath& donor, int64_t first,
                          int64_t last);

}  // namespace lol
