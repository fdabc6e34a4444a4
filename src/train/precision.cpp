#include "train/precision.h"

#include <ATen/autocast_mode.h>

#include "util/autocast.h"
#include "util/error.h"

namespace lol {

// The autocast API changed in LibTorch 2.4: util/autocast.h defines LOL_AUTOCAST_PER_DEVICE
// for the newer form.
namespace {

void set_autocast(torch::DeviceType type, bool enabled, at::ScalarType dtype) {
#ifdef LOL_AUTOCAST_PER_DEVICE
  at::autocast::set_autocast_dtype(type, dtype);
  at::autocast::set_autocast_enabled(type, enabled);
#else
  if (type == torch::kCUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(enabled);
  }
#endif
}

at::ScalarType autocast_dtype(torch::DeviceType type) {
#ifdef LOL_AUTOCAST_PER_DEVICE
  return at::autocast::get_autocast_dtype(type);
#else
  return type == torch::kCUDA ? at::autocast::get_autocast_gpu_dtype()
                              : at::autocast::get_autocast_cpu_dtype();
#endif
}

}  // namespace

template <>
const std::vector<std::pair<Precision, const char*>>& enum_names<Precision>() {
  static const std::vector<std::pair<Precision, const char*>> names = {
      {Precision::kAuto, "auto"}, {Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}};
  return names;
}

bool uses_bf16_autocast(Precision precision, torch::Device device) {
  switch (precision) {
    case Precision::kAuto:
      return device.is_cuda();
    case Precision::kFp32:
      return false;
    case Precision::kBf16:
      return true;
  }
  return false;
}

std::string bf16_speed_note(torch::Device device, std::optional<bool> avx512) {
  if (!device.is_cpu()) return "";
  if (!avx512) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    avx512 = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
#else
    return "";  // no way to tell here
#endif
  }
  if (*avx512) return "";
  return "note: bf16 on this CPU (no AVX-512) runs LibTorch's reference matrix products, "
         "tens of times slower than fp32; precision=fp32 is the fast choice here";
}

AutocastGuard::AutocastGuard(torch::Device device, bool bf16) {
  if (!bf16) return;
  LOL_CHECK(device.is_cuda() || device.is_cpu(),
            "bf16 autocast is supported on CPU and CUDA, not on ", device.str());
  active_ = true;
  type_ = device.type();
  previous_ = autocast_enabled(type_);
  previous_dtype_ = autocast_dtype(type_);
  set_autocast(type_, true, at::kBFloat16);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast(type_, previous_, previous_dtype_);
}

}  // namespace lol
