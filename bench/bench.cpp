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
#include "infer/decoder.h"
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

double percentile(std::vector<double> xs, double q) {
  std::sort(xs.begin(), xs.end());
  const double pos = q * static_cast<double>(xs.size() - 1);
  const size_t lo = static_cast<size_t>(pos), hi = std::min(lo + 1, xs.size() - 1);
  return xs[lo] + (xs[hi] - xs[lo]) * (pos - static_cast<double>(lo));
}

// Decoding: prefill throughput, per-token latency cached vs recomputing the whole sequence at
// several contexts (the core's share reported apart from prelude, coda and head), and batch
// scaling with the blocks and weight bytes each step touches.
void bench_decode(const ModelConfig& base, const std::string& families, const std::vector<int64_t>& contexts,
                  const std::vector<int64_t>& batches, int steps, int reps, const std::string& output,
                  torch::Device device) {
  struct Row {
    std::string family, what;
    int64_t context = 0, batch = 1;
    double tokens_per_s = 0, p50_ms = 0, p95_ms = 0, core_p50_ms = 0, other_p50_ms = 0, recompute_ms = 0;
    double block_calls = 0, weight_mb_per_token = 0;
  };
  std::vector<Row> rows;
  const int64_t longest = *std::max_element(contexts.begin(), contexts.end());
  for (const auto& family : split(families)) {
    auto config = family_config(base, family);
    config.max_seq_len = std::max(config.max_seq_len, longest + steps + 8);
    LanguageModel model(config);
    model->initialize(0);
    model->to(device);
    model->eval();
    torch::NoGradGuard no_grad;
    auto random_prompt = [&](int64_t n, int64_t salt) {
      Prompt p;
      for (int64_t i = 0; i < n; ++i) p.tokens.push_back((i * 7919 + salt * 104729) % config.vocab_size);
      return p;
    };
    auto time_steps = [&](Decoder& decoder, std::vector<double>& ms, std::vector<double>& core, std::vector<double>& other,
                          double& calls, double& bytes) {
      std::vector<int64_t> next(decoder.batch(), 1);
      for (int s = 0; s < steps + 2; ++s) {
        auto t0 = Clock::now();
        decoder.step(next);
        synchronize(device);
        const double t = std::chrono::duration<double>(Clock::now() - t0).count() * 1e3;
        if (s < 2) continue;  // warm-up
        ms.push_back(t);
        core.push_back(decoder.last_step().core_seconds * 1e3);
        other.push_back(decoder.last_step().other_seconds * 1e3);
        calls += static_cast<double>(decoder.last_step().block_calls) / steps;
        bytes += static_cast<double>(decoder.last_step().weight_bytes) / steps;
      }
    };
    for (int64_t C : contexts) {
      Decoder decoder(model, device);
      auto t0 = Clock::now();
      decoder.prefill({random_prompt(C, 1)});
      synchronize(device);
      const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
      rows.push_back({family, "prefill", C, 1, static_cast<double>(C) / prefill_s});
      std::vector<double> ms, core, other;
      double calls = 0, bytes = 0;
      time_steps(decoder, ms, core, other, calls, bytes);
      std::vector<double> recompute;
      for (int r = 0; r < reps; ++r) {
        Layout layout(Batch::single(random_prompt(C + 1, 2).tokens), config.vocab_size, device);
        auto t1 = Clock::now();
        model->forward(layout);
        synchronize(device);
        recompute.push_back(std::chrono::duration<double>(Clock::now() - t1).count() * 1e3);
      }
      Row row{family, "decode", C, 1};
      row.p50_ms = percentile(ms, 0.5);
      row.p95_ms = percentile(ms, 0.95);
      row.tokens_per_s = 1e3 / row.p50_ms;
      row.core_p50_ms = percentile(core, 0.5);
      row.other_p50_ms = percentile(other, 0.5);
      row.recompute_ms = percentile(recompute, 0.5);
      row.block_calls = calls;
      row.weight_mb_per_token = bytes / 1e6;
      rows.push_back(row);
    }
    const int64_t C = std::min<int64_t>(512, longest);
    for (int64_t B : batches) {
      Decoder decoder(model, device);
      std::vector<Prompt> prompts;
      for (int64_t b = 0; b < B; ++b) prompts.push_back(random_prompt(C, b + 3));
      decoder.prefill(prompts);
      std::vector<double> ms, core, other;
      double calls = 0, bytes = 0;
      time_steps(decoder, ms, core, other, calls, bytes);
      Row row{family, "batch", C, B};
      row.p50_ms = percentile(ms, 0.5);
      row.p95_ms = percentile(ms, 0.95);
      row.tokens_per_s = static_cast<double>(B) * 1e3 / row.p50_ms;
      row.core_p50_ms = percentile(core, 0.5);
      row.other_p50_ms = percentile(other, 0.5);
      row.block_calls = calls;
      row.weight_mb_per_token = bytes / 1e6 / static_cast<double>(B);
      rows.push_back(row);
    }
  }
  auto info = runtime_info();
  auto fmt = [](double v, int digits) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(digits) << v;
    return s.str();
  };
  if (output == "json") {
    json j = {{"commit", git_commit()}, {"blas", info.blas}, {"torch_threads", info.torch_threads},
              {"blas_threads", info.blas_threads}, {"config", base.to_json()}, {"rows", json::array()}};
    for (const auto& r : rows)
      j["rows"].push_back({{"family", r.family}, {"what", r.what}, {"context", r.context}, {"batch", r.batch},
                           {"tokens_per_s", r.tokens_per_s}, {"p50_ms", r.p50_ms}, {"p95_ms", r.p95_ms},
                           {"core_p50_ms", r.core_p50_ms}, {"other_p50_ms", r.other_p50_ms},
                           {"recompute_ms", r.recompute_ms}, {"block_calls_per_step", r.block_calls},
                           {"weight_mb_per_token", r.weight_mb_per_token}});
    std::cout << j.dump(2) << "\n";
    return;
  }
  const bool md = output == "md";
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) std::cout << (md ? (i ? " | " : "| ") : (i ? "," : "")) << cells[i];
    std::cout << (md ? " |\n" : "\n");
  };
  if (md)
    std::cout << "commit " << git_commit() << " | BLAS: " << info.blas << "\nthreads: torch " << info.torch_threads
              << ", BLAS " << info.blas_threads << " | " << steps << " timed steps\n\n";
  line({"family", "what", "context", "batch", "tokens/s", "p50 ms", "p95 ms", "core p50 ms", "rest p50 ms",
        "recompute ms", "x cached", "blocks/step", "weight MB/token"});
  if (md) line({"---", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:"});
  for (const auto& r : rows) {
    const bool decode = r.what != "prefill";
    line({r.family, r.what, std::to_string(r.context), std::to_string(r.batch), fmt(r.tokens_per_s, 1),
          decode ? fmt(r.p50_ms, 2) : "", decode ? fmt(r.p95_ms, 2) : "", decode ? fmt(r.core_p50_ms, 2) : "",
          decode ? fmt(r.other_p50_ms, 2) : "", r.recompute_ms > 0 ? fmt(r.recompute_ms, 1) : "",
          r.recompute_ms > 0 ? fmt(r.recompute_ms / r.p50_ms, 1) : "", decode ? fmt(r.block_calls, 1) : "",
          decode ? fmt(r.weight_mb_per_token, 2) : ""});
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
    std::string output = "md", suite = "model", contexts = "128,512,1024,4096", batches = "1,8,32";
    int steps = 16;
    int64_t puzzles = 200;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--suite", o->suite, "model (training throughput), decode (inference) or tasks (data generation)")
      ->capture_default_str()->check(CLI::IsMember({"model", "decode", "tasks"}));
  cmd->add_option("--contexts", o->contexts, "decode: comma list of context lengths")->capture_default_str();
  cmd->add_option("--batches", o->batches, "decode: comma list of batch sizes")->capture_default_str();
  cmd->add_option("--steps", o->steps, "decode: timed steps per measurement")->capture_default_str()
      ->check(CLI::PositiveNumber);
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
    if (o->suite == "decode") {
      std::vector<int64_t> contexts, batches;
      for (const auto& c : split(o->contexts)) contexts.push_back(parse_int_list("--contexts", c)[0]);
      for (const auto& b : split(o->batches)) batches.push_back(parse_int_list("--batches", b)[0]);
      LOL_CHECK(!contexts.empty() && !batches.empty(), "--contexts and --batches need at least one value");
      for (auto c : contexts) LOL_CHECK(c > 0, "--contexts: ", c, " is not a positive length");
      for (auto b : batches) LOL_CHECK(b > 0, "--batches: ", b, " is not a positive size");
      bench_decode(base, o->families, contexts, batches, o->steps, std::max(1, std::min(o->reps, 3)), o->output,
                   selected_device());
      return;
    }
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
