#pragma once
// `lol bench --against OTHER`: this build and another one measured in one sitting. On a VM whose
// speed drifts by tens of percent within minutes, figures from two separate runs compare the
// minutes they ran in more than the builds; rounds that alternate the two builds (A B, B A, ...)
// put both under the same drift, and the medians of the rounds show what changed. Each round
// runs both builds as child processes with this command line (less --against and --rounds, with
// -o json) and reads their rows; a row's identity is its text and integer fields (family, what,
// context, batch, mode, ...), its figure tokens_per_s.
#include <string>

namespace lol::bench {

struct AgainstOptions {
  std::string other;  // the other build's `lol` (or lol-engine)
  int rounds = 4;
  std::string output = "md";
};

// Fails with one message naming the cause: no such executable, a build that exits non-zero,
// output that is not the JSON of a suite with tokens/s rows.
void bench_against(const AgainstOptions& options);

}  // namespace lol::bench
