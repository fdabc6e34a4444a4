#pragma once
// A profiled step's breakdown as the bench suites print it: the profiler's totals divided over
// the steps it watched, by phase and part and by operator, as a table or JSON.
#include <string>
#include <vector>

#include "util/fields.h"
#include "util/op_profile.h"

namespace lol::bench {

struct StepProfile {
  std::vector<ProfileRow> rows;       // by region, phases in the order they first ran
  std::vector<ProfileRow> operators;  // by operator, the largest self time first
  double profiled_ms = 0;             // a profiled step's wall time
};

// The profiler's totals per step over `steps` steps that took `wall_ms` in all; the
// `top_operators` largest operators kept.
StepProfile per_step(const OpProfiler& profiler, int steps, double wall_ms,
                     size_t top_operators = 15);

// "profile of <what>: ms per step (P profiled, U without); ..." and the two tables.
void print_profile(const std::string& what, double unprofiled_ms, const StepProfile& profile,
                   bool md);
// {"profiled_ms_per_step", "profile": [...], "operators": [...]}
json profile_json(const StepProfile& profile);

}  // namespace lol::bench
