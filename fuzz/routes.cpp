// Route files (`lol route` output read by `lol path extract / stats / probe`): sequences or one
// error naming the line; what is accepted feeds the mode paths, statistics and probes.
#include <sstream>

#include "analysis/paths.h"
#include "analysis/probes.h"
#include "analysis/stats.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lol;
  fuzz::guarded([&] {
    std::istringstream in(fuzz::text_of(data, size));
    RouteReader reader(in, "input");
    const auto& h = reader.header();
    if (h.core_depth > 64 || h.library_size > 64) return;  // bounded work per input
    ModePathBuilder paths;
    RouteStatsBuilder stats(h.core_depth, h.choices(), h.skip);
    ProbeData probes(h.core_depth, h.choices());
    while (auto s = reader.next()) {
      paths.add(*s);
      stats.add(*s);
      probes.add(*s);
    }
    for (const auto& p : paths.paths()) (void)ForcedPath::from_json(p.to_json());
    (void)stats.finish().to_json().dump();
    ProbeOptions options;
    options.folds = 2;
    options.shuffles = 1;
    fuzz::guarded([&] { (void)probes.run("sequence", options); });
  });
  return 0;
}
