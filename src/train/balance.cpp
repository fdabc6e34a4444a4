#include "train/balance.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace lol {

namespace {
void update_bias(torch::Tensor bias, const std::vector<double>& load, double rate) {
  if (load.empty()) return;
  const double mean =
      std::accumulate(load.begin(), load.end(), 0.0) / static_cast<double>(load.size());
  std::vector<float> step(load.size());
  for (size_t m = 0; m < load.size(); ++m)
    step[m] = static_cast<float>(rate * ((mean > load[m]) - (mean < load[m])));
  torch::NoGradGuard no_grad;
  bias.add_(torch::tensor(step).to(bias.device()));
  bias.sub_(bias.mean());
}
}  // namespace

void apply_balance(const Core& core, const BalanceLoads& loads, double rate, double target) {
  const auto biases = core.balance_biases();
  LOL_CHECK(loads.loads.empty() || loads.loads.size() == biases.size(),
            "balancing: ", loads.loads.size(), " loads for ", biases.size(), " biases");
  for (size_t i = 0; i < loads.loads.size(); ++i) update_bias(biases[i], loads.loads[i], rate);
  const auto skips = core.skip_biases();
  if (skips.empty() || loads.counted.empty()) return;
  LOL_CHECK(loads.counted.size() == skips.size() && loads.skipped.size() == skips.size(),
            "balancing: ", loads.counted.size(), " skip counts for ", skips.size(), " skip biases");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < skips.size(); ++i) {
    if (loads.counted[i] <= 0) continue;  // a depth past the executed one decided nothing
    const double share = loads.skipped[i] / loads.counted[i];
    skips[i].add_(rate * ((share < target) - (share > target)));
  }
}

double skip_share(const BalanceLoads& loads) {
  double counted = 0, skipped = 0;
  for (size_t i = 0; i < loads.counted.size(); ++i) {
    counted += loads.counted[i];
    skipped += loads.skipped[i];
  }
  return counted > 0 ? skipped / counted : 0.0;
}

double load_entropy(const std::vector<double>& load) {
  const double total = std::accumulate(load.begin(), load.end(), 0.0);
  if (total <= 0) return 0.0;
  double h = 0;
  for (double x : load)
    if (x > 0) h -= (x / total) * std::log(x / total);
  return h;
}

LoadSummary summarize_loads(const BalanceLoads& loads) {
  LoadSummary s;
  if (loads.loads.empty()) return s;
  std::vector<double> sum(loads.loads.front().size(), 0.0);
  for (const auto& l : loads.loads) {
    LOL_CHECK(l.size() == sum.size(), "balancing: routers with ", sum.size(), " and ", l.size(),
              " experts");
    for (size_t e = 0; e < l.size(); ++e) sum[e] += l[e];
  }
  const double total = std::accumulate(sum.begin(), sum.end(), 0.0);
  for (double x : sum) s.shares.push_back(total > 0 ? x / total : 0.0);
  s.entropy = load_entropy(sum);
  s.entropy_min = s.entropy;
  if (loads.loads.size() > 1) {
    s.by_router = loads.loads;
    bool counted = false;
    for (const auto& l : loads.loads) {
      if (std::accumulate(l.begin(), l.end(), 0.0) <= 0) continue;
      const double h = load_entropy(l);
      s.entropy_min = counted ? std::min(s.entropy_min, h) : h;
      counted = true;
    }
  }
  return s;
}

}  // namespace lol
