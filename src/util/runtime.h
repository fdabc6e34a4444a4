#pragma once
// Process-wide compute settings: thread pools and allocator. LibTorch's elementwise kernels
// use its OpenMP pool; GEMMs go to OpenBLAS's own pthread pool, which at::set_num_threads
// does not reach. Both must be sized together or their idle workers fight for the cores.
#include <string>

namespace lol {

struct RuntimeInfo {
  std::string blas;       // which BLAS library is loaded, with its build config when known
  int torch_threads = 0;  // LibTorch intra-op (OpenMP) threads
  int kernel_threads =
      0;  // threads of this project's own parallel kernels (1 if built without OpenMP)
  int blas_threads = 0;  // OpenBLAS threads (-1 when the BLAS does not say)
};

// The environment the OpenMP and OpenBLAS runtimes read when they load is set by the `lol`
// launcher (tools/launcher/lol_launcher.cpp) before it executes the engine.

// Sizes both pools to `threads` (0 = number of cores) and raises the allocator's mmap and
// trim thresholds so large temporaries are reused instead of page-faulted on every step.
void configure_runtime(int threads);

RuntimeInfo runtime_info();

}  // namespace lol
