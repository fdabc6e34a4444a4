// lol train: train any family from scratch, or resume a run exactly.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "commands.h"
#include "infer/generate.h"
#include "model/checkpoint.h"
#include "tasks/copy_task.h"
#include "tasks/score.h"
#include "train/precision.h"
#include "train/sources.h"
#include "train/trainer.h"
#include "util/files.h"
#include "util/progress.h"
#include "util/runtime.h"

namespace lol::cli {

void stopped_by_signal() {
  const int signal = interrupt_signal();
  throw StoppedBySignal{128 + (signal ? signal : SIGINT)};
}
namespace {

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

struct Sample {
  std::vector<int64_t> tokens;      // prompt + continuation
  std::vector<RouteRecord> routes;  // every window of every depth, in decision order
};

// Greedy continuation with the cached decoder.
Sample greedy(LanguageModel& model, const Prompt& prompt, int64_t max_new, int64_t eos,
              torch::Device device) {
  SamplingOptions options;
  options.max_tokens = max_new;
  options.stop_tokens = {eos};
  auto g = generate(model, {prompt}, options, device).front();
  Sample s{prompt.tokens, std::move(g.routes)};
  s.tokens.insert(s.tokens.end(), g.tokens.begin(), g.tokens.end());
  return s;
}

void print_routes(const std::vector<RouteRecord>& routes) {
  if (routes.empty()) return;
  std::map<int64_t, std::vector<const RouteRecord*>> by_depth;
  for (const auto& r : routes) by_depth[r.depth].push_back(&r);
  std::cout << "routes (expert(gate) per window, by depth):\n";
  for (const auto& [depth, list] : by_depth) {
    std::cout << "  depth " << depth << ":";
    for (const auto* r : list) std::cout << " " << r->expert << "(" << fixed(r->gate, 2) << ")";
    std::cout << "\n";
  }
}

std::string shorten(const std::string& text, size_t limit) {
  return text.size() <= limit
             ? text
             : text.substr(0, limit / 2) + " ... " + text.substr(text.size() - limit / 2);
}

// A held-out puzzle per strategy: greedy answer from the prompt, scored like the paper.
void report_task(Trainer& trainer, const tasks::TaskData& task, torch::Device device) {
  const auto& vocab = tasks::vocabulary(task.kind);
  tasks::TaskSource source(task.kind, task.maze_size, trainer.config().seed, 1);
  tasks::ScoreSummary summary;
  std::vector<RouteRecord> first_routes;
  for (int s = 0; s < 5; ++s) {
    auto seq = source.sequence(s);
    auto doc = seq.document(vocab);
    auto sample = greedy(trainer.model(), prompt_from_document(doc, doc.prompt_len),
                         static_cast<int64_t>(doc.tokens.size()) - doc.prompt_len + 16,
                         vocab.id("<eos>", "report"), device);
    auto words = vocab.decode(sample.tokens);
    auto score = tasks::score_sequence(task.kind, words, s + 1, "sample");
    summary.add(score);
    if (s == 0) {
      first_routes = std::move(sample.routes);
      tasks::Tokens generated(words.begin() + doc.prompt_len, words.end());
      const auto full = seq.tokens();
      std::cout << "sample (strategy 1): " << shorten(tasks::join_words(generated), 300) << "\n"
                << "expected:            "
                << shorten(
                       tasks::join_words(tasks::Tokens(full.begin() + doc.prompt_len, full.end())),
                       300)
                << "\n";
    }
  }
  std::cout << "held-out puzzle, all five strategies, greedy:\n" << summary.to_text(task.kind);
  print_routes(first_routes);
}

// What the model learned, in words: held-out loss, one greedy sample and its routes.
void report(Trainer& trainer, torch::Device device) {
  const auto& tc = trainer.config();
  const auto eval = trainer.evaluate();
  std::cout << "eval loss " << fixed(eval.loss, 4) << ", next-token accuracy "
            << fixed(100 * eval.accuracy, 1) << "% (held-out, per target token, teacher-forced)\n";
  if (eval.skip_share)
    std::cout << "the skip taken by " << fixed(100 * *eval.skip_share, 1)
              << "% of the held-out windows the balancing counts\n";
  tasks::TaskData task;
  if (tasks::parse_task_data(tc.data, &task)) {
    report_task(trainer, task, device);
    return;
  }
  if (tc.data != "task:copy") return;
  auto doc = StrategyTask::make(tc.seed, 1, 0);
  const int64_t shown = doc.prompt_len + 2;  // through "A :"
  auto sample = greedy(trainer.model(), prompt_from_document(doc, shown),
                       static_cast<int64_t>(doc.tokens.size()) - shown + 2, 0, device);
  std::cout << "sample    " << StrategyTask::detokenize(sample.tokens) << "\n"
            << "expected  " << StrategyTask::detokenize(doc.tokens) << "\n"
            << (sample.tokens == doc.tokens ? "correct\n" : "incorrect\n");
  print_routes(sample.routes);
}

// lol train --nproc N: starts N workers (this command again, without --nproc) that join one
// process group through a FileStore, and waits for them. A worker that fails stops the others;
// SIGINT/SIGTERM reach every worker, which stop together at a step and checkpoint.
// A step's micro-batches are dealt to the workers: check before starting any that they divide.
void check_worker_count(int nproc, const std::string& resume,
                        const std::vector<std::string>& train_overrides) {
  TrainConfig tc;
  if (!resume.empty()) {
    tc = read_json_file(latest_checkpoint(resume) + "/train_state.json", TrainState::from_json)
             .config;
  } else {
    for (const auto& a : train_overrides) apply_override(TrainConfig::fields(), a, tc);
  }
  LOL_CHECK(tc.grad_accum % nproc == 0, "--nproc ", nproc, ": a step's ", tc.grad_accum,
            " micro-batch(es) (grad_accum) must divide among the workers; set --train-set "
            "grad_accum=",
            nproc, " or a multiple (docs/distributed.md)");
}

void launch_workers(int nproc) {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string a; std::getline(in, a, '\0');) args.push_back(a);
  std::vector<std::string> kept;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--nproc") {
      ++i;
      continue;
    }
    if (args[i].rfind("--nproc=", 0) == 0) continue;
    kept.push_back(args[i]);
  }
  const std::string store =
      "/tmp/lol_dist_" + std::to_string(::getpid()) + "_" +
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  std::vector<pid_t> pids;
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = ::fork();
    LOL_CHECK(pid >= 0, "--nproc: cannot start worker ", r);
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("LOL_DIST_STORE", store.c_str(), 1);
      std::vector<char*> argv;
      for (auto& a : kept) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv("/proc/self/exe", argv.data());
      std::_Exit(127);
    }
    pids.push_back(pid);
  }
  install_interrupt_handler();
  bool forwarded = false, stopped = false;
  std::string failure;
  // After a failure the others get time to see it and report the lost rank themselves; one that
  // is still there after that (hung, or stopped) is killed.
  std::chrono::steady_clock::time_point kill_at;
  size_t running = pids.size();
  while (running > 0) {
    if (!failure.empty() && std::chrono::steady_clock::now() > kill_at)
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL);
    int status = 0;
    const pid_t done = ::waitpid(-1, &status, WNOHANG);
    if (done > 0) {
      --running;
      const auto r = std::find(pids.begin(), pids.end(), done) - pids.begin();
      pids[static_cast<size_t>(r)] = -1;
      // A worker that the forwarded signal stopped has saved its part and exits 128 + signal.
      const bool by_signal =
          forwarded && WIFEXITED(status) &&
          (WEXITSTATUS(status) == 128 + SIGINT || WEXITSTATUS(status) == 128 + SIGTERM);
      stopped = stopped || by_signal;
      const bool ok = WIFEXITED(status) && (WEXITSTATUS(status) == 0 || by_signal);
      if (!ok && failure.empty()) {
        failure =
            "worker rank " + std::to_string(r) +
            (WIFSIGNALED(status) ? " was killed by signal " + std::to_string(WTERMSIG(status))
                                 : " exited with status " + std::to_string(WEXITSTATUS(status)));
        // The others stop: their collectives fail at once (or after the process group's timeout
        // when a worker hangs), they name the lost rank and exit.
        for (pid_t p : pids)
          if (p > 0) ::kill(p, SIGTERM);
        const auto grace = std::clamp<std::chrono::milliseconds>(
            distributed_timeout_from_env(), std::chrono::seconds(10), std::chrono::seconds(60));
        kill_at = std::chrono::steady_clock::now() + grace;
      }
      continue;
    }
    if (interrupt_requested() && !forwarded) {
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGINT);
      forwarded = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::unlink(store.c_str());
  LOL_CHECK(failure.empty(), failure,
            "; the run's last checkpoint is intact: resume it with --resume (at any number of "
            "workers)");
  if (stopped) stopped_by_signal();
}

}  // namespace

