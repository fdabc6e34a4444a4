#include "util/op_profile.h"

#include <ATen/SequenceNumber.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "util/error.h"

namespace lol {
namespace {

using Clock = std::chrono::steady_clock;

struct Totals {
  int64_t forward_ns = 0, backward_ns = 0, gemm_ns = 0, host_ns = 0, calls = 0;
};

// What every thread's observer shares: the (phase, part) keys, their totals, and which key each
// forward operator's autograd sequence number ran under.
struct Shared {
  std::mutex mutex;
  std::vector<std::pair<std::string, std::string>> keys;  // index -> (phase, part)
  std::map<std::pair<std::string, std::string>, int> index;
  std::vector<Totals> totals;
  std::unordered_map<int64_t, int> key_of_sequence;
  std::unordered_map<std::string, Totals> operators;  // by name, over all regions
  bool running = false;
};
Shared& shared() {
  static Shared s;
  return s;
}
// Whether a profiler runs (ProfileScope's only cost otherwise).
std::atomic<bool> profiling{false};
// Bumped by every profiler, so that a thread's frames left from an earlier one are dropped.
std::atomic<uint64_t> generation{0};

struct Frame {
  int key = 0;
  bool backward = false, gemm = false, region = false;
  Clock::time_point start;
  int64_t child_ns = 0;
};
struct ThreadFrames {
  uint64_t generation = 0;
  std::vector<Frame> frames;
};
thread_local ThreadFrames tls;

int intern(Shared& s, const std::string& phase, const std::string& part) {
  const auto k = std::make_pair(phase, part);
  const auto it = s.index.find(k);
  if (it != s.index.end()) return it->second;
  const int id = static_cast<int>(s.keys.size());
  s.keys.push_back(k);
  s.index.emplace(k, id);
  s.totals.emplace_back();
  return id;
}

bool is_gemm(const char* name) {
  // In-place forms too: LibTorch 1.13's CPU baddbmm runs one addmm_ per matrix of the batch.
  static const std::array<const char*, 11> gemms = {
      "aten::mm",      "aten::addmm",    "aten::addmm_",           "aten::bmm",
      "aten::baddbmm", "aten::baddbmm_", "aten::addbmm",           "aten::addmv",
      "aten::mv",      "aten::dot",      "aten::_addmm_activation"};
  for (const char* g : gemms)
    if (std::strcmp(name, g) == 0) return true;
  return false;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  const uint64_t gen = generation.load(std::memory_order_relaxed);
  if (tls.generation != gen) {
    tls.frames.clear();
    tls.generation = gen;
  }
  Frame f;
  const Frame* parent = tls.frames.empty() ? nullptr : &tls.frames.back();
  f.backward = parent && parent->backward;
  const char* name = fn.name();
  auto& s = shared();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    const int parent_key = parent ? parent->key : intern(s, "unscoped", "");
    const auto parent_phase = s.keys[static_cast<size_t>(parent_key)].first;
    if (fn.scope() == at::RecordScope::USER_SCOPE && name) {  // a ProfileScope
      const std::string region = name;
      f.region = true;
      f.key = parent_phase == "unscoped" ? intern(s, region, "") : intern(s, parent_phase, region);
      if (region == "backward") f.backward = true;
    } else {
      f.key = parent_key;
      f.gemm = name && is_gemm(name);
      const int64_t seq = fn.seqNr();
      if (seq >= 0) {
        if (f.backward) {
          const auto it = s.key_of_sequence.find(seq);
          if (it != s.key_of_sequence.end()) f.key = it->second;
        } else {
          s.key_of_sequence[seq] = f.key;
        }
      }
    }
  }
  f.start = Clock::now();
  tls.frames.push_back(f);
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* /*ctx*/) {
  const auto now = Clock::now();
  if (tls.frames.empty() || tls.generation != generation.load(std::memory_order_relaxed)) return;
  const Frame f = tls.frames.back();
  tls.frames.pop_back();
  const int64_t duration =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now - f.start).count();
  const int64_t self = duration - f.child_ns;
  if (!tls.frames.empty()) tls.frames.back().child_ns += duration;
  auto& s = shared();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.running) return;
  auto add = [&](Totals& t) {
    t.calls++;
    if (f.region)
      t.host_ns += self;
    else if (f.backward)
      t.backward_ns += self;
    else
      t.forward_ns += self;
    if (f.gemm) t.gemm_ns += self;
  };
  add(s.totals[static_cast<size_t>(f.key)]);
  if (!f.region && fn.name()) add(s.operators[fn.name()]);
}

ProfileRow to_row(const Totals& t) {
  ProfileRow r;
  r.forward_ms = static_cast<double>(t.forward_ns) / 1e6;
  r.backward_ms = static_cast<double>(t.backward_ns) / 1e6;
  r.gemm_ms = static_cast<double>(t.gemm_ns) / 1e6;
  r.host_ms = static_cast<double>(t.host_ns) / 1e6;
  r.calls = t.calls;
  return r;
}

}  // namespace

ProfileScope::ProfileScope(const char* name) {
  if (!profiling.load(std::memory_order_relaxed)) return;
  fn_.emplace(at::RecordScope::USER_SCOPE);
  if (fn_->isActive()) fn_->before(name);
}

void profile_custom_function_forward() {
  if (!profiling.load(std::memory_order_relaxed)) return;
  if (tls.generation != generation.load(std::memory_order_relaxed) || tls.frames.empty()) return;
  // Function::apply creates the node, which takes the thread's next sequence number, then
  // calls forward with gradients off (no node is made in between): the node's number is the
  // one before the next.
  const int64_t seq = static_cast<int64_t>(at::sequence_number::peek()) - 1;
  auto& s = shared();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.key_of_sequence[seq] = tls.frames.back().key;
}

OpProfiler::OpProfiler() {
  auto& s = shared();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    LOL_CHECK(!s.running, "profiler: another profiler is already running in this process");
    s.running = true;
    s.keys.clear();
    s.index.clear();
    s.totals.clear();
    s.key_of_sequence.clear();
    s.operators.clear();
  }
  generation.fetch_add(1);
  handle_ = at::addGlobalCallback(
      at::RecordFunctionCallback(on_start, on_end)
          .needsInputs(false)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                   at::RecordScope::USER_SCOPE}));
  profiling.store(true);
}

OpProfiler::~OpProfiler() {
  profiling.store(false);
  at::removeCallback(handle_);
  generation.fetch_add(1);
  auto& s = shared();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.running = false;
}

std::vector<ProfileRow> OpProfiler::rows() const {
  auto& s = shared();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<ProfileRow> out;
  for (size_t i = 0; i < s.keys.size(); ++i) {
    const auto& t = s.totals[i];
    if (t.calls == 0) continue;
    ProfileRow r = to_row(t);
    r.phase = s.keys[i].first;
    r.part = s.keys[i].second;
    out.push_back(r);
  }
  return out;
}

std::vector<ProfileRow> OpProfiler::operators() const {
  auto& s = shared();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<ProfileRow> out;
  for (const auto& [name, t] : s.operators) {
    ProfileRow r = to_row(t);
    r.phase = name;
    out.push_back(r);
  }
  std::sort(out.begin(), out.end(), [](const ProfileRow& a, const ProfileRow& b) {
    return a.total_ms() > b.total_ms() || (a.total_ms() == b.total_ms() && a.phase < b.phase);
  });
  return out;
}

}  // namespace lol
