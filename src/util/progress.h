#pragma once
// Progress for long commands: a redrawn bar with rate and ETA on a terminal, plain lines
// (every `line_every` updates) when stderr is not a TTY.
#include <chrono>
#include <string>

namespace lol {

class Progress {
 public:
  // Not on a terminal, a plain line every `line_every` units (0: about twenty over the run).
  Progress(std::string label, int64_t total, int64_t start = 0, int64_t line_every = 0);
  // done: units completed so far; info: extra text such as "loss 2.31".
  void update(int64_t done, const std::string& info);
  void finish(const std::string& info);

 private:
  std::string label_;
  int64_t total_, start_, line_every_, last_line_ = -1;
  bool tty_;
  std::chrono::steady_clock::time_point began_;
};

// "1h2m3s"; "?" when unknown (negative) or absurd.
std::string format_duration(double seconds);
// Units per second the way tqdm writes them: "12.3 it/s", below one "2.5 s/it".
std::string format_rate(double per_second);

// SIGINT / SIGTERM set a flag instead of killing the process, so loops can save and stop.
void install_interrupt_handler();
bool interrupt_requested();
// The signal that asked to stop (SIGINT or SIGTERM), 0 when none did.
int interrupt_signal();

}  // namespace lol
