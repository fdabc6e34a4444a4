#pragma once
// Data parallelism on LibTorch's c10d (docs/distributed.md): a process group over Gloo (CPU
// tensors; NCCL where the LibTorch build has it, for CUDA), joined through a FileStore (lol's
// own launcher, tests) or a TCPStore (the torchrun environment: MASTER_ADDR, MASTER_PORT, RANK,
// WORLD_SIZE), with a timeout so that a worker that dies or hangs ends the run on every rank.
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace lol {

struct DistributedConfig {
  int rank = 0, world = 1;
  int local_rank = 0,
      local_world = 1;      // among this machine's workers (LOCAL_RANK, LOCAL_WORLD_SIZE)
  std::string store_file;   // FileStore path (lol train --nproc), or
  std::string master_addr;  // TCPStore host and port (torchrun)
  int master_port = 0;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  bool active() const { return world > 1; }
};

// From the environment: LOL_DIST_STORE (+ RANK, WORLD_SIZE) as `lol train --nproc` sets it, or
// torchrun's MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE; world 1 when neither is set.
// LOCAL_RANK and LOCAL_WORLD_SIZE (default 0 and 1) place the worker on its machine.
// LOL_DIST_TIMEOUT_S overrides the timeout. Throws naming a variable that is malformed.
DistributedConfig distributed_from_env();
// The device a worker computes on: `requested`, except that a CUDA device without an index is
// cuda:LOCAL_RANK, one GPU per worker of a machine (torchrun's convention; an explicit cuda:N is
// kept). `gpus` is how many the machine shows; a local rank without a GPU of its own throws.
torch::Device worker_device(const torch::Device& requested, const DistributedConfig& config,
                            int gpus);
// LOL_DIST_TIMEOUT_S, or the default of 300 s.
std::chrono::milliseconds distributed_timeout_from_env();

class Distributed {
 public:
  // A collective in flight (c10d work): wait() blocks until it is done, once.
  class Pending {
   public:
    Pending() = default;
    Pending(Pending&&) noexcept;
    Pending& operator=(Pending&&) noexcept;
    ~Pending();
    void wait();
    bool started() const { return work_ != nullptr; }

   private:
    friend class Distributed;
    struct Work;
    std::unique_ptr<Work> work_;
    Distributed* owner_ = nullptr;
  };

  // Joins the group; blocks until every rank has joined (or the timeout passes).
  explicit Distributed(const DistributedConfig& config, torch::Device device);
  ~Distributed();
  int rank() const { return config_.rank; }
  int world() const { return config_.world; }

  // Starts summing `flat` (one tensor) over the ranks in place and returns at once; collectives
  // started on every rank in the same order pair up. Waiting counts in seconds().
  Pending start_all_reduce_sum(torch::Tensor flat);
  // In place, rank `root`'s values everywhere.
  void broadcast(const std::vector<torch::Tensor>& tensors, int root = 0);
  // The sum over ranks of a few numbers (counts, flags).
  std::vector<double> sum(const std::vector<double>& values);

  // The c10d backends this build has: "gloo nccl", "gloo", or "none".
  static std::string backends();

  // Statistics of the collectives so far: seconds waited and bytes reduced.
  double seconds() const { return seconds_; }
  int64_t bytes() const { return bytes_; }

 private:
  struct Group;
  // Waits for a collective; when it fails (a rank died, or hung past the timeout), finds out
  // which ranks are gone and throws naming them (see lost_ranks).
  void wait(const std::function<void()>& wait_for_work);
  // The ranks that do not check in at the store within a grace period after a failed
  // collective: every rank still alive sees the failure and checks in.
  std::string lost_ranks();
  DistributedConfig config_;
  torch::Device device_;
  std::unique_ptr<Group> group_;
  double seconds_ = 0;
  int64_t bytes_ = 0;
};

// What DDP does with gradients, for the trainer: every parameter's gradient summed over the ranks
// in buckets of at most `bucket_bytes`, each started as soon as the backward pass of the step's
// last micro-batch has produced all of its gradients (autograd post-hooks on the parameters'
// gradient accumulators), so that communication overlaps the rest of the backward pass. Buckets
// start strictly in order (the same order on every rank, which c10d needs), and finish() starts
// the ones whose parameters that backward pass did not reach. A parameter no rank reached keeps no
// gradient, as on one worker; one that some rank reached gets the sum everywhere.
class GradientSync {
 public:
  GradientSync(Distributed& dist, std::vector<torch::Tensor> params, int64_t bucket_bytes);
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;
  // Before the backward pass of the step's last micro-batch on this rank.
  void arm();
  // After it: starts the remaining buckets, waits for all, writes the sums into the gradients.
  void finish();
  // Of the last step: buckets started during the backward pass, and all buckets.
  int64_t overlapped() const { return overlapped_; }
  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  struct Hook;
  void ready(size_t param);  // a hook: this parameter's gradient is final
  void start_ready_buckets();
  void start(size_t bucket);

  Distributed& dist_;
  std::vector<torch::Tensor> params_;
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    size_t pending = 0;          // parameters not yet ready
    torch::Tensor flat;
    Distributed::Pending work;
  };
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // per parameter
  std::vector<bool> ready_;
  size_t next_ = 0;  // the next bucket to start
  bool armed_ = false;
  int64_t overlapped_ = 0;
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
};

}  // namespace lol
