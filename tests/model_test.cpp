// Golden tests: the engine's batched forward against the slow reference (tests/reference.cpp),
// and the invariants of SPEC 1.2-1.6 for every family.
#include <random>

#include "helpers.h"

namespace lol {
namespace {

using testing::make_model;
using testing::max_abs_diff;
using testing::random_config;
using testing::random_tokens;
using testing::tiny_config;
using testing::weights_of;

using Doc = TokenSequence;

// Packs documents into rows (two per row when `pack`), with padding at the row ends.
Batch make_batch(const std::vector<Doc>& docs, bool pack) {
  std::vector<std::vector<TokenSequence>> rows;
  for (const auto& doc : docs) {
    if (!pack || rows.empty() || rows.back().size() == 2) rows.emplace_back();
    rows.back().push_back(doc);
  }
  return Batch::from_documents(rows, /*extra_columns=*/1);
}

reference::Document to_reference(const Doc& d) {
  reference::Document out{d.tokens, d.prompt_len, std::vector<bool>(d.tokens.size(), false)};
  for (int64_t p : d.router_only) out.router_only[p] = true;
  return out;
}

// Compares the engine on a packed batch with the reference on each document alone.
void expect_matches_reference(const ModelConfig& c, LanguageModel model,
                              const std::vector<Doc>& docs, bool pack,
                              const ForcedPath* force = nullptr, int64_t depth = -1) {
  Layout layout(make_batch(docs, pack), c.vocab_size, testing::device());
  torch::NoGradGuard no_grad;
  ForwardOptions options;
  options.force = force;
  options.executed_depth = depth;
  auto result = model->forward(layout, options);
  auto weights = weights_of(model);
  for (size_t d = 0; d < docs.size(); ++d) {
    const auto& fd = layout.documents()[d];
    // Routes of this document from the engine, keyed by (depth, ordinal).
    std::map<std::pair<int64_t, int64_t>, int64_t> hint;
    std::map<std::pair<int64_t, int64_t>, std::pair<double, double>> gate_margin;
    for (const auto& r : result.routes)
      for (size_t w = 0; w < r.partition->windows.size(); ++w) {
        const auto& win = r.partition->windows[w];
        if (win.document != static_cast<int64_t>(d)) continue;
        hint[{r.depth, win.ordinal}] = r.experts[w];
        gate_margin[{r.depth, win.ordinal}] = {r.gates[w].item<double>(), r.margins[w]};
      }
    auto ref = reference::forward(c, weights, to_reference(docs[d]), force, depth, &hint, 1e-4);
    auto fast = result.logits.narrow(0, fd.start, fd.length);
    const double diff = max_abs_diff(fast, ref.logits);
    const double scale = std::max(1.0, ref.logits.abs().max().item<double>());
    EXPECT_LT(diff / scale, 1e-4) << "family " << enum_name(c.family) << " doc " << d
                                  << " max diff " << diff;
    EXPECT_EQ(hint.size(), ref.routes.size());
    for (const auto& route : ref.routes) {
      auto key = std::make_pair(route.depth, route.ordinal);
      ASSERT_TRUE(hint.count(key)) << "depth " << route.depth << " window " << route.ordinal;
      if (route.margin > 1e-4) {
        EXPECT_EQ(hint[key], route.expert);
      }
      EXPECT_NEAR(gate_margin[key].first, route.gate, 1e-4);
    }
  }
}

class FamilyTest : public ::testing::TestWithParam<Family> {};
class GoldenForward : public ::testing::TestWithParam<Family> {};

TEST_P(GoldenForward, FastPathMatchesSlowReferenceOnRandomConfigs) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 6; ++trial) {
    auto c = random_config(rng, GetParam());
    SCOPED_TRACE("trial " + std::to_string(trial) + " config " + c.to_json().dump());
    auto model = make_model(c, 100 + trial);
    auto docs = testing::random_documents(rng, c, 3);
    expect_matches_reference(c, model, docs, /*pack=*/trial % 2 == 0);
  }
}

