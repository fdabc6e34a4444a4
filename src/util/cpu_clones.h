#pragma once
// Hot loops compiled also for AVX2+FMA and AVX-512, picked at load time by the CPU they run on
// (GCC/Clang function multiversioning); the baseline build targets x86-64 without them. Each
// clone is one string naming one target: GCC reads "avx2,fma" as two clones (AVX2 without FMA,
// which an AVX2 machine then ran, and FMA), so GCC gets the x86-64 levels v4 (AVX-512) and v3
// (AVX2, FMA). Clang 14 compiles arch=x86-64-vN clones but its resolver never picks them (it ran
// the baseline on an AVX-512 machine), so clang gets avx512f and fma (which implies AVX).
// scripts/isa_check.sh runs the kernel tests on emulated CPUs that pick the v3 and the baseline
// clones (docs/reliability.md).
#if defined(__x86_64__) && defined(__linux__) && defined(__clang__)
#define LOL_CPU_CLONES __attribute__((target_clones("avx512f", "fma", "default")))
#elif defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#define LOL_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LOL_CPU_CLONES
#endif

namespace lol {

// The clone of the LOL_CPU_CLONES functions this process runs, as the loader's resolver picked
// it (asked of the resolver itself, not worked out again from the CPU's features): under GCC
// "x86-64-v4", "x86-64-v3" or "x86-64", under clang "avx512f", "fma" or "default"; "none" where
// the build has no clones; "unknown" where the compiler names its clones otherwise.
const char* cpu_clone();

}  // namespace lol
