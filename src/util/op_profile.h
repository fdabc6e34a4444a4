#pragma once
// Where a training step's time goes, by phase and part (lol bench --profile; docs/performance.md).
//
// The engine marks its regions with ProfileScope ("core", then "attend" inside it, ...); they
// cost one relaxed atomic load when no profiler runs. While an OpProfiler lives, LibTorch's
// RecordFunction observers time every operator and every marked region on every thread, and
// each operator's self time (its duration less that of the operators it called) goes to the
// innermost region around it: the outermost region names the phase (embed, prelude, core,
// coda, head, loss, backward, optimizer, balance, data), the innermost the part (norm, proj,
// attend, swiglu, route, permute, ...). A backward operator goes to the region its forward operator
// ran in, matched by the autograd sequence number LibTorch gives both. A region's own time outside
// any operator (C++ on the host: layouts, routing decisions, packing) is counted as host time.
// Times are host times: on CUDA they measure launches, not kernels.
#include <ATen/record_function.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lol {

// Marks a region for the profiler; `name` must be a string literal (it is kept by pointer).
class ProfileScope {
 public:
  explicit ProfileScope(const char* name);

 private:
  std::optional<at::RecordFunction> fn_;
};

// Called first in a custom autograd function's forward (torch::autograd::Function): its node's
// backward then counts under the region this forward runs in, as a LibTorch operator's does.
// (Such a forward runs no operator carrying the node's sequence number to match it by.)
void profile_custom_function_forward();

struct ProfileRow {
  std::string phase, part;  // part "" for the phase's own operators outside any inner region
  double forward_ms = 0;    // self time of operators run outside the backward pass
  double backward_ms = 0;   // self time of backward operators whose forward ran here
  double gemm_ms = 0;       // of the two, matrix products (mm, addmm, bmm, baddbmm, ...)
  double host_ms = 0;       // time inside the region's own code, outside any operator
  int64_t calls = 0;        // operators and regions counted
  double total_ms() const { return forward_ms + backward_ms + host_ms; }
};

// Observes everything from construction to destruction; one at a time per process.
class OpProfiler {
 public:
  OpProfiler();
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;
  // The rows in the order their regions first ran; totals so far.
  std::vector<ProfileRow> rows() const;
  // The same totals by operator name (in `phase`; backward nodes by their own names, such as
  // MmBackward0, whose inner operators count under theirs), largest self time first.
  std::vector<ProfileRow> operators() const;

 private:
  uint64_t handle_ = 0;
};

}  // namespace lol
