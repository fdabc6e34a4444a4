#pragma once
// Consecutive slices of rows that tile them in order, as a routed depth groups the rows of the
// experts its windows chose (slice s: rows [begin(s), end(s))). Every kernel that walks rows
// by slice (the sliced products, the norm weight + FiLM pass and its backward, the expression
// fallback) takes its offsets from here.
#include <algorithm>
#include <cstdint>
#include <vector>

namespace lol {

class RowSlices {
 public:
  explicit RowSlices(const std::vector<int64_t>& counts) {
    int64_t end = 0;
    for (auto c : counts) ends_.push_back(end += c);
  }
  size_t size() const { return ends_.size(); }
  int64_t begin(size_t s) const { return s == 0 ? 0 : ends_[s - 1]; }
  int64_t end(size_t s) const { return ends_[s]; }
  int64_t count(size_t s) const { return end(s) - begin(s); }
  // The slice holding `row` (size() when row >= rows()).
  size_t slice_of(int64_t row) const {
    return static_cast<size_t>(std::upper_bound(ends_.begin(), ends_.end(), row) - ends_.begin());
  }

 private:
  std::vector<int64_t> ends_;
};

}  // namespace lol
