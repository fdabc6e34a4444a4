#include "analysis/probes.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "util/error.h"

namespace lol {
namespace {

// Solves A z = b for a symmetric positive definite A (n x n, row-major) by Cholesky.
std::vector<double> solve_spd(std::vector<double> a, std::vector<double> b, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (int64_t k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    LOL_CHECK(d > 0, "ridge: the regularised normal matrix is not positive definite");
    a[j * n + j] = std::sqrt(d);
    for (int64_t i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      for (int64_t k = 0; k < j; ++k) s -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = s / a[j * n + j];
    }
  }
  for (int64_t i = 0; i < n; ++i) {  // L y = b
    for (int64_t k = 0; k < i; ++k) b[i] -= a[i * n + k] * b[k];
    b[i] /= a[i * n + i];
  }
  for (int64_t i = n - 1; i >= 0; --i) {  // L^T z = y
    for (int64_t k = i + 1; k < n; ++k) b[i] -= a[k * n + i] * b[k];
    b[i] /= a[i * n + i];
  }
  return b;
}

// Adds row [1, x] (augmented for the intercept) into a Gram matrix of size (c + 1)^2.
void add_gram(std::vector<double>& gram, const double* x, int64_t c) {
  const int64_t n = c + 1;
  auto at = [&](int64_t i) { return i == 0 ? 1.0 : x[i - 1]; };
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) gram[i * n + j] += at(i) * at(j);
}

// Ridge from an augmented Gram matrix and X^T y: the intercept (index 0) is not penalised.
std::vector<double> ridge_from_gram(std::vector<double> gram, std::vector<double> xty, int64_t c,
                                    double lambda) {
  const int64_t n = c + 1;
  for (int64_t i = 1; i < n; ++i) gram[i * n + i] += lambda;
  return solve_spd(std::move(gram), std::move(xty), n);
}

}  // namespace

double auroc(const std::vector<double>& scores, const std::vector<uint8_t>& positive) {
  LOL_CHECK(scores.size() == positive.size(), "auroc: ", scores.size(), " scores for ",
            positive.size(), " labels");
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double positive_rank_sum = 0;
  int64_t positives = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double mean_rank =
        (static_cast<double>(i) + static_cast<double>(j) + 1) / 2;  // 1-based ranks i+1..j
    for (size_t k = i; k < j; ++k)
      if (positive[order[k]]) {
        positive_rank_sum += mean_rank;
        ++positives;
      }
    i = j;
  }
  const int64_t negatives = static_cast<int64_t>(scores.size()) - positives;
  if (positives == 0 || negatives == 0) return std::numeric_limits<double>::quiet_NaN();
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - p * (p + 1) / 2) / (p * static_cast<double>(negatives));
}

std::vector<double> ridge_fit(const std::vector<double>& x, int64_t columns,
                              const std::vector<double>& y, double lambda) {
  LOL_CHECK(
      columns > 0 && static_cast<int64_t>(x.size()) == columns * static_cast<int64_t>(y.size()),
      "ridge: X must be rows x columns with one target per row");
  LOL_CHECK(lambda > 0 && std::isfinite(lambda), "ridge: lambda must be > 0, got ", lambda);
  const int64_t n = columns + 1;
  std::vector<double> gram(static_cast<size_t>(n * n), 0.0), xty(static_cast<size_t>(n), 0.0);
  for (size_t r = 0; r < y.size(); ++r) {
    const double* row = x.data() + r * static_cast<size_t>(columns);
    add_gram(gram, row, columns);
    xty[0] += y[r];
    for (int64_t i = 0; i < columns; ++i) xty[static_cast<size_t>(i + 1)] += row[i] * y[r];
  }
  return ridge_from_gram(std::move(gram), std::move(xty), columns, lambda);
}

double ridge_predict(const std::vector<double>& model, const double* row, int64_t columns) {
  double out = model[0];
  for (int64_t i = 0; i < columns; ++i) out += model[static_cast<size_t>(i + 1)] * row[i];
  return out;
}

json ReadoutResult::to_json() const {
  auto number = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  return {{"level", "window"},
          {"samples", samples},
          {"top1_ridge", number(top1_ridge)},
          {"winning_expert_probability", number(winning_expert)},
          {"expert_frequency_llr", number(frequency_llr)}};
}

json ProbeResult::to_json() const {
  auto number = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json per_label = json::object();
  for (const auto& [label, a] : auroc_per_label) per_label[label] = number(a);
  return {{"level", level},
          {"samples", samples},
          {"features", features},
          {"auroc", number(auroc)},
          {"auroc_per_label", per_label},
          {"shuffled_mean", number(shuffled_mean)},
          {"shuffled_max", number(shuffled_max)}};
}

