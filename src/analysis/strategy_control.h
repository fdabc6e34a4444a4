#pragma once
// Strategy control of one model in one call (paper 4.1.3, SPEC 3.6): mode paths extracted from
// teacher-forced held-out sequences that carry the descriptor, then greedy generation on other
// held-out problems (a) with the true descriptor and (b) with the filler and each strategy's
// mode path forced, scored per strategy. Measured at every checkpoint of a run it gives the
// learning curves of (a) and (b) against training tokens (lol path curve,
// scripts/strategy_control.sh).
#include <functional>
#include <string>
#include <vector>

#include "analysis/path_eval.h"
#include "analysis/paths.h"

namespace lol {

struct StrategyControlOptions {
  tasks::Kind kind = tasks::Kind::kMaze;
  int maze_size = 8;
  int64_t count = 20;       // held-out problems for the paths, and again for each condition
  uint64_t route_seed = 0;  // problems the mode paths are extracted from
  uint64_t eval_seed = 1;   // other problems, generated on
  int64_t max_batch = 16;   // sequences per forward pass and per decoding batch
  ModeRule rule = ModeRule::kProbabilities;  // how the mode paths choose their experts
  std::function<void()> on_sample;           // after each generation (progress)
};

// The mode paths of the strategies, and what the routes they came from say beside them.
struct TaskModePaths {
  std::vector<LabelledPath> paths;  // by the options' rule, in label order
  // How many of the strategies' paths differ (distinct_paths) by each rule, on the same routes:
  // fewer by SPEC 3.6's rule than by the routed one means the balancing bias, not the router,
  // tells some strategies apart.
  int64_t distinct_by_probabilities = 0, distinct_by_routes = 0;
  // Share of the routes' windows whose expert is not the argmax of p, so the bias decided them
  // (as `lol path stats` counts), overall and per depth 1..D.
  double bias_decided = 0;
  std::vector<double> bias_decided_by_depth;
  // Share of the routes' windows run with a gate below kSkipGate (skips), and of the windows
  // the bias decided (RouteStats).
  double skipped = 0, skipped_of_bias_decided = 0;
};

struct StrategyControl {
  int64_t step = 0, tokens = 0;  // where the checkpoint stood (0 for a bare model)
  bool router_skip = false;      // the model may route to the skip (counted among the skipped)
  int64_t labels = 0;            // strategies with a mode path
  int64_t distinct_paths = 0;    // of those, how many force different experts somewhere
  // The same count by each rule, the bias's share of the windows and the skips (TaskModePaths).
  int64_t distinct_by_probabilities = 0, distinct_by_routes = 0;
  double bias_decided = 0;
  std::vector<double> bias_decided_by_depth;
  double skipped = 0, skipped_of_bias_decided = 0;
  ConditionResult descriptor, full;
  std::vector<LabelledPath> paths;  // the mode paths, in label order
  json to_json(tasks::Kind kind) const;
};

// The mode path of every strategy (SPEC 3.6 by default; `rule`) from `count` held-out
// problems of `route_seed`, labelled by strategy.
TaskModePaths task_mode_paths(LanguageModel& model, const StrategyControlOptions& o);

// How many of `paths` differ from each other: two paths are the same when they force the same
// expert at every (depth, window ordinal) either covers (a path reuses its last ordinal beyond
// its end, SPEC 1.6).
int64_t distinct_paths(const std::vector<ForcedPath>& paths, int64_t core_depth);

// Which checkpoints of a run a curve evaluates, given their steps in ascending order: those
// at multiples of `every` checkpoint intervals (the run's checkpoint_every), and the last, so
// a run that was interrupted (a checkpoint at the step it stopped) and resumed curves at the
// same steps as one that was not. Without an interval (0: checkpoints only at the end) every
// `every`-th counting back from the last. Indices into `steps`, ascending.
std::vector<size_t> curve_checkpoints(const std::vector<int64_t>& steps, int64_t interval,
                                      int64_t every);

// `sink` sees every generation (descriptor condition first), as evaluate_paths gives them.
StrategyControl measure_strategy_control(LanguageModel& model, torch::Device device,
                                         const StrategyControlOptions& options,
                                         const std::function<void(const EvalSample&)>& sink = {});

// A mode path in one line: per depth, the expert forced at window ordinals 0, 1, ...
// ("1: 2 0 3 | 2: 1 1 1"; "-" where the path leaves the router free).
std::string path_line(const ForcedPath& path);

// Generations shown as a person reads them: per sample, the requested strategy, the condition
// (with the mode path for a forced one), what the trace followed, whether the answer is right,
// the model's continuation and the requested strategy's reference.
std::string strategy_examples(const std::vector<EvalSample>& samples,
                              const std::vector<LabelledPath>& paths, tasks::Kind kind);

// The curve as a markdown table: step, tokens, distinct paths by each rule, the bias's share of
// the windows, and per condition the share of traces that followed the requested strategy, were
// legal, and gave the right answer.
std::string strategy_curve_table(const std::vector<StrategyControl>& curve);
// One self-contained HTML page: the strategy-control curves against tokens, the routes along
// training (the bias's share of the windows, overall and per depth; distinct mode paths by each
// rule), the table and the confusion matrices of the last point.
std::string strategy_curve_html(const std::vector<StrategyControl>& curve, tasks::Kind kind,
                                const std::string& title);

}  // namespace lol
