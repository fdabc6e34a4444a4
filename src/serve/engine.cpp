#include "serve/engine.h"

#include <algorithm>
#include <map>

#include "util/error.h"
#include "util/runtime.h"

namespace lol::serve {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The log-probability of `token` and the `k` most likely ids below `limit`, from one row of
// logits: both read the same log-softmax, so a greedy token's value equals the top one's.
TokenLogprob token_logprob(const torch::Tensor& logits, int64_t token, int64_t k, int64_t limit) {
  auto lp = torch::log_softmax(logits.to(torch::kCPU, torch::kFloat32), 0).contiguous();
  TokenLogprob out;
  out.token = token;
  out.logprob = lp[token].item<float>();
  if (k > 0) {
    auto within = lp.narrow(0, 0, std::min(limit, lp.size(0)));
    auto top = within.topk(std::min(k, within.size(0)));
    auto values = std::get<0>(top), ids = std::get<1>(top);
    for (int64_t i = 0; i < values.size(0); ++i)
      out.top.emplace_back(ids[i].item<int64_t>(), values[i].item<float>());
  }
  return out;
}

}  // namespace

Job::Job(Request request) : request_(std::move(request)), submitted_(Clock::now()) {
  choices_.resize(static_cast<size_t>(request_.n));
}

bool Job::wait(const std::function<bool(const Job&)>& ready, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return ready(*this); });
}

std::vector<Choice> Job::choices(bool with_routes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (with_routes) return choices_;
  std::vector<Choice> light(choices_.size());
  for (size_t i = 0; i < choices_.size(); ++i) {
    light[i].tokens = choices_[i].tokens;
    light[i].logprobs = choices_[i].logprobs;
    light[i].finish_reason = choices_[i].finish_reason;
    light[i].first_token_seconds = choices_[i].first_token_seconds;
  }
  return light;
}

std::vector<TokenLogprob> Job::prompt_logprobs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return prompt_logprobs_;
}

std::string Job::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

bool Job::finished_locked() const {
  if (!error_.empty()) return true;
  for (const auto& c : choices_)
    if (c.finish_reason.empty()) return false;
  return true;
}

bool Job::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_locked();
}

void Job::cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
}

bool Job::cancelled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cancelled_;
}

// One sequence of the batch: choice `choice` of `job`, fed `next` at the next step.
struct Engine::Row {
  std::shared_ptr<Job> job;
  int64_t choice = 0;
  torch::Generator generator;
  int64_t next = 0;
  bool done = false;
  Clock::time_point last_token;
};

void Engine::declare_metrics(Metrics& m) {
  using T = Metrics::Type;
  m.declare("lol_prompt_tokens_total", T::kCounter, "Prompt tokens prefilled.");
  m.declare("lol_generated_tokens_total", T::kCounter, "Tokens generated.");
  m.declare("lol_queue_depth", T::kGauge, "Requests waiting for a place in the batch.");
  m.declare("lol_batch_size", T::kGauge, "Sequences in the running batch.");
  m.declare("lol_step_batch_size", T::kHistogram, "Sequences per decode step.",
            {1, 2, 4, 8, 16, 32, 64, 128});
  m.declare("lol_prefill_batch_size", T::kHistogram, "Sequences per prefill (admission round).",
            {1, 2, 4, 8, 16, 32, 64, 128});
  m.declare("lol_time_to_first_token_seconds", T::kHistogram,
            "From a request's arrival to its first token.",
            {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30});
  m.declare("lol_token_latency_seconds", T::kHistogram,
            "Between consecutive tokens of one sequence.",
            {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1});
  m.declare("lol_expert_windows_total", T::kCounter,
            "Windows routed to each expert at each routed depth (prompts and generations).");
}

int default_serving_threads(torch::Device device) {
  if (!device.is_cpu()) return at::get_num_threads();
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 1);
}

Engine::Engine(LanguageModel model, torch::Device device, EngineOptions options, Metrics* metrics)
    : model_(std::move(model)),
      device_(device),
      options_(options),
      metrics_(metrics),
      threads_(at::get_num_threads()) {
  LOL_CHECK(options_.parallel >= 1, "--parallel must be >= 1, got ", options_.parallel);
  LOL_CHECK(options_.max_queue >= 0, "--max-queue must be >= 0, got ", options_.max_queue);
  model_->eval();
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  shutdown(std::chrono::milliseconds(0));
}

int64_t Engine::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(waiting_.size());
}

int64_t Engine::running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_;
}

