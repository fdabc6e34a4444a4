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

// torch::zeros(sizes, options), except that a CPU buffer of 2 MB or more lives in transparent
// huge pages where the kernel offers them (Linux, THP in "madvise" or "always" mode): for
// large buffers read over and over for as long as they live, the key/value caches and packed
// weights of decoding. With 4 KB pages every 4 KB of a streamed read costs a TLB refill and
// restarts the hardware prefetcher; measured end to end in docs/performance.md.
torch::Tensor zeros_in_huge_pages(at::IntArrayRef sizes, const torch::TensorOptions& options);

}  // namespace lol