ProbeData::ProbeData(int64_t core_depth, int64_t library_size)
    : depth_(core_depth), library_(library_size) {}

void ProbeData::add(const SequenceRoutes& s) {
  const int64_t sequence = static_cast<int64_t>(labels_.size());
  labels_.push_back(s.label);
  const size_t width = static_cast<size_t>(depth_ * library_);
  std::vector<double> mean(width, 0.0);
  std::vector<int64_t> windows_per_depth(static_cast<size_t>(depth_), 0);
  std::map<int64_t, std::vector<double>> by_ordinal;  // ordinal -> D x L probabilities
  for (const auto& w : s.windows) {
    const size_t base = static_cast<size_t>((w.route.depth - 1) * library_);
    for (int64_t m = 0; m < library_; ++m)
      mean[base + static_cast<size_t>(m)] += w.route.probs[static_cast<size_t>(m)];
    ++windows_per_depth[static_cast<size_t>(w.route.depth - 1)];
    auto& f = by_ordinal[w.route.window];
    if (f.empty()) f.assign(width, 0.0);
    for (int64_t m = 0; m < library_; ++m)
      f[base + static_cast<size_t>(m)] = w.route.probs[static_cast<size_t>(m)];
  }
  for (int64_t l = 0; l < depth_; ++l)
    for (int64_t m = 0; m < library_; ++m)
      if (windows_per_depth[static_cast<size_t>(l)] > 0)
        mean[static_cast<size_t>(l * library_ + m)] /=
            static_cast<double>(windows_per_depth[static_cast<size_t>(l)]);
  sequence_features_.push_back(std::move(mean));
  for (auto& [ordinal, f] : by_ordinal) {
    window_features_.push_back(std::move(f));
    window_sequence_.push_back(sequence);
  }
}

std::vector<int64_t> ProbeData::assign_folds(const ProbeOptions& o, std::vector<std::string>* names,
                                             std::mt19937_64& rng) const {
  LOL_CHECK(o.folds >= 2, "probes need at least 2 folds, got ", o.folds);
  const int64_t n_sequences = sequences();
  LOL_CHECK(n_sequences >= o.folds, "probes need at least as many sequences (", n_sequences,
            ") as folds (", o.folds, ")");
  *names = labels_;
  std::sort(names->begin(), names->end());
  names->erase(std::unique(names->begin(), names->end()), names->end());
  LOL_CHECK(names->size() >= 2, "probes need at least two labels, got ", names->size());
  std::vector<int64_t> order(static_cast<size_t>(n_sequences));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return labels_[static_cast<size_t>(a)] < labels_[static_cast<size_t>(b)];
  });
  std::vector<int64_t> fold_of_sequence(static_cast<size_t>(n_sequences));
  for (int64_t i = 0; i < n_sequences; ++i)
    fold_of_sequence[static_cast<size_t>(order[static_cast<size_t>(i)])] = i % o.folds;
  return fold_of_sequence;
}

