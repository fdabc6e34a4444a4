#pragma once
// Mixed precision: bf16 autocast around the forward pass (fp32 weights, optimizer state and
// loss). `precision` is auto (bf16 on CUDA, fp32 elsewhere), fp32, or bf16 (on any device:
// CPU autocast covers the matrix products, which is how CI exercises this path).
#include <torch/torch.h>

#include <optional>
#include <string>

#include "util/enums.h"

namespace lol {

enum class Precision { kAuto, kFp32, kBf16 };
template <>
const std::vector<std::pair<Precision, const char*>>& enum_names<Precision>();

// Whether `precision` means bf16 autocast on `device`.
bool uses_bf16_autocast(Precision precision, torch::Device device);

// What a user of bf16 autocast on `device` should know, or "" when nothing. On a CPU without
// AVX-512 (BW, VL, DQ) LibTorch runs bf16 products in its reference loops, not oneDNN: tens of
// times slower than fp32. `avx512` overrides the CPU's answer (tests).
std::string bf16_speed_note(torch::Device device, std::optional<bool> avx512 = std::nullopt);

class AutocastGuard {
 public:
  // Enables bf16 autocast for the device's type while alive when `bf16`; otherwise does nothing.
  AutocastGuard(torch::Device device, bool bf16);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  bool previous_ = false;
  at::ScalarType previous_dtype_ = at::kFloat;
  torch::DeviceType type_ = torch::kCPU;
};

}  // namespace lol