std::shared_ptr<Job> Engine::submit(Request request) {
  const auto& c = model_->config();
  const auto& p = request.prompt;
  request.sampling.validate();
  LOL_CHECK(!p.tokens.empty(), "the prompt is empty: it needs at least one token");
  LOL_CHECK(static_cast<int64_t>(p.tokens.size()) <= c.max_seq_len, "the prompt has ",
            p.tokens.size(), " tokens, more than the model's context of ", c.max_seq_len);
  for (auto t : p.tokens)
    LOL_CHECK(t >= 0 && t < c.vocab_size, "token id ", t, " is outside the vocabulary [0, ",
              c.vocab_size, ")");
  LOL_CHECK(request.n >= 1 && request.n <= options_.parallel, "n must be in [1, ",
            options_.parallel, "] (the server's --parallel), got ", request.n);
  if (request.force) {
    const auto* routing = model_->core().routing();
    LOL_CHECK(routing, "force: a ", enum_name(c.family),
              " model has no window routes to force (family lol has)");
    routing->check(*request.force);
  }
  auto job = std::make_shared<Job>(std::move(request));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    LOL_CHECK(!stopping_, "the server is shutting down");
    const bool fits_now = waiting_.empty() && running_ + job->request().n <= options_.parallel;
    if (!fits_now && static_cast<int64_t>(waiting_.size()) >= options_.max_queue)
      throw QueueFull("the queue is full (" + std::to_string(waiting_.size()) +
                      " requests wait; --max-queue " + std::to_string(options_.max_queue) + ")");
    waiting_.push_back(job);
    if (metrics_) metrics_->set("lol_queue_depth", static_cast<double>(waiting_.size()));
  }
  wake_.notify_one();
  return job;
}

void Engine::shutdown(std::chrono::milliseconds grace) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stopping_) {
      stopping_ = true;
      cancel_after_ = Clock::now() + grace;
    }
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Engine::fail_all(const std::string& message) {
  auto fail = [&](Job& job) {
    std::lock_guard<std::mutex> lock(job.mutex_);
    if (job.finished_locked()) return;
    job.error_ = message;
    job.changed_.notify_all();
  };
  for (auto& r : rows_) fail(*r.job);
  rows_.clear();
  decoder_.reset();
  std::lock_guard<std::mutex> lock(mutex_);
  running_ = 0;
}

void Engine::retire_finished() {
  std::vector<int64_t> keep;
  for (size_t r = 0; r < rows_.size(); ++r) {
    auto& row = rows_[r];
    if (!row.done && row.job->cancelled()) {
      std::lock_guard<std::mutex> lock(row.job->mutex_);
      row.job->choices_[static_cast<size_t>(row.choice)].finish_reason = "cancelled";
      row.job->changed_.notify_all();
      row.done = true;
    }
    if (!row.done) keep.push_back(static_cast<int64_t>(r));
  }
  if (keep.size() == rows_.size()) return;
  if (keep.empty())
    decoder_.reset();
  else
    decoder_->retain(keep);
  rows_ = kept_rows(rows_, keep);
  std::lock_guard<std::mutex> lock(mutex_);
  running_ = static_cast<int64_t>(rows_.size());
  if (metrics_) metrics_->set("lol_batch_size", static_cast<double>(running_));
}

