#pragma once
// splitmix64's finaliser: a 64-bit value mixed so that nearby inputs give unrelated outputs.
// Seeds derived from (seed, index, ...) go through it: sampling generators per sequence, router
// noise per micro-batch.
#include <cstdint>

namespace lol {

inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace lol
