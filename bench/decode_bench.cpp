#include <iostream>
#include <optional>

#include "bench_util.h"
#include "infer/decoder.h"
#include "model/packed_gemm.h"
#include "step_profile.h"
#include "suites.h"

namespace lol::bench {

// Decoding: prefill throughput, per-token latency cached vs recomputing the whole sequence at
// several contexts (the core's share reported apart from prelude, coda and head), and batch
// scaling with the blocks and weight bytes each step touches.
void bench_decode(const DecodeBenchOptions& o) {
  const auto& base = o.base;
  const auto& contexts = o.contexts;
  const auto& batches = o.batches;
  const int steps = o.steps, reps = o.reps;
  const auto& output = o.output;
  const auto device = o.device;
  struct Row {
    std::string family, what;
    int64_t context = 0, batch = 1;
    double tokens_per_s = 0, p50_ms = 0, p95_ms = 0, core_p50_ms = 0, other_p50_ms = 0,
           recompute_ms = 0;
    double block_calls = 0, weight_mb_per_token = 0;
    double mb_per_step = 0, gflop_per_step = 0, floor_ms = 0;  // weights and caches read
    double bandwidth_gbps = 0;  // the read bandwidth its floor was taken at
    double vs_batch1 = 0;       // batch rows: tokens/s over the same round's batch-1 row
    int round = 1;              // batch rows: which round measured it
    StepProfile profile = {};   // batch rows with --profile
  };
  std::vector<Row> rows;
  // What bounds a decode step: streaming weights and caches, or the arithmetic.
  const auto bandwidth = measure_read_bandwidth(256, 20, device);
  const auto peak = measure_matmul_peak(device.is_cuda() ? 8192 : 1024, 20, device);
  const int64_t longest = *std::max_element(contexts.begin(), contexts.end());
  for (const auto& family : o.families) {
    auto config = family_config(base, family);
    // Timed steps, their warm-up and (--profile) as many profiled steps past the context.
    config.max_seq_len = std::max(config.max_seq_len, longest + 2 * steps + 8);
    LanguageModel model(config);
    model->initialize(0);
    model->to(device);
    model->eval();
    torch::NoGradGuard no_grad;
    auto random_prompt = [&](int64_t n, int64_t salt) {
      Prompt p;
      for (int64_t i = 0; i < n; ++i)
        p.tokens.push_back((i * 7919 + salt * 104729) % config.vocab_size);
      return p;
    };
    // Times `steps` decode steps (after two untimed ones) into the row: latency percentiles, the
    // core's share, and per step the blocks run, the weights and caches read, the FLOPs and
    // the floor they set (bytes at the measured bandwidth or FLOPs at the measured matmul
    // peak, whichever takes longer; both medians). Weight MB are per token of the row.
    auto time_steps = [&](Decoder& decoder, Row& row, const Peak& read) {
      std::vector<double> ms, core, other;
      double weight_bytes = 0, read_bytes = 0, flops = 0;
      std::vector<int64_t> next(decoder.batch(), 1);
      for (int s = 0; s < steps + 2; ++s) {
        auto t0 = Clock::now();
        decoder.step(next);
        synchronize(device);
        const double t = std::chrono::duration<double>(Clock::now() - t0).count() * 1e3;
        if (s < 2) continue;  // warm-up
        const auto& stats = decoder.last_step();
        ms.push_back(t);
        core.push_back(stats.core_seconds * 1e3);
        other.push_back(stats.other_seconds * 1e3);
        row.block_calls += static_cast<double>(stats.block_calls) / steps;
        weight_bytes += static_cast<double>(stats.weight_bytes) / steps;
        read_bytes += static_cast<double>(stats.weight_bytes + stats.cache_bytes) / steps;
        flops += stats.flops / steps;
      }
      row.p50_ms = percentile(ms, 0.5);
      row.p95_ms = percentile(ms, 0.95);
      row.tokens_per_s = static_cast<double>(row.batch) * 1e3 / row.p50_ms;
      row.core_p50_ms = percentile(core, 0.5);
      row.other_p50_ms = percentile(other, 0.5);
      row.weight_mb_per_token = weight_bytes / 1e6 / static_cast<double>(row.batch);
      row.mb_per_step = read_bytes / 1e6;
      row.gflop_per_step = flops / 1e9;
      row.bandwidth_gbps = read.median;
      row.floor_ms = std::max(read_bytes / (read.median * 1e9), flops / (peak.median * 1e9)) * 1e3;
    };
    for (int64_t C : contexts) {
      {  // untimed: first calls pay for kernel selection and (on a GPU) library handles
        Decoder warm(model, device);
        warm.prefill({random_prompt(C, 1)});
        synchronize(device);
      }
      Decoder decoder(model, device);
      auto t0 = Clock::now();
      decoder.prefill({random_prompt(C, 1)});
      synchronize(device);
      const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
      rows.push_back({family, "prefill", C, 1, static_cast<double>(C) / prefill_s});
      Row row{family, "decode", C, 1};
      time_steps(decoder, row, bandwidth);
      std::vector<double> recompute;
      for (int r = 0; r < reps; ++r) {
        Layout layout(Batch::single(random_prompt(C + 1, 2).tokens), config.vocab_size, device);
        auto t1 = Clock::now();
        model->forward(layout);
        synchronize(device);
        recompute.push_back(std::chrono::duration<double>(Clock::now() - t1).count() * 1e3);
      }
      row.recompute_ms = percentile(recompute, 0.5);
      rows.push_back(row);
    }
    // The batch rows, round after round: the machine's speed drifts (on a shared VM by
    // several times within minutes), so each round takes its own bandwidth for the floors and
    // each batch row is compared with the batch-1 row of its own round.
    const int64_t C = std::min<int64_t>(512, longest);
    for (int round = 1; round <= o.rounds; ++round) {
      const auto round_bandwidth = round == 1 ? bandwidth : measure_read_bandwidth(256, 20, device);
      const size_t first = rows.size();
      for (int64_t B : batches) {
        Decoder decoder(model, device);
        std::vector<Prompt> prompts;
        for (int64_t b = 0; b < B; ++b) prompts.push_back(random_prompt(C, b + 3));
        decoder.prefill(prompts);
        Row row{family, "batch", C, B};
        row.round = round;
        time_steps(decoder, row, round_bandwidth);
        if (o.profile) {
          std::vector<int64_t> next(decoder.batch(), 1);
          std::optional<OpProfiler> profiler(std::in_place);
          auto t0 = Clock::now();
          for (int s = 0; s < steps; ++s) decoder.step(next);
          synchronize(device);
          row.profile = per_step(*profiler, steps, seconds_since(t0) * 1e3);
        }
        rows.push_back(row);
      }
      const auto one = std::find_if(rows.begin() + static_cast<std::ptrdiff_t>(first), rows.end(),
                                    [](const Row& r) { return r.batch == 1; });
      if (one != rows.end())
        for (size_t i = first; i < rows.size(); ++i)
          rows[i].vs_batch1 = rows[i].tokens_per_s / one->tokens_per_s;
    }
  }
  // With rounds: per family and batch, the medians over the rounds.
  struct Median {
    std::string family;
    int64_t context = 0, batch = 1;
    double tokens_per_s = 0, vs_batch1 = 0, vs_floor = 0, bandwidth_gbps = 0;
  };
  std::vector<Median> medians;
  if (o.rounds > 1)
    for (const auto& r : rows) {
      if (r.what != "batch" || r.round != 1) continue;
      std::vector<double> tps, v1, vf, bw;
      for (const auto& s : rows)
        if (s.what == "batch" && s.family == r.family && s.batch == r.batch) {
          tps.push_back(s.tokens_per_s);
          v1.push_back(s.vs_batch1);
          vf.push_back(s.p50_ms / s.floor_ms);
          bw.push_back(s.bandwidth_gbps);
        }
      medians.push_back(
          {r.family, r.context, r.batch, median(tps), median(v1), median(vf), median(bw)});
    }
  auto fmt = fixed;
  // Inference products on the CPU use the packed kernel when the CPU has AVX2+FMA (its 16-column
  // panels with AVX-512), else BLAS: say which, since it changes batch 1 by ~2x.
  const int64_t width = device.is_cpu() ? panel_width_supported() : 0;
  const std::string products = width == 16  ? "packed AVX-512 kernel"
                               : width == 8 ? "packed AVX2 kernel"
                                            : "BLAS";
  if (output == "json") {
    json j = machine_fields(device);
    j.update(
        {{"products", products},
         {"read_bandwidth_gbps",
          {{"median", bandwidth.median}, {"max", bandwidth.max}, {"reps", bandwidth.reps}}},
         {"matmul_peak_gflops", {{"median", peak.median}, {"max", peak.max}, {"reps", peak.reps}}},
         {"config", base.to_json()},
         {"rows", json::array()}});
    for (const auto& r : rows) {
      j["rows"].push_back({{"family", r.family},
                           {"what", r.what},
                           {"context", r.context},
                           {"batch", r.batch},
                           {"tokens_per_s", r.tokens_per_s},
                           {"p50_ms", r.p50_ms},
                           {"p95_ms", r.p95_ms},
                           {"core_p50_ms", r.core_p50_ms},
                           {"other_p50_ms", r.other_p50_ms},
                           {"recompute_ms", r.recompute_ms},
                           {"block_calls_per_step", r.block_calls},
                           {"weight_mb_per_token", r.weight_mb_per_token},
                           {"mb_read_per_step", r.mb_per_step},
                           {"gflop_per_step", r.gflop_per_step},
                           {"floor_ms", r.floor_ms},
                           {"read_bandwidth_gbps", r.bandwidth_gbps}});
      if (r.what == "batch") j["rows"].back().update({{"round", r.round}});
      if (r.vs_batch1 > 0) j["rows"].back().update({{"x_batch1", r.vs_batch1}});
      if (o.profile && r.what == "batch") j["rows"].back().update(profile_json(r.profile));
    }
    if (!medians.empty()) {
      j["rounds"] = o.rounds;
      j["medians"] = json::array();
      for (const auto& m : medians)
        j["medians"].push_back({{"family", m.family},
                                {"context", m.context},
                                {"batch", m.batch},
                                {"tokens_per_s", m.tokens_per_s},
                                {"x_batch1", m.vs_batch1},
                                {"x_floor", m.vs_floor},
                                {"read_bandwidth_gbps", m.bandwidth_gbps}});
    }
    std::cout << j.dump(2) << "\n";
    return;
  }
  const bool md = output == "md";
  Table table(md);
  if (md)
    std::cout << machine_lines(device) << " | products: " << products << " | " << steps
              << " timed steps\nread bandwidth " << fixed(bandwidth.median, 1) << " GB/s median, "
              << fixed(bandwidth.max, 1) << " max of " << bandwidth.reps << " | matmul peak "
              << fixed(peak.median, 1) << " GFLOP/s median, " << fixed(peak.max, 1) << " max of "
              << peak.reps
              << " | floor = the larger of MB read / bandwidth and GFLOP / peak (medians)"
              << (o.rounds > 1 ? "; batch rows in " + std::to_string(o.rounds) +
                                     " rounds, each round's floors at its own bandwidth"
                               : std::string())
              << "\n\n";
  std::vector<std::string> header{
      "family",       "what",     "context",     "batch",           "tokens/s",
      "x batch 1",    "p50 ms",   "p95 ms",      "core p50 ms",     "rest p50 ms",
      "recompute ms", "x cached", "blocks/step", "weight MB/token", "MB read/step",
      "GFLOP/step",   "floor ms", "x floor"};
  if (o.rounds > 1) header.insert(header.begin() + 2, "round");
  table.header(header, 2);
  for (const auto& r : rows) {
    const bool decode = r.what != "prefill";
    std::vector<std::string> cells{r.family,
                                   r.what,
                                   std::to_string(r.context),
                                   std::to_string(r.batch),
                                   fmt(r.tokens_per_s, 1),
                                   r.vs_batch1 > 0 ? fmt(r.vs_batch1, 2) : "",
                                   decode ? fmt(r.p50_ms, 2) : "",
                                   decode ? fmt(r.p95_ms, 2) : "",
                                   decode ? fmt(r.core_p50_ms, 2) : "",
                                   decode ? fmt(r.other_p50_ms, 2) : "",
                                   r.recompute_ms > 0 ? fmt(r.recompute_ms, 1) : "",
                                   r.recompute_ms > 0 ? fmt(r.recompute_ms / r.p50_ms, 1) : "",
                                   decode ? fmt(r.block_calls, 1) : "",
                                   decode ? fmt(r.weight_mb_per_token, 2) : "",
                                   decode ? fmt(r.mb_per_step, 1) : "",
                                   decode ? fmt(r.gflop_per_step, 3) : "",
                                   decode ? fmt(r.floor_ms, 2) : "",
                                   decode ? fmt(r.p50_ms / r.floor_ms, 2) : ""};
    if (o.rounds > 1)
      cells.insert(cells.begin() + 2, r.what == "batch" ? std::to_string(r.round) : "");
    table.row(cells);
  }
  if (!medians.empty()) {
    if (md) std::cout << "\nbatch rows, medians over the " << o.rounds << " rounds\n\n";
    Table summary(md);
    summary.header({"family", "context", "batch", "tokens/s", "x batch 1", "x floor", "read GB/s"},
                   1);
    for (const auto& m : medians)
      summary.row({m.family, std::to_string(m.context), std::to_string(m.batch),
                   fmt(m.tokens_per_s, 1), m.vs_batch1 > 0 ? fmt(m.vs_batch1, 2) : "",
                   fmt(m.vs_floor, 2), fmt(m.bandwidth_gbps, 1)});
  }
  if (o.profile) {
    if (device.is_cuda())
      std::cout << "\nprofiles are host times: on CUDA they time launches, not kernels\n";
    for (const auto& r : rows)
      if (r.what == "batch")
        print_profile(r.family + " decode step, batch " + std::to_string(r.batch) + ", context " +
                          std::to_string(r.context),
                      r.p50_ms, r.profile, md);
  }
}

}  // namespace lol::bench
