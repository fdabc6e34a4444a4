#pragma once
// The training loop: micro-batches -> loss -> backward -> clip -> optimizer -> balance bias,
// with growing depth, periodic evaluation, metrics, and checkpoints that resume exactly.
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "data/packer.h"
#include "model/model.h"
#include "train/balance.h"
#include "train/distributed.h"
#include "train/metrics.h"
#include "train/optim.h"
#include "train/train_config.h"

namespace lol {

// Held-out evaluation: loss per target token and the share of targets the model's most
// likely next token gets right (teacher-forced), both over the loss-masked targets; with
// router_skip, the share of the windows training counts (balance_window0) that took the skip,
// as the model decides without router noise (training's skip_share is with it).
struct EvalResult {
  double loss = 0, accuracy = 0;
  std::optional<double> skip_share;
};

// train_state.json of a checkpoint: where a run stood (docs/training.md).
struct TrainState {
  int64_t step = 0;        // optimizer steps done
  json data_position;      // the packer's position (DocumentSource::seek)
  double total_flops = 0;  // training FLOPs so far
  TrainConfig config;      // the run's configuration
  json to_json() const;
  static TrainState from_json(const json& object);  // throws naming the key that is wrong
};

class Trainer {
 public:
  // A new run in run_dir (created; must not hold a run already unless overwrite). With `dist`,
  // this process is one rank of a data-parallel run (docs/distributed.md): every rank packs the
  // same data stream and takes micro-batches i with i % world == rank, gradients and balance
  // loads are summed over the ranks, and only rank 0 writes into run_dir.
  Trainer(LanguageModel model, TrainConfig config, std::string run_dir, torch::Device device,
          std::shared_ptr<Distributed> dist = nullptr);
  // Continues the run in run_dir from its latest checkpoint (at any world size).
  static std::unique_ptr<Trainer> resume(const std::string& run_dir, torch::Device device,
                                         std::shared_ptr<Distributed> dist = nullptr);

  // Trains until config.steps, or until should_stop() after a step; saves a checkpoint at the
  // end either way. on_step sees every step's metrics.
  void run(const std::function<bool()>& should_stop = {},
           const std::function<void(const StepMetrics&)>& on_step = {});
  // One optimizer step (all micro-batches), without evaluation or checkpointing.
  StepMetrics train_step();
  EvalResult evaluate();
  std::string save_checkpoint();  // returns its directory
  int64_t step() const { return step_; }
  int rank() const { return dist_ ? dist_->rank() : 0; }
  int world() const { return dist_ ? dist_->world() : 1; }
  const Distributed* distributed() const { return dist_.get(); }
  LanguageModel& model() { return model_; }
  const TrainConfig& config() const { return config_; }

 private:
  void build_optimizers();
  void load_checkpoint(const std::string& dir, const TrainState& meta);
  bool writes() const { return rank() == 0; }  // rank 0 alone writes into the run directory

  LanguageModel model_;
  TrainConfig config_;
  std::string run_dir_;
  torch::Device device_;
  std::unique_ptr<DocumentSource> source_;
  std::unique_ptr<Packer> packer_;
  std::unique_ptr<AdamW> adamw_;
  std::unique_ptr<Muon> muon_;
  int64_t step_ = 0;
  double total_flops_ = 0;
  std::shared_ptr<Distributed> dist_;
  std::unique_ptr<GradientSync> grad_sync_;  // with dist_: gradients summed during backward
};

}  // namespace lol
