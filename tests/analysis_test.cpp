// Route extraction and mode paths (docs/analysis.md).
#include <iomanip>
#include <random>
#include <set>
#include <sstream>

#include "analysis/depth_eval.h"
#include "analysis/interventions.h"
#include "analysis/path_eval.h"
#include "analysis/paths.h"
#include "analysis/pca.h"
#include "analysis/probes.h"
#include "analysis/report.h"
#include "analysis/routes.h"
#include "analysis/stats.h"
#include "analysis/strategy_control.h"
#include "analysis/svg.h"
#include "analysis/weights.h"
#include "helpers.h"
#include "infer/generate.h"
#include "tasks/task.h"

namespace lol {
namespace {

// Synthetic routes: every label has a planted expert per (depth, ordinal); each sequence's
// probabilities put most mass there, with noise large enough that single windows often pick
// another expert, and sequences of different lengths reach different ordinals.
std::vector<SequenceRoutes> planted_routes(
    std::mt19937& rng, const std::map<std::string, std::vector<int64_t>>& planted, int64_t depths,
    int64_t library, int per_label) {
  std::vector<SequenceRoutes> out;
  std::uniform_real_distribution<double> noise(0.0, 1.0);
  for (const auto& [label, experts] : planted)
    for (int i = 0; i < per_label; ++i) {
      SequenceRoutes s;
      s.sequence = static_cast<int64_t>(out.size());
      s.label = label;
      const int64_t windows = 1 + i % 3;  // ordinals 0..windows-1: 0 to 2
      for (int64_t l = 1; l <= depths; ++l)
        for (int64_t k = 0; k < windows; ++k) {
          WindowRoute w;
          w.route.depth = l;
          w.route.window = k;
          std::vector<double> p(library);
          double total = 0;
          const int64_t favourite = experts[(l - 1 + k) % experts.size()];
          for (int64_t m = 0; m < library; ++m)
            total += p[m] = noise(rng) + (m == favourite ? 0.6 : 0.0);
          for (auto& x : p) x /= total;
          w.route.expert = std::max_element(p.begin(), p.end()) - p.begin();
          w.route.router_choice = w.route.expert;
          w.route.probs = std::move(p);
          s.windows.push_back(w);
        }
      out.push_back(s);
    }
  return out;
}

TEST(ModePaths, RecoverThePlantedPathWithMeanGatesAndCounts) {
  std::mt19937 rng(17);
  const std::map<std::string, std::vector<int64_t>> planted = {{"bfs", {0, 3, 1}},
                                                               {"dfs", {2, 2, 5}}};
  const auto routes = planted_routes(rng, planted, /*depths=*/4, /*library=*/6, /*per_label=*/60);
  ModePathBuilder builder;
  for (const auto& r : routes) builder.add(r);
  const auto paths = builder.paths();
  ASSERT_EQ(paths.size(), 2u);
  int single_window_disagreements = 0;
  for (const auto& r : routes)
    for (const auto& w : r.windows)
      single_window_disagreements +=
          w.route.expert !=
          planted.at(r.label)[(w.route.depth - 1 + w.route.window) % planted.at(r.label).size()];
  EXPECT_GT(single_window_disagreements, 100);  // the mean, not each window, finds the path
  for (const auto& p : paths) {
    EXPECT_EQ(p.sequences, 60);
    const auto& experts = planted.at(p.label);
    for (int64_t l = 1; l <= 4; ++l)
      for (int64_t k = 0; k < 4; ++k) {
        const auto* entry = p.path.find(l, k);
        ASSERT_NE(entry, nullptr);
        // Ordinal 3 is never observed: the last observed ordinal (2) applies (SPEC 1.6).
        EXPECT_EQ(*entry->expert, experts[(l - 1 + std::min<int64_t>(k, 2)) % experts.size()])
            << p.label << " depth " << l << " window " << k;
      }
    // The gate is the mean probability of that expert over the sequences reaching the cell.
    double sum = 0;
    int64_t count = 0;
    for (const auto& r : routes)
      if (r.label == p.label)
        for (const auto& w : r.windows)
          if (w.route.depth == 2 && w.route.window == 2) {
            sum += w.route.probs[*p.path.find(2, 2)->expert];
            ++count;
          }
    EXPECT_EQ(p.counts.at({2, 2}), count);
    EXPECT_EQ(count, 20);  // only the sequences with three or more windows
    EXPECT_NEAR(*p.path.find(2, 2)->gate, sum / static_cast<double>(count), 1e-12);
    // The file loads as a forced path.
    const auto back = ForcedPath::from_json(p.to_json());
    EXPECT_EQ(back.to_json(), p.path.to_json());
  }
}

// Token paths of a sequence whose windows at every depth cover `length` tokens in windows of `w`.
SequenceRoutes routes_with_experts(
    int64_t length, int64_t w, int64_t depths, int64_t library,
    const std::function<int64_t(int64_t depth, int64_t ordinal)>& expert) {
  SequenceRoutes s;
  s.label = "x";
  s.length = length;
  for (int64_t l = 1; l <= depths; ++l)
    for (int64_t k = 0; k * w < length; ++k) {
      WindowRoute r;
      r.route.depth = l;
      r.route.window = k;
      r.route.position = k * w;
      r.route.length = std::min(w, length - k * w);
      r.route.expert = r.route.router_choice = expert(l, k);
      r.route.probs.assign(library, 0.0);
      r.route.probs[r.route.expert] = 1.0;
      r.route.margin = 1.0;
      s.windows.push_back(r);
    }
  return s;
}

// Where the balancing bias overrules the router, the SPEC rule (argmax of the mean p) and the
// routed rule (the expert the windows ran) differ, each as documented.
TEST(ModePaths, TheRoutedRuleFollowsTheExpertsThatRan) {
  ModePathBuilder by_probs(ModeRule::kProbabilities), by_routes(ModeRule::kRouted);
  for (int i = 0; i < 4; ++i) {
    SequenceRoutes s;
    s.label = "bfs";
    WindowRoute w;
    w.route.depth = 1;
    w.route.window = 0;
    w.route.probs = {0.5, 0.2, 0.3};
    w.route.expert = i < 3 ? 2 : 1;  // the bias made expert 0 lose every time
    w.route.gate = i < 3 ? 0.3 + 0.02 * i : 0.2;
    s.windows.push_back(w);
    by_probs.add(s);
    by_routes.add(s);
  }
  const auto p = by_probs.paths().at(0), r = by_routes.paths().at(0);
  EXPECT_EQ(*p.path.find(1, 0)->expert, 0);
  EXPECT_NEAR(*p.path.find(1, 0)->gate, 0.5, 1e-12);
  EXPECT_EQ(*r.path.find(1, 0)->expert, 2);
  EXPECT_NEAR(*r.path.find(1, 0)->gate, 0.32, 1e-12);  // the mean gate of the three windows
  EXPECT_EQ(p.to_json()["rule"], "probabilities");
  EXPECT_EQ(r.to_json()["rule"], "routed");
  EXPECT_EQ(r.counts.at({1, 0}), 4);
}

TEST(RouteStats, DistinctExpertsFollowTheUniformNullAndPlantedPaths) {
  // The paper's figures: L 8, D 16 and L 24, D 16.
  EXPECT_NEAR(expected_distinct_experts(8, 16), 7.06, 0.005);
  EXPECT_NEAR(expected_distinct_experts(24, 16), 11.85, 0.01);
  EXPECT_DOUBLE_EQ(expected_distinct_experts(4, 1), 1.0);
  // Independent uniform routes: the measured U approaches E[U].
  std::mt19937 rng(3);
  for (auto [L, D] : std::vector<std::pair<int64_t, int64_t>>{{8, 16}, {24, 16}}) {
    RouteStatsBuilder builder(D, L, false);
    std::uniform_int_distribution<int64_t> pick(0, L - 1);
    for (int i = 0; i < 1000; ++i)
      builder.add(routes_with_experts(40, 4, D, L, [&](int64_t, int64_t) { return pick(rng); }));
    const auto stats = builder.finish();
    EXPECT_EQ(stats.token_paths, 1000 * 40);
    EXPECT_NEAR(stats.mean_distinct, expected_distinct_experts(L, D), 0.05)
        << "L " << L << " D " << D;
    EXPECT_NEAR(stats.mean_repeated + stats.mean_distinct, static_cast<double>(D), 1e-12);
    double shares = 0;
    for (double x : stats.distinct_share) shares += x;
    EXPECT_NEAR(shares, 1.0, 1e-12);
    for (const auto& row : stats.utilisation.at("*")) {
      double total = 0;
      for (double x : row) total += x;
      EXPECT_NEAR(total, 1.0, 1e-12);
      for (double x : row) EXPECT_NEAR(x, 1.0 / static_cast<double>(L), 0.05);
    }
  }
  // A planted path that alternates two experts over depth: U = 2 everywhere, full agreement.
  RouteStatsBuilder builder(6, 4, false);
  for (int i = 0; i < 10; ++i)
    builder.add(routes_with_experts(12, 4, 6, 4, [](int64_t l, int64_t) { return l % 2; }));
  const auto stats = builder.finish();
  EXPECT_DOUBLE_EQ(stats.mean_distinct, 2.0);
  EXPECT_DOUBLE_EQ(stats.mean_unused, 2.0);
  EXPECT_DOUBLE_EQ(stats.distinct_share[1], 1.0);
  for (const auto& [key, share] : stats.agreement.at("x")) EXPECT_DOUBLE_EQ(share, 1.0);
  EXPECT_DOUBLE_EQ(stats.utilisation.at("x")[0][1], 1.0);  // depth 1 uses expert 1
}

// Path similarity of labels: cosine of their [depth][expert] shares, worked by hand.
TEST(RouteStats, LabelsThatShareExpertsAreSimilarAndGroupsAverageTheirPairs) {
  RouteStatsBuilder builder(2, 4, false);
  auto add = [&](const std::string& label, int64_t e1, int64_t e2) {
    auto r = routes_with_experts(8, 4, 2, 4, [&](int64_t l, int64_t) { return l == 1 ? e1 : e2; });
    r.label = label;
    builder.add(r);
  };
  add("de", 0, 1);  // shares: depth 1 expert 0, depth 2 expert 1
  add("nl", 0, 1);
  add("nl", 0, 2);  // nl: depth 1 (1, 0, 0, 0), depth 2 (0, 1/2, 1/2, 0)
  add("ja", 3, 3);  // nothing in common with de
  const auto s = builder.finish();
  ASSERT_EQ(s.similarity_labels, (std::vector<std::string>{"de", "ja", "nl"}));
  const auto& c = s.label_similarity;
  // de = (1,0,0,0 | 0,1,0,0), nl = (1,0,0,0 | 0,.5,.5,0): dot 1.5, norms sqrt(2) sqrt(1.5).
  EXPECT_NEAR(c[0][2], 1.5 / std::sqrt(2.0 * 1.5), 1e-12);
  EXPECT_NEAR(c[2][0], c[0][2], 1e-15);
  EXPECT_DOUBLE_EQ(c[0][1], 0.0);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(c[i][i], 1.0, 1e-12);
  const auto g = group_similarity(s, {{"de", "Latin"}, {"nl", "Latin"}, {"ja", "CJK"}});
  EXPECT_EQ(g.within_pairs, 1);
  EXPECT_EQ(g.across_pairs, 2);
  EXPECT_NEAR(g.within, c[0][2], 1e-15);
  EXPECT_NEAR(g.across, (c[0][1] + c[1][2]) / 2, 1e-15);
  EXPECT_EQ(g.nearest.at("de").first, "nl");
  EXPECT_EQ(g.nearest.at("nl").first, "de");
  // A label left out of every group takes no part in the means.
  const auto partial = group_similarity(s, {{"de", "Latin"}, {"nl", "Latin"}});
  EXPECT_EQ(partial.across_pairs, 0);
  EXPECT_EQ(partial.within_pairs, 1);
}

TEST(Probes, RidgeAndAurocAgreeWithTheTextbookComputation) {
  // Ridge with an intercept on a fixed 6 x 2 set: centre X and y, solve the 2 x 2 normal
  // equations by Cramer's rule, b = mean(y) - mean(x) . w.
  const std::vector<double> x = {1.0, 2.0, 2.0, 0.5, 3.0, -1.0, 4.0, 3.5, 5.0, 1.0, 6.0, -2.0};
  const std::vector<double> y = {1.5, 0.7, -0.2, 2.9, 0.4, -1.8};
  const double lambda = 0.7;
  double mx0 = 0, mx1 = 0, my = 0;
  for (int r = 0; r < 6; ++r) {
    mx0 += x[2 * r] / 6;
    mx1 += x[2 * r + 1] / 6;
    my += y[r] / 6;
  }
  double a00 = lambda, a01 = 0, a11 = lambda, b0 = 0, b1 = 0;
  for (int r = 0; r < 6; ++r) {
    const double u = x[2 * r] - mx0, v = x[2 * r + 1] - mx1, t = y[r] - my;
    a00 += u * u;
    a01 += u * v;
    a11 += v * v;
    b0 += u * t;
    b1 += v * t;
  }
  const double det = a00 * a11 - a01 * a01;
  const double w0 = (b0 * a11 - a01 * b1) / det, w1 = (a00 * b1 - a01 * b0) / det;
  const auto model = ridge_fit(x, 2, y, lambda);
  ASSERT_EQ(model.size(), 3u);
  EXPECT_NEAR(model[1], w0, 1e-9);
  EXPECT_NEAR(model[2], w1, 1e-9);
  EXPECT_NEAR(model[0], my - mx0 * w0 - mx1 * w1, 1e-9);
  // AUROC as the share of (positive, negative) pairs ordered right, ties counting one half.
  const std::vector<double> scores = {0.9, 0.3, 0.3, 0.7, 0.1, 0.3, 0.8, 0.5};
  const std::vector<uint8_t> positive = {1, 0, 1, 1, 0, 0, 1, 0};
  double pairs = 0, right = 0;
  for (size_t i = 0; i < scores.size(); ++i)
    for (size_t j = 0; j < scores.size(); ++j)
      if (positive[i] && !positive[j]) {
        pairs += 1;
        right += scores[i] > scores[j] ? 1.0 : scores[i] == scores[j] ? 0.5 : 0.0;
      }
  EXPECT_NEAR(auroc(scores, positive), right / pairs, 1e-12);
  EXPECT_TRUE(std::isnan(auroc({0.1, 0.2}, {1, 1})));  // no negatives
}

TEST(Probes, PlantedLabelsAreReadAndTheShuffledControlIsChance) {
  std::mt19937 rng(23);
  const auto routes =
      planted_routes(rng, {{"bfs", {0, 3, 1}}, {"dfs", {2, 2, 5}}, {"astar", {4, 1, 0}}}, 4, 6, 40);
  ProbeData data(4, 6);
  for (const auto& r : routes) data.add(r);
  ProbeOptions options;
  options.shuffles = 20;
  for (const char* level : {"window", "sequence"}) {
    const auto result = data.run(level, options);
    EXPECT_GT(result.auroc, 0.95) << level;
    EXPECT_EQ(result.auroc_per_label.size(), 3u);
    EXPECT_NEAR(result.shuffled_mean, 0.5, 0.08) << level;
    EXPECT_LT(result.shuffled_max, 0.75) << level;
  }
  int64_t ordinals = 0;  // one window-level sample per (sequence, window ordinal)
  for (const auto& r : routes) {
    std::set<int64_t> seen;
    for (const auto& w : r.windows) seen.insert(w.route.window);
    ordinals += static_cast<int64_t>(seen.size());
  }
  EXPECT_EQ(data.run("window", options).samples, ordinals);
  EXPECT_THROW(data.run("token", options), Error);
}

// The table-2 readouts read what they are built to read: which expert wins (the frequency
// ratio) or how sure the router is (the winning probability), and not the other.
TEST(Probes, ReadoutsSeparateWhichExpertFromHowSure) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  // Two labels; at depth 2 label "a" wins with expert 0 and "b" with expert 1, both with the
  // same spread of confidence; at depth 1 both labels pick expert 2, "a" sure (0.8-0.9) and "b"
  // unsure (0.4-0.5). `which` plants only the first difference, `sure` only the second.
  auto data = [&](bool which, bool sure) {
    ProbeData d(2, 3);
    for (int i = 0; i < 80; ++i) {
      SequenceRoutes s;
      s.label = i % 2 ? "b" : "a";
      for (int64_t k = 0; k < 3; ++k)
        for (int64_t l = 1; l <= 2; ++l) {
          WindowRoute w;
          w.route.depth = l;
          w.route.window = k;
          const double top =
              l == 1 && sure ? (s.label == "a" ? 0.8 : 0.4) + 0.1 * u(rng) : 0.5 + 0.4 * u(rng);
          int64_t best = l == 1 ? 2 : (which && s.label == "b" ? 1 : 0);
          if (l == 2 && !which && u(rng) < 0.5) best = 1;
          w.route.probs.assign(3, (1 - top) / 2);
          w.route.probs[static_cast<size_t>(best)] = top;
          s.windows.push_back(w);
        }
      d.add(s);
    }
    ProbeOptions o;
    o.folds = 4;
    return d.readouts(o);
  };
  const auto which = data(true, false), sure = data(false, true), neither = data(false, false);
  EXPECT_EQ(which.samples, 240);
  EXPECT_GT(which.frequency_llr, 0.99);
  EXPECT_NEAR(which.winning_expert, 0.5, 0.1);
  EXPECT_GT(sure.winning_expert, 0.99);
  EXPECT_GT(sure.top1_ridge, 0.99);
  EXPECT_NEAR(sure.frequency_llr, 0.5, 0.1);
  for (double a : {neither.top1_ridge, neither.winning_expert, neither.frequency_llr})
    EXPECT_NEAR(a, 0.5, 0.1);
}

// PCA of paths: two labels on opposite one-hot paths lie at +-1 on one component that holds all
// the variance; on random routes the components and variances equal an eigendecomposition of
// the covariance by LibTorch.
TEST(PathPcaTest, AgreesWithTheCovarianceEigendecomposition) {
  PathPcaBuilder two(2, 2);
  for (int i = 0; i < 20; ++i) {
    SequenceRoutes s;
    s.label = i % 2 ? "b" : "a";
    for (int64_t l = 1; l <= 2; ++l) {
      WindowRoute w;
      w.route.depth = l;
      w.route.expert = i % 2;
      s.windows.push_back(w);
    }
    two.add(s);
  }
  const auto p = two.finish();
  ASSERT_EQ(p.explained.size(), 1u);
  EXPECT_NEAR(p.explained[0], 1.0, 1e-12);
  for (size_t i = 0; i < p.labels.size(); ++i)
    EXPECT_NEAR(std::abs(p.coordinates[i][0]), 1.0, 1e-9);
  EXPECT_LT(p.coordinates[0][0] * p.coordinates[1][0], 0);

  std::mt19937 rng(3);
  const auto routes = planted_routes(rng, {{"x", {0, 1}}, {"y", {2, 3}}, {"z", {1, 1}}}, 3, 5, 30);
  PathPcaBuilder builder(3, 5);
  std::vector<std::vector<double>> rows;
  for (const auto& r : routes) {
    builder.add(r);
    std::vector<double> row(15, 0.0), windows(3, 0.0);
    for (const auto& w : r.windows) {
      row[static_cast<size_t>((w.route.depth - 1) * 5 + w.route.expert)] += 1;
      windows[static_cast<size_t>(w.route.depth - 1)] += 1;
    }
    for (size_t i = 0; i < 15; ++i) row[i] /= windows[i / 5];
    rows.push_back(row);
  }
  const auto pca = builder.finish(3);
  ASSERT_EQ(pca.explained.size(), 3u);
  auto x = torch::zeros({static_cast<int64_t>(rows.size()), 15}, torch::kFloat64);
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = 0; j < 15; ++j)
      x[static_cast<int64_t>(i)][static_cast<int64_t>(j)] = rows[i][j];
  const auto centred = x - x.mean(0, true);
  const auto cov = centred.t().mm(centred) / static_cast<double>(rows.size() - 1);
  auto [values, vectors] = torch::linalg::eigh(cov, "L");  // ascending
  const double total = cov.trace().item<double>();
  for (int c = 0; c < 3; ++c) {
    const int64_t k = 14 - c;
    EXPECT_NEAR(pca.explained[static_cast<size_t>(c)], values[k].item<double>() / total, 1e-9);
    const auto projected = centred.mv(vectors.select(1, k));
    for (size_t i = 0; i < rows.size(); ++i)
      EXPECT_NEAR(std::abs(pca.coordinates[i][static_cast<size_t>(c)]),
                  std::abs(projected[static_cast<int64_t>(i)].item<double>()), 1e-7);
  }
}

