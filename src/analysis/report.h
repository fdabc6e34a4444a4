#pragma once
// The analysis report (docs/analysis.md): one self-contained HTML file with the pictures of a
// route file's statistics, its probes and, when given, a forced-path evaluation, each beside
// its numbers. Inline SVG only (no scripts, no fonts, no network), deterministic bytes.
#include <optional>
#include <string>
#include <vector>

#include "analysis/pca.h"
#include "analysis/probes.h"
#include "analysis/routes.h"
#include "analysis/stats.h"

namespace lol {

struct ReportInputs {
  std::string title;
  RouteFileHeader header;
  RouteStats stats;
  std::vector<ProbeResult> probes;  // none when the set has one label
  std::optional<ReadoutResult> readouts;
  std::optional<PathPca> pca;  // of the sequences' one-hot paths
  json path_eval;              // `lol path eval --json` output, or null
};

std::string html_report(const ReportInputs& inputs);

// Checks that `results` is what `lol path eval --json` writes (an array of conditions, each
// with its count, strategies and 5 x 6 confusion matrix); throws naming what is missing.
json check_path_eval_results(const json& results);

}  // namespace lol
