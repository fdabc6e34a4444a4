#include "model/packed_gemm.h"

#include <ATen/Parallel.h>

#include "util/error.h"
#include "util/tensor.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define LOL_PACKED_GEMM 1
#endif

namespace lol {
namespace {

// Multiply-adds one thread does before a second one is worth waking (measured: see
// docs/performance.md).
constexpr int64_t kParallelFlops = 1 << 15;

#ifdef LOL_PACKED_GEMM
// Rows [0, M) of x times panels [nb, nb + P): M x P accumulators of 8 columns, each weight
// vector loaded once per k and used for every row. M <= 4 rows of P <= 3 panels (12 + 3 + 1 <=
// 16 ymm registers), or M <= 2 rows of P <= 6: each accumulator takes one FMA per k, a chain
// as long as the FMA's latency, so one or two rows need more panels in flight to keep the
// loads, not that chain, the limit (M x P >= 6 independent sums). The accumulators are named
// variables rather than an array: GCC keeps an array of vectors in memory here and stores
// every accumulator at every k, which halved the speed.
// With `prefetch`, each k also asks for the cache lines of the next P panels (the next group's,
// contiguous after these), so that group's weights are on their way from memory while this one
// computes: the hardware prefetcher restarts on every panel's few kilobytes, and weights that a
// step's cache reads evicted otherwise arrive at the pace of demand misses.
template <int M, int P>
__attribute__((target("avx2,fma"))) void tile(const float* x, int64_t K, const float* panels,
                                              float* y, int64_t ldy, int64_t nb, bool prefetch) {
  static_assert(M >= 1 && P >= 1 && ((M <= 4 && P <= 3) || (M <= 2 && P <= 6)),
                "tile: at most 4 rows of 3 panels or 2 rows of 6");
  const __m256 zero = _mm256_setzero_ps();
  __m256 c00 = zero, c01 = zero, c02 = zero, c03 = zero, c04 = zero, c05 = zero;
  __m256 c10 = zero, c11 = zero, c12 = zero, c13 = zero, c14 = zero, c15 = zero;
  __m256 c20 = zero, c21 = zero, c22 = zero, c30 = zero, c31 = zero, c32 = zero;
  // Panel p starts p * K * 8 floats after the first; panels past P are never read.
  const float* w = panels + nb * K * 8;
  const char* next = reinterpret_cast<const char*>(w + P * K * 8);
  for (int64_t k = 0; k < K; ++k) {
    const float* wk = w + k * 8;
    if (prefetch)  // P x 32 bytes of the next group per k: all of it over the K steps
      for (int c = 0; c < P * 32; c += 64) __builtin_prefetch(next + k * P * 32 + c);
    // (Macros, not lambdas: a lambda does not inherit the function's target attribute.)
    if constexpr (P <= 3) {
      // The P weight vectors loaded, then each row's broadcast against them: 12 accumulators
      // + 3 weights + 1 broadcast registers.
      const __m256 v0 = _mm256_loadu_ps(wk);
      const __m256 v1 = P > 1 ? _mm256_loadu_ps(wk + K * 8) : zero;
      const __m256 v2 = P > 2 ? _mm256_loadu_ps(wk + 2 * K * 8) : zero;
#define LOL_TILE_ROW(m, a0, a1, a2)                       \
  do {                                                    \
    const __m256 xv = _mm256_broadcast_ss(x + (m)*K + k); \
    a0 = _mm256_fmadd_ps(xv, v0, a0);                     \
    if (P > 1) a1 = _mm256_fmadd_ps(xv, v1, a1);          \
    if (P > 2) a2 = _mm256_fmadd_ps(xv, v2, a2);          \
  } while (0)
      LOL_TILE_ROW(0, c00, c01, c02);
      if (M > 1) LOL_TILE_ROW(1, c10, c11, c12);
      if (M > 2) LOL_TILE_ROW(2, c20, c21, c22);
      if (M > 3) LOL_TILE_ROW(3, c30, c31, c32);
#undef LOL_TILE_ROW
    } else {
      // M <= 2: the rows' broadcasts held, each panel's weight vector used as it is loaded:
      // 12 accumulators + 2 broadcasts + 1 weight register.
      const __m256 x0 = _mm256_broadcast_ss(x + k);
      const __m256 x1 = M > 1 ? _mm256_broadcast_ss(x + K + k) : zero;
#define LOL_TILE_PANEL(p, a0, a1)                       \
  do {                                                  \
    if (P > (p)) {                                      \
      const __m256 v = _mm256_loadu_ps(wk + (p)*K * 8); \
      a0 = _mm256_fmadd_ps(x0, v, a0);                  \
      if (M > 1) a1 = _mm256_fmadd_ps(x1, v, a1);       \
    }                                                   \
  } while (0)
      LOL_TILE_PANEL(0, c00, c10);
      LOL_TILE_PANEL(1, c01, c11);
      LOL_TILE_PANEL(2, c02, c12);
      LOL_TILE_PANEL(3, c03, c13);
      LOL_TILE_PANEL(4, c04, c14);
      LOL_TILE_PANEL(5, c05, c15);
#undef LOL_TILE_PANEL
    }
  }
#define LOL_TILE_STORE(m, a0, a1, a2, a3, a4, a5) \
  do {                                            \
    float* out = y + (m)*ldy + nb * 8;            \
    _mm256_storeu_ps(out, a0);                    \
    if (P > 1) _mm256_storeu_ps(out + 8, a1);     \
    if (P > 2) _mm256_storeu_ps(out + 16, a2);    \
    if (P > 3) _mm256_storeu_ps(out + 24, a3);    \
    if (P > 4) _mm256_storeu_ps(out + 32, a4);    \
    if (P > 5) _mm256_storeu_ps(out + 40, a5);    \
  } while (0)
  LOL_TILE_STORE(0, c00, c01, c02, c03, c04, c05);
  if (M > 1) LOL_TILE_STORE(1, c10, c11, c12, c13, c14, c15);
  if (M > 2) LOL_TILE_STORE(2, c20, c21, c22, c20, c20, c20);
  if (M > 3) LOL_TILE_STORE(3, c30, c31, c32, c30, c30, c30);
#undef LOL_TILE_STORE
}

// The same products with AVX-512 over panels of 16 columns, (ceil(N/16), K, 16). Thirty-two
// registers hold M <= 8 rows of P <= 3 panels (24 accumulators + 3 weights + a broadcast), so
// eight rows pass the weights once where the AVX2 tiles take two passes, and each FMA does
// twice the columns: 1.3-1.8x their speed from 8 rows up on an Intel Xeon. One or two rows
// need no wider tiles here: they wait on the weights' bytes (measured even with 2-8 panels).
// Every column is summed over k in order with one FMA per k, as the AVX2 tiles sum it: the same
// bits. The loops over rows and panels are fully unrolled, so GCC keeps the accumulators in
// registers.
template <int M, int P>
__attribute__((target("avx512f"))) void tile16(const float* x, int64_t K, const float* panels,
                                               float* y, int64_t ldy, int64_t nb, bool prefetch) {
  static_assert(M >= 1 && M <= 8 && P >= 1 && P <= 3, "tile16: at most 8 rows of 3 panels");
  __m512 c[M][P];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 3
    for (int p = 0; p < P; ++p) c[m][p] = _mm512_setzero_ps();
  const float* w = panels + nb * K * 16;
  const char* next = reinterpret_cast<const char*>(w + P * K * 16);
  for (int64_t k = 0; k < K; ++k) {
    const float* wk = w + k * 16;
    if (prefetch)  // P x 64 bytes of the next group per k: all of it over the K steps
#pragma GCC unroll 3
      for (int p = 0; p < P; ++p) __builtin_prefetch(next + (k * P + p) * 64);
    __m512 v[P];
#pragma GCC unroll 3
    for (int p = 0; p < P; ++p) v[p] = _mm512_loadu_ps(wk + p * K * 16);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m512 xv = _mm512_set1_ps(x[m * K + k]);
#pragma GCC unroll 3
      for (int p = 0; p < P; ++p) c[m][p] = _mm512_fmadd_ps(xv, v[p], c[m][p]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 3
    for (int p = 0; p < P; ++p) _mm512_storeu_ps(y + m * ldy + (nb + p) * 16, c[m][p]);
}

// The kernels' walk over rows and panels, for panels of W columns (8: AVX2 tiles of up to 4
// rows; 16: AVX-512 tiles of up to 8). (These call the tiles, compiled for their own targets.)
template <int W, int R, int P>
void tile_of(const float* x, int64_t K, const float* panels, float* y, int64_t ldy, int64_t nb,
             bool prefetch) {
  if constexpr (W == 16)
    tile16<R, P>(x, K, panels, y, ldy, nb, prefetch);
  else
    tile<R, P>(x, K, panels, y, ldy, nb, prefetch);
}

// The last `rows` (fewer than a full tile) times panels [nb, nb + P): the tile of that many
// rows, found by counting down from R at compile time.
template <int W, int P, int R = (W == 16 ? 7 : 3)>
void tail_rows(int64_t rows, const float* x, int64_t K, const float* panels, float* y, int64_t ldy,
               int64_t nb, bool prefetch) {
  if constexpr (R >= 1) {
    if (rows == R) return tile_of<W, R, P>(x, K, panels, y, ldy, nb, prefetch);
    tail_rows<W, P, R - 1>(rows, x, K, panels, y, ldy, nb, prefetch);
  }
}

// Every row of x times panels [nb, nb + P), in full tiles and then the remainder: the P panels
// stay in L1 while the rows stream past them. The first tile streams the panels in (and asks
// for the next group's); the others find them in L1.
template <int W, int P>
void panel_group(const float* x, int64_t M, int64_t K, const float* panels, float* y, int64_t ldy,
                 int64_t nb) {
  constexpr int kRows = W == 16 ? 8 : 4;
  int64_t m = 0;
  for (; m + kRows <= M; m += kRows)
    tile_of<W, kRows, P>(x + m * K, K, panels, y + m * ldy, ldy, nb, m == 0);
  tail_rows<W, P>(M - m, x + m * K, K, panels, y + m * ldy, ldy, nb, m == 0);
}

// Every row of x times panels [nb, stop): with 8-column panels, one or two rows six panels
// (48 columns) at a time first (see tile; 16-column ones need no such case, see tile16), then
// groups of three panels and a tail of two or one.
template <int W>
void panel_run(const float* x, int64_t M, int64_t K, const float* panels, float* y, int64_t ldy,
               int64_t nb, int64_t stop) {
  if constexpr (W == 8) {
    if (M <= 2)
      for (; nb + 6 <= stop; nb += 6)
        M == 1 ? tile<1, 6>(x, K, panels, y, ldy, nb, true)
               : tile<2, 6>(x, K, panels, y, ldy, nb, true);
  }
  for (; nb + 3 <= stop; nb += 3) panel_group<W, 3>(x, M, K, panels, y, ldy, nb);
  if (stop - nb == 2) panel_group<W, 2>(x, M, K, panels, y, ldy, nb);
  if (stop - nb == 1) panel_group<W, 1>(x, M, K, panels, y, ldy, nb);
}
#endif

}  // namespace

bool packed_gemm_supported() {
#ifdef LOL_PACKED_GEMM
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported;
#else
  return false;
#endif
}

int64_t panel_width_supported() {
#ifdef LOL_PACKED_GEMM
  static const int64_t width = __builtin_cpu_supports("avx512f") ? 16 : 8;
  return packed_gemm_supported() ? width : 0;
#else
  return 0;
#endif
}

namespace {
// Panels of `width` columns are ones this CPU's kernels take (8: AVX2, 16: AVX-512).
void check_panel_width(int64_t width, const char* who) {
  LOL_CHECK((width == 8 || width == 16) && width <= panel_width_supported(), who, ": panels of ",
            width, " columns need ", width == 16 ? "AVX-512" : "AVX2", " on this CPU");
}
}  // namespace

torch::Tensor pack_panels(const torch::Tensor& weight, int64_t width) {
  LOL_CHECK(
      weight.dim() == 2 && weight.scalar_type() == torch::kFloat32 && weight.device().is_cpu(),
      "pack_panels needs a 2-D fp32 CPU weight");
  if (width == 0) width = panel_width_supported();
  check_panel_width(width, "pack_panels");
  const int64_t n = weight.size(0), k = weight.size(1), num = (n + width - 1) / width;
  auto padded = torch::zeros({num * width, k}, weight.options());
  padded.narrow(0, 0, n).copy_(weight.detach());
  auto panels = zeros_in_huge_pages({num, k, width}, weight.options());
  panels.copy_(padded.view({num, width, k}).transpose(1, 2));
  return panels;
}

torch::Tensor packed_gemm(const torch::Tensor& x, const torch::Tensor& panels, int64_t n) {
  return grouped_packed_gemm({x}, {panels}, n);
}

torch::Tensor grouped_packed_gemm(const std::vector<torch::Tensor>& xs,
                                  const std::vector<torch::Tensor>& panels, int64_t n) {
  LOL_CHECK(packed_gemm_supported(), "packed_gemm needs a CPU with AVX2 and FMA");
  LOL_CHECK(!xs.empty() && xs.size() == panels.size(), "packed_gemm: one panel set per group");
  const int64_t K = panels[0].size(1), num = panels[0].size(0), width = panels[0].size(2),
                groups = static_cast<int64_t>(xs.size());
  check_panel_width(width, "packed_gemm");
  std::vector<int64_t> first_row(groups + 1, 0);  // group g's rows of y: [first_row[g], ..[g+1])
  for (int64_t g = 0; g < groups; ++g) {
    const auto& x = xs[g];
    LOL_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat32 &&
                  x.device().is_cpu(),
              "packed_gemm needs contiguous fp32 CPU rows");
    LOL_CHECK(x.size(1) == K && x.size(0) > 0 && panels[g].size(0) == num &&
                  panels[g].size(1) == K && panels[g].size(2) == width && n <= num * width,
              "packed_gemm: shapes do not match");
    first_row[g + 1] = first_row[g] + x.size(0);
  }
  const int64_t M = first_row[groups];
  auto y = torch::empty({M, num * width}, xs[0].options());
#ifdef LOL_PACKED_GEMM
  float* yp = y.data_ptr<float>();
  const int64_t ldy = num * width;
  // The (group, panel) pairs split over the threads once the products are large enough to
  // repay waking a second one, each thread a contiguous run of about equal cost (a panel of a
  // group costs its rows, plus about one row's worth to stream the panel in: experts get
  // unequal rows); each thread walks its run with panel_run per group.
  std::vector<int64_t> cost(groups + 1, 0);  // cumulative cost of all panels of groups < g
  for (int64_t g = 0; g < groups; ++g) cost[g + 1] = cost[g] + num * (xs[g].size(0) + 1);
  const int64_t flops = 2 * M * K * num * width;
  const int64_t threads =
      std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), flops / kParallelFlops));
  // The first pair whose cost prefix reaches `target`.
  auto pair_at = [&](int64_t target) {
    int64_t g = 0;
    while (g + 1 < groups && cost[g + 1] <= target) ++g;
    const int64_t per = xs[g].size(0) + 1;
    return g * num + std::min<int64_t>(num, (target - cost[g] + per - 1) / per);
  };
  auto run = [&](int64_t begin, int64_t end) {
    while (begin < end) {
      const int64_t g = begin / num, stop = std::min(end, (g + 1) * num) - g * num;
      const int64_t m = first_row[g + 1] - first_row[g];
      const float* xp = xs[g].data_ptr<float>();
      const float* pp = panels[g].data_ptr<float>();
      float* yg = yp + first_row[g] * ldy;
      (width == 16 ? panel_run<16> : panel_run<8>)(xp, m, K, pp, yg, ldy, begin - g * num, stop);
      begin = g * num + stop;
    }
  };
  if (threads == 1) {
    run(0, groups * num);
  } else {
    at::parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        run(t == 0 ? 0 : pair_at(cost[groups] * t / threads),
            t + 1 == threads ? groups * num : pair_at(cost[groups] * (t + 1) / threads));
    });
  }
#endif
  return num * width == n ? y : y.narrow(1, 0, n).contiguous();
}

}  // namespace lol
