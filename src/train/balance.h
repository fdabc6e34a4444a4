#pragma once
// Loss-free load balancing (SPEC 1.7): loads counted over every micro-batch of a step, then
// one bias update after the optimizer step.
#include <vector>

#include "model/model.h"

namespace lol {

struct LoadCounter {
  std::vector<double> lol;                // per library expert
  std::vector<std::vector<double>> moe;   // per MoE layer, per FFN expert
  int64_t decisions = 0, agreements = 0;  // router top choice (no bias) == expert used

  // Adds one forward pass: routed windows (lol) or the MoE layers' last token loads.
  void add(const LanguageModel& model, const ForwardResult& result, const Layout& layout);
};

// b += u * sign(mean(load) - load); b -= mean(b), for the lol router and each MoE layer.
void apply_balance(LanguageModel& model, const LoadCounter& loads);
// Entropy (nats) of the normalised load; log(L) when perfectly uniform.
double load_entropy(const std::vector<double>& load);

}  // namespace lol
