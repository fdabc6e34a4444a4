#pragma once
// Data parallelism on LibTorch's c10d (docs/distributed.md): a process group over Gloo (CPU
// tensors; NCCL where the LibTorch build has it, for CUDA), joined through a FileStore (lol's
// own launcher, tests) or a TCPStore (the torchrun environment: MASTER_ADDR, MASTER_PORT, RANK,
// WORLD_SIZE), with a timeout so that a worker that dies or hangs ends the run on every rank.
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace lol {

struct DistributedConfig {
  int rank = 0, world = 1;
  std::string store_file;   // FileStore path (lol train --nproc), or
  std::string master_addr;  // TCPStore host and port (torchrun)
  int master_port = 0;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  bool active() const { return world > 1; }
};

// From the environment: LOL_DIST_STORE (+ RANK, WORLD_SIZE) as `lol train --nproc` sets it, or
// torchrun's MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE; world 1 when neither is set.
// LOL_DIST_TIMEOUT_S overrides the timeout. Throws naming a variable that is malformed.
DistributedConfig distributed_from_env();

class Distributed {
 public:
  // Joins the group; blocks until every rank has joined (or the timeout passes).
  explicit Distributed(const DistributedConfig& config, torch::Device device);
  ~Distributed();
  int rank() const { return config_.rank; }
  int world() const { return config_.world; }

  // In place, summed over the ranks; tensors are packed into buckets of at most
  // `bucket_bytes` so that one collective moves many small tensors. All of one dtype.
  void all_reduce_sum(const std::vector<torch::Tensor>& tensors, int64_t bucket_bytes = 25 << 20);
  // In place, rank `root`'s values everywhere.
  void broadcast(const std::vector<torch::Tensor>& tensors, int root = 0);
  // The sum over ranks of a few numbers (counts, flags).
  std::vector<double> sum(const std::vector<double>& values);

  // Statistics of the collectives so far: seconds waited and bytes reduced.
  double seconds() const { return seconds_; }
  int64_t bytes() const { return bytes_; }

 private:
  struct Group;
  DistributedConfig config_;
  torch::Device device_;
  std::unique_ptr<Group> group_;
  double seconds_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace lol
