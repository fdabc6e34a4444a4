// Golden tests: the engine's batched forward against the slow reference (tests/reference.cpp),
// and the invariants of SPEC 1.2-1.6 for every family.
#include <algorithm>
#include <numeric>
#include <random>

#include "helpers.h"

namespace lol {
namespace {

using testing::make_model;
using testing::max_abs_diff;
using testing::random_config;
using testing::random_tokens;
using testing::skip_head_config;
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
        hint[{r.depth, win.ordinal}] = r.host().experts[w];
        gate_margin[{r.depth, win.ordinal}] = {r.gates[w].item<double>(), r.host().margins[w]};
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
      for (size_t w = 0; w < part.routes[l].host().experts.size(); ++w) {
        EXPECT_EQ(part.routes[l].host().experts[w], full.routes[l].host().experts[w]);
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
    for (size_t w = 0; w < r.host().experts.size(); ++w) {
      const int64_t k = r.partition->windows[w].ordinal;
      both.depths[r.depth][k] = {r.host().experts[w], r.gates[w].item<double>()};
      ids.depths[r.depth][k] = {r.host().experts[w], std::nullopt};
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
    for (double m : r.host().margins) ASSERT_GT(m, 1e-6);
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

// router_skip: choice L leaves its window's states as they came. Forced at every window, the core
// gives back its input bit for bit and no library, FiLM or router parameter gets a gradient;
// forced at some windows (with and without a forced gate), the engine matches the reference,
// which runs no block there.
TEST(Routing, TheSkipLeavesItsWindowAsItCame) {
  auto c = tiny_config();
  c.core_depth = 3;
  c.library_size = 3;
  c.router_skip = true;
  auto model = make_model(c, 12);
  std::mt19937 rng(13);
  auto tokens = random_tokens(rng, 14, c.vocab_size);
  Layout layout(Batch::single(tokens, 2), c.vocab_size, testing::device());
  ForcedPath skips;
  for (int64_t l = 1; l <= c.core_depth; ++l) skips.depths[l][0] = {c.library_size, std::nullopt};
  ForwardOptions options;
  options.force = &skips;
  torch::Tensor core_in, core_out;
  options.hook = [&](const std::string& name, int64_t layer, const torch::Tensor& t) {
    if (name == "core_in" && layer == 1) core_in = t.detach().clone();
    if (name == "core_depth_out" && layer == c.core_depth) core_out = t.detach().clone();
  };
  model->zero_grad();
  auto result = model->forward(layout, options);
  ASSERT_TRUE(core_in.defined() && core_out.defined());
  EXPECT_TRUE(torch::equal(core_in, core_out));
  for (const auto& r : result.routes)
    for (auto e : r.host().experts) EXPECT_EQ(e, c.library_size);
  result.logits.pow(2).mean().backward();
  double silent = 0, heard = 0;
  for (auto& p : model->named_parameters()) {
    const double g = p.value().grad().defined() ? p.value().grad().abs().max().item<double>() : 0;
    const bool core = p.key().rfind("library.", 0) == 0 || p.key().rfind("router.", 0) == 0 ||
                      p.key().rfind("core.", 0) == 0;
    EXPECT_TRUE(!core || g == 0.0) << p.key();
    (core ? silent : heard) += g;
  }
  EXPECT_GT(heard, 0.0);  // the prelude, coda and embedding learn as usual
  EXPECT_EQ(silent, 0.0);

  std::vector<Doc> docs = {{random_tokens(rng, 12, c.vocab_size), 3, {1}},
                           {random_tokens(rng, 9, c.vocab_size), 0, {}}};
  ForcedPath some;
  some.depths[1][1] = {c.library_size, std::nullopt};  // windows 1, 2, ... of depth 1
  some.depths[2][0] = {c.library_size, 0.7};           // skipped, whatever the gate
  some.depths[3][1] = {1, std::nullopt};
  expect_matches_reference(c, model, docs, /*pack=*/true, &some);
}

// router_skip_renorm: the gates are softmaxes over the experts' logits alone, so the skip cannot
// drain them: the router's skip row gets no gradient from the loss (its logit enters the
// selection only; zero up to float rounding), while the experts' rows do; without renorm it does.
TEST(Routing, TheSkipLeftOutOfTheGateTakesNoGradient) {
  auto c = tiny_config();
  c.core_depth = 3;
  c.library_size = 3;
  c.router_skip = true;
  std::mt19937 rng(14);
  const auto tokens = random_tokens(rng, 20, c.vocab_size);
  for (bool renorm : {false, true}) {
    c.router_skip_renorm = renorm;
    auto model = make_model(c, 15, /*router_scale=*/1.0);  // gates away from 0 and 1
    Layout layout(Batch::single(tokens, 2), c.vocab_size, testing::device());
    model->zero_grad();
    model->forward(layout).logits.pow(2).mean().backward();
    const auto grad = model->named_parameters()["router.weight"].grad().abs();  // (1, 4, d)
    const double experts = grad.narrow(1, 0, 3).max().item<double>();
    const double skip = grad[0][3].max().item<double>();
    EXPECT_GT(experts, 0.0) << renorm;
    // Zero but for float rounding: the softmax's backward sums terms that cancel exactly.
    if (renorm)
      EXPECT_LT(skip, 1e-6 * experts);  // measured 3.5e-9 of it
    else
      EXPECT_GT(skip, 1e-2 * experts);  // measured 0.36 of it
  }
}

// The skip's score is its probability plus its own bias: the experts' bias never moves it, and
// without router_skip_share the router adds 0 there (RouterImpl::depth_bias). A skipped window
// runs expert 0 at update gate 0; its reported gate stays p (or the forced gate).
TEST(Routing, TheSkipTakesOnlyItsOwnBias) {
  const auto probs =
      torch::tensor({{0.3f, 0.2f, 0.1f, 0.4f}, {0.1f, 0.1f, 0.1f, 0.7f}, {0.2f, 0.2f, 0.2f, 0.4f}});
  const auto ordinals = torch::zeros({3}, torch::kInt64);
  struct Case {
    BalanceSpace space;
    float skip_bias;
    std::vector<int64_t> expected;
  };
  // p + b, skip bias 0: (0.8, 0.2, -0.4 | 0.4), (0.6, 0.1, -0.4 | 0.7), (0.7, 0.2, -0.3 | 0.4).
  // log p + b: row 3 becomes (-1.11, -1.61, -2.11 | -0.92), the skip. A skip bias of -0.2 gives
  // row 2 on p back to expert 0 (0.5 against 0.6) and row 3 on log p (-1.116 against -1.109);
  // +0.45 on p sends every row to the skip (0.85, 1.15, 0.85 against 0.8, 0.6, 0.7).
  for (const auto& k : std::vector<Case>{{BalanceSpace::kProbs, 0.0f, {0, 3, 0}},
                                         {BalanceSpace::kLogits, 0.0f, {0, 3, 3}},
                                         {BalanceSpace::kProbs, -0.2f, {0, 0, 0}},
                                         {BalanceSpace::kLogits, -0.2f, {0, 3, 0}},
                                         {BalanceSpace::kProbs, 0.45f, {3, 3, 3}}}) {
    SCOPED_TRACE(std::string(enum_name(k.space)) + " skip bias " + std::to_string(k.skip_bias));
    const auto bias = torch::tensor({0.5f, 0.0f, -0.5f, k.skip_bias});
    auto got = select_experts(probs, bias, k.space, 1, ordinals, nullptr, {/*skip=*/true});
    EXPECT_EQ(got.skip, 3);
    EXPECT_EQ(got.host().experts, k.expected);
    for (size_t w = 0; w < 3; ++w) {
      const bool skipped = k.expected[w] == 3;
      EXPECT_EQ(got.host().blocks[w], skipped ? 0 : k.expected[w]);
      EXPECT_FLOAT_EQ(got.gates[w].item<float>(), probs[w][k.expected[w]].item<float>());
      EXPECT_FLOAT_EQ(got.update_gates()[w].item<float>(),
                      skipped ? 0.0f : probs[w][k.expected[w]].item<float>());
    }
  }
  // router_skip_renorm: a routed window's gate is its p over the experts' total (row 1: 0.3 /
  // 0.6), the gradient reaches the experts' probabilities alone (d alpha / d p_skip = 0 once the
  // total is summed over the experts), and a skipped window's reported gate stays its p.
  {
    auto p = probs.clone().requires_grad_();
    auto got = select_experts(p, torch::tensor({0.5f, 0.0f, -0.5f, 0.0f}), BalanceSpace::kProbs, 1,
                              ordinals, nullptr, {/*skip=*/true, /*renorm=*/true});
    ASSERT_EQ(got.host().experts, (std::vector<int64_t>{0, 3, 0}));
    EXPECT_FLOAT_EQ(got.gates[0].item<float>(), 0.5f);
    EXPECT_FLOAT_EQ(got.gates[1].item<float>(), 0.7f);
    EXPECT_FLOAT_EQ(got.gates[2].item<float>(), 1.0f / 3);
    got.gates[0].backward();
    EXPECT_FLOAT_EQ(p.grad()[0][3].item<float>(), 0.0f);
    EXPECT_FLOAT_EQ(p.grad()[0][0].item<float>(), 1 / 0.6f - 0.3f / (0.6f * 0.6f));
  }
  // 4 choices need 4 biases, with or without the skip.
  EXPECT_THROW(
      select_experts(probs, torch::zeros({3}), BalanceSpace::kProbs, 1, ordinals, nullptr, {true}),
      Error);
  // The router's bias per depth: the experts' row, then 0 for the skip, or the skip's own bias
  // with router_skip_share (entry l with balance_per_depth).
  auto c = tiny_config();
  c.core_depth = 3;
  c.library_size = 3;
  c.router_skip = true;
  for (bool per_depth : {false, true}) {
    c.balance_per_depth = per_depth;
    c.router_skip_share = 0;
    Router plain(c);
    EXPECT_FALSE(plain->skip_bias.defined());
    plain->balance_bias.fill_(0.25);
    EXPECT_TRUE(torch::equal(plain->depth_bias(2), torch::tensor({0.25f, 0.25f, 0.25f, 0.0f})));
    c.router_skip_share = 0.5;
    Router steered(c);
    ASSERT_EQ(steered->skip_bias.sizes().vec(), std::vector<int64_t>{per_depth ? 3 : 1});
    steered->skip_bias.copy_(per_depth ? torch::tensor({-1.0f, -2.0f, -3.0f})
                                       : torch::tensor({-2.0f}));
    EXPECT_TRUE(torch::equal(steered->depth_bias(2), torch::tensor({0.0f, 0.0f, 0.0f, -2.0f})));
    EXPECT_EQ(steered->depth_bias(3)[3].item<float>(), per_depth ? -3.0f : -2.0f);
  }
  // A forced path may name the skip only when the model has one.
  ForcedPath path;
  path.depths[1][0] = {3, std::nullopt};
  EXPECT_NO_THROW(path.validate(2, 3, true));
  try {
    path.validate(2, 3, false);
    ADD_FAILURE() << "expert 3 of a library of 3 without a skip was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no skip"), std::string::npos) << e.what();
  }
}

// router_skip_head: p_skip = sigmoid(z_L - log L) and the experts share the rest by softmax;
// a skipped window runs the best balanced expert but the skip (the fallback) at an update gate of
// value exactly 0, whose gradient reaches the experts' total alone, by g (the fallback's gate
// among the experts).
TEST(Routing, TheSkipHeadProbesTheBestOtherExpert) {
  auto c = tiny_config();
  c.library_size = 3;
  c.router_skip = true;
  c.router_skip_head = true;
  Router router(c);
  {
    torch::NoGradGuard no_grad;
    router->weight.copy_(torch::randn(router->weight.sizes()));
  }
  const auto inputs = torch::randn({5, c.d_model});
  const auto logits = torch::matmul(inputs, router->weight[0].t());
  const auto q = torch::sigmoid(logits.select(1, 3) - std::log(3.0));
  const auto expected = torch::cat(
      {torch::softmax(logits.narrow(1, 0, 3), 1) * (1 - q).unsqueeze(1), q.unsqueeze(1)}, 1);
  EXPECT_LT(max_abs_diff(router->probabilities(inputs, 1, false), expected), 1e-6);
  // At zero logits every choice has 1 / 4, as with the softmax.
  EXPECT_TRUE(torch::allclose(router->probabilities(torch::zeros({1, c.d_model}), 1, false),
                              torch::full({1, 4}, 0.25f)));
  // At z_L = 40 + log 3, where 1 - sigmoid rounds to 0, the experts keep their share, e^-40.
  const auto skip_row = router->weight[0][3].detach();
  const auto far = router->probabilities(
      (skip_row * (40 + std::log(3.0)) / skip_row.dot(skip_row)).unsqueeze(0), 1, false);
  EXPECT_NEAR(far.narrow(1, 0, 3).sum().item<float>(), std::exp(-40.0), 1e-3 * std::exp(-40.0));

  // Balanced scores p + b: row 0 (0.2, 0.25, 0.05 | 0.4) skips and falls back to expert 1 (p
  // alone would say 2), row 1 (0.35, 0.15, -0.2 | 0.6) skips to expert 0, row 2 runs expert 0
  // at 0.5 / 0.9.
  const auto probs = torch::tensor(
      {{0.2f, 0.15f, 0.25f, 0.4f}, {0.35f, 0.05f, 0.0f, 0.6f}, {0.5f, 0.2f, 0.2f, 0.1f}});
  const auto bias = torch::tensor({0.0f, 0.1f, -0.2f, 0.0f});
  auto p = probs.clone().requires_grad_();
  auto got = select_experts(p, bias, BalanceSpace::kProbs, 1, torch::zeros({3}, torch::kInt64),
                            nullptr, {/*skip=*/true, /*renorm=*/true, /*head=*/true});
  ASSERT_EQ(got.host().experts, (std::vector<int64_t>{3, 3, 0}));
  EXPECT_EQ(got.host().blocks, (std::vector<int64_t>{1, 0, 0}));
  const auto gates = got.update_gates();
  EXPECT_EQ(gates[0].item<float>(), 0.0f);
  EXPECT_EQ(gates[1].item<float>(), 0.0f);
  EXPECT_FLOAT_EQ(gates[2].item<float>(), 0.5f / 0.9f);
  EXPECT_FLOAT_EQ(got.gates[0].item<float>(), 0.4f);  // the reported gate stays p_skip
  gates[0].backward();
  // d gate / d p: g = 0.15 / 0.6 on each expert (their total), 0 on the skip and other rows.
  EXPECT_TRUE(torch::allclose(p.grad()[0], torch::tensor({0.25f, 0.25f, 0.25f, 0.0f})));
  EXPECT_EQ(p.grad().narrow(0, 1, 2).abs().sum().item<float>(), 0.0f);
  // Without the head a skipped window runs expert 0 at a constant 0.
  auto plain =
      select_experts(probs, bias, BalanceSpace::kProbs, 1, torch::zeros({3}, torch::kInt64),
                     nullptr, {/*skip=*/true, /*renorm=*/true});
  EXPECT_EQ(plain.host().blocks, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_FALSE(plain.probe_gates.defined());
}

// router_skip_head in a model: with every window of the one routed depth skipped, the core gives
// back its input bit for bit and the library gets no gradient, while the skip's router row gets
// sum_k -a_k g_k q_k (1 - q_k) r_k: a_k = d loss / d alpha of window k running its fallback at
// alpha = 0 (finite differences of forced gates), g_k the fallback's gate among the experts, q_k
// = p_skip, r_k the router input. The experts' rows get nothing (but float rounding).
TEST(Routing, TheSkipHeadLearnsWhatTheUpdateWouldHaveDone) {
  const auto c = skip_head_config(tiny_config(), 1, 2);
  auto model = make_model(c, 16, /*router_scale=*/1.0);
  model->to(torch::kFloat64);
  std::mt19937 rng(17);
  const auto tokens = random_tokens(rng, 15, c.vocab_size);
  Layout layout(Batch::single(tokens, 2), c.vocab_size, testing::device());
  const int64_t L = c.library_size;
  ForcedPath all_skip;
  all_skip.depths[1][0] = {L, std::nullopt};
  ForwardOptions options;
  options.force = &all_skip;
  torch::Tensor core_in, core_out;
  options.hook = [&](const std::string& name, int64_t, const torch::Tensor& t) {
    if (name == "core_in") core_in = t.detach().clone();
    if (name == "core_depth_out") core_out = t.detach().clone();
  };
  model->zero_grad();
  auto result = model->forward(layout, options);
  ASSERT_TRUE(core_in.defined() && core_out.defined());
  EXPECT_TRUE(torch::equal(core_in, core_out));
  result.logits.pow(2).mean().backward();
  for (auto& item : model->named_parameters()) {
    if (item.key().rfind("library.", 0) == 0 && item.value().grad().defined()) {
      EXPECT_EQ(item.value().grad().abs().max().item<double>(), 0.0) << item.key();
    }
  }
  const auto grad = model->named_parameters()["router.weight"].grad()[0].to(torch::kCPU);

  ASSERT_EQ(result.routes.size(), 1u);
  const auto& route = result.routes[0];
  const auto probs = route.probs.detach().to(torch::kCPU);
  const auto inputs = route.router_inputs.detach().to(torch::kCPU);
  const auto& fallback = route.host().blocks;
  const int64_t windows = static_cast<int64_t>(fallback.size());
  ASSERT_GE(windows, 3);
  torch::NoGradGuard no_grad;
  auto expected = torch::zeros({c.d_model}, torch::kFloat64);
  const double h = 1e-5;
  for (int64_t k = 0; k < windows; ++k) {
    auto loss_at = [&](double alpha) {
      ForcedPath one;
      for (int64_t j = 0; j < windows; ++j)
        one.depths[1][j] =
            j == k ? ForcedPath::Entry{fallback[k], alpha} : ForcedPath::Entry{L, std::nullopt};
      ForwardOptions o;
      o.force = &one;
      return model->forward(layout, o).logits.pow(2).mean().item<double>();
    };
    const double a = (loss_at(h) - loss_at(-h)) / (2 * h);
    const double q = probs[k][L].item<double>();
    const double g = probs[k][fallback[k]].item<double>() / (1 - q);
    expected += -a * g * q * (1 - q) * inputs[k];
  }
  const double scale = expected.abs().max().item<double>();
  ASSERT_GT(scale, 0.0);
  EXPECT_LT(max_abs_diff(grad[L], expected), 1e-6 * scale + 1e-12);
  EXPECT_LT(grad.narrow(0, 0, L).abs().max().item<double>(), 1e-9 * scale);
}

// router_skip_target: the skip is a decision of its own, p_skip > sigmoid(-b_skip), taken before
// the experts' balanced scores are compared; a window that does not skip runs the best of those
// (the fallback), the margin is the experts', and a skipped window runs the fallback at a plain 0.
TEST(Routing, TheSkipTargetDecidesOnTheSkipFirst) {
  // Row 0 (0.2, 0.15, 0.25 | 0.4): the skip has the largest p but not more than 1/2, so expert 1
  // (scores 0.2, 0.25, 0.05); row 1 (0.1, 0.15, 0.15 | 0.6) skips, falling back to expert 1;
  // row 2 runs expert 0; row 3 is forced to skip, row 0 of a second call is forced to expert 2.
  const auto probs = torch::tensor({{0.2f, 0.15f, 0.25f, 0.4f},
                                    {0.1f, 0.15f, 0.15f, 0.6f},
                                    {0.5f, 0.2f, 0.2f, 0.1f},
                                    {0.5f, 0.2f, 0.2f, 0.1f}});
  const auto bias = torch::tensor({0.0f, 0.1f, -0.2f, 0.0f});
  ForcedPath path;
  path.depths[1][3] = {3, std::nullopt};
  auto p = probs.clone().requires_grad_();
  const SkipRule rule{/*skip=*/true, /*renorm=*/true, /*head=*/true, /*target=*/true};
  auto got = select_experts(p, bias, BalanceSpace::kProbs, 1, torch::arange(4), &path, rule);
  EXPECT_EQ(got.host().router_choice, (std::vector<int64_t>{1, 3, 0, 0}));
  EXPECT_EQ(got.host().experts, (std::vector<int64_t>{1, 3, 0, 3}));
  EXPECT_EQ(got.host().blocks, (std::vector<int64_t>{1, 1, 0, 0}));
  const std::vector<double> margins = {0.05, 0.15, 0.2, 0.2};
  for (size_t w = 0; w < margins.size(); ++w)
    EXPECT_NEAR(got.host().margins[w], margins[w], 1e-6) << "window " << w;
  const auto gates = got.update_gates();
  EXPECT_FLOAT_EQ(gates[0].item<float>(), 0.15f / 0.6f);
  EXPECT_EQ(gates[1].item<float>(), 0.0f);
  EXPECT_EQ(gates[3].item<float>(), 0.0f);
  gates.sum().backward();
  // The skipped windows' gates pass nothing back: only rows 0 and 2 reach p.
  EXPECT_EQ(p.grad()[1].abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(p.grad()[3].abs().sum().item<float>(), 0.0f);
  EXPECT_GT(p.grad()[0].abs().sum().item<float>(), 0.0f);
  // The head alone would have skipped row 0 (its p is the largest balanced score).
  auto head = select_experts(probs, bias, BalanceSpace::kProbs, 1, torch::arange(4), nullptr,
                             {/*skip=*/true, /*renorm=*/true, /*head=*/true});
  EXPECT_EQ(head.host().experts[0], 3);
  // A skip bias of 1 lowers the threshold to sigmoid(-1) = 0.27: row 0 skips, rows 2 and 3 not.
  auto lowered = select_experts(probs, torch::tensor({0.0f, 0.1f, -0.2f, 1.0f}),
                                BalanceSpace::kProbs, 1, torch::arange(4), nullptr, rule);
  EXPECT_EQ(lowered.host().experts, (std::vector<int64_t>{3, 3, 0, 0}));
}

// router_skip_window0 = false: a window of ordinal 0 is not offered the skip, by every rule (the
// plain skip, the head, the target): it runs the experts' best balanced score, with the margin
// among the experts, while windows of later ordinals skip as before; a forced path still forces
// the skip there.
TEST(Routing, TheSkipIsNotOfferedToWindow0WhenWithheld) {
  // Every row would skip: p_skip 0.6 leads, and exceeds the target's threshold 1/2.
  const auto probs = torch::tensor({{0.1f, 0.2f, 0.1f, 0.6f},
                                    {0.1f, 0.2f, 0.1f, 0.6f},
                                    {0.05f, 0.1f, 0.25f, 0.6f},
                                    {0.1f, 0.2f, 0.1f, 0.6f}});
  const auto bias = torch::zeros({4});
  const auto ordinals = torch::tensor({0, 1, 0, 2}, torch::kLong);
  const std::vector<SkipRule> rules = {
      {/*skip=*/true, /*renorm=*/false, /*head=*/false, /*target=*/false},
      {/*skip=*/true, /*renorm=*/true, /*head=*/true, /*target=*/false},
      {/*skip=*/true, /*renorm=*/true, /*head=*/true, /*target=*/true}};
  for (auto rule : rules) {
    SCOPED_TRACE("head " + std::to_string(rule.head) + " target " + std::to_string(rule.target));
    auto offered = select_experts(probs, bias, BalanceSpace::kProbs, 1, ordinals, nullptr, rule);
    EXPECT_EQ(offered.host().experts, (std::vector<int64_t>{3, 3, 3, 3}));
    EXPECT_TRUE(offered.skip_offered.all().item<bool>());
    rule.window0 = false;
    auto withheld = select_experts(probs, bias, BalanceSpace::kProbs, 1, ordinals, nullptr, rule);
    EXPECT_EQ(withheld.host().experts, (std::vector<int64_t>{1, 3, 2, 3}));
    EXPECT_EQ(withheld.host().router_choice, (std::vector<int64_t>{1, 3, 2, 3}));
    EXPECT_TRUE(torch::equal(withheld.skip_offered, ordinals != 0));
    EXPECT_NEAR(withheld.host().margins[0], 0.1, 1e-6);
    EXPECT_NEAR(withheld.host().margins[2], 0.15, 1e-6);
    // A routed window of ordinal 0 takes its expert's gate (among the experts with renorm).
    const auto gates = withheld.update_gates();
    EXPECT_FLOAT_EQ(gates[0].item<float>(), rule.renorm ? 0.2f / 0.4f : 0.2f);
    ForcedPath path;
    path.depths[1][0] = {3, std::nullopt};
    auto forced = select_experts(probs, bias, BalanceSpace::kProbs, 1, ordinals, &path, rule);
    EXPECT_EQ(forced.host().experts, (std::vector<int64_t>{3, 3, 3, 3}));
  }
}

// router_skip_target in a model: the skip head's logit z_k (of the router input detached) gets,
// through the carrier added to the loss, sum_k (sigmoid(z_k) - y_k) r_k, where y_k = 1 for the
// share of the windows whose update helps least: b_k = -g_k a_k smallest, a_k = d loss / d alpha
// of window k (finite differences of forced gates, the skipped windows' at their fallback and
// gate 0) and g_k its gate or, skipped, its fallback's gate among the experts. Without the
// carrier the head's row gets nothing: it learns from the target alone. With the skip withheld
// from window 0 (router_skip_window0 = false) the share is of the other windows, and window 0
// adds nothing.
class SkipTargetGradient : public ::testing::TestWithParam<bool> {};

TEST_P(SkipTargetGradient, TeachesTheHeadTheWindowsWhoseUpdateHelpsLeast) {
  auto c = skip_head_config(tiny_config(), 1, 2);
  c.router_skip_share = 0.3;
  c.router_skip_target = true;
  c.router_skip_window0 = GetParam();
  auto model = make_model(c, 16, /*router_scale=*/1.0);
  model->to(torch::kFloat64);
  std::mt19937 rng(17);
  const auto tokens = random_tokens(rng, 40, c.vocab_size);
  Layout layout(Batch::single(tokens, 2), c.vocab_size, testing::device());
  const int64_t L = c.library_size;
  auto weight = model->named_parameters()["router.weight"];
  {
    // A skip row that gives the windows head logits z_k - log L of alternating sign, +-(0.3 +
    // 0.1 k) (the router inputs of fewer windows than d are independent), so that some skip.
    torch::NoGradGuard no_grad;
    const auto inputs = model->forward(layout).routes.at(0).router_inputs.to(torch::kCPU);
    const int64_t n = inputs.size(0);
    ASSERT_LT(n, c.d_model);
    auto wanted = torch::empty({n}, torch::kFloat64);
    for (int64_t k = 0; k < n; ++k)
      wanted[k] = (k % 2 == 0 ? -1.0 : 1.0) * (0.3 + 0.1 * static_cast<double>(k)) +
                  std::log(static_cast<double>(L));
    weight[0][L].copy_(torch::mv(torch::pinverse(inputs), wanted).to(weight.device()));
  }
  auto run = [&](bool with_carrier) {
    model->zero_grad();
    auto result = model->forward(layout);
    auto loss = result.logits.pow(2).mean();
    EXPECT_TRUE(result.routes.at(0).target_carrier.defined());
    if (with_carrier) {
      EXPECT_EQ(result.routes[0].target_carrier.item<double>(), 0.0);
      loss = loss + result.routes[0].target_carrier;
    }
    loss.backward();
    return result;
  };
  run(false);
  EXPECT_LT(weight.grad()[0][L].abs().max().item<double>(), 1e-12);
  const auto result = run(true);
  const auto grad = weight.grad()[0][L].to(torch::kCPU);

  const auto& route = result.routes[0];
  const auto probs = route.probs.detach().to(torch::kCPU);
  const auto inputs = route.router_inputs.detach().to(torch::kCPU);
  const auto& host = route.host();
  const int64_t windows = static_cast<int64_t>(host.blocks.size());
  const auto update = route.update_gates().detach().to(torch::kCPU);
  int64_t skipped = 0;
  for (auto e : host.experts) skipped += e == L;
  ASSERT_GE(windows, 6);
  ASSERT_GT(skipped, 0);
  ASSERT_LT(skipped, windows);
  torch::NoGradGuard no_grad;
  const double h = 1e-5;
  std::vector<double> benefit(windows);
  for (int64_t k = 0; k < windows; ++k) {
    auto loss_at = [&](double shift) {
      ForcedPath path;
      for (int64_t j = 0; j < windows; ++j)
        path.depths[1][j] = {host.blocks[j], update[j].item<double>() + (j == k ? shift : 0.0)};
      ForwardOptions o;
      o.force = &path;
      return model->forward(layout, o).logits.pow(2).mean().item<double>();
    };
    const double a = (loss_at(h) - loss_at(-h)) / (2 * h);
    const double g = host.experts[k] == L ? probs[k][host.blocks[k]].item<double>() /
                                                (1 - probs[k][L].item<double>())
                                          : update[k].item<double>();
    benefit[k] = -g * a;
  }
  // The windows the skip is offered to, ranked by benefit.
  std::vector<int64_t> order;
  for (int64_t k = 0; k < windows; ++k)
    if (c.router_skip_window0 || route.partition->windows[k].ordinal > 0) order.push_back(k);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t i, int64_t j) { return benefit[i] < benefit[j]; });
  const auto picked =
      static_cast<size_t>(std::llround(c.router_skip_share * static_cast<double>(order.size())));
  ASSERT_GT(picked, 0u);
  // The labels are those of the finite differences only if no two benefits at the cut are close.
  const double gap = benefit[order[picked]] - benefit[order[picked - 1]];
  ASSERT_GT(gap, 1e-6 * std::abs(benefit[order[picked]]) + 1e-9);
  auto expected = torch::zeros({c.d_model}, torch::kFloat64);
  for (int64_t k : order) {
    const double q = probs[k][L].item<double>();
    const bool label = std::find(order.begin(), order.begin() + static_cast<int64_t>(picked), k) !=
                       order.begin() + static_cast<int64_t>(picked);
    expected += (q - (label ? 1.0 : 0.0)) * inputs[k];
  }
  EXPECT_LT(max_abs_diff(grad, expected), 1e-9 * expected.abs().max().item<double>() + 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Routing, SkipTargetGradient, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Window0Offered" : "Window0Withheld";
                         });

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

// A balancing bias that moves decisions, on p and on the logits, for the routed core and the
// MoE layers: the engine (bias on log p) against the reference (bias on the logits themselves).
// Two models with the same weights and bias, one per space, must give different logits (some
// window or token routed differently), so neither space can pass as the other.
TEST(GoldenRouting, BalanceBiasInEitherSpaceMatchesTheReference) {
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> spread(-0.3f, 0.3f);
  for (auto family : {Family::kLol, Family::kMoe}) {
    auto c = random_config(rng, family);
    c.library_size = std::max<int64_t>(c.library_size, 3);
    c.moe_experts = std::max<int64_t>(c.moe_experts, 3);
    c.moe_top_k = 1;
    const auto docs = testing::random_documents(rng, c, 16);
    const Layout layout(make_batch(docs, true), c.vocab_size, testing::device());
    std::vector<float> bias_values(64);
    for (auto& v : bias_values) v = spread(rng);
    std::vector<torch::Tensor> logits;  // per space
    for (auto space : {BalanceSpace::kProbs, BalanceSpace::kLogits}) {
      c.balance_space = space;
      SCOPED_TRACE(c.to_json().dump());
      auto model = make_model(c, 41);
      torch::NoGradGuard no_grad;
      for (auto& bias : model->core().balance_biases())
        bias.copy_(torch::tensor(bias_values).narrow(0, 0, bias.size(0)));
      logits.push_back(model->forward(layout).logits);
      for (int trial = 0; trial < 3; ++trial)
        expect_matches_reference(c, model, testing::random_documents(rng, c, 3), trial % 2 == 0);
    }
    // Same weights and decisions would give bit-identical logits; a small model's experts differ
    // little, so one token routed elsewhere moves the MoE's logits by about 1e-3.
    EXPECT_GT(max_abs_diff(logits[0], logits[1]), 1e-5) << enum_name(family);
  }
}

// balance_per_depth: depth l adds row l of a (D, L) bias, in the engine's forward and in the
// reference; rows that differ must change the logits against every depth using row 0.
TEST(GoldenRouting, PerDepthBiasMatchesTheReference) {
  std::mt19937 rng(78);
  auto c = random_config(rng, Family::kLol);
  c.core_depth = 3;
  c.library_size = 4;
  c.balance_per_depth = true;
  SCOPED_TRACE(c.to_json().dump());
  auto model = make_model(c, 43);
  const auto docs = testing::random_documents(rng, c, 16);
  const Layout layout(make_batch(docs, true), c.vocab_size, testing::device());
  torch::NoGradGuard no_grad;
  auto bias = model->named_buffers()["router.balance_bias"];  // shares the buffer
  ASSERT_EQ(bias.sizes().vec(), (std::vector<int64_t>{3, 4}));
  bias.copy_(torch::tensor(
      {{0.6f, -0.2f, -0.2f, -0.2f}, {-0.2f, 0.6f, -0.2f, -0.2f}, {-0.2f, -0.2f, -0.2f, 0.6f}}));
  for (int trial = 0; trial < 3; ++trial)
    expect_matches_reference(c, model, testing::random_documents(rng, c, 3), trial % 2 == 0);
  const auto per_depth = model->forward(layout).logits;
  bias.copy_(bias[0].unsqueeze(0).expand({3, 4}).clone());
  EXPECT_GT(max_abs_diff(per_depth, model->forward(layout).logits), 1e-5);
}

// router_skip_share: the skip's own bias (one, or one per depth) moves windows to and from the
// skip, in the engine's forward and in the reference alike. Over the biases tried, some forward
// skips part of its windows (neither none nor all), so the check sees the bias decide.
TEST(GoldenRouting, SkipBiasMatchesTheReference) {
  std::mt19937 rng(79);
  for (bool per_depth : {false, true}) {
    auto c = tiny_config();
    c.core_depth = 3;
    c.library_size = 3;
    c.router_skip = true;
    c.router_skip_share = 0.25;
    c.balance_per_depth = per_depth;
    SCOPED_TRACE(c.to_json().dump());
    auto model = make_model(c, 44);
    const auto docs = testing::random_documents(rng, c, 8);
    const Layout layout(make_batch(docs, true), c.vocab_size, testing::device());
    torch::NoGradGuard no_grad;
    auto skip_bias = model->named_buffers()["router.skip_bias"];  // shares the buffer
    ASSERT_EQ(skip_bias.sizes().vec(), std::vector<int64_t>{per_depth ? 3 : 1});
    bool partial = false;
    for (float b : {-0.3f, -0.1f, -0.03f, 0.0f, 0.03f, 0.1f, 0.3f}) {
      skip_bias.copy_(per_depth ? torch::tensor({b, -b, b / 2}) : torch::tensor({b}));
      int64_t skipped = 0, windows = 0;
      for (const auto& r : model->forward(layout).routes)
        for (auto e : r.host().experts) {
          skipped += e == c.library_size;
          ++windows;
        }
      partial = partial || (skipped > 0 && skipped < windows);
      expect_matches_reference(c, model, testing::random_documents(rng, c, 3), /*pack=*/true);
    }
    EXPECT_TRUE(partial);
  }
}

// Top-1 selection as tensor operations (no host copy, so a GPU keeps its routes on the device)
// against a plain loop over the same sums, with the bias on p (float32 sums, compared exactly)
// and on log p (double sums, margins to 1e-5): ties (the first maximum wins), margins, and a
// forced path with an id, a gate, both, a gap and ordinals past its last entry.
TEST(Routing, SelectionOnTheDeviceMatchesAHostLoop) {
  const int64_t windows = 60;
  std::mt19937 rng(11);
  for (auto space : {BalanceSpace::kProbs, BalanceSpace::kLogits})
    for (int64_t L : {1, 2, 5}) {
      ForcedPath force;
      force.depths[2][1] = {3 % L, std::nullopt};
      force.depths[2][3] = {std::nullopt, 0.25};
      force.depths[2][5] = {1 % L, 0.75};  // ordinals 6, 7, ... take this one
      force.depths[1][0] = {0, std::nullopt};
      const bool logits = space == BalanceSpace::kLogits;
      for (int64_t depth : {2, 3})
        for (const ForcedPath* path : std::vector<const ForcedPath*>{nullptr, &force}) {
          // Probabilities on a grid of eighths (above zero for log p), so rows hold ties; the bias
          // has ties too. No two different sums on these grids are within float rounding.
          auto probs =
              torch::randint(logits ? 1 : 0, 8, {windows, L}, torch::kInt64).to(torch::kFloat32) /
              8;
          auto bias = torch::randint(0, 2, {L}, torch::kInt64).to(torch::kFloat32) / 8;
          std::vector<int64_t> ordinals(windows);
          for (auto& k : ordinals) k = static_cast<int64_t>(rng() % 9);
          auto dev_probs = probs.to(testing::device()).requires_grad_();
          auto got =
              select_experts(dev_probs, bias.to(testing::device()), space, depth,
                             torch::tensor(ordinals).to(testing::device()), path, SkipRule{});
          const auto& h = got.host();
          auto gates = got.gates.detach().to(torch::kCPU);
          ASSERT_EQ(h.experts.size(), static_cast<size_t>(windows));
          const float* p = probs.data_ptr<float>();
          const float* b = bias.data_ptr<float>();
          for (int64_t w = 0; w < windows; ++w) {
            std::vector<double> sum(L);
            for (int64_t m = 0; m < L; ++m)
              sum[m] = logits ? std::log(static_cast<double>(p[w * L + m])) + b[m]
                              : static_cast<double>(p[w * L + m] + b[m]);
            int64_t best = 0;
            for (int64_t m = 1; m < L; ++m)
              if (sum[m] > sum[best]) best = m;
            double second = -std::numeric_limits<double>::infinity();
            for (int64_t m = 0; m < L; ++m)
              if (m != best) second = std::max(second, static_cast<double>(sum[m]));
            const double margin =
                L > 1 ? sum[best] - second : std::numeric_limits<double>::infinity();
            int64_t expert = best;
            float gate = 0;
            bool forced_gate = false, forced_expert = false;
            const auto* entry = path ? path->find(depth, ordinals[w]) : nullptr;
            if (entry && entry->expert) {
              expert = *entry->expert;
              forced_expert = true;
            }
            gate = p[w * L + expert];
            if (entry && entry->gate) {
              gate = static_cast<float>(*entry->gate);
              forced_gate = true;
            }
            SCOPED_TRACE("L " + std::to_string(L) + " depth " + std::to_string(depth) + " window " +
                         std::to_string(w));
            EXPECT_EQ(h.router_choice[w], best);
            EXPECT_EQ(h.experts[w], expert);
            if (logits && L > 1)
              EXPECT_NEAR(h.margins[w], margin, 1e-5);
            else
              EXPECT_EQ(h.margins[w], margin);
            EXPECT_EQ(h.forced_expert[w] != 0, forced_expert);
            EXPECT_EQ(h.forced_gate[w] != 0, forced_gate);
            EXPECT_EQ(gates[w].item<float>(), gate);
          }
          // The gate carries the router's gradient, unless forced.
          got.gates.sum().backward();
          auto grad = dev_probs.grad().to(torch::kCPU);
          for (int64_t w = 0; w < windows; ++w)
            for (int64_t m = 0; m < L; ++m)
              EXPECT_EQ(grad[w][m].item<float>(),
                        m == h.experts[w] && h.forced_gate[w] == 0 ? 1.0f : 0.0f);
        }
    }
}

// Grouping rows by block: the stable sort a GPU runs and the CPU's counting pass (over a tensor or
// over host ids, as the decoder has them) give the same permutation, inverse and slices as
// grouping by hand, with unused blocks and a single block.
TEST(Routing, GroupingBySortMatchesTheCountingPass) {
  auto c = tiny_config();
  std::vector<Block> blocks;
  for (int i = 0; i < 5; ++i) blocks.emplace_back(c);
  std::mt19937 rng(4);
  std::vector<std::vector<int64_t>> cases = {{}, {3}, {2, 2, 2}, {0, 0, 1, 4}, {4, 1, 1, 0, 4}};
  for (int64_t n : {17, 300}) {
    cases.emplace_back(n);
    for (auto& id : cases.back()) id = 1 + static_cast<int64_t>(rng() % 4);  // block 0 unused
  }
  for (const auto& ids : cases) {
    const auto n = static_cast<int64_t>(ids.size());
    std::vector<int64_t> perm;
    std::vector<std::pair<int64_t, int64_t>> slices;  // (block, count)
    for (int64_t m = 0; m < 5; ++m) {
      const auto before = perm.size();
      for (int64_t r = 0; r < n; ++r)
        if (ids[r] == m) perm.push_back(r);
      if (perm.size() > before) slices.emplace_back(m, perm.size() - before);
    }
    std::vector<int64_t> inverse(n);
    for (int64_t r = 0; r < n; ++r) inverse[perm[r]] = r;
    // The counting pass, the device sort, and the counting pass over ids on the host.
    for (int variant = 0; variant < 3; ++variant) {
      auto g = variant == 2
                   ? group_rows(ids, blocks, testing::device())
                   : group_rows(torch::tensor(ids, torch::kInt64).to(testing::device()), blocks,
                                variant == 0 ? RowGrouping::kCount : RowGrouping::kSort);
      auto to_vector = [](const torch::Tensor& t) {
        auto h = t.to(torch::kCPU).contiguous();
        return std::vector<int64_t>(h.data_ptr<int64_t>(), h.data_ptr<int64_t>() + h.numel());
      };
      EXPECT_EQ(to_vector(g.perm), perm);
      EXPECT_EQ(to_vector(g.inverse), inverse);
      ASSERT_EQ(g.slices.size(), slices.size());
      int64_t offset = 0;
      for (size_t i = 0; i < slices.size(); ++i) {
        EXPECT_EQ(g.slices[i].block.get(), blocks[slices[i].first].get());
        EXPECT_EQ(g.slices[i].offset, offset);
        EXPECT_EQ(g.slices[i].count, slices[i].second);
        offset += slices[i].second;
      }
      bool sorted = true;
      for (int64_t r = 0; r < n; ++r) sorted = sorted && perm[r] == r;
      if (g.identity) {
        EXPECT_TRUE(sorted);
      }
      if (slices.size() <= 1) {
        EXPECT_TRUE(g.identity);
      }
    }
  }
  EXPECT_THROW(group_rows(torch::tensor(std::vector<int64_t>{0, 5}), blocks), std::exception);
  EXPECT_THROW(group_rows(std::vector<int64_t>{0, 5}, blocks, torch::kCPU), std::exception);
}

}  // namespace
}  // namespace lol
