#pragma once
// Probes (paper 4.1.2, appendix C.2): how much of a label the router's probabilities carry.
// Ridge regression on router probabilities, at window level (one sample per window ordinal:
// the probabilities of that ordinal at every depth) and at sequence level (probabilities
// averaged over each depth's windows), scored by k-fold cross-validated AUROC (per held-out
// fold, averaged; one-vs-rest and macro-averaged for more than two labels), with a
// label-shuffling control. Folds split by sequence (never between windows of one sequence),
// stratified by label.
#include <map>
#include <random>
#include <string>
#include <vector>

#include "analysis/routes.h"

namespace lol {

// The area under the ROC curve of `scores` for the positives, by the rank statistic (ties get
// the mean rank): the probability that a random positive outscores a random negative.
double auroc(const std::vector<double>& scores, const std::vector<uint8_t>& positive);

// Ridge regression with an unpenalised intercept: minimises |y - b - X w|^2 + lambda |w|^2
// (X: rows x columns, row-major). Returns {b, w...}.
std::vector<double> ridge_fit(const std::vector<double>& x, int64_t columns,
                              const std::vector<double>& y, double lambda);
double ridge_predict(const std::vector<double>& model, const double* row, int64_t columns);

struct ProbeOptions {
  int64_t folds = 5;
  int64_t shuffles = 99;  // label permutations for the control
  double lambda = 1.0;
  uint64_t seed = 0;
};

struct ProbeResult {
  std::string level;  // "window" or "sequence"
  int64_t samples = 0, features = 0;
  double auroc = 0;                               // cross-validated, macro over labels
  std::map<std::string, double> auroc_per_label;  // one-vs-rest
  double shuffled_mean = 0, shuffled_max = 0;     // the same with labels permuted across sequences
  json to_json() const;
};

// The simpler readouts of the paper's table 2 at window level, each cross-validated on the
// probes' folds (AUROC within each held-out fold, averaged; one-vs-rest, macro over labels):
struct ReadoutResult {
  int64_t samples = 0;
  double top1_ridge = 0;      // ridge on the winning expert's probability at every depth
  double winning_expert = 0;  // that probability at one depth, ranked directly; the depth and
                              // the sign chosen by AUROC on the training folds
  double frequency_llr = 0;   // sum over depths of log P(winning expert | label) / P(... | rest),
                              // frequencies with add-one smoothing from the training folds
  json to_json() const;
};

// Collects the features of a route file's sequences, then runs both probes.
class ProbeData {
 public:
  ProbeData(int64_t core_depth, int64_t library_size);
  void add(const SequenceRoutes& routes);
  int64_t sequences() const { return static_cast<int64_t>(labels_.size()); }
  // level: "window" or "sequence". Needs at least two labels and `folds` sequences.
  ProbeResult run(const std::string& level, const ProbeOptions& options) const;
  ReadoutResult readouts(const ProbeOptions& options) const;

 private:
  // Folds by sequence, stratified by label (each label dealt round-robin over the folds in a
  // seeded order): the fold of every sequence. Checks the data holds what probes need.
  std::vector<int64_t> assign_folds(const ProbeOptions& options, std::vector<std::string>* names,
                                    std::mt19937_64& rng) const;
  int64_t depth_, library_;
  std::vector<std::string> labels_;                     // per sequence
  std::vector<std::vector<double>> sequence_features_;  // per sequence: D x L mean probabilities
  std::vector<std::vector<double>> window_features_;    // per window sample: D x L
  std::vector<int64_t> window_sequence_;                // the sequence of each window sample
};

}  // namespace lol
