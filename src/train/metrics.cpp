#include "train/metrics.h"

#include <cmath>

#include "util/error.h"

namespace lol {

json StepMetrics::to_json() const {
  json j = {{"step", step},
            {"loss", loss},
            {"lr", lr},
            {"grad_norm", grad_norm},
            {"tokens_per_s", tokens_per_s},
            {"depth", depth},
            {"total_flops", total_flops}};
  if (steps != 1) j["steps"] = steps;
  if (!load.empty()) {
    j["load"] = load;
    j["load_entropy"] = load_entropy;
    if (!load_counts_by_router.empty()) {
      j["load_counts_by_router"] = load_counts_by_router;
      j["load_entropy_min"] = load_entropy_min;
    }
    j["bias_min"] = bias_min;
    j["bias_max"] = bias_max;
    j["router_agreement"] = agreement;
    if (skip_share) j["skip_share"] = *skip_share;
    if (!skip_bias.empty()) j["skip_bias"] = skip_bias;
  }
  if (comm_bytes > 0) {
    j["comm_seconds"] = comm_seconds;
    j["comm_bytes"] = comm_bytes;
    j["comm_buckets"] = comm_buckets;
    j["comm_overlapped"] = comm_overlapped;
  }
  if (eval_loss) j["eval_loss"] = *eval_loss;
  if (eval_accuracy) j["eval_accuracy"] = *eval_accuracy;
  if (eval_skip_share) j["eval_skip_share"] = *eval_skip_share;
  return j;
}

namespace {
void add_into(std::vector<double>& sum, const std::vector<double>& x) {
  for (size_t i = 0; i < x.size(); ++i) sum[i] += x[i];
}
}  // namespace

void MetricsWindow::add(const StepMetrics& m) {
  if (count_ == 0) {
    sum_ = m;
    count_ = 1;
    return;
  }
  LOL_CHECK(m.load.size() == sum_.load.size() &&
                m.load_counts_by_router.size() == sum_.load_counts_by_router.size(),
            "metrics window: step ", m.step, " routes over ", m.load.size(), " experts and ",
            m.load_counts_by_router.size(), " balanced routers, the steps before over ",
            sum_.load.size(), " and ", sum_.load_counts_by_router.size());
  for (size_t r = 0; r < m.load_counts_by_router.size(); ++r)
    LOL_CHECK(m.load_counts_by_router[r].size() == sum_.load_counts_by_router[r].size(),
              "metrics window: step ", m.step, "'s router ", r, " counts ",
              m.load_counts_by_router[r].size(), " experts, the steps before ",
              sum_.load_counts_by_router[r].size());
  StepMetrics s = std::move(sum_);
  sum_ = m;  // the state of the window's last step, then the running sums on top
  sum_.loss += s.loss;
  sum_.grad_norm += s.grad_norm;
  sum_.tokens += s.tokens;
  sum_.seconds += s.seconds;
  sum_.load_entropy += s.load_entropy;
  sum_.load_entropy_min += s.load_entropy_min;
  sum_.agreement += s.agreement;
  if (sum_.skip_share && s.skip_share) *sum_.skip_share += *s.skip_share;
  sum_.comm_seconds += s.comm_seconds;
  sum_.comm_bytes += s.comm_bytes;
  sum_.comm_buckets += s.comm_buckets;
  sum_.comm_overlapped += s.comm_overlapped;
  add_into(sum_.load, s.load);
  for (size_t r = 0; r < s.load_counts_by_router.size(); ++r)
    add_into(sum_.load_counts_by_router[r], s.load_counts_by_router[r]);
  ++count_;
}

StepMetrics MetricsWindow::take() {
  LOL_CHECK(count_ > 0, "metrics window: no step to summarise");
  StepMetrics m = std::move(sum_);
  const double n = static_cast<double>(count_);
  const auto mean = [&](int64_t x) { return static_cast<int64_t>(std::llround(x / n)); };
  m.steps = count_;
  m.loss /= n;
  m.grad_norm /= n;
  m.tokens_per_s = m.seconds > 0 ? static_cast<double>(m.tokens) / m.seconds : 0.0;
  m.load_entropy /= n;
  m.load_entropy_min /= n;
  m.agreement /= n;
  if (m.skip_share) *m.skip_share /= n;
  for (auto& x : m.load) x /= n;
  m.comm_seconds /= n;
  m.comm_bytes = mean(m.comm_bytes);
  m.comm_buckets = mean(m.comm_buckets);
  m.comm_overlapped = mean(m.comm_overlapped);
  sum_ = StepMetrics{};
  count_ = 0;
  return m;
}

}  // namespace lol
