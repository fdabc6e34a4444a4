// lol train: train any family from scratch, or resume a run exactly.
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "commands.h"
#include "infer/generate.h"
#include "model/checkpoint.h"
#include "tasks/copy_task.h"
#include "tasks/score.h"
#include "train/trainer.h"
#include "util/files.h"
#include "util/progress.h"

namespace lol::cli {
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

}  // namespace

void add_train_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  auto* cmd = app.add_subcommand("train", "train a model from scratch, or resume a run");
  struct Opts {
    ModelFlags model;
    std::string out, resume, data;
    std::vector<std::string> train_overrides;
    int64_t steps = 0;
    uint64_t seed = 0;
    bool overwrite = false;
  };
  auto o = std::make_shared<Opts>();
  add_model_flags(cmd, o->model);
  cmd->add_option("--train-set", o->train_overrides,
                  "override a training config key: --train-set lr=1e-3");
  cmd->add_option("--data", o->data, "task:copy or a token shard path (training config 'data')");
  cmd->add_option("--steps", o->steps, "optimizer steps (training config 'steps')");
  cmd->add_option("--seed", o->seed, "initialisation, data and noise seed");
  cmd->add_option("--out", o->out, "run directory for a new run");
  cmd->add_option("--resume", o->resume, "run directory to continue from its latest checkpoint");
  cmd->add_flag("--overwrite", o->overwrite, "start over in a run directory that holds a run");
  commands.emplace_back(cmd, [o] {
    const auto device = selected_device();
    std::unique_ptr<Trainer> trainer;
    if (!o->resume.empty()) {
      LOL_CHECK(o->out.empty() && !o->model.given() && o->train_overrides.empty() &&
                    o->data.empty() && o->steps == 0,
                "--resume continues a run as it was configured; it takes no other run options");
      trainer = Trainer::resume(o->resume, device);
      std::cerr << "resuming " << o->resume << " at step " << trainer->step() << "\n";
    } else {
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
      // Only now, with every setting checked, may an old run be replaced.
      if (o->overwrite) remove_tree(o->out);
      LanguageModel model(config);
      model->initialize(o->seed);
      trainer = std::make_unique<Trainer>(model, tc, o->out, device);
    }
    const auto& tc = trainer->config();
    std::cerr << "training " << enum_name(trainer->model()->config().family) << " on " << tc.data
              << " for " << tc.steps << " steps (" << tc.batch_rows << " x " << tc.seq_len
              << " tokens x " << tc.grad_accum << " per step); metrics in "
              << (o->resume.empty() ? o->out : o->resume) << "/metrics.jsonl\n";
    install_interrupt_handler();
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
    if (interrupt_requested()) {
      progress.finish("interrupted at step " + std::to_string(trainer->step()) +
                      "; checkpoint saved in " + latest_checkpoint(where) +
                      "; continue with: lol train --resume " + where);
      return;
    }
    progress.finish("done: checkpoint " + latest_checkpoint(where));
    report(*trainer, device);
  });
}

}  // namespace lol::cli
