#include "model/segment_attention.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "model/cpu_fast.h"
#include "util/op_profile.h"

namespace lol {
namespace {

// Queries per block: a block's scores (64 x segment length) stay in cache.
constexpr int64_t kQueryBlock = 64;

using SgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*, const float*,
                         const float*, const int*, const float*, const int*, const float*, float*,
                         const int*);
using SetThreadsFn = void (*)(int);
using GetThreadsFn = int (*)();

SgemmFn sgemm() {
  static const SgemmFn fn = reinterpret_cast<SgemmFn>(::dlsym(RTLD_DEFAULT, "sgemm_"));
  return fn;
}

std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> flag{[] {
    const char* env = std::getenv("LOL_ATTENTION_KERNEL");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }()};
  return flag;
}

// Row-major C (M x N, ldc) = alpha op(A) op(B) + beta C, through the column-major BLAS as
// C^T = op(B)^T op(A)^T.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  const int la = static_cast<int>(lda), lb = static_cast<int>(ldb), lc = static_cast<int>(ldc);
  sgemm()(&tb, &ta, &m, &n, &k, &alpha, B, &lb, A, &la, &beta, C, &lc);
}

// OpenBLAS's own pool would split each product again while the tasks already use every
// thread: one BLAS thread while a parallel region runs, the previous count after.
class SingleThreadedBlas {
 public:
  explicit SingleThreadedBlas(bool active) {
    static const auto get =
        reinterpret_cast<GetThreadsFn>(::dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
    static const auto set =
        reinterpret_cast<SetThreadsFn>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    if (!active || get == nullptr || set == nullptr) return;
    set_ = set;
    saved_ = get();
    if (saved_ != 1) set_(1);
  }
  ~SingleThreadedBlas() {
    if (set_ != nullptr && saved_ != 1) set_(saved_);
  }
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  SetThreadsFn set_ = nullptr;
  int saved_ = 1;
};

// What the kernels read: the segments (start, length), key visibility and the band from the
// plan, the row of each flat token, and the q/k/v layout.
struct Problem {
  const int64_t* segments = nullptr;  // (S, 2)
  const uint8_t* visible = nullptr;   // (N) flat token may be seen by other tokens
  const int64_t* rows = nullptr;      // (N) flat token -> row, nullptr: the identity
  int64_t band = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 1;
  int64_t row(int64_t flat) const { return rows ? rows[flat] : flat; }
};

// Scratch of one thread, grown as needed and kept between calls: a task's buffers are carved
// from it without allocating or zeroing.
float* scratch(size_t floats) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < floats) buffer.resize(floats);
  return buffer.data();
}

struct Task {
  int64_t segment, kv_head;
  double cost;
};

// The (segment, key head) tasks split into one list per thread, largest first, each to the
// least loaded list, so lists of mixed segment lengths finish together.
std::vector<std::vector<Task>> schedule(const Problem& p, int64_t num_segments, int threads) {
  std::vector<Task> tasks;
  for (int64_t s = 0; s < num_segments; ++s) {
    const double n = static_cast<double>(p.segments[2 * s + 1]);
    if (n <= 0) continue;
    const double keys = p.band > 0 ? std::min<double>(n, p.band) : n;
    for (int64_t g = 0; g < p.kv_heads; ++g) tasks.push_back({s, g, n * (keys + 64)});
  }
  std::stable_sort(tasks.begin(), tasks.end(),
                   [](const Task& a, const Task& b) { return a.cost > b.cost; });
  const int bins = std::max(1, std::min<int>(threads, static_cast<int>(tasks.size())));
  std::vector<std::vector<Task>> out(bins);
  std::vector<double> load(bins, 0.0);
  for (const auto& t : tasks) {
    const int b = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    out[b].push_back(t);
    load[b] += t.cost;
  }
  return out;
}

// Runs fn(task) for every task, each list of tasks on one thread.
template <typename Fn>
void for_tasks(const Problem& p, int64_t num_segments, Fn fn) {
  const auto lists = schedule(p, num_segments, at::get_num_threads());
  const int64_t bins = static_cast<int64_t>(lists.size());
  SingleThreadedBlas blas(bins > 1);
  at::parallel_for(0, bins, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      for (const auto& t : lists[b]) fn(t);
  });
}

// Scores of query rows [q0, q0 + qn) of a segment against its keys [k0, k0 + kn) into P, as
// SPEC 1.2 allows: each row's softmax runs over its own range only, from the band's start to
// the query itself, with router-only keys other than the query at -inf; P is exactly 0 for
// every key outside the range (later keys, keys before the band). A causal block's rows skip
// the masked half instead of exponentiating it.
LOL_CPU_CLONES
void masked_softmax(const Problem& p, int64_t start, int64_t q0, int64_t qn, int64_t k0, int64_t kn,
                    float* scores, float* probs) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  const uint8_t* visible = p.visible + start + k0;
  for (int64_t r = 0; r < qn; ++r) {
    const int64_t i = q0 + r - k0;  // the query's own key, relative to k0
    const int64_t lo = p.band > 0 ? std::max<int64_t>(0, i - p.band + 1) : 0;
    float* row = scores + r * kn;
    float* out = probs + r * kn;
    for (int64_t j = lo; j < i; ++j) row[j] = visible[j] ? row[j] : kMasked;
    softmax_row(row + lo, out + lo, i + 1 - lo);
    std::fill(out, out + lo, 0.0f);
    std::fill(out + i + 1, out + kn, 0.0f);
  }
}

