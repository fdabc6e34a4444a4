#pragma once
// Training runs side by side (lol compare, docs/analysis.md): each run's size and executed cost
// from its config, its held-out loss curve against training FLOPs from metrics.jsonl, and its
// final held-out loss from `lol eval --json-out RUN/eval.json` when there is one. The library-
// size sweep of the paper (figures 5/6) is this picture for LoL at several L beside the dense,
// looped and MoE families (docs/text.md).
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/stats.h"
#include "util/json.h"

namespace lol {

struct RunSummary {
  std::string name;  // the run directory's last component
  std::string dir;
  ModelConfig config;  // of the newest checkpoint
  ModelStats stats;    // at the run's seq_len and full depth
  int64_t steps = 0;   // the newest metrics line's step
  int64_t tokens = 0;  // steps x rows x seq_len x grad_accum
  double train_flops = 0;
  struct Point {
    int64_t step;
    double flops, loss;
  };
  std::vector<Point> curve;  // eval_loss lines of metrics.jsonl
  // From RUN/eval.json (lol eval --json-out) when present, else the last eval_loss.
  double final_loss = 0;
  std::optional<double> bits_per_byte;
  std::string final_source;  // "eval.json" or "metrics"
};

// Reads a training run; throws naming the file and what is missing.
RunSummary read_run_summary(const std::string& run_dir);

// "lol L=8", "dense", "looped R=1", "moe E=8/top1", with the sliding/strided core attention.
std::string family_label(const ModelConfig& config);

json comparison_json(const std::vector<RunSummary>& runs);
std::string comparison_markdown(const std::vector<RunSummary>& runs);
// One self-contained page: the table, held-out loss against training FLOPs (curves), and the
// final held-out loss against stored parameters and against executed FLOPs per token.
std::string comparison_html(const std::vector<RunSummary>& runs, const std::string& title);

}  // namespace lol
