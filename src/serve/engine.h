#pragma once
// The serving engine: one thread owns a Decoder and runs continuous batching across requests.
// Requests wait in a bounded queue, join the running batch between decode steps (one prefill
// per admission round) and leave it when they finish or are cancelled; at each routed depth
// the windows of all running sequences that chose the same expert run together (the decoder
// groups rows by expert). Every choice samples from its own generator seeded by (seed, choice),
// so a request's tokens do not depend on what else is running.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "infer/generate.h"
#include "serve/metrics.h"

namespace lol::serve {

// A token's log-probability under the model (log-softmax of its logits over the whole
// vocabulary) and the most likely alternatives, from the same floats.
struct TokenLogprob {
  int64_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int64_t, float>> top;  // most likely first
};

struct Request {
  Prompt prompt;
  SamplingOptions sampling;  // temperature, top-k/p, seed, max tokens, stop tokens, vocab limit
  // Stop strings: called with a choice's tokens after each one; true stops it ("stop").
  std::function<bool(const std::vector<int64_t>& generated)> stop;
  int64_t n = 1;                            // choices
  int64_t logprobs = -1;                    // -1: none; k >= 0: each token's and k alternatives
  bool echo = false;                        // also the prompt tokens' log-probabilities
  std::shared_ptr<const ForcedPath> force;  // null: route freely
};

// One continuation of a request as far as it got.
struct Choice {
  std::vector<int64_t> tokens;
  std::vector<TokenLogprob> logprobs;  // per generated token, when asked for
  std::vector<RouteRecord> routes;     // the prompt's windows, then each window as it opens
  std::string finish_reason;           // "stop", "length" or "cancelled"; empty while running
  double first_token_seconds = -1;     // from submission
};

// A request in flight, shared by the engine and whoever waits for it.
class Job {
 public:
  explicit Job(Request request);
  const Request& request() const { return request_; }
  // Blocks until `ready` holds (checked under the job's lock) or `timeout` passes.
  bool wait(const std::function<bool(const Job&)>& ready, std::chrono::milliseconds timeout);
  // A copy of the state, taken under the lock; without routes (which grow with every window)
  // it is cheap enough to take at every token of a stream.
  std::vector<Choice> choices(bool with_routes = true) const;
  std::vector<TokenLogprob> prompt_logprobs() const;  // with echo and logprobs; [0] is empty
  std::string error() const;  // why the engine could not run it (empty: none)
  bool finished() const;      // every choice finished, or failed
  void cancel();              // drops the job at the next step (a client that went away)
  bool cancelled() const;

  // Unlocked views for the `ready` predicate of wait().
  const std::vector<Choice>& choices_locked() const { return choices_; }
  bool finished_locked() const;
  const std::string& error_locked() const { return error_; }

 private:
  friend class Engine;
  Request request_;
  std::chrono::steady_clock::time_point submitted_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Choice> choices_;
  std::vector<TokenLogprob> prompt_logprobs_;
  std::string error_;
  bool cancelled_ = false;
};

struct EngineOptions {
  int64_t parallel = 8;    // sequences decoded at once
  int64_t max_queue = 64;  // requests waiting for a place; more are refused
};

// Compute threads a server uses on `device` unless told otherwise: on the CPU all cores but
// one, which the HTTP threads need at every token (on 2 cores, 2 compute threads lose 2-4x to
// the wake-ups of HTTP threads; docs/serving.md); elsewhere the process's setting.
int default_serving_threads(torch::Device device);

class QueueFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Engine {
 public:
  // `metrics` (may be null) gets tokens, batch sizes, latencies and expert occupancy.
  Engine(LanguageModel model, torch::Device device, EngineOptions options, Metrics* metrics);
  ~Engine();
  const ModelConfig& config() const { return model_->config(); }
  const EngineOptions& options() const { return options_; }

  // Queues a request (checked: throws lol::Error naming what is wrong). Throws QueueFull when
  // max_queue requests already wait, and lol::Error after shutdown began.
  std::shared_ptr<Job> submit(Request request);
  // Stops taking requests, lets running and queued ones finish for up to `grace`, cancels what
  // is left and joins the engine thread. Idempotent.
  void shutdown(std::chrono::milliseconds grace);
  int64_t queued() const;
  int64_t running() const;  // sequences in the batch

  // Declares the metrics the engine updates on `metrics`.
  static void declare_metrics(Metrics& metrics);

 private:
  struct Row;
  void loop();
  void admit_waiting();
  void step();
  // Samples row r's next token from `logits` and records it with the routes of windows that
  // opened for it; finishes the choice at a stop or its length limit.
  void take(size_t r, const torch::Tensor& logits, std::vector<RouteRecord> routes);
  void retire_finished();
  void fail_all(const std::string& message);

  LanguageModel model_;
  torch::Device device_;
  EngineOptions options_;
  Metrics* metrics_;
  int threads_;  // the constructing thread's compute threads, applied on the engine thread
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> waiting_;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point cancel_after_;
  // Engine-thread state.
  std::unique_ptr<Decoder> decoder_;
  std::vector<Row> rows_;
  int64_t running_ = 0;  // mirror of rows_.size() for other threads (under mutex_)
  std::thread thread_;
};

}  // namespace lol::serve