// The keys a block of queries [q0, q0 + qn) can see at most: from the band's start of its first
// query to its last query.
std::pair<int64_t, int64_t> key_range(const Problem& p, int64_t q0, int64_t qn) {
  const int64_t k0 = p.band > 0 ? std::max<int64_t>(0, q0 - p.band + 1) : 0;
  return {k0, q0 + qn - k0};
}

void gather(const float* src, int64_t row_stride, int64_t head_offset, const Problem& p,
            int64_t start, int64_t first, int64_t count, float* dst) {
  const int64_t dh = p.head_dim;
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(dst + i * dh, src + p.row(start + first + i) * row_stride + head_offset,
                dh * sizeof(float));
}

void scatter(const float* src, const Problem& p, int64_t start, int64_t first, int64_t count,
             float* dst, int64_t row_stride, int64_t head_offset) {
  const int64_t dh = p.head_dim;
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(dst + p.row(start + first + i) * row_stride + head_offset, src + i * dh,
                dh * sizeof(float));
}

Problem make_problem(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& segments,
                     const torch::Tensor& visible, const torch::Tensor& rows, int64_t band) {
  Problem p;
  p.segments = segments.data_ptr<int64_t>();
  p.visible = visible.data_ptr<uint8_t>();
  p.rows = rows.numel() > 0 ? rows.data_ptr<int64_t>() : nullptr;
  p.band = band;
  p.heads = q.size(1);
  p.kv_heads = k.size(1);
  p.head_dim = q.size(2);
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.head_dim)));
  return p;
}

// Calls fn(head, first query, queries, first key, keys) for every query head of a task's key
// head and every block of its segment's queries.
template <typename Fn>
void for_blocks(const Problem& p, const Task& t, int64_t n, int64_t block, Fn fn) {
  const int64_t group = p.heads / p.kv_heads;
  for (int64_t h = t.kv_head * group; h < (t.kv_head + 1) * group; ++h)
    for (int64_t q0 = 0; q0 < n; q0 += block) {
      const int64_t qn = std::min(block, n - q0);
      const auto [k0, kn] = key_range(p, q0, qn);
      fn(h, q0, qn, k0, kn);
    }
}

// P (qn x kn) of a block of gathered queries Q against the task's gathered keys K: the scaled
// scores, masked, softmaxed; S is scratch.
void probabilities(const Problem& p, int64_t start, const float* Q, const float* K, int64_t q0,
                   int64_t qn, int64_t k0, int64_t kn, float* S, float* P) {
  const int64_t dh = p.head_dim;
  gemm(false, true, qn, kn, dh, p.scale, Q, dh, K + k0 * dh, dh, 0, S, kn);
  masked_softmax(p, start, q0, qn, k0, kn, S, P);
}

torch::Tensor forward_kernel(const Problem& p, int64_t num_segments, const torch::Tensor& q,
                             const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t H = p.heads, dh = p.head_dim;
  auto out = torch::empty({q.size(0), H * dh}, q.options());
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for_tasks(p, num_segments, [&](const Task& t) {
    const int64_t start = p.segments[2 * t.segment], n = p.segments[2 * t.segment + 1];
    const int64_t block = std::min(kQueryBlock, n);
    float* K = scratch(2 * n * dh + 2 * block * dh + 2 * block * n);
    float *V = K + n * dh, *Q = V + n * dh, *O = Q + block * dh, *S = O + block * dh,
          *P = S + block * n;
    gather(kp, k.stride(0), t.kv_head * k.stride(1), p, start, 0, n, K);
    gather(vp, v.stride(0), t.kv_head * v.stride(1), p, start, 0, n, V);
    for_blocks(p, t, n, block, [&](int64_t h, int64_t q0, int64_t qn, int64_t k0, int64_t kn) {
      gather(qp, q.stride(0), h * q.stride(1), p, start, q0, qn, Q);
      probabilities(p, start, Q, K, q0, qn, k0, kn, S, P);
      gemm(false, false, qn, dh, kn, 1, P, kn, V + k0 * dh, dh, 0, O, dh);
      scatter(O, p, start, q0, qn, op, H * dh, h * dh);
    });
  });
  return out;
}

