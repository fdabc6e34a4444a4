#include "util/cpu_clones.h"

namespace lol {

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
// A probe with the hot loops' clones. Its resolver (the function the loader calls to fill the
// probe's ifunc slot) returns the address of the clone it chose, which is compared with the
// clones' own symbols. The symbols are named by the compiler: weak references, so a compiler
// that names them otherwise still links and the answer is "unknown".
extern "C" LOL_CPU_CLONES int lol_clone_probe(int x) {
  return x + 1;
}

#if defined(__clang__)
#define LOL_PROBE_CLONE(name, index) "lol_clone_probe." name "." index
#define LOL_PROBE_V4 LOL_PROBE_CLONE("avx512f", "0")
#define LOL_PROBE_V3 LOL_PROBE_CLONE("fma", "1")
#define LOL_PROBE_BASE LOL_PROBE_CLONE("default", "2")
#else
#define LOL_PROBE_V4 "lol_clone_probe.arch_x86_64_v4"
#define LOL_PROBE_V3 "lol_clone_probe.arch_x86_64_v3"
#define LOL_PROBE_BASE "lol_clone_probe.default"
#endif
extern "C" __attribute__((weak)) int lol_clone_probe_v4(int) __asm__(LOL_PROBE_V4);
extern "C" __attribute__((weak)) int lol_clone_probe_v3(int) __asm__(LOL_PROBE_V3);
extern "C" __attribute__((weak)) int lol_clone_probe_base(int) __asm__(LOL_PROBE_BASE);
extern "C" __attribute__((weak)) void* lol_clone_probe_resolver() __asm__(
    "lol_clone_probe.resolver");

const char* cpu_clone() {
  static const char* const name = [] {
    void* chosen = lol_clone_probe_resolver != nullptr ? lol_clone_probe_resolver() : nullptr;
    if (chosen == nullptr) return "unknown";
#if defined(__clang__)
    const char* const names[] = {"avx512f", "fma", "default"};
#else
    const char* const names[] = {"x86-64-v4", "x86-64-v3", "x86-64"};
#endif
    void* const clones[] = {reinterpret_cast<void*>(&lol_clone_probe_v4),
                            reinterpret_cast<void*>(&lol_clone_probe_v3),
                            reinterpret_cast<void*>(&lol_clone_probe_base)};
    for (int i = 0; i < 3; ++i)
      if (clones[i] != nullptr && chosen == clones[i]) return names[i];
    return "unknown";
  }();
  return name;
}
#else
const char* cpu_clone() {
  return "none";
}
#endif

}  // namespace lol
