// The runtime's thread settings reach this project's own parallel kernels.
#include "util/runtime.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <set>

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

}  // namespace lol
