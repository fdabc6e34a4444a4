// Token shards (docs/formats.md): documents or one error; accepted documents respect the header
// (ids below the vocabulary, prompt windows within their document, masks as long as it).
#include "data/shards.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lol;
  fuzz::guarded([&] {
    int64_t vocab = 0;
    const auto docs = parse_shard(fuzz::text_of(data, size), "input", &vocab);
    for (const auto& d : docs) {
      for (auto t : d.tokens) fuzz::expect(t >= 0 && t < vocab, "token id inside the vocabulary");
      fuzz::expect(d.prompt_len >= 0 && d.prompt_len <= static_cast<int64_t>(d.tokens.size()),
                   "prompt window inside");
      fuzz::expect(d.router_only.empty() || d.router_only.size() == d.tokens.size(),
                   "router-only mask length");
      fuzz::expect(d.loss_mask.empty() || d.loss_mask.size() == d.tokens.size(),
                   "loss mask length");
    }
  });
  return 0;
}
