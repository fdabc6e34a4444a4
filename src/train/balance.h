#pragma once
// Loss-free load balancing (SPEC 1.7): the core counts its routers' loads over every
// micro-batch of a step (Core::count_loads), then one bias update follows the optimizer step.
#include <vector>

#include "model/core.h"

namespace lol {

// b += u * sign(mean(load) - load); b -= mean(b), for each of the core's balanced routers.
void apply_balance(const Core& core, const BalanceLoads& loads, double rate);
// Entropy (nats) of the normalised load; log(L) when perfectly uniform.
double load_entropy(const std::vector<double>& load);

}  // namespace lol
