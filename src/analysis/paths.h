#pragma once
// Mode paths (SPEC 3.6): for each label, the router probabilities averaged per (depth, window
// ordinal) over the sequences that reach it; the path takes the argmax expert there and fixes
// the gate to that mean probability. Written in the forced-path format `--force` reads, with
// the number of observations behind each entry.
#include <map>
#include <string>
#include <vector>

#include "analysis/routes.h"
#include "util/enums.h"

namespace lol {

enum class ModeRule;

struct ModePath {
  std::string label;
  std::string rule;       // how the experts were chosen (ModeRule's name)
  int64_t sequences = 0;  // sequences of this label that were averaged
  ForcedPath path;        // expert and gate per (depth, ordinal) observed
  std::map<std::pair<int64_t, int64_t>, int64_t> counts;  // observations per (depth, ordinal)
  // The forced-path JSON (docs/formats.md) with "label", "rule", "sequences" and a "count" per
  // entry.
  // Ordinals beyond the last observed of a depth reuse it (SPEC 1.6).
  json to_json() const;
};

// How a cell's expert is chosen. kProbabilities is SPEC 3.6: the argmax of the mean router
// probabilities before the balancing bias, its mean probability as the gate. kRouted takes the
// expert the label's windows actually ran most often there (the decision rule includes the
// bias; ties to the higher mean probability, then the lower id) and the mean gate of those
// windows: where the bias overrules the router's own preference (e.g. the prompt window), the
// SPEC rule forces an expert the model never ran in that cell.
enum class ModeRule { kProbabilities, kRouted };
template <>
const std::vector<std::pair<ModeRule, const char*>>& enum_names<ModeRule>();

class ModePathBuilder {
 public:
  explicit ModePathBuilder(ModeRule rule = ModeRule::kProbabilities) : rule_(rule) {}
  // Adds a sequence's router probabilities under its label.
  void add(const SequenceRoutes& routes);
  // One mode path per label, in label order. Ties go to the lowest expert id (as the router).
  std::vector<ModePath> paths() const;

 private:
  struct Cell {
    std::vector<double> sum;       // of p per expert
    std::vector<int64_t> routed;   // windows that ran each expert
    std::vector<double> gate_sum;  // of their gates
    int64_t count = 0;
  };
  ModeRule rule_;
  std::map<std::string, std::map<std::pair<int64_t, int64_t>, Cell>> cells_;
  std::map<std::string, int64_t> sequences_;
};

// A label as a file name: letters, digits, '-', '_' and '.' kept, anything else '_'.
std::string label_file_name(const std::string& label);

}  // namespace lol
