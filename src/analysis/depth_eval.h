#pragma once
// Test-time depth (docs/analysis.md): teacher-forced loss and next-token accuracy of labelled
// sequences when the core executes D' depths, fewer than trained or more (extrapolated: depth
// l > D re-uses the router and FiLM of depth ((l - 1) mod D) + 1, ForwardOptions).
#include <functional>
#include <vector>

#include "analysis/routes.h"

namespace lol {

struct DepthResult {
  int64_t depth = 0;  // D'
  double loss = 0, accuracy = 0;
  int64_t targets = 0;  // tokens scored: every target after a sequence's prompt window
  json to_json() const;
};

// Every sequence of `source` (held in memory) at each depth of `depths`, batched. Loss and
// accuracy are over the targets after the prompt window (SPEC 3.1), all sequences together.
std::vector<DepthResult> evaluate_depths(LanguageModel& model, LabelledSource& source,
                                         const std::vector<int64_t>& depths, int64_t batch_size,
                                         const std::function<void()>& on_batch = {});

}  // namespace lol
