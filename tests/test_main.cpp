#include <gtest/gtest.h>
#include <torch/torch.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  at::set_num_threads(1);  // tests compare values, not speed; one thread keeps them repeatable
  return RUN_ALL_TESTS();
}
