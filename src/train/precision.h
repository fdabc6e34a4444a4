#pragma once
// Mixed precision: bf16 autocast around the forward pass on CUDA (fp32 weights, optimizer
// state and loss); plain fp32 on the CPU.
#include <torch/torch.h>

namespace lol {

class AutocastGuard {
 public:
  // Enables bf16 autocast for the device's type while alive when `enabled` and the device is
  // CUDA; otherwise does nothing.
  AutocastGuard(torch::Device device, bool enabled);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  bool previous_ = false;
};

}  // namespace lol