TEST_P(FamilyTest, AppendingTokensNeverChangesEarlierLogitsOrRoutes) {
  std::mt19937 rng(99);
  auto c = random_config(rng, GetParam());
  auto model = make_model(c, 5);
  torch::NoGradGuard no_grad;
  auto tokens = random_tokens(rng, 17, c.vocab_size);
  auto full =
      model->forward(Layout(Batch::single(tokens, 3, {4}), c.vocab_size, testing::device()));
  for (int64_t m : {1, 4, 9, 16}) {
    std::vector<int64_t> prefix(tokens.begin(), tokens.begin() + m);
    auto part = model->forward(
        Layout(Batch::single(prefix, 3, m > 4 ? std::vector<int64_t>{4} : std::vector<int64_t>{}),
               c.vocab_size, testing::device()));
    EXPECT_LT(max_abs_diff(part.logits, full.logits.narrow(0, 0, m)), 1e-5) << "prefix " << m;
    ASSERT_EQ(part.routes.size(), full.routes.size());
    for (size_t l = 0; l < part.routes.size(); ++l)
      for (size_t w = 0; w < part.routes[l].experts.size(); ++w) {
        EXPECT_EQ(part.routes[l].experts[w], full.routes[l].experts[w]);
        EXPECT_NEAR(part.routes[l].gates[w].item<double>(), full.routes[l].gates[w].item<double>(),
                    1e-6);
      }
  }
}

TEST_P(FamilyTest, PackedRowsEqualEachDocumentAlone) {
  std::mt19937 rng(7);
  auto c = random_config(rng, GetParam());
  auto model = make_model(c, 11);
  torch::NoGradGuard no_grad;
  auto docs = testing::random_documents(rng, c, 4);
  Layout packed(make_batch(docs, true), c.vocab_size, testing::device());
  auto together = model->forward(packed);
  for (size_t d = 0; d < docs.size(); ++d) {
    Layout alone(make_batch({docs[d]}, false), c.vocab_size, testing::device());
    auto single = model->forward(alone);
    const auto& fd = packed.documents()[d];
    EXPECT_LT(max_abs_diff(single.logits, together.logits.narrow(0, fd.start, fd.length)), 1e-5);
  }
  // The grid view puts zeros at padding and the flat rows at their columns.
  auto grid = packed.to_grid(together.logits);
  EXPECT_EQ(grid.size(0), packed.rows());
  const auto& last = packed.documents().back();
  EXPECT_LT(max_abs_diff(grid[last.row][last.row_start + last.length - 1],
                         together.logits[last.start + last.length - 1]),
            0.0 + 1e-12);
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, FamilyTest, ::testing::ValuesIn(testing::all_families()),
                         testing::family_test_name);
INSTANTIATE_TEST_SUITE_P(AllFamilies, GoldenForward, ::testing::ValuesIn(testing::all_families()),
                         testing::family_test_name);

// A forced path holding the router's own choices, or just its ids, changes nothing.
TEST(Routing, ForcingTheRoutersOwnChoicesChangesNothing) {
  auto c = tiny_config();
  c.core_depth = 4;
  auto model = make_model(c, 3);
  torch::NoGradGuard no_grad;
  std::mt19937 rng(5);
  auto tokens = random_tokens(rng, 15, c.vocab_size);
  Layout layout(Batch::single(tokens, 2), c.vocab_size, testing::device());
  auto free_run = model->forward(layout);
  ForcedPath both, ids;
  for (const auto& r : free_run.routes)
    for (size_t w = 0; w < r.experts.size(); ++w) {
      const int64_t k = r.partition->windows[w].ordinal;
      both.depths[r.depth][k] = {r.experts[w], r.gates[w].item<double>()};
      ids.depths[r.depth][k] = {r.experts[w], std::nullopt};
    }
  for (const ForcedPath* path : {&both, &ids}) {
    ForwardOptions options;
    options.force = path;
    auto forced = model->forward(layout, options);
    EXPECT_LT(max_abs_diff(forced.logits, free_run.logits), 1e-6);
  }
}

TEST(GoldenRouting, ForcedIdGateAndBothMatchTheReference) {
  auto c = tiny_config();
  c.core_depth = 3;
  c.library_size = 4;
  auto model = make_model(c, 21);
  std::mt19937 rng(8);
  std::vector<Doc> docs = {{random_tokens(rng, 12, c.vocab_size), 3, {1}},
                           {random_tokens(rng, 9, c.vocab_size), 0, {}}};
  ForcedPath path;
  path.depths[1][0] = {2, std::nullopt};    // id only
  path.depths[1][2] = {std::nullopt, 0.3};  // gate only
  path.depths[2][1] = {3, 0.9};             // both; ordinals beyond 1 reuse this entry
  path.depths[3][0] = {0, 0.0};             // a zero gate skips the expert
  expect_matches_reference(c, model, docs, /*pack=*/true, &path);
  // The reuse rule: ordinal 5 of depth 2 takes ordinal 1's entry.
  ASSERT_NE(path.find(2, 5), nullptr);
  EXPECT_EQ(*path.find(2, 5)->expert, 3);
  EXPECT_EQ(path.find(1, 1), nullptr);
}