// Executing 2D depths of a D-depth core is the D-depth model with its depth-indexed parameters
// (FiLM, depth vectors, untied router rows) repeated: a model of depth 2D built that way gives
// the same logits and routes, and the same loss in evaluate_depths, whose loss is the mean
// cross-entropy of the targets after the prompt.
TEST(DepthExtrapolation, EqualsTheModelWithItsDepthsRepeated) {
  for (bool tied : {true, false}) {
    auto c = testing::tiny_config();
    c.vocab_size = 160;
    c.max_seq_len = 256;
    c.core_depth = 2;
    c.router_tied = tied;
    auto shallow = testing::make_model(c, 31, /*router_scale=*/5.0);
    auto cd = c;
    cd.core_depth = 4;
    LanguageModel deep(cd);
    {
      torch::NoGradGuard no_grad;
      std::map<std::string, torch::Tensor> from;
      for (auto& [name, t] : shallow->named_state()) from[name] = t;
      for (auto& [name, t] : deep->named_state()) {
        const auto& a = from.at(name);
        t.copy_(a.sizes() == t.sizes() ? a : torch::cat({a, a}, 0));
      }
    }
    std::mt19937 rng(2);
    const auto docs = testing::random_documents(rng, c, 3);
    Layout layout(Batch::from_documents({docs}), c.vocab_size, testing::device());
    ForwardOptions four;
    four.executed_depth = 4;
    EXPECT_THROW(shallow->forward(layout, four), Error);  // deeper needs the flag
    four.extrapolate_depth = true;
    torch::NoGradGuard no_grad;
    const auto a = shallow->forward(layout, four), b = deep->forward(layout);
    EXPECT_LT(testing::max_abs_diff(a.logits, b.logits), 1e-5) << "tied " << tied;
    ASSERT_EQ(a.routes.size(), 4u);
    for (size_t l = 0; l < 4; ++l) {
      EXPECT_EQ(a.routes[l].depth, static_cast<int64_t>(l + 1));
      EXPECT_EQ(a.routes[l].host().experts, b.routes[l].host().experts);
    }
    auto source = [&] { return task_sequences("maze", 4, 2, 9); };
    auto sa = source(), sb = source();
    const auto ra = evaluate_depths(shallow, *sa, {2, 4}, 3);
    const auto rb = evaluate_depths(deep, *sb, {2, 4}, 4);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_NEAR(ra[i].loss, rb[i].loss, 1e-5);
      EXPECT_NEAR(ra[i].accuracy, rb[i].accuracy, 1e-12);
      EXPECT_EQ(ra[i].targets, rb[i].targets);
    }
    // The loss by hand, one sequence at a time.
    auto sc = source();
    double loss = 0;
    int64_t n = 0;
    while (auto item = sc->next()) {
      const auto& seq = item->sequence;
      Layout one(Batch::from_documents({{seq}}), c.vocab_size, testing::device());
      const auto logp =
          torch::log_softmax(shallow->forward(one, four).logits.to(torch::kFloat64), -1);
      for (int64_t t = seq.prompt_len - 1; t + 1 < static_cast<int64_t>(seq.tokens.size());
           ++t, ++n)
        loss -= logp[t][seq.tokens[static_cast<size_t>(t + 1)]].item<double>();
    }
    EXPECT_EQ(ra[1].targets, n);
    EXPECT_NEAR(ra[1].loss, loss / static_cast<double>(n), 1e-5);
  }
  auto dc = testing::tiny_config(Family::kDense);
  dc.vocab_size = 160;
  dc.max_seq_len = 256;
  auto dense = testing::make_model(dc, 1);
  auto src = task_sequences("maze", 4, 1, 1);
  try {
    evaluate_depths(dense, *src, {dc.core_depth + 1}, 2);
    ADD_FAILURE() << "a dense core ran deeper than it is";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only a lol core executes more depths"), std::string::npos)
        << e.what();
  }
}

