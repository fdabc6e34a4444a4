// The tiled expert products of a routed depth (model/expert_tiles.h), which need no host read
// of the routing: the tile layout (each expert's rows consecutive from a tile boundary, every
// tile one expert's, shapes from n and the library alone) and the products with their
// gradients against one product per expert in float64, for tiles smaller than, equal to and
// larger than the experts' row counts, with unused experts. The whole model on tiled products
// is checked against the float64 reference in gradient_test.cpp.
#include "model/expert_tiles.h"

#include <random>

#include "helpers.h"

namespace lol {
namespace {

// Ascending expert ids with the given rows per expert.
torch::Tensor ids_of(const std::vector<int64_t>& rows_per_expert) {
  std::vector<int64_t> ids;
  for (size_t e = 0; e < rows_per_expert.size(); ++e)
    ids.insert(ids.end(), rows_per_expert[e], static_cast<int64_t>(e));
  return torch::tensor(ids, torch::kInt64);
}

const std::vector<std::vector<int64_t>> kCases = {
    {5}, {0, 7, 0}, {3, 1, 4, 1}, {0, 0, 9}, {12, 0, 0, 2}, {1, 1, 1, 1, 1}, {40, 3, 17}};

TEST(ExpertTiles, EachExpertsRowsFillItsOwnTilesFromATileBoundary) {
  for (const auto& rows : kCases)
    for (int64_t tile : {1, 2, 3, 4, 16}) {
      const auto experts = static_cast<int64_t>(rows.size());
      const auto ids = ids_of(rows);
      const int64_t n = ids.size(0);
      SCOPED_TRACE("n " + std::to_string(n) + " experts " + std::to_string(experts) + " tile " +
                   std::to_string(tile));
      const auto t = expert_tiles(ids.to(testing::device()), experts, tile);
      ASSERT_EQ(t.tiles, (n + tile - 1) / tile + experts);
      ASSERT_EQ(t.tile_expert.size(0), t.tiles);
      const auto position = t.position.to(torch::kCPU);
      const auto tile_expert = t.tile_expert.to(torch::kCPU);
      std::vector<bool> taken(static_cast<size_t>(t.tiles * tile), false);
      int64_t row = 0;
      for (int64_t e = 0; e < experts; ++e)
        for (int64_t k = 0; k < rows[static_cast<size_t>(e)]; ++k, ++row) {
          const int64_t p = position[row].item<int64_t>();
          ASSERT_GE(p, 0);
          ASSERT_LT(p, t.tiles * tile);
          EXPECT_FALSE(taken[static_cast<size_t>(p)]) << "row " << row << " shares slot " << p;
          taken[static_cast<size_t>(p)] = true;
          EXPECT_EQ(tile_expert[p / tile].item<int64_t>(), e) << "row " << row;
          // The expert's k-th row sits k slots after its first, which starts a tile.
          const int64_t first = position[row - k].item<int64_t>();
          EXPECT_EQ(first % tile, 0);
          EXPECT_EQ(p, first + k);
        }
      const auto experts_of_tiles =
          tile_expert.min().item<int64_t>() >= 0 && tile_expert.max().item<int64_t>() < experts;
      EXPECT_TRUE(experts_of_tiles);
    }
}

TEST(GoldenExpertTiles, TiledProductsMatchOneProductPerExpertForwardAndBackward) {
  constexpr int64_t kIn = 9, kOut = 7;
  for (const auto& rows : kCases)
    for (int64_t tile : {1, 3, 8, 64}) {
      const auto experts = static_cast<int64_t>(rows.size());
      const auto ids = ids_of(rows);
      const int64_t n = ids.size(0);
      SCOPED_TRACE("n " + std::to_string(n) + " experts " + std::to_string(experts) + " tile " +
                   std::to_string(tile));
      torch::manual_seed(n * 31 + tile);
      const std::vector<torch::Tensor> inputs{torch::randn({n, kIn}),
                                              torch::randn({experts, kOut, kIn})};
      const auto upstream = torch::randn({n, kOut});
      const auto tiles = expert_tiles(ids, experts, tile);
      auto tiled = [&](const std::vector<torch::Tensor>& l) {
        return tiled_linear(l[0], tiles, l[1]);
      };
      auto per_expert = [&](const std::vector<torch::Tensor>& l) {
        std::vector<torch::Tensor> parts;
        int64_t offset = 0;
        for (int64_t e = 0; e < experts; ++e) {
          const int64_t count = rows[static_cast<size_t>(e)];
          parts.push_back(torch::mm(l[0].narrow(0, offset, count), l[1][e].t()));
          offset += count;
        }
        return torch::cat(parts);
      };
      const auto got = testing::output_and_gradients(inputs, torch::kFloat32, upstream, tiled);
      const auto want =
          testing::output_and_gradients(inputs, torch::kFloat64, upstream, per_expert);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_LT(testing::max_abs_diff(got[i], want[i]),
                  1e-5 * std::max(1.0, want[i].abs().max().item<double>()))
            << "tensor " << i;
    }
}

TEST(ExpertTiles, TheProductsAreNamedOrRefusedByName) {
  EXPECT_EQ(parse_expert_products("sliced"), ExpertProducts::kSliced);
  EXPECT_EQ(parse_expert_products("tiled"), ExpertProducts::kTiled);
  try {
    parse_expert_products("grouped");
    FAIL() << "no error for an unknown value";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("LOL_EXPERT_PRODUCTS"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("grouped"), std::string::npos) << e.what();
  }
  // A test may choose products and tile; unset, the tile follows the rule.
  set_expert_products(ExpertProducts::kTiled, 5);
  EXPECT_EQ(expert_products(torch::kCPU), ExpertProducts::kTiled);
  EXPECT_EQ(expert_tile(4096, 4), 5);
  set_expert_products(std::nullopt);
  EXPECT_EQ(expert_tile(4096, 4), 256);
  EXPECT_EQ(expert_tile(16384, 4), 1024);
  EXPECT_EQ(expert_tile(1 << 20, 4), 1024);
  EXPECT_EQ(expert_tile(10, 3), 16);
  EXPECT_EQ(expert_tile(0, 1), 16);
}

}  // namespace
}  // namespace lol
