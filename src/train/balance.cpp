#include "train/balance.h"

#include <cmath>
#include <numeric>

namespace lol {

void LoadCounter::add(const LanguageModel& model, const ForwardResult& result,
                      const Layout& /*layout*/) {
  const auto& c = model->config();
  if (c.is_lol()) {
    lol.resize(c.library_size, 0.0);
    for (const auto& r : result.routes) {
      auto top = std::get<1>(r.probs.detach().max(1)).to(torch::kCPU);
      auto top_a = top.accessor<int64_t, 1>();
      for (size_t w = 0; w < r.experts.size(); ++w) {
        const auto& win = r.partition->windows[w];
        ++decisions;
        agreements += top_a[static_cast<int64_t>(w)] == r.experts[w];
        if (win.ordinal == 0 && !c.balance_window0) continue;
        lol[r.experts[w]] += c.balance_count == "tokens" ? static_cast<double>(win.length) : 1.0;
      }
    }
  }
  if (c.family == "moe") {
    auto blocks = model->core().blocks();
    moe.resize(blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i) {
      const auto& last = blocks[i]->moe->last_load;
      moe[i].resize(last.size(), 0.0);
      for (size_t e = 0; e < last.size(); ++e) moe[i][e] += static_cast<double>(last[e]);
    }
  }
}

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

void apply_balance(LanguageModel& model, const LoadCounter& loads) {
  const auto& c = model->config();
  if (c.is_lol()) {
    auto& lol_core = dynamic_cast<LolCore&>(model->core());
    update_bias(lol_core.router->balance_bias, loads.lol, c.balance_rate);
  }
  if (c.family == "moe") {
    auto blocks = model->core().blocks();
    for (size_t i = 0; i < blocks.size() && i < loads.moe.size(); ++i)
      update_bias(blocks[i]->moe->balance_bias, loads.moe[i], c.balance_rate);
  }
}

double load_entropy(const std::vector<double>& load) {
  const double total = std::accumulate(load.begin(), load.end(), 0.0);
  if (total <= 0) return 0.0;
  double h = 0;
  for (double x : load)
    if (x > 0) h -= (x / total) * std::log(x / total);
  return h;
}

}  // namespace lol
