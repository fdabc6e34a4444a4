#include "model/small_gemm.h"

#include <ATen/Parallel.h>

#include "util/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define LOL_SMALL_GEMM 1
#endif

namespace lol {
namespace {

// Multiply-adds one thread does before a second one is worth waking (measured: see
// docs/performance.md).
constexpr int64_t kParallelFlops = 1 << 15;

#ifdef LOL_SMALL_GEMM
// Rows [0, M) of x times panels [nb, nb + P): M x P accumulators of 8 columns, each weight
// vector loaded once per k and used for every row. M x P + P + 1 <= 16 ymm registers.
template <int M, int P>
__attribute__((target("avx2,fma"))) void tile(const float* x, int64_t K, const float* panels,
                                              float* y, int64_t ldy, int64_t nb) {
  __m256 acc[M][P];
  for (int m = 0; m < M; ++m)
    for (int p = 0; p < P; ++p) acc[m][p] = _mm256_setzero_ps();
  const float* w[P];
  for (int p = 0; p < P; ++p) w[p] = panels + (nb + p) * K * 8;
  for (int64_t k = 0; k < K; ++k) {
    __m256 wv[P];
    for (int p = 0; p < P; ++p) wv[p] = _mm256_loadu_ps(w[p] + k * 8);
    for (int m = 0; m < M; ++m) {
      const __m256 xv = _mm256_broadcast_ss(x + m * K + k);
      for (int p = 0; p < P; ++p) acc[m][p] = _mm256_fmadd_ps(xv, wv[p], acc[m][p]);
    }
  }
  for (int m = 0; m < M; ++m)
    for (int p = 0; p < P; ++p) _mm256_storeu_ps(y + m * ldy + (nb + p) * 8, acc[m][p]);
}

// Every row of x times panels [nb, nb + P), in tiles of 4 rows and then the remainder: the
// P panels (P x K x 8 floats) stay in L1 while the rows stream past them.
template <int P>
__attribute__((target("avx2,fma"))) void panel_group(const float* x, int64_t M, int64_t K,
                                                     const float* panels, float* y, int64_t ldy,
                                                     int64_t nb) {
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) tile<4, P>(x + m * K, K, panels, y + m * ldy, ldy, nb);
  switch (M - m) {
    case 3:
      tile<3, P>(x + m * K, K, panels, y + m * ldy, ldy, nb);
      break;
    case 2:
      tile<2, P>(x + m * K, K, panels, y + m * ldy, ldy, nb);
      break;
    case 1:
      tile<1, P>(x + m * K, K, panels, y + m * ldy, ldy, nb);
      break;
    default:
      break;
  }
}
#endif

}  // namespace

bool small_gemm_supported() {
#ifdef LOL_SMALL_GEMM
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported;
#else
  return false;
#endif
}

torch::Tensor pack_panels(const torch::Tensor& weight) {
  LOL_CHECK(
      weight.dim() == 2 && weight.scalar_type() == torch::kFloat32 && weight.device().is_cpu(),
      "pack_panels needs a 2-D fp32 CPU weight");
  const int64_t n = weight.size(0), k = weight.size(1), num = (n + 7) / 8;
  auto padded = torch::zeros({num * 8, k}, weight.options());
  padded.narrow(0, 0, n).copy_(weight.detach());
  return padded.view({num, 8, k}).transpose(1, 2).contiguous();
}

torch::Tensor small_gemm(const torch::Tensor& x, const torch::Tensor& panels, int64_t n) {
  const int64_t M = x.size(0), K = x.size(1), num = panels.size(0);
  LOL_CHECK(small_gemm_supported(), "small_gemm needs a CPU with AVX2 and FMA");
  LOL_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat32 &&
                x.device().is_cpu(),
            "small_gemm needs contiguous fp32 CPU rows");
  LOL_CHECK(panels.size(1) == K && panels.size(2) == 8 && n <= num * 8 && M > 0,
            "small_gemm: shapes do not match");
  auto y = torch::empty({M, num * 8}, x.options());
#ifdef LOL_SMALL_GEMM
  const float* xp = x.data_ptr<float>();
  const float* pp = panels.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t ldy = num * 8;
  // The panels split evenly over the threads once the product is large enough to repay waking
  // a second one; each thread walks its share three panels (24 columns) at a time.
  const int64_t grain = std::max<int64_t>(1, kParallelFlops / (2 * M * K * 8));
  at::parallel_for(0, num, grain, [&](int64_t begin, int64_t end) {
    int64_t nb = begin;
    for (; nb + 3 <= end; nb += 3) panel_group<3>(xp, M, K, pp, yp, ldy, nb);
    if (end - nb == 2) panel_group<2>(xp, M, K, pp, yp, ldy, nb);
    if (end - nb == 1) panel_group<1>(xp, M, K, pp, yp, ldy, nb);
  });
#endif
  return num * 8 == n ? y : y.narrow(1, 0, n).contiguous();
}

}  // namespace lol
