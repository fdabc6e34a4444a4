// The runtime's thread settings reach this project's own parallel kernels.
#include "util/runtime.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <sstream>
#include <string>

#include "util/cpu_clones.h"
#include "util/tensor.h"

namespace lol {

// at::parallel_for is a header template: unless the code calling it is compiled with OpenMP,
// it runs every chunk on the calling thread whatever at::set_num_threads said.
TEST(Runtime, ParallelForInOurCodeRunsOnTheConfiguredThreads) {
  const int before = at::get_num_threads();
  configure_runtime(2);
  std::mutex mutex;
  std::set<int> threads;
  at::parallel_for(0, 64, 1, [&](int64_t, int64_t) {
    std::lock_guard<std::mutex> lock(mutex);
    threads.insert(at::get_thread_num());
  });
  EXPECT_EQ(runtime_info().kernel_threads, 2);
  configure_runtime(before);
  EXPECT_EQ(threads.size(), 2u);
}

// Large CPU buffers come 2 MB-aligned (so the kernel can back them with huge pages), small
// ones and other devices' from LibTorch; either way they are zeros of the shape and type asked,
// writable, and freed with the tensor.
TEST(Runtime, ZerosInHugePagesAreZerosOfTheShapeAsked) {
  const auto options = torch::TensorOptions().dtype(torch::kFloat32);
  for (int64_t rows : {3, 1000, 4096}) {  // 3 KB, 1 MB, 4 MB
    auto t = zeros_in_huge_pages({rows, 256}, options);
    EXPECT_EQ(t.sizes(), (std::vector<int64_t>{rows, 256}));
    EXPECT_EQ(t.scalar_type(), torch::kFloat32);
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(t.count_nonzero().item<int64_t>(), 0);
    t.fill_(2.0f);
    EXPECT_EQ(t.sum().item<double>(), 2.0 * static_cast<double>(rows * 256));
#ifdef __linux__
    if (rows == 4096) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % (uintptr_t{2} << 20), 0u);
    }
#endif
  }
  auto ints = zeros_in_huge_pages({1 << 20}, options.dtype(torch::kInt64));  // 8 MB
  EXPECT_EQ(ints.scalar_type(), torch::kInt64);
  EXPECT_EQ(ints.count_nonzero().item<int64_t>(), 0);
}

// The kernels' clone is the one the loader's resolver picked, read back from it. On x86-64 Linux
// the probe finds it (a compiler that renamed its clones would make it "unknown"), a CPU with
// AVX2 and FMA never runs the baseline, and scripts/isa_check.sh, which runs this test on
// emulated CPUs, names in LOL_EXPECT_CPU_CLONE the clones (one per compiler, | between) the
// emulated CPU must get.
TEST(Runtime, ReportsTheCloneTheLoaderPicked) {
  const std::string clone = cpu_clone();
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
  EXPECT_NE(clone, "unknown");
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_NE(clone, "x86-64");
    EXPECT_NE(clone, "default");
  }
  if (const char* expected = std::getenv("LOL_EXPECT_CPU_CLONE")) {
    std::istringstream names(expected);
    bool listed = false;
    for (std::string name; std::getline(names, name, '|');) listed = listed || name == clone;
    EXPECT_TRUE(listed) << "runs the " << clone << " clone, expected " << expected;
  }
#else
  EXPECT_EQ(clone, "none");
#endif
}

}  // namespace lol
