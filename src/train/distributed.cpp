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

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "util/error.h"
#include "util/parse.h"

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
  const auto x = parse_int(v);
  LOL_CHECK(x && *x >= lo && *x <= hi, name, " must be an integer in [", lo, ", ", hi, "], got '",
            v, "'");
  return static_cast<int>(*x);
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
  c.local_world = env_int("LOCAL_WORLD_SIZE", 1, 1, c.world);
  c.local_rank = env_int("LOCAL_RANK", 0, 0, c.local_world - 1);
  if (c.store_file.empty()) {
    LOL_CHECK(!c.master_addr.empty() || c.world == 1,
              "WORLD_SIZE is set but MASTER_ADDR is not (torchrun sets both)");
    c.master_port = env_int("MASTER_PORT", 29500, 1, 65535);
  }
  c.timeout = distributed_timeout_from_env();
  return c;
}

torch::Device worker_device(const torch::Device& requested, const DistributedConfig& config,
                            int gpus) {
  if (!requested.is_cuda() || requested.has_index()) return requested;
  LOL_CHECK(config.local_rank < gpus, "worker ", config.rank, " (LOCAL_RANK ", config.local_rank,
            ") has no GPU of its own: this machine shows ", gpus,
            " (one GPU per local worker; start at most that many per machine, or name one with "
            "--device cuda:N)");
  return torch::Device(requested.type(), static_cast<c10::DeviceIndex>(config.local_rank));
}

