#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <optional>

#include "bench_util.h"
#include "model/model.h"
#include "model/stats.h"
#include "step_profile.h"
#include "suites.h"
#include "train/precision.h"
#include "train/trainer.h"
#include "util/files.h"
#include "util/op_profile.h"
#include "util/runtime.h"

namespace lol::bench {
namespace {

struct Row {
  std::string family, mode;  // mode "peer step": the PyTorch peer's whole step
  int round = 1;
  int64_t seq_len = 0, batch = 0;
  Spread tokens_per_s, ms_per_step;
  double mfu = 0, flops_per_token = 0;
  StepProfile profile;  // with --profile
};

// Seconds per repetition of one mode for one model: forward+backward ("train"), a whole
// optimizer step on packed task documents ("step"), or a forward pass ("forward"). With
// `profiler`, the timed repetitions run under a profiler it starts after the warmup.
std::vector<double> time_mode(const ModelBenchOptions& o, const std::string& mode,
                              LanguageModel& model, int64_t T,
                              std::optional<OpProfiler>* profiler = nullptr) {
  const auto& config = model->config();
  model->train(mode != "forward");
  Batch batch;
  batch.tokens = torch::randint(0, config.vocab_size, {o.batch, T}, torch::kInt64);
  Layout layout(batch, config.vocab_size, o.device);
  auto targets =
      torch::randint(0, config.vocab_size, {layout.num_tokens()}, torch::kInt64).to(o.device);
  ForwardOptions options;
  options.router_noise = mode != "forward";
  const bool bf16 = uses_bf16_autocast(o.precision, o.device);
  std::unique_ptr<Trainer> trainer;
  const auto run_dir =
      std::filesystem::temp_directory_path() / ("lol-bench-" + std::to_string(::getpid()));
  if (mode == "step") {
    TrainConfig tc;
    tc.steps = o.warmup + o.reps;
    tc.batch_rows = o.batch;
    tc.seq_len = T;
    tc.eval_every = 0;
    tc.checkpoint_every = 0;
    tc.precision = o.precision;
    trainer = std::make_unique<Trainer>(model, tc, run_dir.string(), o.device);
  }
  std::vector<double> times;
  for (int r = 0; r < o.warmup + o.reps; ++r) {
    if (profiler && r == o.warmup) profiler->emplace();
    auto t0 = Clock::now();
    if (mode == "step") {
      trainer->train_step();
    } else if (mode == "train") {
      model->zero_grad();
      torch::Tensor logits;
      {
        AutocastGuard autocast(o.device, bf16);
        logits = model->forward(layout, options).logits;
      }
      torch::Tensor loss;
      {
        ProfileScope scope("loss");
        loss = torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), targets);
      }
      ProfileScope scope("backward");
      loss.backward();
    } else {
      torch::NoGradGuard no_grad;
      AutocastGuard autocast(o.device, bf16);
      model->forward(layout, options);
    }
    synchronize(o.device);
    if (r >= o.warmup) times.push_back(seconds_since(t0));
  }
  if (trainer) remove_tree(run_dir.string());
  return times;
}

// A row's tokens/s, ms per step and MFU from the seconds of its timed steps.
void set_timing(Row& row, const std::vector<double>& seconds, double flops_per_token,
                double peak_gflops) {
  std::vector<double> rates, ms;
  for (double s : seconds) {
    rates.push_back(static_cast<double>(row.batch * row.seq_len) / s);
    ms.push_back(s * 1e3);
  }
  row.tokens_per_s = spread(rates);
  row.ms_per_step = spread(ms);
  row.flops_per_token = flops_per_token;
  row.mfu = row.tokens_per_s.mean * flops_per_token / (peak_gflops * 1e9);
}

}  // namespace

