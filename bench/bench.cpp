// lol bench: llama-bench style measurements. Every combination of the comma-separated options
// is run `--reps` times after warm-up; each row reports the mean and spread, and the header
// stamps the commit, BLAS, thread counts and the machine's measured fp32 matmul peak.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "../tools/commands.h"
#include "model/model.h"
#include "model/stats.h"
#include "tasks/task.h"
#include "train/trainer.h"
#include <filesystem>
#include "util/runtime.h"
#include "util/version.h"

namespace lol::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Spread {
  double mean = 0, stddev = 0;
};
Spread spread(const std::vector<double>& xs) {
  Spread s;
  for (double x : xs) s.mean += x;
  s.mean /= static_cast<double>(xs.size());
  for (double x : xs) s.stddev += (x - s.mean) * (x - s.mean);
  s.stddev = xs.size() > 1 ? std::sqrt(s.stddev / static_cast<double>(xs.size() - 1)) : 0.0;
  return s;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// fp32 GEMM throughput of this machine with the current thread settings (GFLOP/s).
void synchronize(torch::Device device) {
#if TORCH_VERSION_MAJOR >= 2
  if (device.is_cuda()) torch::cuda::synchronize();
#endif
}

Spread measure_matmul_peak(int64_t size, int reps, torch::Device device) {
  auto a = torch::randn({size, size}, device), b = torch::randn({size, size}, device);
  torch::mm(a, b);
  synchronize(device);
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    auto c = torch::mm(a, b);
    synchronize(device);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(2.0 * size * size * size / s / 1e9);
  }
  return spread(rates);
}

// "dense-sliding" -> family dense, core_attention sliding.
ModelConfig family_config(ModelConfig base, const std::string& spec) {
  auto dash = spec.find('-');
  base.family = spec.substr(0, dash);
  if (dash != std::string::npos) base.core_attention = spec.substr(dash + 1);
  if (base.family == "looped") base.loop_blocks = std::max<int64_t>(1, base.library_size);
  if (base.family == "moe") base.moe_experts = base.library_size;
  base.validate();
  return base;
}

struct Row {
  std::string family, mode;
  int64_t seq_len, batch;
  Spread tokens_per_s, ms_per_step;
  double mfu = 0, flops_per_token = 0;
};

// Task generation is a data pipeline: puzzles/s to generate, sequences/s per strategy to trace
// and tokenize, and the whole streaming source's tokens/s (what `lol train --data task:...`
// consumes), each over `reps` timed repetitions of `count` puzzles.
void bench_tasks(int64_t count, int reps, const std::string& output) {
  struct TaskRow {
    std::string task, what;
    Spread per_s;
    std::string unit;
  };
  std::vector<TaskRow> rows;
  auto time_it = [&](const std::function<double()>& body) {  // body returns units done
    std::vector<double> rates;
    for (int r = 0; r < reps; ++r) {
      auto t0 = Clock::now();
      const double units = body();
      rates.push_back(units / std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return spread(rates);
  };
  uint64_t seed = 1000;
  for (auto kind : {tasks::Kind::kSudoku, tasks::Kind::kMaze}) {
    const std::string name = tasks::kind_name(kind);
    std::vector<sudoku::Puzzle> sudokus;
    std::vector<maze::Maze> mazes;
    rows.push_back({name, "generate", time_it([&] {
                      sudokus.clear();
                      mazes.clear();
                      ++seed;
                      for (int64_t i = 0; i < count; ++i) {
                        if (kind == tasks::Kind::kSudoku) sudokus.push_back(sudoku::generate(seed, i));
                        else mazes.push_back(maze::generate(8, seed, i));
                      }
                      return static_cast<double>(count);
                    }), "puzzles/s"});
    for (int s = 1; s <= 5; ++s) {
      const std::string strategy = kind == tasks::Kind::kSudoku ? sudoku::strategy_name(s) : maze::strategy_name(s);
      rows.push_back({name, "trace " + strategy, time_it([&] {
                        const auto& vocab = tasks::vocabulary(kind);
                        int64_t tokens = 0;
                        for (int64_t i = 0; i < count; ++i) {
                          auto seq = kind == tasks::Kind::kSudoku ? tasks::sudoku_sequence(sudokus[i], s)
                                                                  : tasks::maze_sequence(mazes[i], s);
                          tokens += static_cast<int64_t>(seq.document(vocab).tokens.size());
                        }
                        return static_cast<double>(count);
                      }), "puzzles/s"});
    }
    rows.push_back({name, "stream (all strategies)", time_it([&] {
                      tasks::TaskSource source(kind, 8, ++seed, 0);
                      int64_t tokens = 0;
                      for (int64_t i = 0; i < count * 5; ++i) tokens += static_cast<int64_t>(source.next().tokens.size());
                      return static_cast<double>(tokens);
                    }), "tokens/s"});
  }
  auto fmt = [](double v) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(0) << v;
    return s.str();
  };
  if (output == "json") {
    json j = {{"commit", git_commit()}, {"count", count}, {"reps", reps}, {"rows", json::array()}};
    for (const auto& r : rows)
      j["rows"].push_back({{"task", r.task}, {"what", r.what}, {"rate", r.per_s.mean}, {"stddev", r.per_s.stddev}, {"unit", r.unit}});
    std::cout << j.dump(2) << "\n";
    return;
  }
  const bool md = output == "md";
  if (md) std::cout << "commit " << git_commit() << " | " << count << " puzzles x " << reps << " reps, one thread\n\n"
                    << "| task | what | rate | ± | unit |\n| --- | --- | ---: | ---: | --- |\n";
  for (const auto& r : rows) {
    if (md)
      std::cout << "| " << r.task << " | " << r.what << " | " << fmt(r.per_s.mean) << " | " << fmt(r.per_s.stddev) << " | " << r.unit << " |\n";
    else
      std::cout << r.task << "," << r.what << "," << fmt(r.per_s.mean) << "," << fmt(r.per_s.stddev) << "," << r.unit << "\n";
  }
}

}  // namespace