std::chrono::milliseconds distributed_timeout_from_env() {
  return std::chrono::seconds(env_int("LOL_DIST_TIMEOUT_S", 300, 1, 86400));
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
    // The worker's GPU becomes the current one, so that NCCL and the caching allocator do not
    // open a context on GPU 0 for every worker of the machine.
    c10::impl::getDeviceGuardImpl(device_.type())->setDevice(device_);
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

std::string Distributed::backends() {
  std::string out;
#ifdef USE_C10D_GLOO
  out += "gloo";
#endif
#ifdef USE_C10D_NCCL
  out += out.empty() ? "nccl" : " nccl";
#endif
  return out.empty() ? "none" : out;
}

void Distributed::wait(const std::function<void()>& wait_for_work) {
  try {
    wait_for_work();
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    fail("rank ", config_.rank, " of ", config_.world, ": a collective failed (", what, "); ",
         lost_ranks(),
         ". The run stops on every rank; its last checkpoint is intact: resume it with --resume "
         "(at any number of workers)");
  }
}

std::string Distributed::lost_ranks() {
  // Every rank that is still running sees the failure (its own collective fails, at once when a
  // peer's connection drops, after the timeout when a peer hangs) and checks in under its own
  // key; a rank that has not checked in after the grace period is gone or hung.
  const auto grace = std::min<std::chrono::milliseconds>(config_.timeout, std::chrono::seconds(5));
  std::vector<int> missing;
  try {
    group_->store->set("lol_failed/" + std::to_string(config_.rank), std::vector<uint8_t>{1});
    const auto deadline = std::chrono::steady_clock::now() + grace;
    do {
      missing.clear();
      for (int r = 0; r < config_.world; ++r)
        if (r != config_.rank && !group_->store->check({"lol_failed/" + std::to_string(r)}))
          missing.push_back(r);
      if (missing.empty()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } while (std::chrono::steady_clock::now() < deadline);
  } catch (const std::exception&) {
    return "the rendezvous store is unreachable, so rank 0, which hosts it, is lost";
  }
  if (missing.empty()) return "every rank is still running (a network failure?)";
  std::string out = missing.size() == 1 ? "lost rank " : "lost ranks ";
  for (size_t i = 0; i < missing.size(); ++i) out += (i ? ", " : "") + std::to_string(missing[i]);
  return out + " (exited, killed or hung: no word from it within " +
         std::to_string(grace.count() / 1000) + " s of the failure)";
}

struct Distributed::Pending::Work {
  c10::intrusive_ptr<::c10d::Work> work;
};
Distributed::Pending::Pending(Pending&&) noexcept = default;
Distributed::Pending& Distributed::Pending::operator=(Pending&&) noexcept = default;
Distributed::Pending::~Pending() = default;

void Distributed::Pending::wait() {
  if (!work_) return;
  const auto start = std::chrono::steady_clock::now();
  auto work = std::move(work_);
  owner_->wait([&] { work->work->wait(); });
  owner_->seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Distributed::Pending Distributed::start_all_reduce_sum(torch::Tensor flat) {
  Pending p;
  std::vector<torch::Tensor> one{std::move(flat)};
  p.work_ = std::make_unique<Pending::Work>(Pending::Work{group_->pg->allreduce(one)});
  p.owner_ = this;
  bytes_ += one[0].numel() * static_cast<int64_t>(one[0].element_size());
  return p;
}

void Distributed::broadcast(const std::vector<torch::Tensor>& tensors, int root) {
  const auto start = std::chrono::steady_clock::now();
  ::c10d::BroadcastOptions o;
  o.rootRank = root;
  for (const auto& t : tensors) {
    std::vector<torch::Tensor> one{t};
    auto work = group_->pg->broadcast(one, o);
    wait([&] { work->wait(); });
    // The transport wrote the memory behind LibTorch's back: move the version counter (shared
    // with the parameter a detached view comes from) so caches keyed on it (the stacked and
    // packed weights of model/block.h) see the new values.
    torch::autograd::impl::bump_version(t);
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<double> Distributed::sum(const std::vector<double>& values) {
  auto t = torch::tensor(values, torch::kFloat64);
  if (device_.is_cuda()) t = t.to(device_);
  start_all_reduce_sum(t).wait();
  t = t.to(torch::kCPU);
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

// Called by autograd after a parameter's gradient accumulator has run: its gradient for this
// backward pass is complete.
struct GradientSync::Hook : torch::autograd::FunctionPostHook {
  Hook(GradientSync* owner, size_t index) : sync(owner), param(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    sync->ready(param);
    return outputs;
  }
  GradientSync* sync;
  size_t param;
};

GradientSync::GradientSync(Distributed& dist, std::vector<torch::Tensor> params,
                           int64_t bucket_bytes)
    : dist_(dist), params_(std::move(params)) {
  // Backward produces the last layers' gradients first: buckets run from the last parameter.
  bucket_of_.resize(params_.size());
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const int64_t b = params_[k].numel() * static_cast<int64_t>(params_[k].element_size());
    if (buckets_.empty() || (bytes > 0 && bytes + b > bucket_bytes)) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().params.push_back(k);
    bucket_of_[k] = buckets_.size() - 1;
    bytes += b;
  }
  for (size_t k = 0; k < params_.size(); ++k) {
    // The accumulator is created on first use and otherwise freed with the graph: holding it
    // keeps the hook for every step.
    auto node = torch::autograd::impl::grad_accumulator(params_[k]);
    LOL_CHECK(node != nullptr, "parameter ", k, " has no gradient accumulator (not a leaf?)");
    const auto key = node->add_post_hook(std::make_unique<Hook>(this, k));
    hooks_.emplace_back(std::move(node), key);
  }
  ready_.assign(params_.size(), false);
}

GradientSync::~GradientSync() {
  for (auto& [node, key] : hooks_) node->del_post_hook(key);
}

void GradientSync::arm() {
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& b : buckets_) b.pending = b.params.size();
  next_ = 0;
  overlapped_ = 0;
  armed_ = true;
}

void GradientSync::ready(size_t param) {
  if (!armed_ || ready_[param]) return;
  ready_[param] = true;
  --buckets_[bucket_of_[param]].pending;
  start_ready_buckets();
}

void GradientSync::start_ready_buckets() {
  while (next_ < buckets_.size() && buckets_[next_].pending == 0) {
    start(next_);
    if (armed_) ++overlapped_;
    ++next_;
  }
}

void GradientSync::start(size_t bucket) {
  auto& b = buckets_[bucket];
  std::vector<torch::Tensor> parts;
  for (size_t k : b.params) {
    auto& p = params_[k];
    // A parameter this rank did not reach joins with zeros, and a flag says so (the last element
    // of each part): the sum of the flags tells whether any rank reached it.
    const bool reached = p.grad().defined();
    auto grad = reached ? p.grad().reshape({-1}) : torch::zeros({p.numel()}, p.options());
    parts.push_back(grad);
    parts.push_back(torch::full({1}, reached ? 1.0 : 0.0, p.options()));
  }
  b.flat = torch::cat(parts);
  b.work = dist_.start_all_reduce_sum(b.flat);
}

void GradientSync::finish() {
  LOL_CHECK(armed_, "GradientSync::finish without arm");
  armed_ = false;
  // Parameters the last backward pass did not reach are complete as they are.
  for (auto& b : buckets_) b.pending = 0;
  start_ready_buckets();
  for (auto& b : buckets_) {
    b.work.wait();
    // The summed flags, read in one transfer: > 0 where some rank reached the parameter.
    std::vector<int64_t> flag_at;
    int64_t at = 0;
    for (size_t k : b.params) {
      at += params_[k].numel();
      flag_at.push_back(at++);
    }
    const auto flags = b.flat.index_select(0, torch::tensor(flag_at).to(b.flat.device()))
                           .to(torch::kCPU, torch::kFloat64);
    const auto any = flags.accessor<double, 1>();
    at = 0;
    for (size_t i = 0; i < b.params.size(); ++i) {
      auto& p = params_[b.params[i]];
      const int64_t n = p.numel();
      if (any[static_cast<int64_t>(i)] == 0) {
        p.mutable_grad() = torch::Tensor();
      } else {
        auto sum = b.flat.narrow(0, at, n).view(p.sizes());
        if (p.grad().defined())
          p.mutable_grad().copy_(sum);
        else
          p.mutable_grad() = sum.clone();
      }
      at += n + 1;
    }
    b.flat = torch::Tensor();
  }
}

}  // namespace lol
