#pragma once
// Forced-path evaluation (SPEC 3.6, paper 4.1.3): generate on held-out task problems with the
// neutral filler in place of the strategy descriptor and each label's mode path forced (or one
// of its interventions), score every trace with the task scorers, and count which strategy it
// followed against the one requested.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "analysis/interventions.h"
#include "infer/decoder.h"
#include "model/model.h"
#include "tasks/score.h"

namespace lol {

// A label's forced path with the task strategy the label names.
struct LabelledPath {
  std::string label;
  int strategy = 0;  // 1..5
  ForcedPath path;
};

// Every DIR/*.json written by `lol path extract`, in label order. Throws naming the file for
// a label that names no strategy of the task or a path outside the model (`skip`: the model's
// router may skip, ModelConfig::router_skip).
std::vector<LabelledPath> load_task_paths(const std::string& dir, tasks::Kind kind,
                                          int64_t core_depth, int64_t library_size, bool skip);

// One evaluated condition: an intervention (with its depth range for kDepths).
struct EvalCondition {
  Intervention intervention = Intervention::kFull;
  int64_t first_depth = 0, last_depth = 0;
  std::string name() const;  // "full", "depths 3-4"
};

struct PathEvalOptions {
  tasks::Kind kind = tasks::Kind::kMaze;
  int maze_size = 8;
  int64_t count = 20;               // held-out problems
  uint64_t seed = 1;                // problems (task split 1) and interventions
  bool length_matched = true;       // filler with as many "..." as the descriptor has cells
  int64_t max_batch = 16;           // sequences decoded at once
  int64_t extra_tokens = 16;        // budget beyond the longest reference continuation
  std::function<void()> on_sample;  // after each generation (progress)
};

// One generation: the prompt and what the model wrote, scored against the requested strategy.
struct EvalSample {
  std::string condition, label;
  int64_t problem = 0;
  std::vector<int64_t> prompt, generated;
  tasks::Score score;
  json to_json(tasks::Kind kind) const;
};

struct ConditionResult {
  EvalCondition condition;
  tasks::ScoreSummary summary;
  int64_t donor_followed = 0;  // kDepths: traces that followed the donor label's strategy
  json to_json(tasks::Kind kind) const;
};

// One line per condition: count, strategy as requested, legal trace, rule-faithful trace,
// correct answer (and for a depth range, the share that followed the donor's strategy).
std::string path_eval_table(const std::vector<ConditionResult>& results);

// The prompt of held-out problem `problem` (its question) with `descriptor`: filler or a
// strategy's descriptor; P through "]", the bracket part router-only.
Prompt task_eval_prompt(tasks::Kind kind, const tasks::Tokens& question,
                        const tasks::Tokens& descriptor);

// Runs every condition for every label on `count` held-out problems, greedy, stopping at
// <eos>. The path forced for a condition is exactly what `lol generate --force` would read
// from the transformed path, so a generation here equals that command's output.
std::vector<ConditionResult> evaluate_paths(
    LanguageModel& model, torch::Device device, const std::vector<LabelledPath>& paths,
    const std::vector<EvalCondition>& conditions, const PathEvalOptions& options,
    const std::function<void(const EvalSample&)>& sink = {});

// The path a condition forces for label `index` (null for descriptor and filler).
std::optional<ForcedPath> condition_path(const EvalCondition& condition,
                                         const std::vector<LabelledPath>& paths, size_t index,
                                         int64_t library_size, uint64_t seed);

}  // namespace lol
