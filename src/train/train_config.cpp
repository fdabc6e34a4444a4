#include "train/train_config.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "train/precision.h"

namespace lol {

template <>
const std::vector<std::pair<Optimizer, const char*>>& enum_names<Optimizer>() {
  static const std::vector<std::pair<Optimizer, const char*>> names = {
      {Optimizer::kMuon, "muon"}, {Optimizer::kAdamW, "adamw"}};
  return names;
}

template <>
const std::vector<std::pair<Schedule, const char*>>& enum_names<Schedule>() {
  static const std::vector<std::pair<Schedule, const char*>> names = {{Schedule::kCosine, "cosine"},
                                                                      {Schedule::kWsd, "wsd"}};
  return names;
}

template <>
const std::vector<std::pair<GrowShape, const char*>>& enum_names<GrowShape>() {
  static const std::vector<std::pair<GrowShape, const char*>> names = {
      {GrowShape::kSqrt, "sqrt"}, {GrowShape::kLinear, "linear"}};
  return names;
}

const std::vector<Field<TrainConfig>>& TrainConfig::fields() {
  using C = TrainConfig;
  static const std::vector<Field<C>> table = {
      field("data", &C::data, "task:NAME, corpus:DIR, shard path or mix:W*SPEC,..."),
      field("eval_data", &C::eval_data, "held-out shard path"),
      field("steps", &C::steps, "optimizer steps"),
      field("batch_rows", &C::batch_rows, "rows per micro-batch"),
      field("seq_len", &C::seq_len, "tokens per row"),
      field("grad_accum", &C::grad_accum, "micro-batches per step"),
      field("optimizer", &C::optimizer, "optimizer of block matrices"),
      field("lr", &C::lr, "peak learning rate"),
      field("min_lr_ratio", &C::min_lr_ratio, "final lr / peak"),
      field("warmup_steps", &C::warmup_steps, "warm-up steps"),
      field("schedule", &C::schedule, "learning-rate schedule"),
      field("decay_fraction", &C::decay_fraction, "wsd decay share"),
      field("weight_decay", &C::weight_decay, "decoupled weight decay"),
      field("beta1", &C::beta1, "AdamW beta1"),
      field("beta2", &C::beta2, "AdamW beta2"),
      field("adam_eps", &C::adam_eps, "AdamW epsilon"),
      field("muon_momentum", &C::muon_momentum, "Muon momentum"),
      field("grad_clip", &C::grad_clip, "max grad norm (0 = off)"),
      field("skip_lr_scale", &C::skip_lr_scale,
            "lr of the skip's router row / lr (lol with router_skip)"),
      field("grow_start_depth", &C::grow_start_depth, "depth at step 0 (0 = no growing)"),
      field("grow_fraction", &C::grow_fraction, "share of steps spent growing"),
      field("grow_shape", &C::grow_shape, "depth growth shape"),
      field("eval_every", &C::eval_every, "steps between evaluations"),
      field("eval_batches", &C::eval_batches, "batches per evaluation"),
      field("log_every", &C::log_every, "steps between progress lines and metrics.jsonl lines"),
      field("checkpoint_every", &C::checkpoint_every, "steps between checkpoints"),
      field("keep_checkpoints", &C::keep_checkpoints, "checkpoints kept"),
      field("seed", &C::seed, "initialisation, data and noise seed"),
      field("bucket_mb", &C::bucket_mb, "data parallel: all-reduce bucket size in MiB"),
      field("precision", &C::precision, "auto is bf16 autocast on CUDA, fp32 elsewhere"),
  };
  return table;
}

void TrainConfig::validate() const {
  // Bounds keep a batch (rows x seq_len tokens, grad_accum of them) a size that can be allocated.
  auto check_range = [](const char* name, int64_t value, int64_t low, int64_t high) {
    LOL_CHECK(value >= low, name, " must be >= ", low, ", got ", value);
    LOL_CHECK(value <= high, name, " must be <= ", high, ", got ", value);
  };
  auto check_number = [](const char* name, double value, double low, double high, bool open_low,
                         bool open_high) {
    const bool ok = std::isfinite(value) && (open_low ? value > low : value >= low) &&
                    (open_high ? value < high : value <= high);
    if (std::isinf(high))
      LOL_CHECK(ok, name, " must be a finite number ", open_low ? "> " : ">= ", low, ", got ",
                value);
    LOL_CHECK(ok, name, " must be in ", open_low ? "(" : "[", low, ", ", high,
              open_high ? ")" : "]", ", got ", value);
  };
  const double inf = std::numeric_limits<double>::infinity();
  check_range("steps", steps, 1, int64_t{1} << 40);
  check_range("batch_rows", batch_rows, 1, int64_t{1} << 16);
  check_range("seq_len", seq_len, 2, int64_t{1} << 24);
  check_range("grad_accum", grad_accum, 1, int64_t{1} << 16);
  check_number("lr", lr, 0, inf, true, true);
  check_number("min_lr_ratio", min_lr_ratio, 0, 1, false, false);
  check_range("warmup_steps", warmup_steps, 0, int64_t{1} << 40);
  check_number("decay_fraction", decay_fraction, 0, 1, true, false);
  check_number("weight_decay", weight_decay, 0, inf, false, true);
  check_number("beta1", beta1, 0, 1, false, true);
  check_number("beta2", beta2, 0, 1, false, true);
  check_number("adam_eps", adam_eps, 0, inf, true, true);
  check_number("muon_momentum", muon_momentum, 0, 1, false, true);
  check_number("grad_clip", grad_clip, 0, inf, false, true);
  check_number("skip_lr_scale", skip_lr_scale, 0, inf, false, true);
  check_range("grow_start_depth", grow_start_depth, 0, int64_t{1} << 10);
  check_number("grow_fraction", grow_fraction, 0, 1, true, false);
  check_range("eval_every", eval_every, 0, int64_t{1} << 40);
  check_range("eval_batches", eval_batches, 1, int64_t{1} << 20);
  check_range("log_every", log_every, 1, int64_t{1} << 40);
  check_range("checkpoint_every", checkpoint_every, 0, int64_t{1} << 40);
  check_range("keep_checkpoints", keep_checkpoints, 1, int64_t{1} << 20);
  check_number("bucket_mb", bucket_mb, 0, 4096, true, false);
}

void TrainConfig::validate_for(const ModelConfig& model) const {
  LOL_CHECK(skip_lr_scale == 1.0 || (model.family == Family::kLol && model.router_skip),
            "skip_lr_scale (", skip_lr_scale,
            ") scales the lr of the skip's row of router.weight: the model needs router_skip=true");
}

TrainConfig TrainConfig::from_json(const json& object) {
  TrainConfig config;
  fields_from_json(fields(), object, config);
  config.validate();
  return config;
}

double learning_rate(const TrainConfig& c, int64_t step) {
  if (step < c.warmup_steps)
    return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  const double floor = c.lr * c.min_lr_ratio;
  if (c.schedule == Schedule::kWsd) {
    const double decay_start = c.steps * (1.0 - c.decay_fraction);
    if (step < decay_start) return c.lr;
    const double progress =
        std::min(1.0, (step - decay_start) / std::max(1.0, c.steps - decay_start));
    return c.lr - (c.lr - floor) * progress;
  }
  const double span = std::max<int64_t>(1, c.steps - c.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / span);
  return floor + (c.lr - floor) * 0.5 * (1 + std::cos(M_PI * progress));
}

int64_t grown_depth(const TrainConfig& c, int64_t core_depth, int64_t step) {
  if (c.grow_start_depth <= 0 || c.grow_start_depth >= core_depth) return core_depth;
  const double grow_steps = std::max(1.0, c.grow_fraction * static_cast<double>(c.steps));
  const double t = std::min(1.0, static_cast<double>(step) / grow_steps);
  const double shape = c.grow_shape == GrowShape::kLinear ? t : 1.0 - std::sqrt(1.0 - t);
  return c.grow_start_depth +
         static_cast<int64_t>(std::llround((core_depth - c.grow_start_depth) * shape));
}

}  // namespace lol
