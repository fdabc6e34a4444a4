#include "train/train_config.h"

#include <algorithm>
#include <cmath>

#include "train/precision.h"

namespace lol {

const std::vector<Field<TrainConfig>>& TrainConfig::fields() {
  using C = TrainConfig;
  static const std::vector<Field<C>> table = {
      field("data", &C::data, "task:NAME or shard path"),
      field("eval_data", &C::eval_data, "held-out shard path"),
      field("steps", &C::steps, "optimizer steps"),
      field("batch_rows", &C::batch_rows, "rows per micro-batch"),
      field("seq_len", &C::seq_len, "tokens per row"),
      field("grad_accum", &C::grad_accum, "micro-batches per step"),
      field("optimizer", &C::optimizer, "muon | adamw"),
      field("lr", &C::lr, "peak learning rate"),
      field("min_lr_ratio", &C::min_lr_ratio, "final lr / peak"),
      field("warmup_steps", &C::warmup_steps, "warm-up steps"),
      field("schedule", &C::schedule, "cosine | wsd"),
      field("decay_fraction", &C::decay_fraction, "wsd decay share"),
      field("weight_decay", &C::weight_decay, "decoupled weight decay"),
      field("beta1", &C::beta1, "AdamW beta1"),
      field("beta2", &C::beta2, "AdamW beta2"),
      field("adam_eps", &C::adam_eps, "AdamW epsilon"),
      field("muon_momentum", &C::muon_momentum, "Muon momentum"),
      field("grad_clip", &C::grad_clip, "max grad norm (0 = off)"),
      field("grow_start_depth", &C::grow_start_depth, "depth at step 0 (0 = no growing)"),
      field("grow_fraction", &C::grow_fraction, "share of steps spent growing"),
      field("grow_shape", &C::grow_shape, "sqrt | linear"),
      field("eval_every", &C::eval_every, "steps between evaluations"),
      field("eval_batches", &C::eval_batches, "batches per evaluation"),
      field("log_every", &C::log_every, "steps between log lines"),
      field("checkpoint_every", &C::checkpoint_every, "steps between checkpoints"),
      field("keep_checkpoints", &C::keep_checkpoints, "checkpoints kept"),
      field("seed", &C::seed, "data and noise seed"),
      field("precision", &C::precision,
            "auto (bf16 autocast on CUDA, fp32 elsewhere) | fp32 | bf16 (autocast on any device)"),
  };
  return table;
}

void TrainConfig::validate() const {
  LOL_CHECK(steps > 0, "steps must be > 0, got ", steps);
  LOL_CHECK(batch_rows > 0, "batch_rows must be > 0, got ", batch_rows);
  LOL_CHECK(seq_len > 1, "seq_len must be > 1, got ", seq_len);
  LOL_CHECK(grad_accum > 0, "grad_accum must be > 0, got ", grad_accum);
  LOL_CHECK(optimizer == "muon" || optimizer == "adamw", "optimizer must be muon or adamw, got '",
            optimizer, "'");
  LOL_CHECK(std::isfinite(lr) && lr > 0, "lr must be > 0, got ", lr);
  LOL_CHECK(min_lr_ratio >= 0 && min_lr_ratio <= 1, "min_lr_ratio must be in [0, 1], got ",
            min_lr_ratio);
  LOL_CHECK(warmup_steps >= 0, "warmup_steps must be >= 0, got ", warmup_steps);
  LOL_CHECK(schedule == "cosine" || schedule == "wsd", "schedule must be cosine or wsd, got '",
            schedule, "'");
  LOL_CHECK(decay_fraction > 0 && decay_fraction <= 1, "decay_fraction must be in (0, 1], got ",
            decay_fraction);
  LOL_CHECK(weight_decay >= 0, "weight_decay must be >= 0, got ", weight_decay);
  LOL_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1,
            "beta1 and beta2 must be in [0, 1)");
  LOL_CHECK(adam_eps > 0, "adam_eps must be > 0, got ", adam_eps);
  LOL_CHECK(muon_momentum >= 0 && muon_momentum < 1, "muon_momentum must be in [0, 1), got ",
            muon_momentum);
  LOL_CHECK(grad_clip >= 0, "grad_clip must be >= 0, got ", grad_clip);
  LOL_CHECK(grow_start_depth >= 0, "grow_start_depth must be >= 0, got ", grow_start_depth);
  LOL_CHECK(grow_fraction > 0 && grow_fraction <= 1, "grow_fraction must be in (0, 1], got ",
            grow_fraction);
  LOL_CHECK(grow_shape == "sqrt" || grow_shape == "linear",
            "grow_shape must be sqrt or linear, got '", grow_shape, "'");
  const auto& names = precision_names();
  LOL_CHECK(std::find(names.begin(), names.end(), precision) != names.end(),
            "precision must be auto, fp32 or bf16, got '", precision, "'");
  LOL_CHECK(eval_every >= 0 && eval_batches > 0 && log_every > 0 && checkpoint_every >= 0 &&
                keep_checkpoints > 0,
            "eval_every and checkpoint_every must be >= 0; eval_batches, log_every and "
            "keep_checkpoints > 0");
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
  if (c.schedule == "wsd") {
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
  const double shape = c.grow_shape == "linear" ? t : 1.0 - std::sqrt(1.0 - t);
  return c.grow_start_depth +
         static_cast<int64_t>(std::llround((core_depth - c.grow_start_depth) * shape));
}

}  // namespace lol