TEST(Routes, ExtractionRecordsTheForwardPassRoutesAndRoundTrips) {
  auto c = testing::tiny_config();
  c.vocab_size = 160;  // the maze vocabulary
  c.max_seq_len = 256;
  auto model = testing::make_model(c, 8);
  auto source = task_sequences("maze", 4, 2, 3);
  ASSERT_EQ(source->size(), 10);
  std::vector<SequenceRoutes> extracted;
  ExtractOptions options;
  options.batch_size = 3;  // batches that split the puzzles' five strategies
  extract_routes(model, *source, options,
                 [&](SequenceRoutes&& s) { extracted.push_back(std::move(s)); });
  ASSERT_EQ(extracted.size(), 10u);
  // Each sequence alone through the model gives the same routes.
  auto again = task_sequences("maze", 4, 2, 3);
  torch::NoGradGuard no_grad;
  for (const auto& s : extracted) {
    auto item = again->next();
    ASSERT_TRUE(item);
    EXPECT_EQ(s.label, item->label);
    EXPECT_EQ(s.length, static_cast<int64_t>(item->sequence.tokens.size()));
    Layout layout(Batch::from_documents({{item->sequence}}), c.vocab_size, testing::device());
    std::vector<RouteRecord> alone;
    for (const auto& depth : model->forward(layout).routes)
      for (auto& r : depth.records(&layout)) alone.push_back(r);
    ASSERT_EQ(alone.size(), s.windows.size());
    for (size_t i = 0; i < alone.size(); ++i) {
      const auto& w = s.windows[i];
      EXPECT_EQ(w.route.depth, alone[i].depth);
      EXPECT_EQ(w.route.window, alone[i].window);
      EXPECT_EQ(w.route.position, alone[i].position);
      EXPECT_EQ(w.route.length, alone[i].length);
      if (alone[i].margin > 1e-4) {
        EXPECT_EQ(w.route.expert, alone[i].expert);
      }
      EXPECT_NEAR(w.route.gate, alone[i].gate, 1e-5);
      EXPECT_EQ(w.prompt, s.prompt_len > 0 && w.route.window == 0);
    }
    // The descriptor is router-only and inside the prompt window.
    int64_t router_only = 0;
    for (const auto& w : s.windows)
      if (w.route.depth == 1) router_only += w.router_only;
    EXPECT_EQ(router_only, static_cast<int64_t>(item->sequence.router_only.size()));
    EXPECT_GT(router_only, 0);
  }
  // Written and read back, the file holds the same routes.
  std::stringstream file;
  file << RouteFileHeader{"m", "s", c.core_depth, c.library_size, 10}.to_json().dump() << "\n";
  for (const auto& s : extracted) file << s.to_json().dump() << "\n";
  std::vector<SequenceRoutes> read;
  RouteReader reader(file, "routes");
  while (auto s = reader.next()) read.push_back(std::move(*s));
  EXPECT_EQ(reader.header().library_size, c.library_size);
  ASSERT_EQ(read.size(), extracted.size());
  for (size_t i = 0; i < read.size(); ++i) EXPECT_EQ(read[i].to_json(), extracted[i].to_json());
}

// A route file of a model with router_skip: its header says so, its windows carry L + 1
// probabilities and may name expert L; read with that header they pass, and the statistics
// count the skip as skipped whatever its gate. Under a header without the skip the same windows
// are an error naming the count.
TEST(Routes, TheSkipTravelsThroughARouteFile) {
  SequenceRoutes s;
  s.label = "bfs";
  s.length = 8;
  for (int64_t depth : {1, 2}) {
    WindowRoute w;
    w.route.depth = depth;
    w.route.length = 8;
    w.route.expert = w.route.router_choice = depth == 1 ? 3 : 1;
    w.route.gate = depth == 1 ? 0.5 : 0.4;
    w.route.probs = depth == 1 ? std::vector<double>{0.1, 0.2, 0.2, 0.5}
                               : std::vector<double>{0.1, 0.4, 0.3, 0.2};
    w.route.margin = 0.1;
    s.windows.push_back(w);
  }
  auto read = [&](bool skip) {
    RouteFileHeader h{"m", "s", 2, 3, 1};
    h.skip = skip;
    std::stringstream file;
    file << h.to_json().dump() << "\n" << s.to_json().dump() << "\n";
    RouteReader reader(file, "routes");
    auto got = reader.next();
    EXPECT_EQ(reader.header().skip, skip);
    EXPECT_EQ(reader.header().choices(), skip ? 4 : 3);
    return got;
  };
  const auto got = read(true);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->to_json(), s.to_json());
  RouteStatsBuilder builder(2, 4, true);
  builder.add(*got);
  const auto stats = builder.finish();
  EXPECT_TRUE(stats.skip);
  EXPECT_DOUBLE_EQ(stats.skipped, 0.5);
  EXPECT_EQ(stats.skipped_by_depth, (std::vector<double>{1.0, 0.0}));
  try {
    read(false);
    ADD_FAILURE() << "a window of 4 probabilities passed a header of 3 experts and no skip";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4 probabilities"), std::string::npos) << e.what();
  }
}

// A sequence longer than the model's context is routed on its first max_seq_len tokens, and
// those routes are the whole sequence's there (the router reads only earlier windows): the
// same model with a longer context routes the same windows the same way.
TEST(Routes, ASequencePastTheContextIsRoutedOnItsPrefixAsAWholeOne) {
  auto c = testing::tiny_config();
  c.vocab_size = 160;
  c.max_seq_len = 256;
  auto whole = testing::make_model(c, 8);
  auto short_config = c;
  short_config.max_seq_len = 84;  // the 4 x 4 mazes below have 82-91 tokens
  auto cut_model = testing::make_model(short_config, 8);
  {
    const auto a = whole->named_state(), b = cut_model->named_state();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_TRUE(a[i].first == b[i].first && torch::equal(a[i].second, b[i].second)) << a[i].first;
  }
  auto run = [&](LanguageModel& model, int64_t* cut) {
    auto source = task_sequences("maze", 4, 3, 3);
    std::vector<SequenceRoutes> out;
    ExtractOptions options;
    options.batch_size = 4;
    *cut = extract_routes(model, *source, options, [&](SequenceRoutes&& s) { out.push_back(s); });
    return out;
  };
  int64_t none = -1, cut = -1;
  const auto a = run(whole, &none), b = run(cut_model, &cut);
  EXPECT_EQ(none, 0);
  ASSERT_EQ(a.size(), b.size());
  int64_t longer = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    longer += a[i].length > 84;
    EXPECT_EQ(b[i].length, std::min<int64_t>(a[i].length, 84));
    EXPECT_EQ(b[i].prompt_len, a[i].prompt_len);
    std::vector<const WindowRoute*> expected;
    for (const auto& w : a[i].windows)
      if (w.route.position < 84) expected.push_back(&w);
    ASSERT_EQ(b[i].windows.size(), expected.size());
    for (size_t k = 0; k < expected.size(); ++k) {
      const auto &x = *expected[k], &y = b[i].windows[k];
      EXPECT_EQ(y.route.depth, x.route.depth);
      EXPECT_EQ(y.route.window, x.route.window);
      EXPECT_EQ(y.route.position, x.route.position);
      EXPECT_EQ(y.route.length, std::min<int64_t>(x.route.length, 84 - x.route.position));
      EXPECT_EQ(y.route.expert, x.route.expert);
      EXPECT_NEAR(y.route.gate, x.route.gate, 1e-5);
      EXPECT_EQ(y.router_only, x.router_only);
    }
  }
  EXPECT_EQ(cut, longer);
  EXPECT_GT(cut, 0);
  EXPECT_LT(cut, static_cast<int64_t>(a.size()));
}

