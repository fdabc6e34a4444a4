#include "util/autocast.h"

#include <ATen/autocast_mode.h>

namespace lol {

bool autocast_enabled(torch::DeviceType type) {
#ifdef LOL_AUTOCAST_PER_DEVICE
  return at::autocast::is_autocast_enabled(type);
#else
  return type == torch::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

}  // namespace lol