void add_train_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  auto* cmd = app.add_subcommand("train", "train a model from scratch, or resume a run");
  struct Opts {
    ModelFlags model;
    std::string out, resume, data;
    std::vector<std::string> train_overrides;
    int64_t steps = 0;
    uint64_t seed = 0;
    bool overwrite = false, dry_run = false;
    int nproc = 1;
  };
  auto o = std::make_shared<Opts>();
  add_model_flags(cmd, o->model);
  cmd->add_option("--train-set", o->train_overrides,
                  "override a training config key: --train-set lr=1e-3");
  cmd->add_option("--data", o->data,
                  "task:NAME, corpus:DIR (lol corpus build), a token shard path, or a mixture "
                  "mix:W*SPEC,W*SPEC,... (training config 'data'; docs/training.md)");
  cmd->add_option("--steps", o->steps, "optimizer steps (training config 'steps')");
  cmd->add_option("--seed", o->seed,
                  "initialisation, data and noise seed (training config 'seed')");
  cmd->add_option("--out", o->out, "run directory for a new run");
  cmd->add_option("--resume", o->resume, "run directory to continue from its latest checkpoint");
  cmd->add_flag("--overwrite", o->overwrite, "start over in a run directory that holds a run");
  cmd->add_flag("--dry-run", o->dry_run,
                "check a new run's settings and data, write its config.json and "
                "train_config.json into --out, and stop before training");
  cmd->add_option("--nproc", o->nproc,
                  "data-parallel workers on this machine (docs/distributed.md); torchrun's "
                  "environment starts one worker per process instead")
      ->check(at_least(1));
  // A new run's settings, every one checked: the model's config and the training config.
  auto resolve_new_run = [o] {
    LOL_CHECK(!o->out.empty(), "give --out DIR for a new run, or --resume DIR");
    LOL_CHECK(o->overwrite || !path_exists(o->out + "/checkpoints"), "--out: ", o->out,
              " already holds a run (resume it with --resume, or pass --overwrite)");
    auto config = o->model.resolve();
    TrainConfig tc;
    tc.seed = o->seed;
    if (!o->data.empty()) tc.data = o->data;
    if (o->steps > 0) tc.steps = o->steps;
    for (const auto& a : o->train_overrides) apply_override(TrainConfig::fields(), a, tc);
    tc.validate();
    tc.validate_for(config);
    // The data must fit the model's vocabulary: checked here so that a bad pairing is one error
    // from this process, not one from each worker or a failure after the model is built.
    check_source_vocab(*open_source(tc.data, tc.seed, 0), tc.data, config.vocab_size);
    return std::make_pair(config, tc);
  };
  commands.emplace_back(cmd, [o, resolve_new_run] {
    if (o->dry_run) {
      LOL_CHECK(o->resume.empty(), "--dry-run checks a new run; it does not take --resume");
      LOL_CHECK(!o->overwrite, "--dry-run never replaces a run; it does not take --overwrite");
      const auto [config, tc] = resolve_new_run();
      if (o->nproc > 1) check_worker_count(o->nproc, "", o->train_overrides);
      make_directories(o->out);
      write_file_atomic(o->out + "/config.json", config.to_json().dump(2) + "\n");
      write_file_atomic(o->out + "/train_config.json", tc.to_json().dump(2) + "\n");
      std::cout << "dry run: " << enum_name(config.family) << " on " << tc.data << " for "
                << tc.steps << " steps of " << tc.batch_rows << " x " << tc.seq_len << " tokens x "
                << tc.grad_accum << "; settings in " << o->out
                << "/config.json and train_config.json\n";
      return;
    }
    const auto dist_config = distributed_from_env();
    if (o->nproc > 1 && !dist_config.active()) {
      check_worker_count(o->nproc, o->resume, o->train_overrides);
      if (o->resume.empty()) resolve_new_run();  // a new run's settings, checked once
      return launch_workers(o->nproc);
    }
    auto device = selected_device();
    std::shared_ptr<Distributed> dist;
    if (dist_config.active()) {
      device = worker_device(device, dist_config,
                             device.is_cuda() ? static_cast<int>(torch::cuda::device_count()) : 0);
      // Local workers share the cores unless --threads says otherwise.
      if (global_options().threads == 0)
        configure_runtime(std::max(
            1, static_cast<int>(std::thread::hardware_concurrency()) / dist_config.local_world));
      dist = std::make_shared<Distributed>(dist_config, device);
    }
    const bool main_rank = !dist || dist->rank() == 0;
    std::unique_ptr<Trainer> trainer;
    if (!o->resume.empty()) {
      LOL_CHECK(o->out.empty() && !o->model.given() && o->train_overrides.empty() &&
                    o->data.empty() && o->steps == 0,
                "--resume continues a run as it was configured; it takes no other run options");
      trainer = Trainer::resume(o->resume, device, dist);
      if (main_rank)
        std::cerr << "resuming " << o->resume << " at step " << trainer->step() << "\n";
    } else {
      const auto [config, tc] = resolve_new_run();
      // Only now, with every setting checked, may an old run be replaced.
      if (o->overwrite && main_rank) remove_tree(o->out);
      LanguageModel model(config);
      // The training config's seed (--seed, or a --train-set / config file override) seeds the
      // initialisation too, so train_config.json reproduces the whole run.
      model->initialize(tc.seed);
      trainer = std::make_unique<Trainer>(model, tc, o->out, device, dist);
    }
    const auto& tc = trainer->config();
    install_interrupt_handler();
    if (!main_rank) {  // the other ranks train silently; rank 0 reports and writes
      trainer->run([] { return interrupt_requested(); });
      if (trainer->step() < trainer->config().steps) stopped_by_signal();
      return;
    }
    std::cerr << "training " << enum_name(trainer->model()->config().family) << " on " << tc.data
              << " for " << tc.steps << " steps (" << tc.batch_rows << " x " << tc.seq_len
              << " tokens x " << tc.grad_accum << " per step"
              << (dist ? ", " + std::to_string(dist->world()) + " workers" : std::string())
              << "); metrics in " << (o->resume.empty() ? o->out : o->resume) << "/metrics.jsonl\n";
    if (uses_bf16_autocast(tc.precision, device)) {
      const auto note = bf16_speed_note(device);
      if (!note.empty()) std::cerr << note << "\n";
    }
    Progress progress("train", tc.steps, trainer->step(), tc.log_every);
    double last_eval = -1, last_accuracy = 0;
    trainer->run(
        [] { return interrupt_requested(); },
        [&](const StepMetrics& m) {
          if (m.eval_loss) last_eval = *m.eval_loss;
          if (m.eval_accuracy) last_accuracy = *m.eval_accuracy;
          std::string info = "loss " + fixed(m.loss, 4) + " lr " + fixed(m.lr * 1e3, 3) + "e-3 " +
                             fixed(m.tokens_per_s, 0) + " tok/s depth " + std::to_string(m.depth);
          if (last_eval >= 0)
            info += " eval " + fixed(last_eval, 4) + " (" + fixed(100 * last_accuracy, 1) + "%)";
          progress.update(m.step, info);
        });
    const std::string where = o->resume.empty() ? o->out : o->resume;
    if (trainer->step() < tc.steps) {  // a signal stopped it
      progress.finish("interrupted at step " + std::to_string(trainer->step()) +
                      "; checkpoint saved in " + latest_checkpoint(where) +
                      "; continue with: lol train --resume " + where);
      stopped_by_signal();
    }
    progress.finish("done: checkpoint " + latest_checkpoint(where));
    report(*trainer, device);
  });
}

}  // namespace lol::cli