void bench_model(const ModelBenchOptions& o) {
  // MFU is against the measured peak of the precision the matrix products run in; a GPU
  // needs larger products than a CPU core to reach its peak.
  const bool bf16 = uses_bf16_autocast(o.precision, o.device);
  const auto peak = measure_matmul_peak(o.device.is_cuda() ? 8192 : 1024, 20, o.device,
                                        bf16 ? torch::kBFloat16 : torch::kFloat32);
  const auto peer_fams = o.peer ? peer_families(o.families) : std::vector<std::string>{};
  const int threads = runtime_info().torch_threads;
  std::vector<Row> rows;
  for (int round = 1; round <= o.rounds; ++round) {
    for (const auto& mode : o.modes)
      for (const int64_t T : o.seq_lens)
        for (const auto& family : o.families) {
          auto config = family_config(o.base, family);
          LanguageModel model(config);
          model->initialize(0);
          model->to(o.device);
          Row row;
          row.family = family;
          row.mode = mode;
          row.round = round;
          row.seq_len = T;
          row.batch = o.batch;
          // Step mode packs whole documents into the rows; like the other modes it counts the
          // row capacity (padding at row ends is a few percent).
          const auto stats = model_stats(config, T);
          set_timing(
              row, time_mode(o, mode, model, T),
              mode == "forward" ? stats.forward_flops_per_token : stats.train_flops_per_token,
              peak.median);
          if (o.profile) {
            std::optional<OpProfiler> profiler;
            double total = 0;
            for (double s : time_mode(o, mode, model, T, &profiler)) total += s;
            row.profile = per_step(*profiler, o.reps, total * 1e3);
          }
          rows.push_back(row);
        }
    // The peer's rows of this round: its own whole step on fixed rows of random tokens, with
    // FLOPs and MFU counted as the engine counts them for the same shape.
    for (const int64_t T : o.peer ? o.seq_lens : std::vector<int64_t>{}) {
      const auto run =
          run_peer(*o.peer, o.base, peer_fams, o.batch, T, std::max(o.warmup, 1), o.reps, threads);
      for (const auto& family : peer_fams) {
        Row row;
        row.family = family;
        row.mode = "peer step";
        row.round = round;
        row.seq_len = T;
        row.batch = o.batch;
        set_timing(row, run.seconds.at(family),
                   model_stats(family_config(o.base, family), T).train_flops_per_token,
                   peak.median);
        rows.push_back(row);
      }
    }
  }
  // Each row's ratio to the first family of the same mode and length.
  auto baseline = [&](const Row& r) {
    for (const auto& b : rows)
      if (b.mode == r.mode && b.seq_len == r.seq_len && b.round == r.round)
        return b.tokens_per_s.mean;
    return r.tokens_per_s.mean;
  };
  // An engine row's ratio to the peer's whole step of the same family, length and round; 0
  // where the peer has no such row.
  auto to_peer = [&](const Row& r) {
    if (r.mode == "peer step") return 0.0;
    for (const auto& p : rows)
      if (p.mode == "peer step" && p.family == r.family && p.seq_len == r.seq_len &&
          p.round == r.round)
        return r.tokens_per_s.mean / p.tokens_per_s.mean;
    return 0.0;
  };
  const std::string first_family = o.families.front();
  // With rounds: per family, mode and length, the medians over the rounds of tokens/s and of
  // each round's ratios (rows of one round ran minutes apart at most, so their ratios hold
  // while the machine's speed drifts between rounds).
  struct Median {
    std::string family, mode;
    int64_t seq_len = 0;
    double tokens_per_s = 0, vs_first = 0, vs_peer = 0;
  };
  std::vector<Median> medians;
  if (o.rounds > 1)
    for (const auto& r : rows) {
      if (r.round != 1) continue;
      std::vector<double> tps, first, peer;
      for (const auto& s : rows)
        if (s.family == r.family && s.mode == r.mode && s.seq_len == r.seq_len) {
          tps.push_back(s.tokens_per_s.mean);
          first.push_back(s.tokens_per_s.mean / baseline(s));
          if (to_peer(s) > 0) peer.push_back(to_peer(s));
        }
      medians.push_back({r.family, r.mode, r.seq_len, median(tps), median(first), median(peer)});
    }
  if (o.output == "json") {
    json j = machine_fields(o.device);
    j.update(
        {{"precision", bf16 ? "bf16" : "fp32"},
         {"matmul_peak_gflops", {{"median", peak.median}, {"max", peak.max}, {"reps", peak.reps}}},
         {"config", o.base.to_json()},
         {"rows", json::array()}});
    for (const auto& r : rows) {
      j["rows"].push_back({{"family", r.family},
                           {"mode", r.mode},
                           {"round", r.round},
                           {"seq_len", r.seq_len},
                           {"batch", r.batch},
                           {"tokens_per_s", r.tokens_per_s.mean},
                           {"tokens_per_s_stddev", r.tokens_per_s.stddev},
                           {"ms_per_step", r.ms_per_step.mean},
                           {"flops_per_token", r.flops_per_token},
                           {"mfu", r.mfu},
                           {"ratio_to_" + first_family, r.tokens_per_s.mean / baseline(r)}});
      if (to_peer(r) > 0) j["rows"].back()["ratio_to_peer"] = to_peer(r);
      if (o.profile && r.mode != "peer step") j["rows"].back().update(profile_json(r.profile));
    }
    if (!medians.empty()) {
      j["rounds"] = o.rounds;
      j["medians"] = json::array();
      for (const auto& m : medians) {
        j["medians"].push_back({{"family", m.family},
                                {"mode", m.mode},
                                {"seq_len", m.seq_len},
                                {"tokens_per_s", m.tokens_per_s},
                                {"ratio_to_" + first_family, m.vs_first}});
        if (m.vs_peer > 0) j["medians"].back()["ratio_to_peer"] = m.vs_peer;
      }
    }
    std::cout << j.dump(2) << "\n";
    return;
  }
  const bool md = o.output == "md";
  if (md)
    std::cout << machine_lines(o.device) << " | " << (bf16 ? "bf16 autocast" : "fp32")
              << " | matmul peak " << fixed(peak.median, 1) << " GFLOP/s median, "
              << fixed(peak.max, 1) << " max of " << peak.reps
              << " (MFU against the median) | preset " << o.preset_name << "\n\n";
  if (md && bf16) {
    const auto note = bf16_speed_note(o.device);
    if (!note.empty()) std::cout << note << "\n\n";
  }
  if (md && o.peer)
    std::cout << "peer: " << o.peer->script << " (" << o.peer->python
              << ", --env tuned_malloc, the same threads): its whole step (forward, backward, "
                 "AdamW, balance update) on fixed rows of random tokens; x peer = an engine row "
                 "against the peer's step of the same family in the same round\n\n";
  Table table(md);
  std::vector<std::string> header = {
      "family", "mode",    "seq",         "batch", "tokens/s",
      "±",      "ms/step", "GFLOP/token", "MFU %", "x " + first_family};
  if (o.peer) header.push_back("x peer");
  if (o.rounds > 1) header.insert(header.begin(), "round");
  table.header(header, o.rounds > 1 ? 3 : 2);
  for (const auto& r : rows) {
    std::vector<std::string> cells = {r.family,
                                      r.mode,
                                      std::to_string(r.seq_len),
                                      std::to_string(r.batch),
                                      fixed(r.tokens_per_s.mean, 1),
                                      fixed(r.tokens_per_s.stddev, 1),
                                      fixed(r.ms_per_step.mean, 1),
                                      fixed(r.flops_per_token / 1e9, 4),
                                      fixed(100 * r.mfu, 1),
                                      fixed(r.tokens_per_s.mean / baseline(r), 3)};
    if (o.peer) cells.push_back(to_peer(r) > 0 ? fixed(to_peer(r), 3) : "-");
    if (o.rounds > 1) cells.insert(cells.begin(), std::to_string(r.round));
    table.row(cells);
  }
  if (!medians.empty()) {
    if (md)
      std::cout << "\nmedians over the " << o.rounds
                << " rounds (ratios: each round's, then their median)\n\n";
    Table summary(md);
    std::vector<std::string> head = {"family", "mode", "seq", "tokens/s", "x " + first_family};
    if (o.peer) head.push_back("x peer");
    summary.header(head, 2);
    for (const auto& m : medians) {
      std::vector<std::string> cells = {m.family, m.mode, std::to_string(m.seq_len),
                                        fixed(m.tokens_per_s, 1), fixed(m.vs_first, 3)};
      if (o.peer) cells.push_back(m.vs_peer > 0 ? fixed(m.vs_peer, 3) : "-");
      summary.row(cells);
    }
  }
  if (o.profile) {
    if (o.device.is_cuda())
      std::cout << "\nprofiles are host times: on CUDA they time launches, not kernels\n";
    for (const auto& r : rows)
      if (r.mode != "peer step")
        print_profile(r.family + " " + r.mode + ", seq " + std::to_string(r.seq_len) + ", batch " +
                          std::to_string(r.batch),
                      r.ms_per_step.mean, r.profile, md);
  }
}

}  // namespace lol::bench
