#include "util/progress.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <sstream>

namespace lol {

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  std::ostringstream out;
  if (s >= 3600) out << s / 3600 << "h";
  if (s >= 60) out << (s % 3600) / 60 << "m";
  out << s % 60 << "s";
  return out.str();
}

std::string format_rate(double per_second) {
  if (!(per_second > 0) || per_second > 1e9) return "? it/s";
  // Three significant digits, none after the point from 100 on (no exponents).
  const auto number = [](double x) {
    char text[32];
    std::snprintf(text, sizeof text, x >= 100 ? "%.0f" : "%.3g", x);
    return std::string(text);
  };
  return per_second >= 1 ? number(per_second) + " it/s" : number(1 / per_second) + " s/it";
}

Progress::Progress(std::string label, int64_t total, int64_t start, int64_t line_every)
    : label_(std::move(label)),
      total_(total),
      start_(start),
      line_every_(std::max<int64_t>(1, line_every > 0 ? line_every : (total - start) / 20)),
      last_line_(start),
      tty_(::isatty(STDERR_FILENO) != 0),
      began_(std::chrono::steady_clock::now()) {}

void Progress::update(int64_t done, const std::string& info) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began_).count();
  const double rate = elapsed > 0 ? (done - start_) / elapsed : 0;
  const double eta = rate > 0 ? (total_ - done) / rate : -1;
  std::ostringstream line;
  if (tty_) {
    const int width = 24;
    const int filled = total_ > 0 ? static_cast<int>(width * done / total_) : 0;
    line << "\r" << label_ << " [" << std::string(filled, '#') << std::string(width - filled, ' ')
         << "] " << done << "/" << total_ << " " << info << " | " << format_rate(rate) << " ETA "
         << format_duration(eta) << "\033[K";
    std::cerr << line.str() << std::flush;
  } else if (done - last_line_ >= line_every_ || done == total_) {
    last_line_ = done;
    line << label_ << " " << done << "/" << total_ << " " << info << " | " << format_rate(rate)
         << " elapsed " << format_duration(elapsed) << " ETA " << format_duration(eta) << "\n";
    std::cerr << line.str() << std::flush;
  }
}

void Progress::finish(const std::string& info) {
  if (tty_) std::cerr << "\n";
  if (!info.empty()) std::cerr << label_ << ": " << info << "\n";
}

namespace {
std::atomic<int> g_signal{0};
extern "C" void on_signal(int signal) {
  g_signal.store(signal);
}
}  // namespace

void install_interrupt_handler() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}
bool interrupt_requested() {
  return g_signal.load() != 0;
}
int interrupt_signal() {
  return g_signal.load();
}

}  // namespace lol