// The flip measurement: no flips at eps 0 (not measured), none for clear margins under a
// small perturbation, many under a large one; the statistics count them per depth and margin.
TEST(Routes, PerturbationFlipsFollowTheMargins) {
  auto c = testing::tiny_config();
  c.vocab_size = 160;
  c.max_seq_len = 256;
  auto model = testing::make_model(c, 8, /*router_scale=*/3.0);
  auto run = [&](double eps) {
    auto source = task_sequences("maze", 4, 3, 2);
    ExtractOptions options;
    options.perturbation = eps;
    options.seed = 4;
    std::vector<SequenceRoutes> out;
    extract_routes(model, *source, options, [&](SequenceRoutes&& s) { out.push_back(s); });
    return out;
  };
  for (const auto& s : run(0.0))
    for (const auto& w : s.windows) EXPECT_FALSE(w.flipped);
  int64_t small_flips = 0, large_flips = 0, windows = 0;
  for (const auto& s : run(1e-4))
    for (const auto& w : s.windows) {
      ASSERT_TRUE(w.flipped);
      small_flips += *w.flipped;
      if (w.route.margin > 1e-2) {
        EXPECT_FALSE(*w.flipped) << "margin " << w.route.margin;
      }
    }
  RouteStatsBuilder stats(c.core_depth, c.route_choices(), c.router_skip);
  for (const auto& s : run(10.0)) {
    stats.add(s);
    for (const auto& w : s.windows) {
      large_flips += *w.flipped;
      ++windows;
      // Written and read back, the measurement survives.
      EXPECT_EQ(SequenceRoutes::from_json(s.to_json()).windows.back().flipped,
                s.windows.back().flipped);
    }
  }
  EXPECT_LT(small_flips, windows / 20);
  EXPECT_GT(large_flips, windows / 5);
  const auto r = stats.finish();
  EXPECT_EQ(r.flips_measured, windows);
  EXPECT_NEAR(r.flip_rate, static_cast<double>(large_flips) / static_cast<double>(windows), 1e-12);
  ASSERT_EQ(r.flip_rate_by_depth.size(), static_cast<size_t>(c.core_depth));
  double weighted = 0;
  for (size_t b = 0; b < r.margin_counts.size(); ++b)
    weighted += r.flip_rate_by_margin[b] * static_cast<double>(r.margin_counts[b]);
  EXPECT_NEAR(weighted, static_cast<double>(large_flips), 1e-9);
  EXPECT_TRUE(r.to_json().contains("flips"));
}

