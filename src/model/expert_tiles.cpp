#include "model/expert_tiles.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <tuple>

#include "util/error.h"

namespace lol {

ExpertTiles expert_tiles(const torch::Tensor& expert, int64_t experts, int64_t tile) {
  LOL_CHECK(expert.dim() == 1 && expert.scalar_type() == torch::kInt64 && experts >= 1 && tile >= 1,
            "expert_tiles: expert must be a 1-D int64 tensor, experts and tile >= 1");
  const int64_t n = expert.size(0);
  const auto ids = torch::arange(experts + 1, expert.options());
  // Rows ascend by expert: expert e holds rows [bounds[e], bounds[e + 1]).
  const auto bounds = torch::searchsorted(expert, ids);
  ExpertTiles t;
  t.counts = bounds.slice(0, 1) - bounds.slice(0, 0, experts);
  const auto tiles_of = torch::div(t.counts + (tile - 1), tile, "floor");
  const auto tile_end = tiles_of.cumsum(0), tile_begin = tile_end - tiles_of;
  t.tile = tile;
  t.tiles = (n + tile - 1) / tile + experts;
  t.position = tile_begin.index_select(0, expert) * tile + torch::arange(n, expert.options()) -
               bounds.index_select(0, expert);
  // Tile j belongs to the expert whose tiles span it: the number of experts whose tiles end at
  // or before j. Tiles past the last expert's hold only padding; they take the last expert.
  t.tile_expert = torch::searchsorted(tile_end, torch::arange(t.tiles, expert.options()),
                                      /*out_int32=*/false, /*right=*/true)
                      .clamp_max(experts - 1);
  return t;
}

SortedTiles sort_into_tiles(const torch::Tensor& ids, int64_t experts, int64_t tile) {
  LOL_CHECK(ids.dim() == 1 && ids.scalar_type() == torch::kInt64,
            "sort_into_tiles: ids must be a 1-D int64 tensor");
  SortedTiles s;
  std::tie(s.expert, s.perm) = ids.sort(/*stable=*/true, 0, /*descending=*/false);
  s.tiles = expert_tiles(s.expert, experts, tile);
  return s;
}

torch::Tensor tiled_linear(const torch::Tensor& x, const ExpertTiles& tiles,
                           const torch::Tensor& weight) {
  LOL_CHECK(x.dim() == 2 && weight.dim() == 3 && weight.size(2) == x.size(1) &&
                tiles.position.numel() == x.size(0),
            "tiled_linear: x (n, in), weight (experts, out, in) and a position per row");
  const int64_t in = x.size(1), out = weight.size(1), rows = tiles.tiles * tiles.tile;
  const auto padded = torch::zeros({rows, in}, x.options())
                          .index_copy(0, tiles.position, x)
                          .view({tiles.tiles, tiles.tile, in});
  const auto y = torch::bmm(padded, weight.index_select(0, tiles.tile_expert).transpose(1, 2));
  return y.reshape({rows, out}).index_select(0, tiles.position);
}

namespace {
// -1: not set by a test; else the ExpertProducts value. Tile 0: by expert_tile's rule.
std::atomic<int> chosen_products{-1};
std::atomic<int64_t> chosen_tile{0};
}  // namespace

ExpertProducts parse_expert_products(const std::string& value) {
  if (value == "sliced") return ExpertProducts::kSliced;
  if (value == "tiled") return ExpertProducts::kTiled;
  fail("LOL_EXPERT_PRODUCTS must be 'sliced' or 'tiled', got '", value, "'");
}

ExpertProducts expert_products(torch::Device device) {
  if (const int chosen = chosen_products.load(); chosen >= 0)
    return static_cast<ExpertProducts>(chosen);
  static const std::optional<ExpertProducts> from_env = []() -> std::optional<ExpertProducts> {
    const char* env = std::getenv("LOL_EXPERT_PRODUCTS");
    if (env == nullptr || *env == '\0') return std::nullopt;
    return parse_expert_products(env);
  }();
  if (from_env) return *from_env;
  return device.is_cpu() ? ExpertProducts::kSliced : ExpertProducts::kTiled;
}

int64_t expert_tile(int64_t rows, int64_t experts) {
  if (const int64_t chosen = chosen_tile.load(); chosen > 0) return chosen;
  const int64_t target = (rows + 4 * experts - 1) / (4 * std::max<int64_t>(experts, 1));
  int64_t tile = 16;
  while (tile < target && tile < 1024) tile *= 2;
  return tile;
}

void set_expert_products(std::optional<ExpertProducts> products, int64_t tile) {
  LOL_CHECK(tile >= 0, "set_expert_products: tile must be >= 0 (0: the default rule)");
  chosen_products.store(products ? static_cast<int>(*products) : -1);
  chosen_tile.store(products ? tile : 0);
}

}  // namespace lol
