#pragma once
// PCA of one-hot routing paths (paper 4.1.1, figure 3 left): each sequence as the share of its
// windows that ran each expert at each depth (D x L; a sequence with one window per depth is
// its one-hot path), projected on the first principal components of the set. Power iteration
// with deflation on the covariance in double precision: deterministic, and D x L stays small.
#include <string>
#include <vector>

#include "analysis/routes.h"

namespace lol {

struct PathPca {
  std::vector<std::string> labels;               // per sequence
  std::vector<std::vector<double>> coordinates;  // per sequence: one value per component
  std::vector<double> explained;                 // share of the total variance per component
};

class PathPcaBuilder {
 public:
  PathPcaBuilder(int64_t core_depth, int64_t library_size);
  void add(const SequenceRoutes& routes);
  // The first `components` components (fewer when the data spans fewer). Each component's sign
  // makes its largest loading positive.
  PathPca finish(int components = 2) const;

 private:
  int64_t depth_, library_;
  std::vector<std::string> labels_;
  std::vector<std::vector<double>> rows_;
};

}  // namespace lol
