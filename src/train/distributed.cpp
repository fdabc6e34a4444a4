#include "train/distributed.h"

#include <torch/version.h>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>

#include "util/error.h"

// LibTorch 2.x split the collectives' implementations (Gloo, NCCL) into c10d::Backend; 1.13's
// derive from c10d::ProcessGroup. Both offer the same allreduce and broadcast.
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
using CollectiveGroup = ::c10d::Backend;
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
using CollectiveGroup = ::c10d::ProcessGroup;
#endif

namespace lol {
namespace {

int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  LOL_CHECK(end != v && *end == '\0' && x >= lo && x <= hi, name, " must be an integer in [", lo,
            ", ", hi, "], got '", v, "'");
  return static_cast<int>(x);
}

std::string env_text(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

DistributedConfig distributed_from_env() {
  DistributedConfig c;
  c.store_file = env_text("LOL_DIST_STORE");
  c.master_addr = env_text("MASTER_ADDR");
  const bool torchrun = !c.master_addr.empty() || std::getenv("WORLD_SIZE") != nullptr;
  if (c.store_file.empty() && !torchrun) return c;
  c.world = env_int("WORLD_SIZE", 1, 1, 1 << 20);
  c.rank = env_int("RANK", 0, 0, c.world - 1);
  if (c.store_file.empty()) {
    LOL_CHECK(!c.master_addr.empty() || c.world == 1,
              "WORLD_SIZE is set but MASTER_ADDR is not (torchrun sets both)");
    c.master_port = env_int("MASTER_PORT", 29500, 1, 65535);
  }
  c.timeout = std::chrono::seconds(env_int("LOL_DIST_TIMEOUT_S", 300, 1, 86400));
  return c;
}

struct Distributed::Group {
  c10::intrusive_ptr<::c10d::Store> store;
  c10::intrusive_ptr<CollectiveGroup> pg;
};

Distributed::Distributed(const DistributedConfig& config, torch::Device device)
    : config_(config), device_(device), group_(std::make_unique<Group>()) {
  LOL_CHECK(config_.world >= 1 && config_.rank >= 0 && config_.rank < config_.world, "rank ",
            config_.rank, " is outside the world of ", config_.world);
  if (!config_.store_file.empty()) {
    group_->store = c10::make_intrusive<::c10d::FileStore>(config_.store_file, config_.world);
  } else {
    ::c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(config_.master_port);
    o.isServer = config_.rank == 0;
    o.numWorkers = config_.world;
    o.timeout = config_.timeout;
    group_->store = c10::make_intrusive<::c10d::TCPStore>(config_.master_addr, o);
  }
  group_->store->setTimeout(config_.timeout);
  if (device_.is_cuda()) {
#ifdef USE_C10D_NCCL
    auto o = ::c10d::ProcessGroupNCCL::Options::create();
    o->timeout = config_.timeout;
    group_->pg = c10::make_intrusive<::c10d::ProcessGroupNCCL>(group_->store, config_.rank,
                                                               config_.world, o);
    return;
#else
    fail("data parallelism on CUDA needs a LibTorch built with NCCL");
#endif
  }
#ifdef USE_C10D_GLOO
  auto o = ::c10d::ProcessGroupGloo::Options::create();
  o->timeout = config_.timeout;
  const std::string host = config_.master_addr.empty() ? "127.0.0.1" : config_.master_addr;
  o->devices.push_back(config_.store_file.empty()
                           ? ::c10d::ProcessGroupGloo::createDefaultDevice()
                           : ::c10d::ProcessGroupGloo::createDeviceForHostname(host));
  group_->pg =
      c10::make_intrusive<::c10d::ProcessGroupGloo>(group_->store, config_.rank, config_.world, o);
#else
  fail("data parallelism on the CPU needs a LibTorch built with Gloo");
#endif
}

Distributed::~Distributed() = default;

void Distributed::all_reduce_sum(const std::vector<torch::Tensor>& tensors, int64_t bucket_bytes) {
  const auto start = std::chrono::steady_clock::now();
  size_t i = 0;
  while (i < tensors.size()) {
    // The next bucket: consecutive tensors up to bucket_bytes (at least one).
    size_t j = i;
    int64_t bytes = 0;
    do {
      bytes += tensors[j].numel() * static_cast<int64_t>(tensors[j].element_size());
      ++j;
    } while (j < tensors.size() &&
             bytes + tensors[j].numel() * static_cast<int64_t>(tensors[j].element_size()) <=
                 bucket_bytes);
    std::vector<torch::Tensor> flat_parts;
    for (size_t k = i; k < j; ++k) flat_parts.push_back(tensors[k].reshape({-1}));
    std::vector<torch::Tensor> bucket{torch::cat(flat_parts)};
    group_->pg->allreduce(bucket)->wait();
    int64_t at = 0;
    for (size_t k = i; k < j; ++k) {
      const int64_t n = tensors[k].numel();
      tensors[k].copy_(bucket[0].narrow(0, at, n).view(tensors[k].sizes()));
      at += n;
    }
    bytes_ += bytes;
    i = j;
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Distributed::broadcast(const std::vector<torch::Tensor>& tensors, int root) {
  const auto start = std::chrono::steady_clock::now();
  ::c10d::BroadcastOptions o;
  o.rootRank = root;
  for (const auto& t : tensors) {
    std::vector<torch::Tensor> one{t};
    group_->pg->broadcast(one, o)->wait();
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<double> Distributed::sum(const std::vector<double>& values) {
  auto t = torch::tensor(values, torch::kFloat64);
  if (device_.is_cuda()) t = t.to(device_);
  all_reduce_sum({t});
  t = t.to(torch::kCPU);
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

}  // namespace lol