// The windows the balancing bias decided, counted by hand: the router's choice is not the first
// maximum of p.
TEST(RouteStats, TheBiasDecidedTheWindowsWhoseChoiceIsNotTheArgmaxOfP) {
  RouteStatsBuilder builder(2, 3, false);
  auto add = [&](const std::string& label, const std::vector<int64_t>& choices,
                 const std::vector<double>& gates) {
    SequenceRoutes s;
    s.label = label;
    s.length = 4;
    for (int64_t l = 1; l <= 2; ++l) {
      WindowRoute w;
      w.route.depth = l;
      w.route.length = 4;
      w.route.probs = {0.2, 0.4, 0.4};  // a tie: the first maximum, expert 1, is the argmax
      w.route.expert = w.route.router_choice = choices[static_cast<size_t>(l - 1)];
      w.route.gate = gates[static_cast<size_t>(l - 1)];
      s.windows.push_back(w);
    }
    builder.add(s);
  };
  // Gates below kSkipGate are skips: three, two of them in windows the bias decided.
  add("a", {1, 1}, {0.4, 0.005});   // the router's own choices; depth 2 a skip all the same
  add("a", {2, 1}, {0.4, 0.4});     // depth 1 decided (also the tie's other side)
  add("b", {0, 0}, {0.0, 0.0099});  // both decided, both skips
  add("b", {1, 1}, {0.4, 0.01});    // 0.01 is not below kSkipGate
  const auto s = builder.finish();
  EXPECT_DOUBLE_EQ(s.bias_decided, 3.0 / 8.0);
  ASSERT_EQ(s.bias_decided_by_depth.size(), 2u);
  EXPECT_DOUBLE_EQ(s.bias_decided_by_depth[0], 2.0 / 4.0);
  EXPECT_DOUBLE_EQ(s.bias_decided_by_depth[1], 1.0 / 4.0);
  EXPECT_DOUBLE_EQ(s.bias_decided_by_label.at("a"), 1.0 / 4.0);
  EXPECT_DOUBLE_EQ(s.bias_decided_by_label.at("b"), 2.0 / 4.0);
  EXPECT_EQ(s.to_json()["bias_decided"]["by_depth"].size(), 2u);
  EXPECT_NE(s.to_text().find("balancing bias decided"), std::string::npos);
  EXPECT_DOUBLE_EQ(s.skipped, 3.0 / 8.0);
  ASSERT_EQ(s.skipped_by_depth.size(), 2u);
  EXPECT_DOUBLE_EQ(s.skipped_by_depth[0], 1.0 / 4.0);
  EXPECT_DOUBLE_EQ(s.skipped_by_depth[1], 2.0 / 4.0);
  EXPECT_DOUBLE_EQ(s.skipped_of_bias_decided, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(s.to_json()["skipped"]["share_of_bias_decided"].get<double>(), 2.0 / 3.0);
  EXPECT_NE(s.to_text().find("windows skipped (gate below 0.01): 0.375"), std::string::npos)
      << s.to_text();
}

// The skip chosen, counted by hand: of the windows after window 0 (the share training steers),
// per ordinal, per label, and weighted by tokens; a small gate is not the skip here.
TEST(RouteStats, TheSkipChosenIsCountedAfterWindow0ByWindowLabelAndTokens) {
  RouteStatsBuilder builder(2, 3, true);  // two experts and the skip (choice 2)
  auto add = [&](const std::string& label, const std::vector<std::vector<int64_t>>& choices) {
    SequenceRoutes s;
    s.label = label;
    s.length = 10;
    for (int64_t l = 1; l <= 2; ++l)
      for (int64_t k = 0; k < 3; ++k) {  // windows of 6, 2 and 2 tokens
        WindowRoute w;
        w.route.depth = l;
        w.route.window = k;
        w.route.position = k == 0 ? 0 : 4 + 2 * k;
        w.route.length = k == 0 ? 6 : 2;
        w.route.probs = {0.3, 0.3, 0.4};
        w.route.expert = w.route.router_choice =
            choices[static_cast<size_t>(l - 1)][static_cast<size_t>(k)];
        w.route.gate = w.route.expert == 0 ? 0.001 : 0.4;
        s.windows.push_back(w);
      }
    builder.add(s);
  };
  add("a", {{2, 2, 0}, {1, 0, 1}});  // window 0 skips at depth 1, window 1 at depth 1
  add("b", {{0, 1, 2}, {1, 2, 2}});  // windows 2, 1 and 2
  const auto r = builder.finish();
  EXPECT_DOUBLE_EQ(r.skip_share, 4.0 / 8.0);
  EXPECT_EQ(r.skip_share_by_window,
            (std::map<int64_t, double>{{0, 1.0 / 4.0}, {1, 2.0 / 4.0}, {2, 2.0 / 4.0}}));
  EXPECT_DOUBLE_EQ(r.to_json()["skip_chosen"]["by_window"]["1"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(r.skip_share_by_label.at("a"), 1.0 / 4.0);
  EXPECT_DOUBLE_EQ(r.skip_share_by_label.at("b"), 3.0 / 4.0);
  EXPECT_DOUBLE_EQ(r.skip_token_depths, (6.0 + 4 * 2.0) / 40.0);
  EXPECT_DOUBLE_EQ(r.to_json()["skip_chosen"]["share_after_window0"].get<double>(), 0.5);
  EXPECT_NE(r.to_text().find("the skip chosen: 0.500 of the windows after window 0, 0.350"),
            std::string::npos)
      << r.to_text();
  RouteStatsBuilder no_skip(2, 3, false);
  EXPECT_FALSE(no_skip.finish().to_json().contains("skip_chosen"));
  // Ordinals come from files: a huge one is one more entry, not an allocation of its size.
  RouteStatsBuilder far(1, 3, true);
  SequenceRoutes one;
  one.label = "c";
  one.length = 1;
  WindowRoute w;
  w.route.depth = 1;
  w.route.window = int64_t{1} << 40;
  w.route.length = 1;
  w.route.probs = {0.3, 0.3, 0.4};
  w.route.expert = w.route.router_choice = 2;
  w.route.gate = 0.4;
  one.windows.push_back(w);
  far.add(one);
  EXPECT_EQ(far.finish().skip_share_by_window.at(int64_t{1} << 40), 1.0);
  // A long sequence's windows print ten a line.
  RouteStatsBuilder many(1, 3, true);
  SequenceRoutes longer;
  longer.label = "d";
  longer.length = 12;
  for (int64_t k = 0; k < 12; ++k) {
    w.route.window = w.route.position = k;
    longer.windows.push_back(w);
  }
  many.add(longer);
  const auto text = many.finish().to_text();
  EXPECT_NE(text.find("  by window: 0:1.000 1:1.000"), std::string::npos) << text;
  EXPECT_NE(text.find(" 9:1.000\n    10:1.000 11:1.000\n"), std::string::npos) << text;
}

// Routes extracted from a model whose bias moves decisions at one depth only (a per-depth bias,
// SPEC 1.7 per depth): there the bias decides exactly the windows whose most probable expert is
// not the one it favours, counted from the recorded p; at the other depths it decides none.
TEST(Routes, TheBiasDecidesTheWindowsItMovesAtItsOwnDepth) {
  auto c = testing::tiny_config();
  c.vocab_size = 160;
  c.max_seq_len = 256;
  c.balance_per_depth = true;
  auto model = testing::make_model(c, 8, /*router_scale=*/3.0);
  // The route statistics, the windows at depth 2 whose most probable expert is not expert 0,
  // and the windows at depth 2 (each of which, with `moved`, must have chosen expert 0).
  auto stats_of = [&](bool moved) {
    RouteStatsBuilder stats(c.core_depth, c.route_choices(), c.router_skip);
    int64_t other = 0, windows = 0;
    auto source = task_sequences("maze", 4, 3, 2);
    extract_routes(model, *source, ExtractOptions{}, [&](SequenceRoutes&& s) {
      stats.add(s);
      for (const auto& w : s.windows) {
        if (w.route.depth != 2) continue;
        ++windows;
        if (moved) {
          EXPECT_EQ(w.route.router_choice, 0);
        }
        const auto& p = w.route.probs;
        other += std::max_element(p.begin(), p.end()) - p.begin() != 0;
      }
    });
    return std::make_tuple(stats.finish(), other, windows);
  };
  const auto [none, unused, windows] = stats_of(false);
  EXPECT_DOUBLE_EQ(none.bias_decided, 0.0);  // a zero bias never decides
  {
    torch::NoGradGuard no_grad;
    model->core().balance_biases()[1][0] = 2.0;  // depth 2: p + b, expert 0 wins every window
  }
  const auto [moved, other, windows_again] = stats_of(true);
  ASSERT_EQ(windows, windows_again);
  ASSERT_GT(other, 0);  // the test needs windows the bias moves
  ASSERT_EQ(moved.bias_decided_by_depth.size(), 3u);
  EXPECT_DOUBLE_EQ(moved.bias_decided_by_depth[0], 0.0);
  EXPECT_DOUBLE_EQ(moved.bias_decided_by_depth[1],
                   static_cast<double>(other) / static_cast<double>(windows));
  EXPECT_DOUBLE_EQ(moved.bias_decided_by_depth[2], 0.0);
  EXPECT_GT(moved.bias_decided, 0.0);
}

TEST(Routes, MalformedRouteFilesNameTheLine) {
  auto error_of = [](const std::string& text) {
    std::stringstream in(text);
    return testing::error_message([&] {
      RouteReader reader(in, "r.jsonl");
      while (reader.next()) {
      }
    });
  };
  const std::string header = R"({"lol_routes":1,"core_depth":2,"library_size":2,"sequences":1})";
  const std::string window =
      R"({"depth":1,"window":0,"position":0,"expert":1,"gate":0.6,"probs":[0.4,0.6],"margin":0.2,)"
      R"("router_choice":1,"forced_expert":false,"forced_gate":false,"prompt":false,"router_only":0})";
  const std::string good =
      R"({"sequence":0,"label":"a","length":3,"prompt_len":0,"windows":[)" + window + "]}";
  EXPECT_EQ(error_of(header + "\n" + good + "\n"), "no error");
  EXPECT_NE(error_of("").find("empty"), std::string::npos);
  EXPECT_NE(error_of("{}\n").find("r.jsonl line 1: not a route file"), std::string::npos);
  EXPECT_NE(error_of(header + "\n{oops\n").find("r.jsonl line 2: not valid JSON"),
            std::string::npos);
  auto bad_depth = good;
  bad_depth.replace(bad_depth.find("\"depth\":1"), 9, "\"depth\":7");
  EXPECT_NE(error_of(header + "\n\n" + bad_depth).find("line 3: depth 7 is outside 1..2"),
            std::string::npos);
  auto bad_probs = good;
  bad_probs.replace(bad_probs.find("[0.4,0.6]"), 9, "[0.4]");
  EXPECT_NE(error_of(header + "\n" + bad_probs).find("has 1 probabilities"), std::string::npos);
}

// A path over depths 1..4 and ordinals 0..2 with distinct experts along depth at ordinal 1.
ForcedPath sample_path() {
  ForcedPath p;
  for (int64_t l = 1; l <= 4; ++l)
    for (int64_t k = 0; k <= 2; ++k) {
      ForcedPath::Entry e;
      e.expert = (l + k) % 5;
      e.gate = 0.1 * static_cast<double>(l) + 0.01 * static_cast<double>(k);
      p.depths[l][k] = e;
    }
  return p;
}

TEST(Interventions, EachTransformChangesOnlyWhatItNames) {
  const auto path = sample_path();
  const auto ids = experts_only(path), gates = gates_only(path);
  for (const auto& [l, entries] : path.depths)
    for (const auto& [k, e] : entries) {
      EXPECT_EQ(ids.find(l, k)->expert, e.expert);
      EXPECT_FALSE(ids.find(l, k)->gate);
      EXPECT_EQ(gates.find(l, k)->gate, e.gate);
      EXPECT_FALSE(gates.find(l, k)->expert);
    }
  // Permuting depths: every ordinal keeps its multiset of (expert, gate) pairs, the depth
  // order changes, the same seed gives the same permutation.
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const auto permuted = permute_depths(path, seed);
    EXPECT_EQ(permuted.to_json(), permute_depths(path, seed).to_json());
    bool changed = false;
    for (int64_t k = 0; k <= 2; ++k) {
      std::multiset<std::pair<int64_t, double>> before, after;
      for (int64_t l = 1; l <= 4; ++l) {
        before.insert({*path.find(l, k)->expert, *path.find(l, k)->gate});
        after.insert({*permuted.find(l, k)->expert, *permuted.find(l, k)->gate});
        changed |= permuted.find(l, k)->expert != path.find(l, k)->expert;
      }
      EXPECT_EQ(before, after);
    }
    EXPECT_TRUE(changed) << "seed " << seed;
  }
  // A path whose depths agree cannot be permuted into another.
  ForcedPath flat;
  for (int64_t l = 1; l <= 3; ++l) flat.depths[l][0].expert = 2;
  EXPECT_EQ(permute_depths(flat, 1).to_json(), flat.to_json());
  // Random experts: gates kept, experts in the library, not the path's everywhere.
  const auto random = random_experts(path, 5, 7);
  int same = 0;
  for (const auto& [l, entries] : path.depths)
    for (const auto& [k, e] : entries) {
      const auto* r = random.find(l, k);
      EXPECT_EQ(r->gate, e.gate);
      EXPECT_GE(*r->expert, 0);
      EXPECT_LT(*r->expert, 5);
      same += *r->expert == *e.expert;
    }
  EXPECT_LT(same, 12);
  // Replacing depths 2-3 with a donor's: those depths are the donor's, the others the path's.
  ForcedPath donor;
  donor.depths[2][0].expert = 9;
  const auto replaced = replace_depths(path, donor, 2, 3);
  EXPECT_EQ(replaced.depths.at(1), path.depths.at(1));
  EXPECT_EQ(replaced.depths.at(4), path.depths.at(4));
  EXPECT_EQ(*replaced.find(2, 0)->expert, 9);
  EXPECT_EQ(replaced.depths.count(3), 0u);
  EXPECT_THROW(replace_depths(path, donor, 3, 2), Error);
}

// lol path eval forces exactly what lol generate --force reads: every generation equals
// generate() with the condition's path written to JSON and read back, and the prompt built
// from the task text with the filler.
// A tiny maze-vocabulary model whose blocks are loud enough that the expert a window runs
// changes the greedy token (so a forced path that were ignored would show).
LanguageModel loud_maze_model(uint64_t seed) {
  auto c = testing::tiny_config();
  c.vocab_size = 160;
  c.max_seq_len = 512;
  auto model = testing::make_model(c, seed);
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : model->named_state()) {
    auto role = model->roles().all().find(name);
    if (role != model->roles().all().end() &&
        (role->second == ParamRole::kMatrix || role->second == ParamRole::kResidualOutput))
      t.mul_(6.0);
  }
  return model;
}

// `count` held-out 4 x 4 mazes of seed 5, a budget of 4 tokens past the longest reference.
PathEvalOptions small_maze_eval(int64_t count) {
  PathEvalOptions options;
  options.kind = tasks::Kind::kMaze;
  options.maze_size = 4;
  options.count = count;
  options.seed = 5;
  options.extra_tokens = 4;
  return options;
}

TEST(PathEval, GenerationsEqualGenerateWithTheForcedPathFile) {
  auto model = loud_maze_model(21);
  const auto& c = model->config();
  std::vector<LabelledPath> paths;
  for (int s : {1, 3}) {
    LabelledPath p;
    p.strategy = s;
    p.label = tasks::strategy_name(tasks::Kind::kMaze, s);
    for (int64_t l = 1; l <= c.core_depth; ++l) {
      p.path.depths[l][0].expert = (l + s) % c.library_size;
      p.path.depths[l][1].expert = (2 * l + s) % c.library_size;
      p.path.depths[l][1].gate = 0.3 + 0.1 * s;
    }
    paths.push_back(p);
  }
  auto options = small_maze_eval(2);
  options.max_batch = 3;
  std::vector<EvalCondition> conditions;
  for (auto i : {Intervention::kDescriptor, Intervention::kFiller, Intervention::kFull,
                 Intervention::kPermute, Intervention::kRandom, Intervention::kDepths}) {
    EvalCondition condition;
    condition.intervention = i;
    condition.first_depth = condition.last_depth = 2;
    conditions.push_back(condition);
  }
  std::vector<EvalSample> samples;
  int64_t progress = 0;
  options.on_sample = [&] { ++progress; };
  const auto results = evaluate_paths(model, testing::device(), paths, conditions, options,
                                      [&](const EvalSample& s) { samples.push_back(s); });
  ASSERT_EQ(results.size(), conditions.size());
  ASSERT_EQ(samples.size(), conditions.size() * 2 * 2);
  EXPECT_EQ(progress, static_cast<int64_t>(samples.size()));
  const auto& vocab = tasks::vocabulary(tasks::Kind::kMaze);
  tasks::TaskSource source(tasks::Kind::kMaze, 4, 5, 1);
  size_t at = 0;
  for (size_t ci = 0; ci < conditions.size(); ++ci) {
    EXPECT_EQ(results[ci].summary.count, 4);
    for (size_t j = 0; j < paths.size(); ++j)
      for (int64_t i = 0; i < 2; ++i) {
        const auto& sample = samples[at++];
        EXPECT_EQ(sample.label, paths[j].label);
        EXPECT_EQ(sample.problem, i);
        // The prompt as a user would type it for lol generate --task maze.
        const auto seq = source.sequence(i * 5 + paths[j].strategy - 1);
        const bool descriptor = conditions[ci].intervention == Intervention::kDescriptor;
        tasks::Tokens words = {"Q", ":"};
        words.insert(words.end(), seq.question.begin(), seq.question.end());
        const auto bracket = descriptor ? seq.descriptor : tasks::filler(tasks::Kind::kMaze, true);
        words.insert(words.end(), bracket.begin(), bracket.end());
        ASSERT_EQ(vocab.decode(sample.prompt), words);
        Prompt prompt{sample.prompt, static_cast<int64_t>(words.size()), {}};
        for (int64_t p = 2 + static_cast<int64_t>(seq.question.size()); p < prompt.prompt_len; ++p)
          prompt.router_only.push_back(p);
        SamplingOptions sampling;
        sampling.max_tokens = static_cast<int64_t>(sample.generated.size());
        sampling.stop_tokens = {vocab.id("<eos>", "test")};
        sampling.vocab_limit = vocab.size();
        const auto forced = condition_path(conditions[ci], paths, j, c.library_size, 5);
        std::optional<ForcedPath> file;
        if (forced) file = ForcedPath::from_json(json::parse(forced->to_json().dump()));
        const auto expected =
            generate(model, {prompt}, sampling, testing::device(), file ? &*file : nullptr);
        EXPECT_EQ(sample.generated, expected[0].tokens)
            << conditions[ci].name() << " " << sample.label << " problem " << i;
        auto all = vocab.decode(sample.prompt);
        const auto generated = vocab.decode(sample.generated);
        all.insert(all.end(), generated.begin(), generated.end());
        const auto score = tasks::score_sequence(tasks::Kind::kMaze, all, paths[j].strategy, "t");
        EXPECT_EQ(sample.score.followed, score.followed);
        EXPECT_EQ(sample.score.trace_legal, score.trace_legal);
      }
  }
  // Forcing changes what the model writes (so the comparison above would see a path ignored):
  // conditions are in order, four samples each; filler is the second, full the third.
  int changed = 0;
  for (size_t i = 0; i < 4; ++i) changed += samples[4 + i].generated != samples[8 + i].generated;
  EXPECT_GE(changed, 2);
}

// `unbiased` is the descriptor condition with the balancing bias at zero: its generations are
// generate()'s on the model with its bias zeroed by hand, the descriptor's are generate()'s with
// the bias, the two differ where the bias decides windows, and the model keeps its bias.
TEST(PathEval, UnbiasedIsTheDescriptorWithTheBiasAtZero) {
  auto model = loud_maze_model(21);
  {
    torch::NoGradGuard no_grad;
    for (auto& bias : model->core().balance_biases()) bias[0] = 2.0;  // expert 0 wins everywhere
  }
  const auto biased = torch::cat(model->core().balance_biases()).clone();
  std::vector<LabelledPath> paths(2);
  for (int s : {1, 3}) {
    auto& p = paths[s / 2];
    p.strategy = s;
    p.label = tasks::strategy_name(tasks::Kind::kMaze, s);
    p.path.depths[1][0].expert = 1;  // forced by no condition here
  }
  auto options = small_maze_eval(3);
  std::vector<EvalCondition> conditions(2);
  conditions[0].intervention = Intervention::kDescriptor;
  conditions[1].intervention = Intervention::kUnbiased;
  std::vector<EvalSample> samples;
  const auto results = evaluate_paths(model, testing::device(), paths, conditions, options,
                                      [&](const EvalSample& s) { samples.push_back(s); });
  ASSERT_EQ(samples.size(), 2u * 2 * 3);
  EXPECT_EQ(results[1].condition.name(), "unbiased");
  EXPECT_TRUE(torch::equal(torch::cat(model->core().balance_biases()), biased));
  const auto& vocab = tasks::vocabulary(tasks::Kind::kMaze);
  tasks::TaskSource source(tasks::Kind::kMaze, 4, 5, 1);
  auto expected = [&](const EvalSample& sample, size_t label) {
    const auto seq = source.sequence(sample.problem * 5 + paths[label].strategy - 1);
    const auto prompt = task_eval_prompt(tasks::Kind::kMaze, seq.question, seq.descriptor);
    EXPECT_EQ(prompt.tokens, sample.prompt);
    SamplingOptions sampling;
    sampling.max_tokens = static_cast<int64_t>(sample.generated.size());
    sampling.stop_tokens = {vocab.id("<eos>", "test")};
    sampling.vocab_limit = vocab.size();
    return generate(model, {prompt}, sampling, testing::device())[0].tokens;
  };
  int differ = 0;
  for (size_t k = 0; k < 6; ++k) {  // conditions in order, labels in order, then problems
    EXPECT_EQ(samples[k].generated, expected(samples[k], k / 3)) << "descriptor " << k;
    differ += samples[k].generated != samples[6 + k].generated;
  }
  EXPECT_GE(differ, 1);  // the bias decides windows, so removing it changes traces
  {
    torch::NoGradGuard no_grad;
    for (auto& bias : model->core().balance_biases()) bias.zero_();
  }
  for (size_t k = 6; k < 12; ++k)
    EXPECT_EQ(samples[k].generated, expected(samples[k], (k - 6) / 3)) << "unbiased " << k;
}

TEST(PathEval, PathDirectoriesAreCheckedAgainstTaskAndModel) {
  const std::string dir = testing::temp_dir("path_eval_dirs");
  EXPECT_THROW(load_task_paths(dir + "/missing", tasks::Kind::kMaze, 4, 4, false), Error);
  write_file_atomic(dir + "/a.json",
                    R"({"label":"bfs","entries":[{"depth":1,"window":0,"expert":3}]})");
  write_file_atomic(dir + "/b.json",
                    R"({"label":"dfs","entries":[{"depth":2,"window":1,"gate":0.5}]})");
  const auto paths = load_task_paths(dir, tasks::Kind::kMaze, 4, 4, false);
  ASSERT_EQ(paths.size(), 2u);
  EXPECT_EQ(paths[0].strategy, 1);
  EXPECT_EQ(paths[1].strategy, 2);
  auto message = [&](tasks::Kind kind, int64_t depth, int64_t library) {
    try {
      load_task_paths(dir, kind, depth, library, false);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(
      message(tasks::Kind::kSudoku, 4, 4).find("a.json: label 'bfs' names no sudoku strategy"),
      std::string::npos);
  EXPECT_NE(message(tasks::Kind::kMaze, 4, 3).find("a.json"), std::string::npos);
  EXPECT_NE(message(tasks::Kind::kMaze, 1, 4).find("b.json"), std::string::npos);
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A run interrupted at steps 4,991 and 26,154 (a checkpoint each) and resumed curves at the
// same steps as one that was not: multiples of every x checkpoint_every, and the last.
TEST(StrategyControl, CurvesPickCheckpointsByStep) {
  auto steps_of = [](const std::vector<int64_t>& steps, int64_t interval, int64_t every) {
    std::vector<int64_t> out;
    for (size_t i : curve_checkpoints(steps, interval, every)) out.push_back(steps[i]);
    return out;
  };
  std::vector<int64_t> straight, interrupted;
  for (int64_t s = 2000; s <= 40000; s += 2000) straight.push_back(s);
  for (int64_t s : straight) {
    interrupted.push_back(s);
    if (s == 4000) interrupted.push_back(4991);
    if (s == 26000) interrupted.push_back(26154);
  }
  const std::vector<int64_t> every_two = {4000,  8000,  12000, 16000, 20000,
                                          24000, 28000, 32000, 36000, 40000};
  EXPECT_EQ(steps_of(straight, 2000, 2), every_two);
  EXPECT_EQ(steps_of(interrupted, 2000, 2), every_two);
  EXPECT_EQ(steps_of(interrupted, 2000, 1), straight);
  // Stopped at 26,154 and not resumed: the curve ends at the model there is.
  const std::vector<int64_t> so_far(interrupted.begin(), interrupted.begin() + 15);
  EXPECT_EQ(steps_of(so_far, 2000, 2),
            (std::vector<int64_t>{4000, 8000, 12000, 16000, 20000, 24000, 26154}));
  // A last step off the grid (steps not a multiple of the interval) is still the last point.
  EXPECT_EQ(steps_of({300, 600, 900, 1000}, 300, 2), (std::vector<int64_t>{600, 1000}));
  // Checkpoints only at the end: every k-th counting back from the last.
  EXPECT_EQ(steps_of({10, 20, 30, 40, 50}, 0, 2), (std::vector<int64_t>{10, 30, 50}));
  EXPECT_TRUE(steps_of({}, 2000, 2).empty());
  EXPECT_THROW(curve_checkpoints({10}, 10, 0), Error);
}

TEST(StrategyControl, DistinctPathsCompareExpertsWhereverEitherPathReaches) {
  ForcedPath a;
  a.depths[1][0].expert = 1;
  a.depths[1][1].expert = 2;
  a.depths[2][1].expert = 0;
  ForcedPath reused = a;  // ordinal 2 reuses ordinal 1 (SPEC 1.6): the same path
  reused.depths[1][2].expert = 2;
  ForcedPath gated = a;  // gates are not what makes a path distinct
  gated.depths[1][1].gate = 0.25;
  ForcedPath later = a;  // differs only beyond a's last ordinal
  later.depths[2][3].expert = 3;
  ForcedPath deeper = a;
  deeper.depths[2][1].expert = 1;
  EXPECT_EQ(distinct_paths({a, reused, gated}, 2), 1);
  EXPECT_EQ(distinct_paths({a, later}, 2), 2);
  EXPECT_EQ(distinct_paths({a, deeper, reused}, 2), 2);
  EXPECT_EQ(distinct_paths({a, deeper, later}, 2), 3);
  EXPECT_EQ(distinct_paths({}, 2), 0);
}

// measure_strategy_control is the chain `lol route` (seed A) | `lol path extract` | `lol path
// eval --interventions descriptor,full` (seed B): the same paths, through their JSON files, give
// the same generations, on problems of the evaluation seed.
// `rule` picks how the curve's mode paths choose experts, as `lol path extract --rule` does:
// with a balancing bias that makes every window run expert 0, the routed rule's paths force
// expert 0 everywhere, the SPEC rule's (argmax of the mean p) do not.
TEST(StrategyControl, ModePathsFollowTheChosenRule) {
  auto model = loud_maze_model(23);
  {
    torch::NoGradGuard no_grad;
    for (auto& bias : model->core().balance_biases()) {
      bias.zero_();
      bias[0] = 2.0;  // p + b: expert 0 wins every window
    }
  }
  StrategyControlOptions o;
  o.maze_size = 4;
  o.count = 2;
  o.route_seed = 3;
  std::map<ModeRule, std::vector<LabelledPath>> got;
  for (auto rule : {ModeRule::kProbabilities, ModeRule::kRouted}) {
    o.rule = rule;
    const auto mode = task_mode_paths(model, o);
    got[rule] = mode.paths;
    auto source = task_sequences("maze", 4, 2, 3);
    ModePathBuilder builder(rule);
    RouteStatsBuilder stats(model->config().core_depth, model->config().route_choices(),
                            model->config().router_skip);
    extract_routes(model, *source, ExtractOptions{}, [&](SequenceRoutes&& s) {
      builder.add(s);
      stats.add(s);
    });
    const auto expected = builder.paths();
    ASSERT_EQ(got[rule].size(), expected.size());
    std::vector<ForcedPath> forced;
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(got[rule][i].label, expected[i].label);
      EXPECT_EQ(got[rule][i].path.to_json(), expected[i].path.to_json());
      forced.push_back(expected[i].path);
    }
    // Beside the paths: the distinct count by this rule and the bias's share of the windows,
    // as `lol path extract` and `lol path stats` give them from the same routes.
    EXPECT_EQ(rule == ModeRule::kRouted ? mode.distinct_by_routes : mode.distinct_by_probabilities,
              distinct_paths(forced, model->config().core_depth));
    const auto expected_stats = stats.finish();
    EXPECT_DOUBLE_EQ(mode.bias_decided, expected_stats.bias_decided);
    ASSERT_EQ(mode.bias_decided_by_depth.size(), expected_stats.bias_decided_by_depth.size());
    for (size_t l = 0; l < mode.bias_decided_by_depth.size(); ++l)
      EXPECT_DOUBLE_EQ(mode.bias_decided_by_depth[l], expected_stats.bias_decided_by_depth[l]);
    EXPECT_DOUBLE_EQ(mode.skipped, expected_stats.skipped);
    EXPECT_DOUBLE_EQ(mode.skipped_of_bias_decided, expected_stats.skipped_of_bias_decided);
    EXPECT_GT(mode.bias_decided, 0.0);
    EXPECT_EQ(mode.distinct_by_routes, 1);  // expert 0 everywhere
  }
  int64_t routed_other = 0, spec_other = 0;
  for (const auto& p : got[ModeRule::kRouted])
    for (const auto& [depth, entries] : p.path.depths)
      for (const auto& [ordinal, e] : entries) routed_other += e.expert.value_or(-1) != 0;
  for (const auto& p : got[ModeRule::kProbabilities])
    for (const auto& [depth, entries] : p.path.depths)
      for (const auto& [ordinal, e] : entries) spec_other += e.expert.value_or(-1) != 0;
  EXPECT_EQ(routed_other, 0);
  EXPECT_GT(spec_other, 0);
}

TEST(StrategyControl, EqualsRouteExtractAndEvalThroughTheirFiles) {
  auto model = loud_maze_model(23);
  const auto& c = model->config();
  StrategyControlOptions o;
  o.maze_size = 4;
  o.count = 2;
  o.route_seed = 3;
  o.eval_seed = 7;
  o.max_batch = 3;
  std::vector<EvalSample> samples;
  const auto control = measure_strategy_control(model, testing::device(), o,
                                                [&](const EvalSample& s) { samples.push_back(s); });

  auto source = task_sequences("maze", 4, 2, 3);
  ModePathBuilder builder;
  extract_routes(model, *source, ExtractOptions{}, [&](SequenceRoutes&& s) { builder.add(s); });
  std::vector<LabelledPath> paths;
  std::vector<ForcedPath> forced;
  for (const auto& m : builder.paths()) {
    LabelledPath p;
    p.label = m.label;
    p.strategy = tasks::strategy_by_name(tasks::Kind::kMaze, m.label);
    p.path = ForcedPath::from_json(json::parse(m.to_json().dump()));
    forced.push_back(p.path);
    paths.push_back(p);
  }
  ASSERT_EQ(paths.size(), 5u);
  EXPECT_EQ(control.labels, 5);
  EXPECT_EQ(control.distinct_paths, distinct_paths(forced, c.core_depth));
  PathEvalOptions eval;
  eval.kind = tasks::Kind::kMaze;
  eval.maze_size = 4;
  eval.count = 2;
  eval.seed = 7;
  EvalCondition descriptor, full;
  descriptor.intervention = Intervention::kDescriptor;
  full.intervention = Intervention::kFull;
  std::vector<EvalSample> expected;
  const auto results = evaluate_paths(model, testing::device(), paths, {descriptor, full}, eval,
                                      [&](const EvalSample& s) { expected.push_back(s); });
  ASSERT_EQ(samples.size(), 2u * 5 * 2);
  ASSERT_EQ(samples.size(), expected.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    EXPECT_EQ(samples[i].condition, expected[i].condition) << i;
    EXPECT_EQ(samples[i].prompt, expected[i].prompt) << i;
    EXPECT_EQ(samples[i].generated, expected[i].generated) << i;
  }
  // Generated on the evaluation seed's problems, not on those the paths came from.
  const auto& vocab = tasks::vocabulary(tasks::Kind::kMaze);
  tasks::TaskSource eval_problems(tasks::Kind::kMaze, 4, 7, 1),
      route_problems(tasks::Kind::kMaze, 4, 3, 1);
  const auto words = vocab.decode(samples[0].prompt);
  const auto q = eval_problems.sequence(samples[0].problem * 5).question;
  EXPECT_TRUE(std::equal(q.begin(), q.end(), words.begin() + 2));
  const auto other = route_problems.sequence(samples[0].problem * 5).question;
  EXPECT_FALSE(other.size() <= words.size() - 2 &&
               std::equal(other.begin(), other.end(), words.begin() + 2));
  EXPECT_EQ(control.descriptor.summary.confusion, results[0].summary.confusion);
  EXPECT_EQ(control.full.summary.confusion, results[1].summary.confusion);

  auto later = control;
  later.step = 40;
  later.tokens = 81920;
  later.full.summary.strategy_as_requested = 0.625;
  const auto table = strategy_curve_table({control, later});
  EXPECT_NE(table.find("| 40 | 81920 | " + std::to_string(control.distinct_by_probabilities) +
                       " / " + std::to_string(control.distinct_by_routes) + " of 5 | " +
                       [&] {
                         std::ostringstream f;
                         f << std::fixed << std::setprecision(3) << control.bias_decided;
                         return f.str();
                       }() +
                       " |"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| 0.625 |"), std::string::npos) << table;
  const auto page = strategy_curve_html({control, later}, tasks::Kind::kMaze, "a <title>");
  EXPECT_NE(page.find("a &lt;title&gt;"), std::string::npos);
  EXPECT_EQ(count_of(page, "<h1>"), 1u);
  EXPECT_NE(page.find("(b) forced mode path at step 40"), std::string::npos);
  // The routes along training: the bias's share at every depth the model has, and no other.
  ASSERT_EQ(control.bias_decided_by_depth.size(), static_cast<size_t>(c.core_depth));
  EXPECT_NE(page.find("Routes along training"), std::string::npos);
  EXPECT_NE(page.find("bias decided: depth " + std::to_string(c.core_depth)), std::string::npos);
  EXPECT_EQ(page.find("bias decided: depth " + std::to_string(c.core_depth + 1)),
            std::string::npos);
  EXPECT_NE(page.find("distinct paths / strategies: routed rule"), std::string::npos);
  // The skipped windows name the skip only where a model has one.
  EXPECT_EQ(page.find("routed to the skip"), std::string::npos);
  later.router_skip = true;
  EXPECT_NE(strategy_curve_html({control, later}, tasks::Kind::kMaze, "t")
                .find("skipped (a gate below " + skip_gate_text() + " or routed to the skip)"),
            std::string::npos);
}

// How `lol path curve --show` prints a path and a generation: the reference is the requested
// strategy's own continuation, so a generation that reproduces it reads as followed and right,
// and one that follows another strategy names that one.
TEST(StrategyControl, ExamplesShowTheTraceBesideTheRequestedReference) {
  ForcedPath p;
  p.depths[1][0].expert = 2;
  p.depths[1][2].expert = 3;  // ordinal 1 left to the router
  p.depths[2][0].expert = 1;
  EXPECT_EQ(path_line(p), "1: 2 - 3 | 2: 1");

  const auto kind = tasks::Kind::kMaze;
  const auto& vocab = tasks::vocabulary(kind);
  tasks::TaskSource problems(kind, 5, 11, 1);
  const auto bfs = problems.sequence(0), dfs = problems.sequence(1);  // strategies 1 and 2
  ASSERT_NE(bfs.trace, dfs.trace);
  std::vector<LabelledPath> paths(2);
  paths[0].label = "bfs";
  paths[0].strategy = 1;
  paths[0].path = p;
  paths[1].label = "dfs";
  paths[1].strategy = 2;
  // Each label's generation is the other label's reference continuation, prompted with the
  // filler; the first one is also shown with the descriptor, reproducing its own reference.
  auto sample = [&](const LabelledPath& label, const tasks::Sequence& written, bool descriptor) {
    EvalSample s;
    s.label = label.label;
    s.condition = descriptor ? "descriptor" : "full";
    const auto prompt = task_eval_prompt(kind, bfs.question,
                                         descriptor ? bfs.descriptor : tasks::filler(kind, true));
    s.prompt = prompt.tokens;
    const auto whole = vocab.encode(written.tokens(), "test");
    s.generated.assign(whole.begin() + static_cast<std::ptrdiff_t>(2 + bfs.question.size() +
                                                                   bfs.descriptor.size()),
                       whole.end());
    auto words = vocab.decode(s.prompt);
    const auto g = vocab.decode(s.generated);
    words.insert(words.end(), g.begin(), g.end());
    s.score = tasks::score_sequence(kind, words, label.strategy, "test");
    return s;
  };
  const auto text = strategy_examples(
      {sample(paths[0], bfs, true), sample(paths[0], dfs, false), sample(paths[1], bfs, false)},
      paths, kind);
  std::istringstream in(text);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 9u) << text;
  EXPECT_EQ(lines[0], "bfs, true descriptor: followed bfs, answer right");
  EXPECT_EQ(lines[1].substr(13), lines[2].substr(13));  // model == reference
  EXPECT_EQ(lines[2], "  reference  R : " + tasks::join_words(bfs.trace) +
                          " A : " + tasks::join_words(bfs.answer) + " <eos>");
  EXPECT_EQ(lines[3],
            "bfs, filler, mode path forced (1: 2 - 3 | 2: 1): followed dfs, answer right");
  EXPECT_EQ(lines[5], lines[2]);  // the requested strategy's reference, whatever was forced
  EXPECT_EQ(lines[6].rfind("dfs, filler, mode path forced (): followed bfs", 0), 0u) << lines[6];
  EXPECT_EQ(lines[8], "  reference  R : " + tasks::join_words(dfs.trace) +
                          " A : " + tasks::join_words(dfs.answer) + " <eos>");
  EXPECT_THROW(strategy_examples({sample(paths[0], bfs, true)}, {paths[1]}, kind), Error);
}

TEST(Svg, HeatmapsAndBarsAreDeterministicEscapedAndChecked) {
  EXPECT_EQ(svg::colour(0), "#f7fbff");
  EXPECT_EQ(svg::colour(0.5), "#6baed6");
  EXPECT_EQ(svg::colour(1), "#08306b");
  EXPECT_EQ(svg::colour(-3), svg::colour(0));
  EXPECT_EQ(svg::colour(std::nan("")), svg::colour(0));
  EXPECT_EQ(svg::escape("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
  svg::Heatmap h;
  h.title = "fr <&> de";
  h.rows = {"1", "2"};
  h.columns = {"a", "b", "c"};
  h.values = {{0, 0.5, 1}, {0.25, 0.75, 0.1}};
  const auto a = svg::heatmap(h);
  EXPECT_EQ(a, svg::heatmap(h));              // same data, same bytes
  EXPECT_EQ(count_of(a, "<rect"), 6u + 10u);  // cells and the ten-step colour scale
  EXPECT_NE(a.find("fr &lt;&amp;&gt; de"), std::string::npos);
  EXPECT_EQ(a.find("fr <&> de"), std::string::npos);
  EXPECT_NE(a.find(">0.75<"), std::string::npos);
  EXPECT_NE(a.find("fill=\"#08306b\""), std::string::npos);  // the cell at max
  EXPECT_EQ(count_of(a, "<svg"), count_of(a, "</svg>"));
  EXPECT_EQ(count_of(a, "<text"), count_of(a, "</text>"));
  h.values[1].pop_back();
  EXPECT_THROW(svg::heatmap(h), Error);
  svg::BarChart b;
  b.title = "margins";
  b.labels = {"x", "y"};
  b.values = {0.2, std::numeric_limits<double>::infinity()};
  const auto bars = svg::bar_chart(b);
  EXPECT_EQ(count_of(bars, "<rect"), 2u);
  EXPECT_EQ(bars.find("inf"), std::string::npos);
  b.values.pop_back();
  EXPECT_THROW(svg::bar_chart(b), Error);
}

TEST(Svg, CurvesJoinEachGroupAndALogAxisLeavesOutWhatItCannotDraw) {
  svg::Scatter s;
  s.title = "curves";
  s.x = {1e9, 1e10, 1e11, 1e9, 0.0, 1e11};
  s.y = {5.0, 4.0, 3.5, 5.5, 9.0, 4.5};
  s.group = {0, 0, 0, 1, 1, 1};
  s.groups = {"lol", "dense"};
  const auto points = svg::scatter(s);
  EXPECT_EQ(count_of(points, "<polyline"), 0u);
  EXPECT_EQ(count_of(points, "<circle"), 6u + 2u);  // points and the legend
  s.lines = s.log_x = true;
  const auto curves = svg::scatter(s);
  EXPECT_EQ(curves, svg::scatter(s));
  EXPECT_EQ(count_of(curves, "<polyline"), 2u);
  EXPECT_EQ(count_of(curves, "<circle"), 5u + 2u);  // x = 0 has no place on a log axis
  // The axis ends are data values (10^x of the padded log range), not logarithms.
  EXPECT_NE(curves.find("(log scale)"), std::string::npos);
  EXPECT_NE(curves.find(">1.26e+11<"), std::string::npos);  // 10^11.1
  EXPECT_NE(curves.find(">794M<"), std::string::npos);      // 10^8.9
  // A linear axis of token counts reads in k and M, of shares in two decimals.
  s.log_x = false;
  s.x = {2048, 34816000, 169984000, 2048, 34816000, 169984000};
  s.y = {0.0, 0.5, 1.0, 0.25, 0.5, 0.75};
  const auto linear = svg::scatter(s);
  EXPECT_NE(linear.find(">-8.5M<"), std::string::npos);  // 2048 - 5% of the range
  EXPECT_NE(linear.find(">178M<"), std::string::npos);
  EXPECT_NE(linear.find(">-0.05<"), std::string::npos);
  EXPECT_NE(linear.find(">1.05<"), std::string::npos);
  // The unit follows the rounding: an axis end just under a million reads 1M (not 1e+03k), just
  // under a billion 1e+09 (not 1e+03M). The ends are the data's 952,000 plus 5% of the range.
  s.y = {0, 1, 0, 1, 0, 1};
  s.lines = false;
  s.x = {0, 952000, 0, 952000, 0, 952000};  // 999,600
  EXPECT_NE(svg::scatter(s).find(">1M<"), std::string::npos);
  s.x = {0, 952e6, 0, 952e6, 0, 952e6};  // 999.6M
  EXPECT_NE(svg::scatter(s).find(">1e+09<"), std::string::npos);
  s.x = {0, 940000, 0, 940000, 0, 940000};  // 987,000
  EXPECT_NE(svg::scatter(s).find(">987k<"), std::string::npos);
  // The dense curve has two drawable points: one segment, from x 1e9 to 1e11 (the plot's ends).
  const auto dense = curves.find("stroke=\"#ff7f0e\"");
  ASSERT_NE(dense, std::string::npos);
  const auto line = curves.rfind("<polyline points=\"", dense);
  const auto pts = curves.substr(line, dense - line);
  EXPECT_EQ(count_of(pts, ","), 2u);
}

TEST(Report, OneSelfContainedPageWithEveryLabelAndCondition) {
  std::mt19937 rng(5);
  const auto routes = planted_routes(rng, {{"bfs", {0, 3}}, {"<dfs>", {2, 1}}}, 3, 4, 20);
  RouteStatsBuilder stats(3, 4, false);
  ProbeData probes(3, 4);
  PathPcaBuilder pca(3, 4);
  for (auto r : routes) {
    for (auto& w : r.windows) w.flipped = w.route.window == 0;
    stats.add(r);
    probes.add(r);
    pca.add(r);
  }
  ReportInputs in;
  in.title = "planted & checked";
  in.header = RouteFileHeader{"m", "s", 3, 4, 40};
  in.stats = stats.finish();
  ProbeOptions options;
  options.folds = 2;
  options.shuffles = 2;
  in.probes = {probes.run("window", options), probes.run("sequence", options)};
  in.readouts = probes.readouts(options);
  in.pca = pca.finish();
  json condition = {{"condition", "full"},
                    {"count", 10},
                    {"strategy_as_requested", 0.5},
                    {"strategies", {"none", "bfs", "dfs", "astar", "bidirectional", "deadend"}},
                    {"confusion", json::array()}};
  for (int r = 0; r < 5; ++r) condition["confusion"].push_back({r, 1, 0, 0, 0, 2});
  in.path_eval = check_path_eval_results(json::array({condition}));
  const auto page = html_report(in);
  EXPECT_EQ(page, html_report(in));
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("<title>planted &amp; checked</title>"), std::string::npos);
  // Offline: no scripts, no outside resources; the only URL is the SVG namespace.
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("src="), std::string::npos);
  EXPECT_EQ(count_of(page, "http"), count_of(page, "http://www.w3.org/2000/svg"));
  // Utilisation (all, two labels), U, agreement (two labels), label similarity, PCA, margins,
  // flips, windows the bias decided, probes, confusion.
  EXPECT_EQ(count_of(page, "<svg"), 3u + 1u + 2u + 1u + 1u + 1u + 1u + 1u + 1u + 1u);
  EXPECT_NE(page.find("Windows the balancing bias decided"), std::string::npos);
  EXPECT_NE(page.find("Windows run with a gate below 0.01 (skips: the block adds almost "
                      "nothing): " +
                      [&] {
                        std::ostringstream f;
                        f << std::fixed << std::setprecision(3) << in.stats.skipped;
                        return f.str();
                      }()),
            std::string::npos);
  EXPECT_NE(page.find("Path similarity between labels"), std::string::npos);
  EXPECT_NE(page.find("expert-frequency log-likelihood ratio"), std::string::npos);
  EXPECT_NE(page.find("label &lt;dfs&gt;"), std::string::npos);
  EXPECT_NE(page.find("condition: full"), std::string::npos);
  EXPECT_NE(page.find("Flip rate"), std::string::npos);
  // Malformed evaluation results name what is wrong.
  auto message = [](json bad) {
    try {
      check_path_eval_results(bad);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(json::object()).find("non-empty JSON array"), std::string::npos);
  auto short_row = condition;
  short_row["confusion"][2] = {1, 2};
  EXPECT_NE(message(json::array({short_row})).find("condition 'full': each confusion row"),
            std::string::npos);
  auto negative = condition;
  negative["confusion"][0][0] = -1;
  EXPECT_NE(message(json::array({negative})).find("counts must be numbers >= 0"),
            std::string::npos);
}

// lol info's figures for the routing tensors, against values worked by hand.
TEST(RoutingWeights, FiguresAreDistancesFromTheStartAndNorms) {
  TensorMap t;
  auto f32 = [](std::vector<float> v, std::vector<int64_t> shape) {
    return torch::tensor(v).reshape(shape);
  };
  // FiLM over d = 4 at D = 2: depth 1 gamma - 1 = (0.5, -0.5, 0.5, -0.5) -> rms 0.5; depth 2
  // at the identity -> 0. beta (3, 0, 4, 0) / (0, 0, 0, 0) -> rms 2.5, 0.
  t["core.film.attn.gamma"] = f32({1.5, 0.5, 1.5, 0.5, 1, 1, 1, 1}, {2, 4});
  t["core.film.attn.beta"] = f32({3.0, 0, 4, 0, 0, 0, 0, 0}, {2, 4});
  t["router.depth_vectors"] = f32({3.0, 4, 0, 0, 0, 0, 0, 12}, {2, 4});
  // Untied router over L = 2 experts: rows (3, 4, 0, 0) -> 5, (1, 0, 0, 0) -> 1; then 0, 2.
  t["router.weight"] = f32({3.0, 4, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0}, {2, 2, 4});
  t["router.balance_bias"] = f32({0.25, -0.25, 0.5, -0.5}, {2, 2});
  t["router.skip_bias"] = f32({-0.125, 0.375}, {2});  // per depth, as stored
  t["embed.weight"] = torch::ones({3, 4});            // not a routing tensor: left alone
  const auto w = routing_weights(t);
  ASSERT_EQ(w.film.size(), 2u);
  EXPECT_EQ(w.film[0].name, "attn.gamma - 1");
  EXPECT_NEAR(w.film[0].values.at(0), 0.5, 1e-12);
  EXPECT_NEAR(w.film[0].values.at(1), 0.0, 1e-12);
  EXPECT_EQ(w.film[1].name, "attn.beta");
  EXPECT_NEAR(w.film[1].values.at(0), 2.5, 1e-12);
  ASSERT_EQ(w.depth_vectors.size(), 1u);
  EXPECT_EQ(w.depth_vectors[0].values, (std::vector<double>{5, 12}));
  ASSERT_EQ(w.router_rows.size(), 2u);
  EXPECT_EQ(w.router_rows[0].name, "router.weight[1]");
  EXPECT_EQ(w.router_rows[0].values, (std::vector<double>{5, 1}));
  EXPECT_EQ(w.router_rows[1].values, (std::vector<double>{0, 2}));
  ASSERT_EQ(w.balance_bias.size(), 2u);
  EXPECT_EQ(w.balance_bias[1].name, "router.balance_bias[2]");
  EXPECT_EQ(w.balance_bias[1].values, (std::vector<double>{0.5, -0.5}));
  const json j = w.to_json();
  EXPECT_EQ(j.at("film_rms").at("attn.beta").at(0).get<double>(), 2.5);
  EXPECT_EQ(j.at("router_depth_vector_norms"), json({5.0, 12.0}));
  EXPECT_EQ(j.at("router_row_norms").at("router.weight").size(), 2u);
  EXPECT_EQ(j.at("balance_bias").at("router.balance_bias").size(), 2u);  // one row per depth
  ASSERT_EQ(w.skip_bias.size(), 1u);
  EXPECT_EQ(j.at("skip_bias"), json({-0.125, 0.375}));
  EXPECT_FALSE(j.contains("embed.weight"));
  // The bias of the 80,000-step maze runs is at the limit a bias on probabilities has; the
  // sudoku model's is not; an empty row (no bias) is not.
  EXPECT_TRUE(bias_at_probability_limit({0.250, 0.250, 0.248, -0.748}));
  EXPECT_FALSE(bias_at_probability_limit({0.036, -0.346, 0.145, 0.165}));
  EXPECT_FALSE(bias_at_probability_limit({}));

  t["router.depth_vectors"] = torch::zeros({2, 2, 4});
  try {
    routing_weights(t);
    ADD_FAILURE() << "a [2, 2, 4] depth vector tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("router.depth_vectors: depth vectors are [D, d]"),
              std::string::npos)
        << e.what();
  }
}

// Every family's stored routing tensors are found by their canonical names; a fresh model sits
// at FiLM's identity and a zero bias.
TEST(RoutingWeights, AFreshModelOfEachFamilyStartsAtTheIdentity) {
  for (Family family : {Family::kLol, Family::kMoe, Family::kDense}) {
    LanguageModel model(testing::tiny_config(family));
    model->initialize(1);
    const std::string dir = testing::temp_dir("routing_weights");
    save_model(model, dir);
    const auto w = routing_weights(read_safetensors(dir + "/model.safetensors", is_routing_weight));
    const auto& c = model->config();
    SCOPED_TRACE(enum_name(family));
    if (family == Family::kDense) {
      EXPECT_TRUE(w.empty());
      continue;
    }
    for (const auto& row : w.balance_bias)
      for (double b : row.values) EXPECT_EQ(b, 0.0);
    for (const auto& row : w.router_rows)
      EXPECT_EQ(row.values.size(),
                static_cast<size_t>(family == Family::kLol ? c.library_size : c.moe_experts));
    if (family == Family::kMoe) {
      EXPECT_FALSE(w.router_rows.empty());
      EXPECT_TRUE(w.film.empty());
      continue;
    }
    ASSERT_EQ(w.film.size(), 4u);
    for (const auto& row : w.film) {
      ASSERT_EQ(row.values.size(), static_cast<size_t>(c.core_depth));
      for (double v : row.values) EXPECT_EQ(v, 0.0) << row.name;
    }
    ASSERT_EQ(w.depth_vectors.size(), 1u);
    EXPECT_EQ(w.router_rows.size(), c.router_tied ? 1u : static_cast<size_t>(c.core_depth));
  }
}

}  // namespace
}  // namespace lol
