#include "train/precision.h"

#include <ATen/autocast_mode.h>

namespace lol {

// The autocast API changed in LibTorch 2.4 (per-device-type functions replace the CUDA-only
// ones); 1.13 from Debian has the older form.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define LOL_AUTOCAST_PER_DEVICE 1
#endif

AutocastGuard::AutocastGuard(torch::Device device, bool enabled) {
  if (!enabled || !device.is_cuda()) return;
  active_ = true;
#ifdef LOL_AUTOCAST_PER_DEVICE
  previous_ = at::autocast::is_autocast_enabled(at::kCUDA);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
  previous_ = at::autocast::is_enabled();
  at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
  at::autocast::set_enabled(true);
#endif
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#ifdef LOL_AUTOCAST_PER_DEVICE
  at::autocast::set_autocast_enabled(at::kCUDA, previous_);
#else
  at::autocast::set_enabled(previous_);
#endif
}

}  // namespace lol
