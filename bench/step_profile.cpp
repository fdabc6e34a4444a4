#include "step_profile.h"

#include <algorithm>
#include <iostream>

#include "bench_util.h"

namespace lol::bench {

StepProfile per_step(const OpProfiler& profiler, int steps, double wall_ms, size_t top_operators) {
  auto scale = [&](std::vector<ProfileRow> rs, size_t keep) {
    if (rs.size() > keep) rs.resize(keep);
    for (auto& r : rs)
      for (double* v : {&r.forward_ms, &r.backward_ms, &r.gemm_ms, &r.host_ms}) *v /= steps;
    return rs;
  };
  StepProfile p;
  p.rows = scale(profiler.rows(), SIZE_MAX);
  // Phases in the order they first ran, each phase's parts together.
  std::vector<std::string> order;
  for (const auto& r : p.rows)
    if (std::find(order.begin(), order.end(), r.phase) == order.end()) order.push_back(r.phase);
  auto rank = [&](const ProfileRow& r) {
    return std::find(order.begin(), order.end(), r.phase) - order.begin();
  };
  std::stable_sort(p.rows.begin(), p.rows.end(),
                   [&](const ProfileRow& a, const ProfileRow& b) { return rank(a) < rank(b); });
  p.operators = scale(profiler.operators(), top_operators);
  p.profiled_ms = wall_ms / steps;
  return p;
}

void print_profile(const std::string& what, double unprofiled_ms, const StepProfile& profile,
                   bool md) {
  const double step_ms = profile.profiled_ms;
  std::cout << "\nprofile of " << what << ": ms per step (" << fixed(step_ms, 2) << " profiled, "
            << fixed(unprofiled_ms, 2)
            << " without); self time of operators by the region they ran in, backward "
               "operators by their forward's\n\n";
  Table table(md);
  table.header({"phase", "part", "forward", "backward", "host", "total", "% step", "GEMM", "calls"},
               2);
  ProfileRow sum;
  auto line = [&](const ProfileRow& r) {
    table.row({r.phase, r.part.empty() ? "-" : r.part, fixed(r.forward_ms, 2),
               fixed(r.backward_ms, 2), fixed(r.host_ms, 2), fixed(r.total_ms(), 2),
               fixed(100 * r.total_ms() / step_ms, 1), fixed(r.gemm_ms, 2),
               std::to_string(r.calls)});
  };
  for (const auto& r : profile.rows) {
    line(r);
    sum.forward_ms += r.forward_ms;
    sum.backward_ms += r.backward_ms;
    sum.host_ms += r.host_ms;
    sum.gemm_ms += r.gemm_ms;
    sum.calls += r.calls;
  }
  sum.phase = "all";
  line(sum);
  ProfileRow rest;
  rest.phase = "outside";
  rest.part = "no region or operator";
  rest.host_ms = step_ms - sum.total_ms();
  line(rest);
  std::cout << "\nits " << profile.operators.size()
            << " largest operators by self time (ms per step; calls over the profiled steps)\n\n";
  Table ops(md);
  ops.header({"operator", "forward", "backward", "total", "% step", "calls"}, 1);
  for (const auto& r : profile.operators)
    ops.row({r.phase, fixed(r.forward_ms, 2), fixed(r.backward_ms, 2), fixed(r.total_ms(), 2),
             fixed(100 * r.total_ms() / step_ms, 1), std::to_string(r.calls)});
}

json profile_json(const StepProfile& profile) {
  json rows = json::array(), operators = json::array();
  for (const auto& p : profile.rows)
    rows.push_back({{"phase", p.phase},
                    {"part", p.part},
                    {"forward_ms", p.forward_ms},
                    {"backward_ms", p.backward_ms},
                    {"host_ms", p.host_ms},
                    {"gemm_ms", p.gemm_ms},
                    {"calls", p.calls}});
  for (const auto& p : profile.operators)
    operators.push_back({{"operator", p.phase},
                         {"forward_ms", p.forward_ms},
                         {"backward_ms", p.backward_ms},
                         {"calls", p.calls}});
  return {
      {"profiled_ms_per_step", profile.profiled_ms}, {"profile", rows}, {"operators", operators}};
}

}  // namespace lol::bench
