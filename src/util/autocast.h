#pragma once
// Whether LibTorch's autocast is on for a device type, across the API change of LibTorch 2.4
// (functions taking a device type replaced the per-backend ones; Debian's 1.13 has the older
// form). Kernels that bypass LibTorch's operators ask it so that autocast keeps its meaning.
#include <torch/torch.h>

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define LOL_AUTOCAST_PER_DEVICE 1
#endif

namespace lol {

bool autocast_enabled(torch::DeviceType type);

}  // namespace lol
