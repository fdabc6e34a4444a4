#pragma once
// Statistics of the routes of a labelled set (docs/analysis.md): expert utilisation per depth,
// distinct experts per token path against the independent-uniform null, agreement of routes
// with each label's mode path, the distribution of routing margins, and how often the balancing
// bias decides a window.
#include <map>
#include <string>
#include <vector>

#include "analysis/routes.h"

namespace lol {

// A window whose gate is below this runs its block at under 1% of the block's update
// (s = H + alpha (E - H), SPEC 1.4): it passes its states on almost as they came, a skip.
constexpr double kSkipGate = 0.01;
// kSkipGate as the figures and text name it ("0.01").
std::string skip_gate_text();

// E[U] for D independent uniform choices among L experts: L (1 - (1 - 1/L)^D).
double expected_distinct_experts(int64_t library_size, int64_t depth);

struct RouteStats {
  // library_size counts the route choices: with `skip` (router_skip) the last is the skip, an
  // expert like the others in utilisation and token paths.
  int64_t core_depth = 0, library_size = 0, sequences = 0, token_paths = 0;
  bool skip = false;
  // Share of windows choosing each expert at each depth, [depth - 1][expert], per label ("*":
  // all labels together).
  std::map<std::string, std::vector<std::vector<double>>> utilisation;
  // Token paths: the experts of the windows holding a token, depth 1..D.
  double mean_distinct = 0;            // U, distinct experts per path
  double expected_distinct = 0;        // E[U] of the independent-uniform null
  double mean_repeated = 0;            // D - U: depths re-using an expert already on the path
  double mean_unused = 0;              // L - U: library experts the path never visits
  std::vector<double> distinct_share;  // share of paths with U = 1, 2, ..., min(L, D)
  // Per label and (depth, ordinal): the share of its sequences whose route there is the label's
  // mode-path expert (the expert of highest mean probability).
  std::map<std::string, std::map<std::pair<int64_t, int64_t>, double>> agreement;
  // Top-2 margins of p + b, in bins with upper edges `margin_edges` (the last is +inf).
  std::vector<double> margin_edges;
  std::vector<int64_t> margin_counts;
  // Route flips under a perturbation of the router input (`lol route --perturb`): of the
  // windows measured, the share whose router choice changed, overall, per depth and per margin
  // bin. flips_measured 0: the route file holds no measurement.
  int64_t flips_measured = 0;
  double flip_rate = 0;
  std::vector<double> flip_rate_by_depth, flip_rate_by_margin;
  // Windows the balancing bias decided (SPEC 1.7): the router's choice, the argmax of the
  // balanced scores, is not the argmax of its probabilities p. The share of all windows, per
  // depth and per label; 0 for a model without a bias or whose bias never changes a choice.
  double bias_decided = 0;
  std::vector<double> bias_decided_by_depth;
  std::map<std::string, double> bias_decided_by_label;
  // Windows run with a gate below kSkipGate or routed to the skip (skips): the share of all
  // windows, per depth, and
  // the share of the windows the bias decided that were skips (a router that puts all its
  // probability on an expert the bias holds out gets a gate of nearly 0 on the expert that runs).
  double skipped = 0;
  std::vector<double> skipped_by_depth;
  double skipped_of_bias_decided = 0;
  // With `skip`: the windows routed to the skip itself (a small gate aside). The share of the
  // windows after window 0 (ordinal >= 1, the windows a `router_skip_share` steers with
  // balance_window0=false, so a checkpoint's figure compares with training's skip_share), per
  // ordinal (0, 1, ...) and per label (ordinal >= 1), and the share of the core's token-depths
  // (windows weighted by their tokens: what the skip saves of the core's work).
  double skip_share = 0;
  std::map<int64_t, double> skip_share_by_window;  // the ordinals the routes hold
  std::map<std::string, double> skip_share_by_label;
  double skip_token_depths = 0;
  // Do labels share paths? The cosine similarity of two labels' utilisation (their [depth][expert]
  // shares as one vector), for every pair of labels ("*" left out). Symmetric, 1 on the diagonal.
  std::vector<std::string> similarity_labels;
  std::vector<std::vector<double>> label_similarity;

  json to_json() const;
  std::string to_text() const;
};

// Mean label similarity within and across groups of labels (e.g. languages grouped by script).
// `group_of` maps a label to its group; labels it leaves out take no part.
struct GroupSimilarity {
  double within = 0, across = 0;  // mean cosine over the pairs
  int64_t within_pairs = 0, across_pairs = 0;
  // Per label: its most similar other label and that similarity.
  std::map<std::string, std::pair<std::string, double>> nearest;
};
GroupSimilarity group_similarity(const RouteStats& stats,
                                 const std::map<std::string, std::string>& group_of);

class RouteStatsBuilder {
 public:
  // library_size: the route choices (RouteFileHeader::choices), the last the skip with `skip`.
  RouteStatsBuilder(int64_t core_depth, int64_t library_size, bool skip);
  void add(const SequenceRoutes& routes);
  RouteStats finish() const;

 private:
  int64_t depth_, library_;
  bool skip_;
  int64_t sequences_ = 0, token_paths_ = 0;
  double distinct_sum_ = 0;
  std::vector<int64_t> distinct_counts_;
  std::map<std::string, std::vector<std::vector<double>>>
      window_counts_;  // label -> [depth][expert]
  // label -> (depth, ordinal) -> per expert: probability sum and route count
  std::map<std::string, std::map<std::pair<int64_t, int64_t>,
                                 std::pair<std::vector<double>, std::vector<int64_t>>>>
      cells_;
  std::vector<double> margin_edges_;
  std::vector<int64_t> margin_counts_;
  // flips and windows measured, per depth and per margin bin
  std::vector<int64_t> flips_by_depth_, measured_by_depth_, flips_by_margin_, measured_by_margin_;
  // windows the bias decided and windows, per depth and per label
  std::vector<int64_t> decided_by_depth_, windows_by_depth_;
  // skips per depth, and skips among the windows the bias decided
  std::vector<int64_t> skipped_by_depth_;
  int64_t skipped_decided_ = 0;
  // with `skip`: windows that chose it and windows, per ordinal and per label (ordinal >= 1);
  // tokens of those windows and of all windows
  std::map<int64_t, std::pair<int64_t, int64_t>> skip_by_window_;  // a file's ordinals, unbounded
  std::map<std::string, std::pair<int64_t, int64_t>> skip_by_label_;
  int64_t skip_tokens_ = 0, window_tokens_ = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> decided_by_label_;
};

}  // namespace lol
