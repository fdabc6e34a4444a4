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

namespace {
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// rows (n, width) into tiles * tile rows at their positions, zeros elsewhere.
torch::Tensor into_tiles(const torch::Tensor& rows, const ExpertTiles& t) {
  return torch::zeros({t.tiles * t.tile, rows.size(1)}, rows.options())
      .index_copy(0, t.position, rows)
      .view({t.tiles, t.tile, rows.size(1)});
}

// The products of tiled_linear as one autograd node that saves x and the (experts, out, in)
// weights, not the per-tile copies of the weights (tiles, out, in) that a bmm of LibTorch
// expressions keeps for its backward: with about five tiles per expert, five copies of the
// library's weights per product and routed depth. The backward gathers them again.
struct TiledLinearFunction : torch::autograd::Function<TiledLinearFunction> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& position,
                               const torch::Tensor& tile_expert, int64_t tiles, int64_t tile) {
    const ExpertTiles t{position, tile_expert, {}, tiles, tile};
    const auto y =
        torch::bmm(into_tiles(x, t), weight.index_select(0, tile_expert).transpose(1, 2));
    ctx->save_for_backward({x, weight, position, tile_expert});
    ctx->saved_data["tiles"] = tiles;
    ctx->saved_data["tile"] = tile;
    return {y.reshape({tiles * tile, weight.size(1)}).index_select(0, position)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1];
    const ExpertTiles t{
        saved[2], saved[3], {}, ctx->saved_data["tiles"].toInt(), ctx->saved_data["tile"].toInt()};
    // The products in the gradient's dtype (bf16 when the forward ran under autocast, whose
    // casts the backward does not see), each gradient in its input's dtype.
    const auto dy = into_tiles(grads[0], t);  // (tiles, tile, out)
    const auto dtype = dy.scalar_type();
    torch::Tensor dx, dweight;
    if (ctx->needs_input_grad(0))
      dx = torch::bmm(dy, weight.index_select(0, t.tile_expert).to(dtype))
               .reshape({t.tiles * t.tile, x.size(1)})
               .index_select(0, t.position)
               .to(x.scalar_type());
    if (ctx->needs_input_grad(1))
      dweight = torch::zeros_like(weight).index_add_(
          0, t.tile_expert,
          torch::bmm(dy.transpose(1, 2), into_tiles(x.to(dtype), t)).to(weight.scalar_type()));
    return {dx, dweight, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};
}  // namespace

torch::Tensor tiled_linear(const torch::Tensor& x, const ExpertTiles& tiles,
                           const torch::Tensor& weight) {
  LOL_CHECK(x.dim() == 2 && weight.dim() == 3 && weight.size(2) == x.size(1) &&
                tiles.position.numel() == x.size(0),
            "tiled_linear: x (n, in), weight (experts, out, in) and a position per row");
  return TiledLinearFunction::apply(x, weight, tiles.position, tiles.tile_expert, tiles.tiles,
                                    tiles.tile)[0];
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
