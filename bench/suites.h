#pragma once
// The `lol bench` suites. Each prints one table (md or csv) or a JSON document, stamped
// with the commit, the BLAS and the thread counts. Never run by the tests.
#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "peer.h"
#include "train/precision.h"

namespace lol::bench {

struct ModelBenchOptions {
  ModelConfig base;
  std::string preset_name;
  std::vector<std::string> families, modes;  // modes: train, step, forward
  std::vector<int64_t> seq_lens;
  int64_t batch = 8;
  int reps = 5, warmup = 1;
  std::string output = "md";
  Precision precision = Precision::kAuto;  // as TrainConfig::precision: bf16 autocast or fp32
  torch::Device device = torch::kCPU;
  bool profile = false;             // then each row's step by phase and part (util/op_profile.h)
  std::optional<PeerOptions> peer;  // then the PyTorch peer's lol and dense steps after each round
  int rounds = 1;                   // every row measured this many times, rounds interleaved
};
// Training throughput per family: forward+backward, a whole optimizer step, or forward only;
// tokens/s with spread, FLOPs per token and utilisation of the measured matmul peak.
void bench_model(const ModelBenchOptions& options);

struct DecodeBenchOptions {
  ModelConfig base;
  std::vector<std::string> families;
  std::vector<int64_t> contexts, batches;
  int steps = 16, reps = 3;
  std::string output = "md";
  torch::Device device = torch::kCPU;
  bool profile = false;  // then each batch row's step by phase and part (util/op_profile.h)
  int rounds = 1;        // the batch rows measured this many times, rounds interleaved
};
// Prefill tokens/s; per-token latency cached vs recomputed by context (core vs rest); batch
// scaling with block calls and weight bytes per token, each batch row against batch 1 and
// against its floor (medians over the rounds when there are several).
void bench_decode(const DecodeBenchOptions& options);

struct AnalysisBenchOptions {
  ModelConfig base;
  int maze_size = 8;
  int64_t puzzles = 20, batch = 16;
  int reps = 3, warmup = 1;
  std::string output = "md";
  torch::Device device = torch::kCPU;
};
// Routes extracted per second (lol route) against the forward pass alone on the same batches.
void bench_analysis(const AnalysisBenchOptions& options);

struct ServeBenchOptions {
  ModelConfig base;
  std::vector<int64_t> clients;  // concurrent streaming clients, one measurement each
  int64_t requests = 64, prompt_len = 32, max_tokens = 32, parallel = 16;
  std::string output = "md";
  torch::Device device = torch::kCPU;
};
// The server on loopback: requests/s, tokens/s, time to first token and per-token latency
// under N concurrent clients, against generate() on the same prompts. Needs cpp-httplib.
void bench_serve(const ServeBenchOptions& options);

struct DpBenchOptions {
  std::string preset = "maze-cpu", data = "task:maze";
  std::vector<std::string> overrides;
  std::vector<int64_t> workers;  // one measurement each
  int64_t steps = 6, seq_len = 512, batch = 4, grad_accum = 4;
  int threads_per_worker = 0;  // 0: the workers split this machine's cores
  std::string output = "md";
};
// Data-parallel training: tokens/s, time in all-reduce and bytes per step for each number of
// local workers (short `lol train --nproc N` runs), and the threads each worker ran with.
void bench_dp(const DpBenchOptions& options);

struct TokenizerBenchOptions {
  std::string tokenizer, input;  // tokenizer.json; text tree INPUT/<label>/*.txt
  int64_t bytes_per_label = 4'000'000;
  int reps = 3;
  std::string output = "md";
};
// Byte-level BPE encode and decode MB/s on one thread, per label and overall.
void bench_tokenizer(const TokenizerBenchOptions& options);

// Task data as a pipeline: puzzles/s generated and traced per strategy, tokens/s streamed.
void bench_tasks(int64_t puzzles, int reps, const std::string& output);

}  // namespace lol::bench
