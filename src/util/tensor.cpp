#include "util/tensor.h"

#include <cstdlib>
#include <cstring>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace lol {

torch::Tensor zeros_in_huge_pages(at::IntArrayRef sizes, const torch::TensorOptions& options) {
#ifdef __linux__
  constexpr size_t kHugePage = size_t{2} << 20;
  int64_t numel = 1;
  for (auto s : sizes) numel *= s;
  const size_t bytes = static_cast<size_t>(numel) * options.dtype().itemsize();
  if (options.device().is_cpu() && bytes >= kHugePage) {
    void* data = nullptr;
    if (::posix_memalign(&data, kHugePage, bytes) == 0) {
      // Advice only: where the kernel declines, the buffer keeps 4 KB pages.
      ::madvise(data, bytes, MADV_HUGEPAGE);
      std::memset(data, 0, bytes);
      return torch::from_blob(
          data, sizes, [](void* p) { std::free(p); }, options);
    }
  }
#endif
  return torch::zeros(sizes, options);
}

}  // namespace lol
