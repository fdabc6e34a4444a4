#pragma once
// What a training step measured, and the window of steps that one line of metrics.jsonl covers.
#include <cstdint>
#include <optional>
#include <vector>

#include "util/json.h"

namespace lol {

struct StepMetrics {
  int64_t step = 0;  // 1-based count of optimizer steps done
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0;
  int64_t tokens = 0;        // tokens the step trained on (all ranks)
  double seconds = 0;        // wall time of the step
  int64_t depth = 0;         // executed core depth
  std::vector<double> load;  // per-expert share of routed windows (lol)
  double load_entropy = 0, bias_min = 0, bias_max = 0, agreement = 1;
  // With several balanced routers (balance_per_depth, moe): each one's counts per expert over
  // the step (all ranks), and the least balanced one's entropy (train/balance.h).
  std::vector<std::vector<double>> load_counts_by_router;
  double load_entropy_min = 0;
  // With router_skip: the share of counted windows that took the skip; with router_skip_share,
  // the skip's bias of each balanced router.
  std::optional<double> skip_share;
  std::vector<double> skip_bias;
  double total_flops = 0;  // training FLOPs so far, counted with the grown depth
  // Data parallel: seconds this rank spent in collectives this step, and bytes it reduced.
  double comm_seconds = 0;
  int64_t comm_bytes = 0;
  int64_t comm_buckets = 0, comm_overlapped = 0;  // buckets, and those started during backward
  std::optional<double> eval_loss, eval_accuracy;
  std::optional<double> eval_skip_share;  // router_skip: EvalResult::skip_share
  int64_t steps = 1;  // the steps these metrics cover (MetricsWindow), ending at `step`
  json to_json() const;
};

// The steps since the last line of metrics.jsonl, summarised into the next line
// (docs/training.md): the loss, gradient norm, loads, entropies, router agreement and
// skip share and communication figures are means per step; tokens_per_s is the window's tokens over
// its wall time; the loads counted per router are summed; the learning rate, depth, FLOPs, bias
// range and evaluation (and skip bias) are those of the window's last step. A window of one step is
// that step's metrics.
class MetricsWindow {
 public:
  void add(const StepMetrics& m);
  bool empty() const { return count_ == 0; }
  StepMetrics take();  // the summary of the steps added since the last take(); must not be empty

 private:
  int64_t count_ = 0;
  StepMetrics sum_;  // sums of the averaged and summed fields, the last step's state
};

}  // namespace lol
