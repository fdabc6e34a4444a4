// The forced-path JSON of `--force` (SPEC 1.6): a path or one error; an accepted path keeps
// its entries through a JSON round trip and answers lookups at any depth and ordinal.
#include "fuzz_target.h"
#include "model/router.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lol;
  const json object = json::parse(fuzz::text_of(data, size), nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return 0;
  fuzz::guarded([&] {
    auto path = ForcedPath::from_json(object);
    fuzz::expect(ForcedPath::from_json(path.to_json()).to_json() == path.to_json(),
                 "forced path round trip");
    for (int64_t depth : {0, 1, 2, 5})
      for (int64_t ordinal : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1} << 40})
        (void)path.find(depth, ordinal);
    path.validate(4, 4, /*skip=*/size % 2 == 1);
  });
  return 0;
}
