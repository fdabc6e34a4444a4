#include "model/small_gemm.h"

#include "util/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define LOL_SMALL_GEMM 1
#endif

namespace lol {
namespace {

#ifdef LOL_SMALL_GEMM
// Rows [0, M) of x times panels [nb, nb + P): M x P accumulators of 8 columns, each weight
// vector loaded once per k and used for every row. M x P + P + 1 <= 16 ymm registers.
template <int M, int P>
__attribute__((target("avx2,fma"))) void tile(const float* x, int64_t K, const float* panels, float* y,
                                              int64_t ldy, int64_t nb) {
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

// M rows times every panel: tiles of P panels, then single panels for the rest.
template <int M, int P>
__attribute__((target("avx2,fma"))) void all_panels(const float* x, int64_t K, const float* panels,
                                                    int64_t num_panels, float* y, int64_t ldy) {
  int64_t nb = 0;
  for (; nb + P <= num_panels; nb += P) tile<M, P>(x, K, panels, y, ldy, nb);
  for (; nb < num_panels; ++nb) tile<M, 1>(x, K, panels, y, ldy, nb);
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
  LOL_CHECK(weight.dim() == 2 && weight.scalar_type() == torch::kFloat32 && weight.device().is_cpu(),
            "pack_panels needs a 2-D fp32 CPU weight");
  const int64_t n = weight.size(0), k = weight.size(1), num = (n + 7) / 8;
  auto padded = torch::zeros({num * 8, k}, weight.options());
  padded.narrow(0, 0, n).copy_(weight.detach());
  return padded.view({num, 8, k}).transpose(1, 2).contiguous();
}

torch::Tensor small_gemm(const torch::Tensor& x, const torch::Tensor& panels, int64_t n) {
  const int64_t M = x.size(0), K = x.size(1), num = panels.size(0);
  LOL_CHECK(small_gemm_supported(), "small_gemm needs a CPU with AVX2 and FMA");
  LOL_CHECK(x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kFloat32 && x.device().is_cpu(),
            "small_gemm needs contiguous fp32 CPU rows");
  LOL_CHECK(panels.size(1) == K && panels.size(2) == 8 && n <= num * 8 && M <= kSmallGemmMaxRows,
            "small_gemm: shapes do not match");
  auto y = torch::empty({M, num * 8}, x.options());
#ifdef LOL_SMALL_GEMM
  const float* xp = x.data_ptr<float>();
  const float* pp = panels.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t ldy = num * 8;
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) all_panels<4, 3>(xp + m * K, K, pp, num, yp + m * ldy, ldy);
  switch (M - m) {
    case 3: all_panels<3, 3>(xp + m * K, K, pp, num, yp + m * ldy, ldy); break;
    case 2: all_panels<2, 4>(xp + m * K, K, pp, num, yp + m * ldy, ldy); break;
    case 1: all_panels<1, 4>(xp + m * K, K, pp, num, yp + m * ldy, ldy); break;
    default: break;
  }
#endif
  return num * 8 == n ? y : y.narrow(1, 0, n).contiguous();
}

}  // namespace lol
