#pragma once
// How a model is trained (the architecture lives in ModelConfig). Saved as train_config.json
// in the run directory; a resumed run reads it back.
#include <string>

#include "model/config.h"
#include "train/precision.h"
#include "util/fields.h"

namespace lol {

enum class Optimizer { kMuon, kAdamW };
enum class Schedule { kCosine, kWsd };
enum class GrowShape { kSqrt, kLinear };
template <>
const std::vector<std::pair<Optimizer, const char*>>& enum_names<Optimizer>();
template <>
const std::vector<std::pair<Schedule, const char*>>& enum_names<Schedule>();
template <>
const std::vector<std::pair<GrowShape, const char*>>& enum_names<GrowShape>();

struct TrainConfig {
  std::string data = "task:copy";  // task:NAME or a token shard path
  std::string eval_data;           // shard path for held-out data ("" = the task's held-out split)
  int64_t steps = 300;             // optimizer steps
  int64_t batch_rows = 8;          // rows per micro-batch
  int64_t seq_len = 128;           // tokens per row
  int64_t grad_accum = 1;          // micro-batches per optimizer step
  Optimizer optimizer = Optimizer::kMuon;  // muon (Muon for block matrices + AdamW) | adamw
  double lr = 3e-3;                        // peak learning rate (Muon's is RMS-matched to AdamW's)
  double min_lr_ratio = 0.1;               // final lr as a fraction of the peak
  int64_t warmup_steps = 20;               // linear warm-up
  Schedule schedule = Schedule::kCosine;   // cosine | wsd (warmup-stable-decay)
  double decay_fraction = 0.2;             // wsd: share of steps spent decaying
  double weight_decay = 0.01;              // decoupled, on matrices
  double beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8;
  double muon_momentum = 0.95;
  double grad_clip = 1.0;        // max global grad norm (0 = off)
  double skip_lr_scale = 1.0;    // lr of the skip's row of router.weight / lr (lol, router_skip)
  int64_t grow_start_depth = 0;  // routed depth at step 0 (0 = no growing, train at D)
  double grow_fraction = 0.75;   // share of steps over which the depth grows (SPEC 1.8)
  GrowShape grow_shape = GrowShape::kSqrt;  // sqrt (the "1 - sqrt" shape) | linear
  int64_t eval_every = 50;                  // steps between evaluations (0 = only at the end)
  int64_t eval_batches = 4;
  int64_t log_every = 10;
  int64_t checkpoint_every = 100;  // steps between checkpoints (0 = only at the end)
  int64_t keep_checkpoints = 2;
  uint64_t seed = 0;     // initialisation, data and router noise
  double bucket_mb = 8;  // data parallel: gradient all-reduce bucket size (MiB)
  Precision precision =
      Precision::kAuto;  // auto (bf16 autocast on CUDA, fp32 elsewhere) | fp32 | bf16

  void validate() const;
  // The settings that name a part of the model (skip_lr_scale needs a skip) against it.
  void validate_for(const ModelConfig& model) const;
  json to_json() const { return fields_to_json(fields(), *this); }
  static TrainConfig from_json(const json& object);
  static const std::vector<Field<TrainConfig>>& fields();
};

// Learning rate at step t (0-based): linear warm-up, then cosine or WSD down to min_lr_ratio.
double learning_rate(const TrainConfig& config, int64_t step);
// Executed routed depth at step t (SPEC 1.8).
int64_t grown_depth(const TrainConfig& config, int64_t core_depth, int64_t step);

}  // namespace lol
