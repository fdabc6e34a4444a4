#include "model/stats.h"

#include "helpers.h"

namespace lol {
namespace {

TEST(Stats, StoredParameterCountMatchesABuiltModel) {
  for (Family family : testing::all_families())
    for (bool tied : {true, false}) {
      auto c = testing::tiny_config(family);
      c.router_tied = tied;
      c.tie_embeddings = tied;
      c.loop_blocks = 1;
      LanguageModel model(c);
      int64_t numel = 0;
      for (const auto& p : model->parameters()) numel += p.numel();
      EXPECT_EQ(model_stats(c, 16).stored_params, numel) << enum_name(family) << " tied " << tied;
    }
}

TEST(Stats, LolExecutesDBlocksFromASmallerLibrary) {
  auto c = testing::tiny_config(Family::kLol);
  c.core_depth = 8;
  c.library_size = 2;
  auto dense = c;
  dense.family = Family::kDense;
  auto lol = model_stats(c, 64), ref = model_stats(dense, 64);
  EXPECT_EQ(lol.executed_blocks, ref.executed_blocks);
  EXPECT_LT(lol.stored_params, ref.stored_params);
  // Same executed matrix work up to the router's L x d per depth.
  EXPECT_EQ(lol.executed_matmul_params - ref.executed_matmul_params, 8 * 2 * c.d_model);
  // Windowed attention in the core is cheaper than full attention at long context.
  EXPECT_LT(lol.attention_flops_per_token, ref.attention_flops_per_token);
  EXPECT_GT(lol.core_cache_bytes, 0);
  EXPECT_EQ(ref.core_cache_bytes, 0);
}

}  // namespace
}  // namespace lol