ProbeResult ProbeData::run(const std::string& level, const ProbeOptions& o) const {
  LOL_CHECK(level == "window" || level == "sequence",
            "probe level must be window or sequence, got '", level, "'");
  std::vector<std::string> names;
  std::mt19937_64 rng(o.seed);
  const auto fold_of_sequence = assign_folds(o, &names, rng);
  const bool windows = level == "window";
  const auto& features = windows ? window_features_ : sequence_features_;
  const int64_t columns = depth_ * library_, rows = static_cast<int64_t>(features.size());
  auto sequence_of = [&](int64_t r) {
    return windows ? window_sequence_[static_cast<size_t>(r)] : r;
  };

  // One Gram matrix per fold (X does not change when the labels are shuffled, only X^T y
  // does).
  const int64_t n = columns + 1;
  std::vector<std::vector<double>> fold_gram(static_cast<size_t>(o.folds),
                                             std::vector<double>(static_cast<size_t>(n * n), 0.0));
  std::vector<double> total_gram(static_cast<size_t>(n * n), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    add_gram(fold_gram[static_cast<size_t>(fold_of_sequence[static_cast<size_t>(sequence_of(r))])],
             features[static_cast<size_t>(r)].data(), columns);
  }
  for (const auto& g : fold_gram)
    for (size_t i = 0; i < g.size(); ++i) total_gram[i] += g[i];

  // Cross-validated AUROC of one-vs-rest ridge probes for sequence labels `label_of`.
  auto evaluate = [&](const std::vector<std::string>& label_of,
                      std::map<std::string, double>* per_label) {
    double sum = 0;
    int counted = 0;
    for (const auto& name : names) {
      std::vector<uint8_t> positive(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r)
        positive[static_cast<size_t>(r)] = label_of[static_cast<size_t>(sequence_of(r))] == name;
      std::vector<std::vector<double>> fold_xty(static_cast<size_t>(o.folds),
                                                std::vector<double>(static_cast<size_t>(n), 0.0));
      for (int64_t r = 0; r < rows; ++r) {
        if (!positive[static_cast<size_t>(r)]) continue;
        auto& xty =
            fold_xty[static_cast<size_t>(fold_of_sequence[static_cast<size_t>(sequence_of(r))])];
        xty[0] += 1;
        for (int64_t i = 0; i < columns; ++i)
          xty[static_cast<size_t>(i + 1)] +=
              features[static_cast<size_t>(r)][static_cast<size_t>(i)];
      }
      // AUROC within each held-out fold, averaged over the folds that hold both classes: each
      // fold's model has its own intercept, which would bias an AUROC of the pooled scores.
      double fold_sum = 0;
      int folds_counted = 0;
      for (int64_t f = 0; f < o.folds; ++f) {
        std::vector<double> gram = total_gram, xty(static_cast<size_t>(n), 0.0);
        for (size_t i = 0; i < gram.size(); ++i) gram[i] -= fold_gram[static_cast<size_t>(f)][i];
        for (int64_t g = 0; g < o.folds; ++g)
          if (g != f)
            for (int64_t i = 0; i < n; ++i)
              xty[static_cast<size_t>(i)] +=
                  fold_xty[static_cast<size_t>(g)][static_cast<size_t>(i)];
        const auto model = ridge_from_gram(std::move(gram), std::move(xty), columns, o.lambda);
        std::vector<double> scores;
        std::vector<uint8_t> held_out;
        for (int64_t r = 0; r < rows; ++r)
          if (fold_of_sequence[static_cast<size_t>(sequence_of(r))] == f) {
            scores.push_back(
                ridge_predict(model, features[static_cast<size_t>(r)].data(), columns));
            held_out.push_back(positive[static_cast<size_t>(r)]);
          }
        const double fold_auroc = auroc(scores, held_out);
        if (std::isfinite(fold_auroc)) {
          fold_sum += fold_auroc;
          ++folds_counted;
        }
      }
      const double a =
          folds_counted > 0 ? fold_sum / folds_counted : std::numeric_limits<double>::quiet_NaN();
      if (per_label) (*per_label)[name] = a;
      if (std::isfinite(a)) {
        sum += a;
        ++counted;
      }
      if (names.size() == 2) break;  // with two labels, one-vs-rest of either gives the same AUROC
    }
    return counted > 0 ? sum / counted : std::numeric_limits<double>::quiet_NaN();
  };

  ProbeResult result;
  result.level = level;
  result.samples = rows;
  result.features = columns;
  result.auroc = evaluate(labels_, &result.auroc_per_label);
  std::vector<std::string> shuffled = labels_;
  double shuffled_sum = 0;
  result.shuffled_max = -std::numeric_limits<double>::infinity();
  for (int64_t k = 0; k < o.shuffles; ++k) {
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    const double a = evaluate(shuffled, nullptr);
    shuffled_sum += a;
    result.shuffled_max = std::max(result.shuffled_max, a);
  }
  result.shuffled_mean = o.shuffles > 0 ? shuffled_sum / static_cast<double>(o.shuffles)
                                        : std::numeric_limits<double>::quiet_NaN();
  if (o.shuffles == 0) result.shuffled_max = std::numeric_limits<double>::quiet_NaN();
  return result;
}