void Engine::admit_waiting() {
  std::vector<std::shared_ptr<Job>> taking;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t free = options_.parallel - static_cast<int64_t>(rows_.size());
    while (!waiting_.empty()) {
      auto& job = waiting_.front();
      if (job->cancelled()) {
        std::lock_guard<std::mutex> job_lock(job->mutex_);
        for (auto& c : job->choices_) c.finish_reason = "cancelled";
        job->changed_.notify_all();
        waiting_.pop_front();
        continue;
      }
      if (job->request().n > free) break;
      free -= job->request().n;
      running_ += job->request().n;  // counted from now on: submit() sees the batch as full
      taking.push_back(job);
      waiting_.pop_front();
    }
    if (metrics_) metrics_->set("lol_queue_depth", static_cast<double>(waiting_.size()));
  }
  if (taking.empty()) return;
  // One prefill per forced path among the newcomers (most often one: no path).
  std::map<const ForcedPath*, std::vector<std::shared_ptr<Job>>> groups;
  for (auto& job : taking) groups[job->request().force.get()].push_back(job);
  const auto& c = model_->config();
  for (auto& [force, jobs] : groups) {
    std::vector<Prompt> prompts;
    for (auto& job : jobs)
      for (int64_t i = 0; i < job->request().n; ++i) prompts.push_back(job->request().prompt);
    if (!decoder_) decoder_ = std::make_unique<Decoder>(model_, device_);
    const size_t base = rows_.size();
    auto out = decoder_->admit(prompts, force);
    if (metrics_) metrics_->observe("lol_prefill_batch_size", static_cast<double>(prompts.size()));
    size_t i = 0;
    for (auto& job : jobs) {
      const auto& req = job->request();
      if (metrics_)
        metrics_->add("lol_prompt_tokens_total", static_cast<double>(req.prompt.tokens.size()));
      if (req.echo && req.logprobs >= 0) {
        // Prompt token t's log-probability comes from the logits after token t - 1.
        const auto& logits = out.prompt_logits[i];
        std::vector<TokenLogprob> lps(1);
        lps[0].token = req.prompt.tokens[0];
        for (size_t t = 1; t < req.prompt.tokens.size(); ++t)
          lps.push_back(token_logprob(
              logits[static_cast<int64_t>(t) - 1], req.prompt.tokens[t], req.logprobs,
              req.sampling.vocab_limit > 0 ? req.sampling.vocab_limit : c.vocab_size));
        std::lock_guard<std::mutex> lock(job->mutex_);
        job->prompt_logprobs_ = std::move(lps);
      }
      for (int64_t k = 0; k < req.n; ++k, ++i) {
        Row row;
        row.job = job;
        row.choice = k;
        row.generator = sequence_generator(req.sampling.seed, k);
        row.last_token = job->submitted_;
        rows_.push_back(std::move(row));
      }
    }
    // The prompt windows' routes, then every new row's first token.
    std::vector<std::vector<RouteRecord>> routes(prompts.size());
    for (auto& r : out.routes) routes[static_cast<size_t>(r.sequence) - base].push_back(r);
    for (size_t j = 0; j < prompts.size(); ++j) {
      auto& row = rows_[base + j];
      if (row.job->request().sampling.max_tokens == 0) {
        std::lock_guard<std::mutex> lock(row.job->mutex_);
        auto& choice = row.job->choices_[static_cast<size_t>(row.choice)];
        choice.routes = std::move(routes[j]);
        choice.finish_reason = "length";
        row.done = true;
        row.job->changed_.notify_all();
        continue;
      }
      take(base + j, out.logits[static_cast<int64_t>(j)], std::move(routes[j]));
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  running_ = static_cast<int64_t>(rows_.size());
  if (metrics_) metrics_->set("lol_batch_size", static_cast<double>(running_));
}

void Engine::take(size_t r, const torch::Tensor& logits, std::vector<RouteRecord> routes) {
  auto& row = rows_[r];
  Job& job = *row.job;
  const auto& req = job.request();
  const auto& c = model_->config();
  const int64_t token = sample_token(logits, req.sampling, row.generator);
  TokenLogprob lp;
  if (req.logprobs >= 0)
    lp = token_logprob(logits, token, req.logprobs,
                       req.sampling.vocab_limit > 0 ? req.sampling.vocab_limit : c.vocab_size);
  const auto now = Clock::now();
  if (metrics_) {
    for (const auto& rec : routes)
      metrics_->add("lol_expert_windows_total", 1,
                    {{"depth", std::to_string(rec.depth)}, {"expert", std::to_string(rec.expert)}});
    metrics_->add("lol_generated_tokens_total");
  }
  std::lock_guard<std::mutex> lock(job.mutex_);
  auto& choice = job.choices_[static_cast<size_t>(row.choice)];
  for (auto& rec : routes) {
    rec.sequence = row.choice;
    choice.routes.push_back(std::move(rec));
  }
  choice.tokens.push_back(token);
  if (req.logprobs >= 0) choice.logprobs.push_back(std::move(lp));
  if (choice.tokens.size() == 1) {
    choice.first_token_seconds = seconds_between(job.submitted_, now);
    if (metrics_) metrics_->observe("lol_time_to_first_token_seconds", choice.first_token_seconds);
  } else if (metrics_) {
    metrics_->observe("lol_token_latency_seconds", seconds_between(row.last_token, now));
  }
  row.last_token = now;
  row.next = token;
  const auto& stops = req.sampling.stop_tokens;
  if (std::find(stops.begin(), stops.end(), token) != stops.end() ||
      (req.stop && req.stop(choice.tokens)))
    choice.finish_reason = "stop";
  else if (static_cast<int64_t>(choice.tokens.size()) >= req.sampling.max_tokens ||
           decoder_->position(static_cast<int64_t>(r)) + 1 >= c.max_seq_len)
    choice.finish_reason = "length";
  row.done = !choice.finish_reason.empty();
  job.changed_.notify_all();
}

void Engine::step() {
  std::vector<int64_t> next;
  for (const auto& row : rows_) next.push_back(row.next);
  auto out = decoder_->step(next);
  if (metrics_) metrics_->observe("lol_step_batch_size", static_cast<double>(rows_.size()));
  std::vector<std::vector<RouteRecord>> routes(rows_.size());
  for (auto& rec : out.routes) routes[static_cast<size_t>(rec.sequence)].push_back(std::move(rec));
  for (size_t r = 0; r < rows_.size(); ++r)
    take(r, out.logits[static_cast<int64_t>(r)], std::move(routes[r]));
}

void Engine::loop() {
  // Thread counts of OpenMP are per thread: this one starts with the defaults.
  configure_runtime(threads_);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !rows_.empty(); });
      if (stopping_ && waiting_.empty() && rows_.empty()) break;
      if (stopping_ && Clock::now() >= cancel_after_) {
        for (auto& job : waiting_) job->cancel();
        for (auto& row : rows_) row.job->cancel();
      }
    }
    try {
      retire_finished();
      admit_waiting();
      retire_finished();
      if (!rows_.empty()) step();
    } catch (const std::exception& e) {
      fail_all(std::string("the engine failed: ") + e.what());
    }
  }
}

}  // namespace lol::serve