std::vector<torch::Tensor> backward_kernel(const Problem& p, int64_t num_segments,
                                           const torch::Tensor& q, const torch::Tensor& k,
                                           const torch::Tensor& v, const torch::Tensor& out,
                                           const torch::Tensor& grad_out) {
  const int64_t H = p.heads, Hkv = p.kv_heads, dh = p.head_dim;
  auto dq = torch::empty({q.size(0), H, dh}, q.options());
  auto dk = torch::empty({k.size(0), Hkv, dh}, k.options());
  auto dv = torch::empty({v.size(0), Hkv, dh}, v.options());
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  const float *op = out.data_ptr<float>(), *gp = grad_out.data_ptr<float>();
  float *dqp = dq.data_ptr<float>(), *dkp = dk.data_ptr<float>(), *dvp = dv.data_ptr<float>();
  for_tasks(p, num_segments, [&](const Task& t) {
    const int64_t start = p.segments[2 * t.segment], n = p.segments[2 * t.segment + 1];
    const int64_t block = std::min(kQueryBlock, n);
    float* K = scratch(4 * n * dh + 4 * block * dh + block + 2 * block * n);
    float *V = K + n * dh, *dK = V + n * dh, *dV = dK + n * dh, *Q = dV + n * dh,
          *O = Q + block * dh, *dO = O + block * dh, *dQ = dO + block * dh, *D = dQ + block * dh,
          *S = D + block, *P = S + block * n;
    std::fill(dK, dK + 2 * n * dh, 0.0f);  // dK and dV
    gather(kp, k.stride(0), t.kv_head * k.stride(1), p, start, 0, n, K);
    gather(vp, v.stride(0), t.kv_head * v.stride(1), p, start, 0, n, V);
    for_blocks(p, t, n, block, [&](int64_t h, int64_t q0, int64_t qn, int64_t k0, int64_t kn) {
      gather(qp, q.stride(0), h * q.stride(1), p, start, q0, qn, Q);
      gather(op, H * dh, h * dh, p, start, q0, qn, O);
      gather(gp, H * dh, h * dh, p, start, q0, qn, dO);
      for (int64_t r = 0; r < qn; ++r) D[r] = dot(dO + r * dh, O + r * dh, dh);
      probabilities(p, start, Q, K, q0, qn, k0, kn, S, P);
      // dV += P^T dO; dP = dO V^T, then dS = P (dP - D) / sqrt(dh) in its place.
      gemm(true, false, kn, dh, qn, 1, P, kn, dO, dh, 1, dV + k0 * dh, dh);
      gemm(false, true, qn, kn, dh, 1, dO, dh, V + k0 * dh, dh, 0, S, kn);
      for (int64_t r = 0; r < qn; ++r) {
        float* ds = S + r * kn;
        const float* pr = P + r * kn;
        const float d = D[r];
        for (int64_t j = 0; j < kn; ++j) ds[j] = pr[j] * (ds[j] - d) * p.scale;
      }
      // dQ = dS K; dK += dS^T Q.
      gemm(false, false, qn, dh, kn, 1, S, kn, K + k0 * dh, dh, 0, dQ, dh);
      scatter(dQ, p, start, q0, qn, dqp, H * dh, h * dh);
      gemm(true, false, kn, dh, qn, 1, S, kn, Q, dh, 1, dK + k0 * dh, dh);
    });
    scatter(dK, p, start, 0, n, dkp, Hkv * dh, t.kv_head * dh);
    scatter(dV, p, start, 0, n, dvp, Hkv * dh, t.kv_head * dh);
  });
  return {dq, dk, dv};
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct SegmentAttentionFunction : torch::autograd::Function<SegmentAttentionFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& segments,
                               const torch::Tensor& visible, const torch::Tensor& rows,
                               int64_t band) {
    profile_custom_function_forward();
    const auto p = make_problem(q, k, segments, visible, rows, band);
    auto out = forward_kernel(p, segments.size(0), q, k, v);
    ctx->save_for_backward({q, k, v, out, segments, visible, rows});
    ctx->saved_data["band"] = band;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3];
    const auto p =
        make_problem(q, k, saved[4], saved[5], saved[6], ctx->saved_data["band"].toInt());
    auto d = backward_kernel(p, saved[4].size(0), q, k, v, out, grads[0].contiguous());
    return {d[0], d[1], d[2], torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

void set_segment_attention_enabled(bool enabled) {
  enabled_flag() = enabled;
}

bool segment_attention_supported(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v) {
  if (!enabled_flag() || sgemm() == nullptr) return false;
  for (const auto* t : {&q, &k, &v})
    if (!t->device().is_cpu() || t->scalar_type() != torch::kFloat32 || t->dim() != 3 ||
        t->stride(2) != 1)
      return false;
  return q.size(1) % k.size(1) == 0 && q.size(0) < (int64_t{1} << 31);
}

torch::Tensor segment_attention(const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& v, const AttentionPlan& plan,
                                const torch::Tensor& inverse_perm) {
  const auto rows = inverse_perm.defined() ? inverse_perm.to(torch::kCPU).contiguous()
                                           : torch::empty({0}, torch::kInt64);
  return SegmentAttentionFunction::apply(q, k, v, plan.segment_table, plan.key_visible, rows,
                                         plan.band);
}

}  // namespace lol