ReadoutResult ProbeData::readouts(const ProbeOptions& o) const {
  std::vector<std::string> names;
  std::mt19937_64 rng(o.seed);
  const auto fold_of_sequence = assign_folds(o, &names, rng);
  const auto rows = window_features_.size();
  const auto D = static_cast<size_t>(depth_), L = static_cast<size_t>(library_);
  // Per window sample and depth: the winning expert's probability and its id (-1 where the
  // sequence has no window at this ordinal and depth: all probabilities 0).
  std::vector<double> top(rows * D, 0.0);
  std::vector<int64_t> winner(rows * D, -1);
  for (size_t r = 0; r < rows; ++r)
    for (size_t l = 0; l < D; ++l) {
      const double* p = window_features_[r].data() + l * L;
      const auto best = static_cast<size_t>(std::max_element(p, p + L) - p);
      if (p[best] <= 0) continue;
      top[r * D + l] = p[best];
      winner[r * D + l] = static_cast<int64_t>(best);
    }
  auto fold_of = [&](size_t r) {
    return fold_of_sequence[static_cast<size_t>(window_sequence_[r])];
  };
  // AUROC of `score` over the rows of fold f (held out) or of every other fold (training).
  auto fold_auroc = [&](const std::function<double(size_t)>& score,
                        const std::vector<uint8_t>& positive, int64_t f, bool held_out) {
    std::vector<double> scores;
    std::vector<uint8_t> labels;
    for (size_t r = 0; r < rows; ++r)
      if ((fold_of(r) == f) == held_out) {
        scores.push_back(score(r));
        labels.push_back(positive[r]);
      }
    return auroc(scores, labels);
  };
  // Macro over labels (one label of two) of the mean over folds of the held-out AUROC of the
  // scorer `fit` builds from training fold f.
  using Scorer = std::function<double(size_t)>;
  auto cross_validate =
      [&](const std::function<Scorer(const std::vector<uint8_t>&, int64_t)>& fit) {
        double sum = 0;
        int counted = 0;
        for (const auto& name : names) {
          std::vector<uint8_t> positive(rows);
          for (size_t r = 0; r < rows; ++r)
            positive[r] = labels_[static_cast<size_t>(window_sequence_[r])] == name;
          double fold_sum = 0;
          int folds = 0;
          for (int64_t f = 0; f < o.folds; ++f) {
            const double a = fold_auroc(fit(positive, f), positive, f, /*held_out=*/true);
            if (std::isfinite(a)) {
              fold_sum += a;
              ++folds;
            }
          }
          if (folds > 0) {
            sum += fold_sum / folds;
            ++counted;
          }
          if (names.size() == 2) break;
        }
        return counted > 0 ? sum / counted : std::numeric_limits<double>::quiet_NaN();
      };

  ReadoutResult out;
  out.samples = static_cast<int64_t>(rows);
  out.top1_ridge = cross_validate([&](const std::vector<uint8_t>& positive, int64_t f) -> Scorer {
    std::vector<double> x, y;
    for (size_t r = 0; r < rows; ++r)
      if (fold_of(r) != f) {
        x.insert(x.end(), top.begin() + static_cast<std::ptrdiff_t>(r * D),
                 top.begin() + static_cast<std::ptrdiff_t>((r + 1) * D));
        y.push_back(positive[r]);
      }
    auto model = ridge_fit(x, depth_, y, o.lambda);
    return [&top, D, model](size_t r) { return ridge_predict(model, top.data() + r * D, D); };
  });
  out.winning_expert =
      cross_validate([&](const std::vector<uint8_t>& positive, int64_t f) -> Scorer {
        size_t best_depth = 0;
        double best = -1, sign = 1;
        for (size_t l = 0; l < D; ++l)
          for (double s : {1.0, -1.0}) {
            const double a = fold_auroc([&](size_t r) { return s * top[r * D + l]; }, positive, f,
                                        /*held_out=*/false);
            if (std::isfinite(a) && a > best) {
              best = a;
              best_depth = l;
              sign = s;
            }
          }
        return [&top, D, best_depth, sign](size_t r) { return sign * top[r * D + best_depth]; };
      });
  out.frequency_llr =
      cross_validate([&](const std::vector<uint8_t>& positive, int64_t f) -> Scorer {
        // counts[class][depth][expert] over training rows, add-one smoothed.
        std::vector<double> counts(2 * D * L, 1.0), totals(2 * D, static_cast<double>(L));
        for (size_t r = 0; r < rows; ++r)
          if (fold_of(r) != f)
            for (size_t l = 0; l < D; ++l)
              if (winner[r * D + l] >= 0) {
                const size_t c = positive[r] ? 1 : 0;
                counts[(c * D + l) * L + static_cast<size_t>(winner[r * D + l])] += 1;
                totals[c * D + l] += 1;
              }
        return [&winner, D, L, counts, totals](size_t r) {
          double llr = 0;
          for (size_t l = 0; l < D; ++l) {
            const int64_t e = winner[r * D + l];
            if (e < 0) continue;
            const auto m = static_cast<size_t>(e);
            llr += std::log(counts[(D + l) * L + m] / totals[D + l]) -
                   std::log(counts[l * L + m] / totals[l]);
          }
          return llr;
        };
      });
  return out;
}

}  // namespace lol
