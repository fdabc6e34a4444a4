#pragma once
// Scoring generated task sequences (SPEC 3.5, paper appendix C.3): per sequence the five
// metrics and the strategy the trace actually follows; over a set, the means and the
// requested-vs-followed confusion matrix. docs/tasks.md defines each metric precisely.
#include <array>
#include <string>

#include "tasks/task.h"

namespace lol::tasks {

struct Score {
  int requested = 0;  // 1..5 (from the descriptor, or given when the prompt holds a filler)
  int followed = 0;   // 1..5, 0 = no strategy
  bool strategy_as_requested = false, trace_legal = false, trace_rule_faithful = false,
       answer_correct = false;
  double padding_fraction = 0;
};

// `requested` <= 0: read the strategy from the sequence's descriptor. Throws (naming `where`)
// for a malformed prompt: unknown token, bad grid or maze, missing descriptor.
Score score_sequence(Kind kind, const Tokens& sequence, int requested, const std::string& where);

struct ScoreSummary {
  int64_t count = 0;
  double strategy_as_requested = 0, trace_legal = 0, trace_rule_faithful = 0, answer_correct = 0,
         padding_fraction = 0;                        // means over the set
  std::array<std::array<int64_t, 6>, 6> confusion{};  // [requested][followed], index 0 = none
  void add(const Score& s);
  json to_json(Kind kind) const;
  std::string to_text(Kind kind) const;
};

}  // namespace lol::tasks
