#pragma once
// Expert products without reading the routing on the host: a routed depth's (lol) and a
// token-routed feed-forward's (moe). The rows arrive in expert order (a stable sort by the
// expert each row's window, or each token's choice, took); the host does not know
// how many rows each expert has, so a product per expert (model/sliced_linear.h, which needs
// the counts: one device-to-host read per routed depth, a synchronisation on a GPU) is not
// possible. Instead every expert's rows are laid out in tiles of `tile` rows, each tile
// holding rows of one expert only (an expert's last tile padded with zero rows), and one
// batched product multiplies each tile by its expert's weight. The number of tiles is bounded
// by ceil(n / tile) + experts, so every shape is known on the host; the positions and each
// tile's expert are computed on the device. Padding costs at most one tile per expert.
//
// Which products the routed families use: `sliced` (per expert, the counts read on the host)
// or `tiled` (this file). LOL_EXPERT_PRODUCTS=sliced|tiled chooses; by default a CPU slices
// (reading the counts there is free and the per-expert products are faster) and other devices
// tile. Tests compare the two.
#include <torch/torch.h>

#include <optional>
#include <string>

namespace lol {

struct ExpertTiles {
  torch::Tensor position;     // (n) int64: each row's place among tiles * tile padded rows
  torch::Tensor tile_expert;  // (tiles) int64: the expert whose weight each tile takes
  torch::Tensor counts;       // (experts) int64: rows per expert
  int64_t tiles = 0, tile = 0;
};

// expert (n) int64, ascending, each in 0..experts-1, on any device.
ExpertTiles expert_tiles(const torch::Tensor& expert, int64_t experts, int64_t tile);

// ids (n) int64 in any order, each in 0..experts-1: a stable sort on the device (perm: the
// rows in expert order; expert: their experts, ascending), then laid out in tiles.
struct SortedTiles {
  torch::Tensor perm, expert;
  ExpertTiles tiles;
};
SortedTiles sort_into_tiles(const torch::Tensor& ids, int64_t experts, int64_t tile);

// y[r] = x[r] weight[expert of r]^T for x (n, in) in expert order and weight (experts, out,
// in); differentiable in x and weight. A copy into the tiles, one bmm with each tile's
// expert's weight, a gather back; one autograd node that keeps x and `weight` for the
// backward, not the per-tile copies of the weights.
torch::Tensor tiled_linear(const torch::Tensor& x, const ExpertTiles& tiles,
                           const torch::Tensor& weight);

enum class ExpertProducts { kSliced, kTiled };
// "sliced" or "tiled"; anything else throws naming the variable and the value.
ExpertProducts parse_expert_products(const std::string& value);
// The products a routed depth on `device` uses (LOL_EXPERT_PRODUCTS, else the device's
// default).
ExpertProducts expert_products(torch::Device device);
// Rows per tile for `rows` rows over `experts` experts: the power of two nearest above
// rows / (4 experts), within 16..1024. Each tile costs a copy of its expert's weight and each
// expert pads half a tile on average, so about five tiles per expert when the load is even
// keeps the weight copies at about five times the library's weights and the padding near an
// eighth of the rows.
int64_t expert_tile(int64_t rows, int64_t experts);
// Tests: choose the products (and a fixed tile) for every device; nullopt: the defaults.
void set_expert_products(std::optional<ExpertProducts> products, int64_t tile = 0);

}  // namespace lol
