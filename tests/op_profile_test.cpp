// The step profiler (util/op_profile.h): operators go to the innermost region around them,
// backward operators to the region their forward ran in, times are self times, and a training
// step's phases and parts all show up.
#include "util/op_profile.h"

#include <gtest/gtest.h>

#include <chrono>

#include "helpers.h"
#include "train/trainer.h"

namespace lol {
namespace {

const ProfileRow* find_row(const std::vector<ProfileRow>& rows, const std::string& phase,
                           const std::string& part) {
  for (const auto& r : rows)
    if (r.phase == phase && r.part == part) return &r;
  return nullptr;
}

TEST(OpProfile, BackwardOperatorsGoToTheRegionTheirForwardRanIn) {
  auto x = torch::randn({16, 8}, torch::requires_grad());
  auto w = torch::randn({8, 8}, torch::requires_grad());
  std::vector<ProfileRow> rows, ops;
  double wall_ms = 0;
  {
    OpProfiler profiler;
    const auto t0 = std::chrono::steady_clock::now();
    torch::Tensor y, z;
    {
      ProfileScope outer("alpha");
      ProfileScope inner("matmul");
      y = x.mm(w);
    }
    {
      ProfileScope outer("beta");
      ProfileScope middle("ignored");  // between phase and part: the innermost takes the ops
      ProfileScope inner("exp");
      z = y.exp().sum();
    }
    {
      ProfileScope scope("backward");
      z.backward();
    }
    wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    rows = profiler.rows();
    ops = profiler.operators();
  }
  // By operator: the product ran forward and, twice, in MmBackward0.
  const auto* product = find_row(ops, "aten::mm", "");
  ASSERT_NE(product, nullptr);
  EXPECT_EQ(product->calls, 3);
  EXPECT_GT(product->backward_ms, 0);
  EXPECT_NE(find_row(ops, "MmBackward0", ""), nullptr);
  for (size_t i = 1; i < ops.size(); ++i) EXPECT_GE(ops[i - 1].total_ms(), ops[i].total_ms());
  const auto* mm = find_row(rows, "alpha", "matmul");
  const auto* ex = find_row(rows, "beta", "exp");
  ASSERT_NE(mm, nullptr);
  ASSERT_NE(ex, nullptr);
  // The middle region is a row of its own host time only: its operators ran in "exp".
  const auto* middle = find_row(rows, "beta", "ignored");
  ASSERT_NE(middle, nullptr);
  EXPECT_EQ(middle->forward_ms + middle->backward_ms, 0);
  EXPECT_GT(mm->forward_ms, 0);
  EXPECT_GT(mm->backward_ms, 0);  // MmBackward: two products, found by sequence number
  EXPECT_GT(mm->gemm_ms, 0);
  EXPECT_GT(ex->forward_ms, 0);
  EXPECT_GT(ex->backward_ms, 0);
  EXPECT_EQ(ex->gemm_ms, 0);  // exp, sum and their backward are no matrix products
  // Self times partition the outermost frames, so together they fit in the wall time.
  double sum = 0;
  for (const auto& r : rows) {
    EXPECT_LE(r.gemm_ms, r.forward_ms + r.backward_ms + 1e-9) << r.phase << "/" << r.part;
    sum += r.total_ms();
  }
  EXPECT_LE(sum, wall_ms);
}

TEST(OpProfile, OneAtATimeAndEachStartsEmpty) {
  auto x = torch::randn({4, 4});
  {
    OpProfiler profiler;
    EXPECT_THROW(OpProfiler second, std::exception);
    ProfileScope scope("first");
    x.mm(x);
  }
  ProfileScope unobserved("outside");  // no profiler: inert
  x.mm(x);
  OpProfiler profiler;
  {
    ProfileScope scope("second");
    x.mm(x);
  }
  const auto rows = profiler.rows();
  EXPECT_EQ(find_row(rows, "first", ""), nullptr);
  EXPECT_EQ(find_row(rows, "outside", ""), nullptr);
  ASSERT_NE(find_row(rows, "second", ""), nullptr);
  EXPECT_GT(find_row(rows, "second", "")->gemm_ms, 0);
}

TEST(OpProfile, ATrainingStepShowsEveryPhaseAndTheBackwardOfEachPart) {
  auto config = testing::tiny_config(Family::kLol);
  config.vocab_size = 20;
  LanguageModel model(config);
  model->initialize(0);
  TrainConfig tc;
  tc.steps = 2;
  tc.batch_rows = 2;
  tc.seq_len = 32;
  tc.eval_every = 0;
  tc.checkpoint_every = 0;
  const auto dir = testing::temp_dir("op_profile");
  Trainer trainer(model, tc, dir, torch::kCPU);
  trainer.train_step();  // the first step's one-time work stays out
  std::vector<ProfileRow> rows;
  {
    OpProfiler profiler;
    trainer.train_step();
    rows = profiler.rows();
  }
  remove_tree(dir);
  for (const char* phase :
       {"data", "zero_grad", "embed", "head", "loss", "backward", "optimizer", "balance"})
    EXPECT_NE(find_row(rows, phase, ""), nullptr) << phase;
  for (const char* phase : {"prelude", "core", "coda"})
    for (const char* part : {"norm", "proj", "attend", "swiglu"}) {
      const auto* r = find_row(rows, phase, part);
      ASSERT_NE(r, nullptr) << phase << "/" << part;
      EXPECT_GT(r->forward_ms, 0) << phase << "/" << part;
      EXPECT_GT(r->backward_ms, 0) << phase << "/" << part;
    }
  for (const char* part : {"route", "permute"}) EXPECT_NE(find_row(rows, "core", part), nullptr);
  EXPECT_GT(find_row(rows, "core", "proj")->gemm_ms, 0);
  EXPECT_EQ(find_row(rows, "core", "norm")->gemm_ms, 0);
  // The optimizer by part: gradient clipping, AdamW, Muon's own work and its Newton-Schulz
  // iterations (whose products are GEMMs).
  for (const char* part : {"clip", "adamw", "muon", "newton_schulz"}) {
    const auto* r = find_row(rows, "optimizer", part);
    ASSERT_NE(r, nullptr) << part;
    EXPECT_GT(r->forward_ms, 0) << part;
    EXPECT_EQ(r->backward_ms, 0) << part;
  }
  EXPECT_GT(find_row(rows, "optimizer", "newton_schulz")->gemm_ms, 0);
}

}  // namespace
}  // namespace lol
