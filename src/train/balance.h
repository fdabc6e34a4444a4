#pragma once
// Loss-free load balancing (SPEC 1.7): the core counts its routers' loads over every
// micro-batch of a step (Core::count_loads), then one bias update follows the optimizer step.
#include <vector>

#include "model/core.h"

namespace lol {

// b += u * sign(mean(load) - load); b -= mean(b), for each of the core's balanced routers. Where
// the core steers its skip (router_skip_share = target), each router's skip bias moves by
// u * sign(target - skipped / counted): toward the target share of skipped windows, not
// centred (it is one number, compared with the experts' scores).
void apply_balance(const Core& core, const BalanceLoads& loads, double rate, double target);
// The share of counted windows that took the skip, all routers together (0 when none counted).
double skip_share(const BalanceLoads& loads);
// Entropy (nats) of the normalised load; log(L) when perfectly uniform.
double load_entropy(const std::vector<double>& load);

// What a step's metrics say about its loads: each expert's share of the windows (tokens for
// moe) of all balanced routers together, and, where there are several (lol with
// balance_per_depth: one per depth; moe: one per layer), each router's own counts, since an
// aggregate that looks balanced can hide a depth that runs one expert.
struct LoadSummary {
  std::vector<double> shares;                  // per expert, all routers together
  double entropy = 0;                          // of `shares`
  std::vector<std::vector<double>> by_router;  // counts per router, per expert; empty with one
  // The least balanced router's entropy, over the routers that counted anything (depths past
  // the executed one count nothing); `entropy` with one router.
  double entropy_min = 0;
};
LoadSummary summarize_loads(const BalanceLoads& loads);

}  // namespace lol
