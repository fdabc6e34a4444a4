#pragma once
// Mode paths (SPEC 3.6): for each label, the router probabilities averaged per (depth, window
// ordinal) over the sequences that reach it; the path takes the argmax expert there and fixes
// the gate to that mean probability. Written in the forced-path format `--force` reads, with
// the number of observations behind each entry.
#include <map>
#include <string>
#include <vector>

#include "analysis/routes.h"

namespace lol {

struct ModePath {
  std::string label;
  int64_t sequences = 0;  // sequences of this label that were averaged
  ForcedPath path;        // expert and gate per (depth, ordinal) observed
  std::map<std::pair<int64_t, int64_t>, int64_t> counts;  // observations per (depth, ordinal)
  // The forced-path JSON (docs/formats.md) with "label", "sequences" and a "count" per entry.
  // Ordinals beyond the last observed of a depth reuse it (SPEC 1.6).
  json to_json() const;
};

class ModePathBuilder {
 public:
  // Adds a sequence's router probabilities under its label.
  void add(const SequenceRoutes& routes);
  // One mode path per label, in label order. Ties go to the lowest expert id (as the router).
  std::vector<ModePath> paths() const;

 private:
  struct Cell {
    std::vector<double> sum;  // of p per expert
    int64_t count = 0;
  };
  std::map<std::string, std::map<std::pair<int64_t, int64_t>, Cell>> cells_;
  std::map<std::string, int64_t> sequences_;
};

// A label as a file name: letters, digits, '-', '_' and '.' kept, anything else '_'.
std::string label_file_name(const std::string& label);

}  // namespace lol
