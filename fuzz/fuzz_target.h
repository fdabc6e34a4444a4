#pragma once
// Shared by the fuzz targets (docs/reliability.md). Each target feeds bytes from outside (a
// file, a flag, a request) to one parser of the engine. A lol::Error is the clean rejection
// every bad input must get; anything else (another exception, a crash, a sanitizer report, a
// failed property check) is a bug that libFuzzer reports with the input that caused it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>

#include "util/error.h"

namespace lol::fuzz {

template <typename F>
void guarded(F&& parse) {
  try {
    parse();
  } catch (const Error&) {
    // the expected answer to bad input
  }
}

// A property every accepted input must keep (a round trip, say); aborts so the fuzzer keeps
// the input.
inline void expect(bool condition, const char* what) {
  if (condition) return;
  std::cerr << "fuzz property violated: " << what << "\n";
  std::abort();
}

inline std::string text_of(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace lol::fuzz
