// PCA of one-hot routing paths (docs/analysis.md).
#include "analysis/pca.h"

#include <cmath>
#include <numeric>

#include "util/error.h"

namespace lol {

PathPcaBuilder::PathPcaBuilder(int64_t core_depth, int64_t library_size)
    : depth_(core_depth), library_(library_size) {
  LOL_CHECK(core_depth > 0 && library_size > 0, "path PCA needs core_depth and library_size > 0");
}

void PathPcaBuilder::add(const SequenceRoutes& s) {
  const auto L = static_cast<size_t>(library_);
  std::vector<double> row(static_cast<size_t>(depth_) * L, 0.0);
  std::vector<double> windows(static_cast<size_t>(depth_), 0.0);
  for (const auto& w : s.windows) {
    const auto l = static_cast<size_t>(w.route.depth - 1);
    row[l * L + static_cast<size_t>(w.route.expert)] += 1;
    windows[l] += 1;
  }
  for (size_t l = 0; l < windows.size(); ++l)
    if (windows[l] > 0)
      for (size_t m = 0; m < L; ++m) row[l * L + m] /= windows[l];
  labels_.push_back(s.label);
  rows_.push_back(std::move(row));
}

PathPca PathPcaBuilder::finish(int components) const {
  PathPca out;
  out.labels = labels_;
  const size_t n = rows_.size(), f = static_cast<size_t>(depth_ * library_);
  out.coordinates.assign(n, {});
  LOL_CHECK(f <= 4096, "path PCA: ", f, " features (D x L) is more than the 4096 it handles");
  if (n < 2) return out;
  std::vector<double> mean(f, 0.0);
  for (const auto& r : rows_)
    for (size_t i = 0; i < f; ++i) mean[i] += r[i] / static_cast<double>(n);
  std::vector<double> cov(f * f, 0.0);
  for (const auto& r : rows_)
    for (size_t i = 0; i < f; ++i) {
      const double a = r[i] - mean[i];
      if (a == 0) continue;
      for (size_t j = 0; j < f; ++j) cov[i * f + j] += a * (r[j] - mean[j]);
    }
  for (auto& c : cov) c /= static_cast<double>(n - 1);
  double total = 0;
  for (size_t i = 0; i < f; ++i) total += cov[i * f + i];
  if (total <= 0) return out;
  for (int c = 0; c < components; ++c) {
    // Power iteration from a fixed start that is not orthogonal to any axis.
    std::vector<double> v(f), next(f);
    for (size_t i = 0; i < f; ++i) v[i] = 1.0 + 0.01 * static_cast<double>(i % 7);
    double lambda = 0;
    for (int it = 0; it < 1000; ++it) {
      for (size_t i = 0; i < f; ++i)
        next[i] = std::inner_product(cov.begin() + static_cast<std::ptrdiff_t>(i * f),
                                     cov.begin() + static_cast<std::ptrdiff_t>((i + 1) * f),
                                     v.begin(), 0.0);
      const double norm =
          std::sqrt(std::inner_product(next.begin(), next.end(), next.begin(), 0.0));
      if (norm <= 1e-12 * total) break;
      double change = 0;
      for (size_t i = 0; i < f; ++i) {
        next[i] /= norm;
        change = std::max(change, std::abs(next[i] - v[i]));
      }
      v.swap(next);
      lambda = norm;
      if (change < 1e-12) break;
    }
    if (lambda <= 1e-12 * total) break;
    size_t largest = 0;
    for (size_t i = 1; i < f; ++i)
      if (std::abs(v[i]) > std::abs(v[largest])) largest = i;
    if (v[largest] < 0)
      for (auto& x : v) x = -x;
    out.explained.push_back(lambda / total);
    for (size_t s = 0; s < n; ++s) {
      double x = 0;
      for (size_t i = 0; i < f; ++i) x += (rows_[s][i] - mean[i]) * v[i];
      out.coordinates[s].push_back(x);
    }
    for (size_t i = 0; i < f; ++i)  // deflate
      for (size_t j = 0; j < f; ++j) cov[i * f + j] -= lambda * v[i] * v[j];
  }
  return out;
}

}  // namespace lol
