#pragma once
// Tensor helpers shared across the engine.
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace lol {

// A 1-D int64 tensor of `values` on `device`: indices, positions and token ids built on the host.
inline torch::Tensor int64_tensor(const std::vector<int64_t>& values, torch::Device device) {
  return torch::tensor(values, torch::kInt64).to(device);
}

}  // namespace lol
