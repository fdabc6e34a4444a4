#include "bench_util.h"

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "model/packed_gemm.h"
#include "util/cpu_clones.h"
#include "util/runtime.h"
#include "util/version.h"

namespace lol::bench {

Spread spread(const std::vector<double>& xs) {
  Spread s;
  for (double x : xs) s.mean += x;
  s.mean /= static_cast<double>(xs.size());
  for (double x : xs) s.stddev += (x - s.mean) * (x - s.mean);
  s.stddev = xs.size() > 1 ? std::sqrt(s.stddev / static_cast<double>(xs.size() - 1)) : 0.0;
  return s;
}

double percentile(std::vector<double> xs, double q) {
  std::sort(xs.begin(), xs.end());
  const double pos = q * static_cast<double>(xs.size() - 1);
  const size_t lo = static_cast<size_t>(pos), hi = std::min(lo + 1, xs.size() - 1);
  return xs[lo] + (xs[hi] - xs[lo]) * (pos - static_cast<double>(lo));
}

double median(const std::vector<double>& xs) {
  return xs.empty() ? 0.0 : percentile(xs, 0.5);
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

void synchronize([[maybe_unused]] torch::Device device) {
#if TORCH_VERSION_MAJOR >= 2
  if (device.is_cuda()) torch::cuda::synchronize();
#endif
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

int run_command(const std::string& command) {
  const int status = std::system(command.c_str());
  return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string fixed(double value, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << value;
  return out.str();
}

namespace {
// `work` units per run (FLOPs, bytes) / 1e9 per second over `reps` (at least 20) runs after one
// warmup: the median and the best.
Peak measure_rate(int reps, torch::Device device, double work, const std::function<void()>& run) {
  run();
  synchronize(device);
  std::vector<double> rates;
  Peak peak;
  peak.reps = std::max(reps, 20);
  for (int r = 0; r < peak.reps; ++r) {
    auto t0 = Clock::now();
    run();
    synchronize(device);
    rates.push_back(work / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
  }
  peak.median = percentile(rates, 0.5);
  peak.max = *std::max_element(rates.begin(), rates.end());
  return peak;
}
}  // namespace

Peak measure_matmul_peak(int64_t size, int reps, torch::Device device, torch::ScalarType dtype) {
  auto options = torch::TensorOptions().device(device).dtype(dtype);
  auto a = torch::randn({size, size}, options), b = torch::randn({size, size}, options);
  return measure_rate(reps, device, 2.0 * static_cast<double>(size * size * size),
                      [&] { torch::mm(a, b); });
}

Peak measure_read_bandwidth(int64_t megabytes, int reps, torch::Device device) {
  const int64_t n = megabytes * (1 << 20) / 4;
  auto a = torch::ones({n}, torch::TensorOptions().device(device).dtype(torch::kFloat32));
  return measure_rate(reps, device, static_cast<double>(n) * 4, [&] { a.sum(); });
}

ModelConfig family_config(ModelConfig base, const std::string& spec) {
  auto dash = spec.find('-');
  base.family = parse_enum<Family>(spec.substr(0, dash), "--families: family");
  if (dash != std::string::npos)
    base.core_attention =
        parse_enum<CoreAttention>(spec.substr(dash + 1), "--families: core attention");
  // The comparison families get as many blocks or experts as the lol library has.
  switch (base.family) {
    case Family::kLol:
    case Family::kDense:
      break;
    case Family::kLooped:
      base.loop_blocks = std::max<int64_t>(1, base.library_size);
      break;
    case Family::kMoe:
      base.moe_experts = base.library_size;
      break;
  }
  base.validate();
  return base;
}

void Table::header(const std::vector<std::string>& cells, size_t text_columns) {
  row(cells);
  if (!markdown_) return;
  std::vector<std::string> rule(cells.size(), "---:");
  for (size_t i = 0; i < text_columns && i < rule.size(); ++i) rule[i] = "---";
  row(rule);
}

void Table::row(const std::vector<std::string>& cells) const {
  for (size_t i = 0; i < cells.size(); ++i)
    std::cout << (markdown_ ? (i ? " | " : "| ") : (i ? "," : "")) << cells[i];
  std::cout << (markdown_ ? " |\n" : "\n");
}

namespace {
// The processor's model name (/proc/cpuinfo), since the same VM type may land on different
// processors and the figures follow them.
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      const auto name =
          colon == std::string::npos ? colon : line.find_first_not_of(" \t", colon + 1);
      if (name != std::string::npos) return line.substr(name);
    }
  return "unknown";
}
}  // namespace

json machine_fields(torch::Device device) {
  const auto info = runtime_info();
  return {{"commit", git_commit()},
          {"cpu", cpu_model()},
          {"blas", info.blas},
          {"torch_threads", info.torch_threads},
          {"kernel_threads", info.kernel_threads},
          {"blas_threads", info.blas_threads},
          {"kernel_clone", cpu_clone()},
          {"packed_gemm_columns", panel_width_supported()},
          {"device", device.str()}};
}

std::string machine_lines(torch::Device device) {
  const auto info = runtime_info();
  std::ostringstream out;
  out << "commit " << git_commit() << " | cpu: " << cpu_model() << " | BLAS: " << info.blas
      << "\nthreads: torch " << info.torch_threads << ", kernels " << info.kernel_threads
      << ", BLAS " << info.blas_threads << " | CPU code: " << cpu_clone() << " clones, "
      << (panel_width_supported() > 0
              ? "packed GEMM " + std::to_string(panel_width_supported()) + " columns"
              : std::string("no packed GEMM"))
      << " | device " << device.str();
  return out.str();
}

}  // namespace lol::bench
