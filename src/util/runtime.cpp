#include "util/runtime.h"

#include <dlfcn.h>
#include <malloc.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>
#ifdef _OPENMP
#include <omp.h>
#endif

namespace lol {
namespace {

// OpenBLAS is found at run time so the binary also runs (slowly) on another BLAS.
using SetThreadsFn = void (*)(int);
using GetThreadsFn = int (*)();
using GetConfigFn = char* (*)();

template <typename Fn>
Fn find_symbol(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, name));
}

}  // namespace

void configure_runtime(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
#ifdef _OPENMP
  // Our own at::parallel_for loops run on the OpenMP runtime this binary links; with a pip
  // LibTorch that bundles its own copy, at::set_num_threads sizes only LibTorch's.
  omp_set_num_threads(threads);
#endif
  if (auto set_blas = find_symbol<SetThreadsFn>("openblas_set_num_threads")) set_blas(threads);
  ::mallopt(M_MMAP_THRESHOLD, 256 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

RuntimeInfo runtime_info() {
  RuntimeInfo info;
  info.torch_threads = at::get_num_threads();
#ifdef _OPENMP
  info.kernel_threads = omp_get_max_threads();
#else
  info.kernel_threads = 1;
#endif
  if (auto get_config = find_symbol<GetConfigFn>("openblas_get_config")) {
    // The configuration string names the library itself ("OpenBLAS 0.3.21 ...") from 0.3.x on.
    const std::string config = get_config();
    info.blas = config.rfind("OpenBLAS", 0) == 0 ? config : "OpenBLAS " + config;
  } else if (at::hasMKL()) {
    info.blas = "MKL (linked into LibTorch)";
  } else if (find_symbol<void*>("cblas_sgemm") != nullptr) {
    info.blas = "unknown BLAS (not OpenBLAS: expect ~30x slower GEMM)";
  } else {
    info.blas = "none found";
  }
  auto get_threads = find_symbol<GetThreadsFn>("openblas_get_num_threads");
  info.blas_threads = get_threads ? get_threads() : -1;
  return info;
}

}  // namespace lol