void add_bench_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  auto* cmd = app.add_subcommand("bench", "throughput and FLOPs utilisation (not a test)");
  struct Opts {
    std::string preset = "maze-cpu", families = "dense,lol", seq_lens = "512", modes = "train,step";
    std::vector<std::string> overrides;
    int64_t batch = 8;
    int reps = 5, warmup = 1;
    std::string output = "md", suite = "model";
    int64_t puzzles = 200;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--suite", o->suite, "model (training throughput) or tasks (data generation)")
      ->capture_default_str()->check(CLI::IsMember({"model", "tasks"}));
  cmd->add_option("--puzzles", o->puzzles, "puzzles per repetition (suite tasks)")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--preset", o->preset, "model shape (preset name or config file)")->capture_default_str();
  cmd->add_option("--set", o->overrides, "override a config key of the preset");
  cmd->add_option("--families", o->families,
                  "comma list: lol, dense, dense-sliding, dense-strided, looped, moe")->capture_default_str();
  cmd->add_option("--seq-len", o->seq_lens, "comma list of sequence lengths")->capture_default_str();
  cmd->add_option("--mode", o->modes, "comma list: train (forward+backward), step (whole optimizer step on task:copy data), forward")->capture_default_str();
  cmd->add_option("--batch", o->batch, "sequences per step")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--reps", o->reps, "timed repetitions")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o->warmup, "untimed repetitions first")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("-o,--output", o->output, "md | csv | json")->capture_default_str()
      ->check(CLI::IsMember({"md", "csv", "json"}));
  commands.emplace_back(cmd, [o] {
    if (o->suite == "tasks") {
      bench_tasks(o->puzzles, o->reps, o->output);
      return;
    }
    auto base = load_model_config(o->preset, o->overrides);
    auto info = runtime_info();
    const auto device = selected_device();
    auto peak = measure_matmul_peak(1024, 5, device);
    std::vector<Row> rows;
    for (const auto& mode : split(o->modes)) {
      LOL_CHECK(mode == "train" || mode == "forward" || mode == "step", "--mode: unknown mode '", mode, "'");
      for (const auto& seq_text : split(o->seq_lens)) {
        const int64_t T = parse_int_list("--seq-len", seq_text)[0];
        LOL_CHECK(T > 0, "--seq-len must be > 0, got ", T);
        for (const auto& family : split(o->families)) {
          auto config = family_config(base, family);
          LanguageModel model(config);
          model->initialize(0);
          model->to(device);
          model->train(mode == "train");
          auto tokens = torch::randint(0, config.vocab_size, {o->batch, T}, torch::kInt64);
          Batch batch;
          batch.tokens = tokens;
          Layout layout(batch, config.vocab_size, device);
          auto targets = torch::randint(0, config.vocab_size, {layout.num_tokens()}, torch::kInt64).to(device);
          ForwardOptions options;
          options.router_noise = mode == "train";
          std::vector<double> times;
          std::unique_ptr<Trainer> trainer;
          const auto run_dir = std::filesystem::temp_directory_path() / ("lol-bench-" + std::to_string(::getpid()));
          if (mode == "step") {
            TrainConfig tc;
            tc.steps = o->warmup + o->reps;
            tc.batch_rows = o->batch;
            tc.seq_len = T;
            tc.eval_every = 0;
            tc.checkpoint_every = 0;
            trainer = std::make_unique<Trainer>(model, tc, run_dir.string(), device);
          }
          int64_t step_tokens = o->batch * T;
          for (int r = 0; r < o->warmup + o->reps; ++r) {
            auto t0 = Clock::now();
            if (mode == "step") {
              trainer->train_step();
            } else if (mode == "train") {
              model->zero_grad();
              auto out = model->forward(layout, options);
              torch::nn::functional::cross_entropy(out.logits, targets).backward();
            } else {
              torch::NoGradGuard no_grad;
              model->forward(layout, options);
            }
            synchronize(device);
            const double s = std::chrono::duration<double>(Clock::now() - t0).count();
            if (r >= o->warmup) times.push_back(s);
          }
          if (trainer) std::filesystem::remove_all(run_dir);
          Row row{family, mode, T, o->batch, {}, {}, 0, 0};
          std::vector<double> rates, ms;
          for (double s : times) {
            // A step's rows are packed with whole documents; count the row capacity, as the
            // other modes do (padding at row ends is a few percent).
            rates.push_back(static_cast<double>(step_tokens) / s);
            ms.push_back(s * 1e3);
          }
          row.tokens_per_s = spread(rates);
          row.ms_per_step = spread(ms);
          auto stats = model_stats(config, T);
          row.flops_per_token = mode != "forward" ? stats.train_flops_per_token : stats.forward_flops_per_token;
          row.mfu = row.tokens_per_s.mean * row.flops_per_token / (peak.mean * 1e9);
          rows.push_back(row);
        }
      }
    }
    // Ratio of each row to the first family of the same mode and length.
    auto baseline = [&](const Row& r) {
      for (const auto& b : rows)
        if (b.mode == r.mode && b.seq_len == r.seq_len) return b.tokens_per_s.mean;
      return r.tokens_per_s.mean;
    };
    const std::string first_family = split(o->families)[0];
    if (o->output == "json") {
      json j;
      j["commit"] = git_commit();
      j["blas"] = info.blas;
      j["torch_threads"] = info.torch_threads;
      j["blas_threads"] = info.blas_threads;
      j["matmul_peak_gflops"] = {{"mean", peak.mean}, {"stddev", peak.stddev}};
      j["config"] = base.to_json();
      j["rows"] = json::array();
      for (const auto& r : rows)
        j["rows"].push_back({{"family", r.family}, {"mode", r.mode}, {"seq_len", r.seq_len},
                             {"batch", r.batch}, {"tokens_per_s", r.tokens_per_s.mean},
                             {"tokens_per_s_stddev", r.tokens_per_s.stddev},
                             {"ms_per_step", r.ms_per_step.mean}, {"flops_per_token", r.flops_per_token},
                             {"mfu", r.mfu}, {"ratio_to_" + first_family, r.tokens_per_s.mean / baseline(r)}});
      std::cout << j.dump(2) << "\n";
      return;
    }
    const bool md = o->output == "md";
    auto line = [&](const std::vector<std::string>& cells) {
      for (size_t i = 0; i < cells.size(); ++i)
        std::cout << (md ? (i ? " | " : "| ") : (i ? "," : "")) << cells[i];
      std::cout << (md ? " |\n" : "\n");
    };
    auto fmt = [](double v, int precision) {
      std::ostringstream s;
      s << std::fixed << std::setprecision(precision) << v;
      return s.str();
    };
    if (md) {
      std::cout << "commit " << git_commit() << " | BLAS: " << info.blas << "\n"
                << "threads: torch " << info.torch_threads << ", BLAS " << info.blas_threads
                << " | fp32 matmul peak " << fmt(peak.mean, 1) << " ± " << fmt(peak.stddev, 1)
                << " GFLOP/s (1024^3) | preset " << o->preset << "\n\n";
    }
    line({"family", "mode", "seq", "batch", "tokens/s", "±", "ms/step", "GFLOP/token", "MFU %",
          "x " + first_family});
    if (md) line({"---", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:"});
    for (const auto& r : rows)
      line({r.family, r.mode, std::to_string(r.seq_len), std::to_string(r.batch),
            fmt(r.tokens_per_s.mean, 1), fmt(r.tokens_per_s.stddev, 1), fmt(r.ms_per_step.mean, 1),
            fmt(r.flops_per_token / 1e9, 4), fmt(100 * r.mfu, 1), fmt(r.tokens_per_s.mean / baseline(r), 3)});
  });
}

}  // namespace lol::cli
