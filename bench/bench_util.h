#pragma once
// Shared pieces of the bench suites: spread over repetitions, comma lists, device sync,
// md/csv table lines, the machine's matmul peak and the family spec strings.
#include <torch/torch.h>

#include <chrono>
#include <string>
#include <vector>

#include "model/config.h"
#include "util/fields.h"

namespace lol::bench {

using Clock = std::chrono::steady_clock;

struct Spread {
  double mean = 0, stddev = 0;
};
Spread spread(const std::vector<double>& xs);
double percentile(std::vector<double> xs, double q);      // xs not empty
double median(const std::vector<double>& xs);             // 0 for none
std::vector<std::string> split(const std::string& text);  // "a,b" -> {"a", "b"}
void synchronize(torch::Device device);                   // waits for queued GPU work
double seconds_since(Clock::time_point start);
std::string fixed(double value, int digits);
// GEMM throughput (size^3, GFLOP/s) in `dtype` on `device` with the current thread settings,
// over `reps` (at least 20) repetitions after one warmup: the median, what MFU is measured
// against, and the best, what the machine can do when nothing else runs.
struct Peak {
  double median = 0, max = 0;
  int reps = 0;
};
Peak measure_matmul_peak(int64_t size, int reps, torch::Device device,
                         torch::ScalarType dtype = torch::kFloat32);
// Memory read bandwidth (GB/s): a sum over `megabytes` of fp32 (more than the last-level
// cache holds), median and best of `reps` (at least 20) after one warmup. What a step that
// streams weights and caches from memory can read at most.
Peak measure_read_bandwidth(int64_t megabytes, int reps, torch::Device device);
// A shell word holding `s` as it is (single-quoted).
std::string shell_quote(const std::string& s);
// Runs a shell command line; its exit status, or -1 when it did not exit normally.
int run_command(const std::string& command);
// "dense-sliding" -> family dense, core_attention sliding; looped and moe take L blocks/experts.
ModelConfig family_config(ModelConfig base, const std::string& spec);

// What a run ran on, stamped on every suite's output: commit, BLAS, the threads of LibTorch's
// pool, this project's kernels and the BLAS, and the device. As JSON fields, or as the lines
// above a markdown table.
json machine_fields(torch::Device device);
std::string machine_lines(torch::Device device);

// Prints rows as a markdown table (with a header rule) or as CSV.
class Table {
 public:
  explicit Table(bool markdown) : markdown_(markdown) {}
  // The first `text_columns` columns are left-aligned, the rest (numbers) right-aligned.
  void header(const std::vector<std::string>& cells, size_t text_columns);
  void row(const std::vector<std::string>& cells) const;

 private:
  bool markdown_;
};

}  // namespace lol::bench