TEST(Routing, RouterOnlyTokenIsInvisibleToOthersUnderAForcedPath) {
  auto c = tiny_config();
  auto model = make_model(c, 4);
  torch::NoGradGuard no_grad;
  std::mt19937 rng(6);
  auto tokens = random_tokens(rng, 14, c.vocab_size);
  const int64_t secret = 5;
  ForcedPath path;
  for (int64_t l = 1; l <= c.core_depth; ++l) path.depths[l][0] = {l % c.library_size, 0.7};
  ForwardOptions options;
  options.force = &path;
  auto a = model->forward(
      Layout(Batch::single(tokens, 0, {secret}), c.vocab_size, testing::device()), options);
  tokens[secret] = (tokens[secret] + 1) % c.vocab_size;
  auto b = model->forward(
      Layout(Batch::single(tokens, 0, {secret}), c.vocab_size, testing::device()), options);
  auto keep = torch::ones({14}, torch::kBool);
  keep[secret] = false;
  auto idx = torch::nonzero(keep).squeeze(1).to(a.logits.device());
  EXPECT_LT(max_abs_diff(a.logits.index_select(0, idx), b.logits.index_select(0, idx)), 1e-6);
  EXPECT_GT(max_abs_diff(a.logits[secret], b.logits[secret]), 1e-4);  // its own output changes
  // Without forcing, the token still steers routing through the window means.
  auto free_a =
      model->forward(Layout(Batch::single(tokens, 0, {secret}), c.vocab_size, testing::device()));
  EXPECT_GT(free_a.routes.size(), 0u);
}

TEST(Routing, GradientReachesTheRouterOnlyThroughTheGate) {
  auto c = tiny_config();
  auto model = make_model(c, 9, /*router_scale=*/3.0);
  model->to(torch::kFloat64);
  std::mt19937 rng(10);
  auto tokens = random_tokens(rng, 13, c.vocab_size);
  Layout layout(Batch::single(tokens, 2), c.vocab_size, testing::device());
  auto loss_of = [&](const ForwardOptions& options) {
    return model->forward(layout, options).logits.pow(2).mean();
  };
  auto router_weight = model->named_parameters()["router.weight"];
  auto depth_vectors = model->named_parameters()["router.depth_vectors"];

  // Forcing every gate leaves no path from the loss to the router.
  ForcedPath gates;
  for (int64_t l = 1; l <= c.core_depth; ++l) gates.depths[l][0] = {std::nullopt, 0.5};
  ForwardOptions forced;
  forced.force = &gates;
  model->zero_grad();
  loss_of(forced).backward();
  EXPECT_TRUE(!router_weight.grad().defined() ||
              router_weight.grad().abs().max().item<double>() == 0.0);

  // Through the gate, the analytic gradient matches finite differences (selection is fixed
  // by a margin far larger than the step).
  model->zero_grad();
  auto base = model->forward(layout);
  for (auto& r : base.routes)
    for (double m : r.margins) ASSERT_GT(m, 1e-6);
  loss_of({}).backward();
  auto grad = router_weight.grad().clone();
  EXPECT_GT(grad.abs().max().item<double>(), 0.0);
  EXPECT_GT(depth_vectors.grad().abs().max().item<double>(), 0.0);
  torch::NoGradGuard no_grad;
  const double h = 1e-6;
  for (int64_t m = 0; m < c.library_size; ++m) {
    for (int64_t j : {0, 5}) {
      auto entry = router_weight[0][m][j];
      entry.add_(h);
      const double up = loss_of({}).item<double>();
      entry.sub_(2 * h);
      const double down = loss_of({}).item<double>();
      entry.add_(h);
      EXPECT_NEAR((up - down) / (2 * h), grad[0][m][j].item<double>(), 1e-6);
    }
  }
}

TEST(GoldenRouting, ExecutedDepthBelowDMatchesTheReference) {
  auto c = tiny_config();
  c.core_depth = 4;
  auto model = make_model(c, 31);
  std::mt19937 rng(12);
  std::vector<Doc> docs = {{random_tokens(rng, 11, c.vocab_size), 2, {}}};
  expect_matches_reference(c, model, docs, false, nullptr, /*depth=*/2);
  torch::NoGradGuard no_grad;
  Layout layout(make_batch(docs, false), c.vocab_size, testing::device());
  ForwardOptions options;
  options.executed_depth = 2;
  EXPECT_EQ(model->forward(layout, options).routes.size(), 2u);
  options.executed_depth = 5;
  EXPECT_THROW(model->forward(layout, options), Error);
}

}  // namespace
}  // namespace lol
