// model.safetensors / train_state.safetensors: whatever the bytes, a tensor map or one error.
#include <sstream>

#include "fuzz_target.h"
#include "model/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lol::fuzz::guarded([&] {
    std::istringstream in(lol::fuzz::text_of(data, size));
    const auto tensors = lol::read_safetensors(in, "input");
    // What was accepted is well formed: every tensor holds exactly the bytes its entry named.
    uint64_t bytes = 0;
    for (const auto& [name, t] : tensors)
      bytes += static_cast<uint64_t>(t.numel()) * t.element_size();
    lol::fuzz::expect(bytes <= size, "tensors hold more bytes than the file");
  });
  return 0;
}
