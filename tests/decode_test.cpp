// Cached decoding against the full forward pass (SPEC 4.1).
#include <random>
#include <set>

#include "helpers.h"
#include "infer/decoder.h"
#include "infer/generate.h"
#include "recompute.h"

namespace lol {
namespace {

using testing::make_model;
using testing::random_tokens;

using Seq = TokenSequence;

std::vector<Seq> decode_seqs(std::mt19937& rng, const ModelConfig& c) {
  std::vector<Seq> seqs;
  for (int i = 0; i < 3; ++i) {
    Seq s;
    const int64_t n = std::uniform_int_distribution<int64_t>(2, 14)(rng);
    s.tokens = random_tokens(rng, n, c.vocab_size);
    s.prompt_len = std::uniform_int_distribution<int>(0, 1)(rng)
                       ? std::uniform_int_distribution<int64_t>(1, n)(rng)
                       : 0;
    for (int64_t p = 0; p < n; ++p)
      if (std::uniform_int_distribution<int>(0, 5)(rng) == 0) s.router_only.push_back(p);
    seqs.push_back(s);
  }
  return seqs;
}

// Full forward of all sequences packed into one row: logits per sequence and routes keyed by
// (sequence, depth, window).
struct Reference {
  std::vector<torch::Tensor> logits;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::tuple<int64_t, double, double>>
      routes;  // expert, gate, margin
};

Reference full_forward(LanguageModel& model, const std::vector<Seq>& seqs,
                       const ForcedPath* force = nullptr) {
  torch::NoGradGuard no_grad;
  Layout layout(Batch::from_documents({seqs}, /*extra_columns=*/2), model->config().vocab_size,
                testing::device());
  ForwardOptions options;
  options.force = force;
  auto result = model->forward(layout, options);
  Reference ref;
  for (const auto& d : layout.documents())
    ref.logits.push_back(result.logits.narrow(0, d.start, d.length));
  for (const auto& r : result.routes)
    for (size_t w = 0; w < r.host().experts.size(); ++w) {
      const auto& win = r.partition->windows[w];
      ref.routes[{win.document, r.depth, win.ordinal}] = {
          r.host().experts[w], r.gates[static_cast<int64_t>(w)].item<double>(),
          r.host().margins[w]};
    }
  return ref;
}

// Prefills the first `prefix` tokens of every sequence, then decodes the rest one token per
// step (all sequences in one batch; finished ones repeat their last token). Returns the
// logits after every token and the routes.
std::pair<std::vector<torch::Tensor>, std::vector<RouteRecord>> decode(
    LanguageModel& model, const std::vector<Seq>& seqs, int64_t prefix,
    const ForcedPath* force = nullptr) {
  Decoder decoder(model, testing::device(), force);
  std::vector<Prompt> prompts;
  for (const auto& s : seqs) {
    Prompt p;
    const int64_t m = std::min<int64_t>(prefix, static_cast<int64_t>(s.tokens.size()));
    p.tokens.assign(s.tokens.begin(), s.tokens.begin() + m);
    p.prompt_len = s.prompt_len;
    for (auto r : s.router_only)
      if (r < m) p.router_only.push_back(r);
    prompts.push_back(p);
  }
  std::vector<std::vector<torch::Tensor>> rows(seqs.size());
  auto out = decoder.prefill(prompts);
  std::vector<RouteRecord> routes = out.routes;
  for (size_t b = 0; b < seqs.size(); ++b) rows[b].push_back(out.logits[static_cast<int64_t>(b)]);
  int64_t longest = 0;
  for (const auto& s : seqs)
    longest = std::max<int64_t>(longest, static_cast<int64_t>(s.tokens.size()));
  for (int64_t i = prefix; i < longest; ++i) {
    std::vector<int64_t> tokens;
    std::vector<uint8_t> ro;
    for (const auto& s : seqs) {
      const int64_t n = static_cast<int64_t>(s.tokens.size());
      tokens.push_back(s.tokens[std::min(i, n - 1)]);
      ro.push_back(i < n &&
                   std::find(s.router_only.begin(), s.router_only.end(), i) != s.router_only.end());
    }
    out = decoder.step(tokens, ro);
    for (size_t b = 0; b < seqs.size(); ++b)
      if (i < static_cast<int64_t>(seqs[b].tokens.size()))
        rows[b].push_back(out.logits[static_cast<int64_t>(b)]);
    for (const auto& r : out.routes)
      if (i < static_cast<int64_t>(seqs[r.sequence].tokens.size())) routes.push_back(r);
  }
  std::vector<torch::Tensor> logits;
  for (auto& r : rows) logits.push_back(torch::stack(r));
  // prefill returns only the last prompt token's logits: align rows with positions.
  return {logits, routes};
}

void expect_equal_to_forward(LanguageModel& model, const std::vector<Seq>& seqs, int64_t prefix,
                             const ForcedPath* force = nullptr) {
  auto ref = full_forward(model, seqs, force);
  auto [logits, routes] = decode(model, seqs, prefix, force);
  for (size_t b = 0; b < seqs.size(); ++b) {
    const int64_t n = static_cast<int64_t>(seqs[b].tokens.size());
    const int64_t m = std::min<int64_t>(prefix, n);
    auto expected = ref.logits[b].narrow(0, m - 1, n - m + 1);
    ASSERT_EQ(logits[b].size(0), expected.size(0));
    const double scale = std::max(1.0, expected.abs().max().item<double>());
    EXPECT_LT(testing::max_abs_diff(logits[b], expected) / scale, 1e-4)
        << "sequence " << b << " prefix " << prefix;
  }
  size_t matched = 0;
  for (const auto& r : routes) {
    auto it = ref.routes.find({r.sequence, r.depth, r.window});
    ASSERT_NE(it, ref.routes.end())
        << "sequence " << r.sequence << " depth " << r.depth << " window " << r.window;
    const auto [expert, gate, margin] = it->second;
    if (margin > 1e-4) {
      EXPECT_EQ(r.expert, expert);
    }
    EXPECT_NEAR(r.gate, gate, 1e-4);
    ++matched;
  }
  EXPECT_EQ(matched, ref.routes.size());  // every window of every sequence was routed once
}

class GoldenDecode : public ::testing::TestWithParam<Family> {};

TEST_P(GoldenDecode, TokenByTokenAndPrefillEqualTheFullForward) {
  std::mt19937 rng(77);
  for (int trial = 0; trial < 4; ++trial) {
    auto c = testing::random_config(rng, GetParam());
    SCOPED_TRACE(c.to_json().dump());
    auto model = make_model(c, 300 + trial);
    {
      // A steered skip (router_skip_share) at a bias that decides some windows.
      torch::NoGradGuard no_grad;
      for (auto b : model->core().skip_biases())
        b.fill_(std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng));
    }
    auto seqs = decode_seqs(rng, c);
    expect_equal_to_forward(model, seqs, 1);  // decode from the first token
    expect_equal_to_forward(model, seqs, 5);  // prefill, then decode
  }
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, GoldenDecode, ::testing::ValuesIn(testing::all_families()),
                         testing::family_test_name);

TEST(GoldenDecoding, ForcedPathsMatchTheFullForward) {
  for (bool skip : {false, true}) {
    auto c = testing::tiny_config();
    c.router_skip = skip;
    SCOPED_TRACE(c.to_json().dump());
    auto model = make_model(c, 8);
    std::mt19937 rng(3);
    std::vector<Seq> seqs = {{random_tokens(rng, 13, c.vocab_size), 3, {1}},
                             {random_tokens(rng, 9, c.vocab_size), 0, {}}};
    ForcedPath path;
    path.depths[1][0] = {2, std::nullopt};
    path.depths[2][1] = {std::nullopt, 0.8};
    path.depths[3][1] = {0, 0.5};  // and every later window of depth 3
    // The skip (router_skip): window 0 of depth 2 and windows 2, 3, ... of depth 1.
    if (skip) {
      path.depths[2][0] = {c.library_size, std::nullopt};
      path.depths[1][2] = {c.library_size, 0.5};
    }
    expect_equal_to_forward(model, seqs, 1, &path);
    expect_equal_to_forward(model, seqs, 6, &path);
  }
}

TEST(Decode, ForcingTheRoutersOwnChoicesGeneratesTheSame) {
  auto c = testing::tiny_config();
  c.core_depth = 3;
  auto model = make_model(c, 12);
  Prompt prompt{{3, 9, 4, 1, 7}, 2, {}};
  SamplingOptions greedy;
  greedy.max_tokens = 20;
  auto free_run = generate(model, {prompt}, greedy, testing::device());
  ForcedPath path;
  for (const auto& r : free_run[0].routes) path.depths[r.depth][r.window] = {r.expert, r.gate};
  auto forced = generate(model, {prompt}, greedy, testing::device(), &path);
  EXPECT_EQ(forced[0].tokens, free_run[0].tokens);
  ASSERT_EQ(forced[0].routes.size(), free_run[0].routes.size());
  for (size_t i = 0; i < forced[0].routes.size(); ++i) {
    EXPECT_TRUE(forced[0].routes[i].forced_expert);
    EXPECT_EQ(forced[0].routes[i].expert, free_run[0].routes[i].expert);
  }
  // A different path changes the routes actually used.
  ForcedPath other;
  for (int64_t l = 1; l <= c.core_depth; ++l)
    other.depths[l][0] = {(free_run[0].routes[0].expert + 1) % c.library_size, 0.9};
  auto changed = generate(model, {prompt}, greedy, testing::device(), &other);
  for (const auto& r : changed[0].routes)
    EXPECT_EQ(r.expert, (free_run[0].routes[0].expert + 1) % c.library_size);
}

TEST(Decode, RetainDropsSequencesAndLeavesTheOthersAsIfAlone) {
  for (Family family : testing::all_families()) {
    auto c = testing::tiny_config(family);
    auto model = make_model(c, 14);
    std::vector<Prompt> prompts = {
        {{5, 3, 8, 1}, 2, {1}}, {{9, 9}, 0, {}}, {{4, 1, 2, 6, 3, 3, 7}, 4, {}}};
    Decoder all(model, testing::device()), kept(model, testing::device());
    all.prefill(prompts);
    auto out_kept = kept.prefill({prompts[0], prompts[2]});
    for (int64_t i = 0; i < 3; ++i) all.step({i % c.vocab_size, 7, (i * 5) % c.vocab_size});
    for (int64_t i = 0; i < 3; ++i) kept.step({i % c.vocab_size, (i * 5) % c.vocab_size});
    all.retain({0, 2});
    ASSERT_EQ(all.batch(), 2);
    EXPECT_EQ(all.position(1), kept.position(1));
    for (int64_t i = 0; i < 9; ++i) {  // crosses several window boundaries (W 4, S 2)
      std::vector<int64_t> tokens = {(i * 3) % c.vocab_size, (i * 11 + 1) % c.vocab_size};
      auto a = all.step(tokens), k = kept.step(tokens);
      EXPECT_LT(testing::max_abs_diff(a.logits, k.logits), 1e-5)
          << enum_name(family) << " step " << i;
      ASSERT_EQ(a.routes.size(), k.routes.size());
      for (size_t r = 0; r < a.routes.size(); ++r) {
        EXPECT_EQ(a.routes[r].sequence, k.routes[r].sequence);
        EXPECT_EQ(a.routes[r].expert, k.routes[r].expert);
        EXPECT_EQ(a.routes[r].window, k.routes[r].window);
      }
    }
    EXPECT_THROW(all.retain({1, 0}), Error);
    EXPECT_THROW(all.retain({2}), Error);
  }
}

// Rows that stop early are dropped from the decoder; the others continue exactly as if each had
// been generated alone.
TEST(Decode, GenerationWithRowsFinishingEarlyEqualsGeneratingEachAlone) {
  auto c = testing::tiny_config();
  c.max_seq_len = 64;
  auto model = make_model(c, 15);
  std::vector<Prompt> prompts;
  for (int64_t b = 0; b < 6; ++b)
    prompts.push_back({{(b * 5 + 1) % c.vocab_size, 3, (b + 7) % c.vocab_size}, 1, {}});
  SamplingOptions greedy;
  greedy.max_tokens = 24;
  greedy.stop = [](int64_t sequence, const std::vector<int64_t>& generated) {
    return static_cast<int64_t>(generated.size()) >=
           2 + 3 * sequence;  // row b stops after 2 + 3b tokens
  };
  auto together = generate(model, prompts, greedy, testing::device());
  for (int64_t b = 0; b < 6; ++b) {
    SamplingOptions alone_options = greedy;
    alone_options.stop = [b](int64_t, const std::vector<int64_t>& generated) {
      return static_cast<int64_t>(generated.size()) >= 2 + 3 * b;
    };
    auto alone = generate(model, {prompts[b]}, alone_options, testing::device());
    EXPECT_EQ(together[b].tokens, alone[0].tokens) << "prompt " << b;
    EXPECT_EQ(together[b].finish_reason, "stop");
    ASSERT_EQ(together[b].routes.size(), alone[0].routes.size()) << "prompt " << b;
    for (size_t r = 0; r < alone[0].routes.size(); ++r) {
      EXPECT_EQ(together[b].routes[r].sequence, b);
      EXPECT_EQ(together[b].routes[r].expert, alone[0].routes[r].expert);
      EXPECT_EQ(together[b].routes[r].window, alone[0].routes[r].window);
    }
  }
}

// Sequences admitted into a running batch decode exactly as in a decoder of their own, and
// the rows already there are undisturbed; admitted caches longer and shorter than the
// running ones (capacity widened either way).
// Sequences admitted with different forced paths (and none) share one batch, and each decodes
// exactly as it would alone under its own path: the server forces paths per request.
TEST(Decode, SequencesWithTheirOwnForcedPathsShareABatch) {
  auto c = testing::tiny_config();
  auto model = make_model(c, 21);
  std::mt19937 rng(5);
  const Prompt p1{random_tokens(rng, 7, c.vocab_size), 2, {}};
  const Prompt p2{random_tokens(rng, 5, c.vocab_size), 0, {}};
  const Prompt p3{random_tokens(rng, 9, c.vocab_size), 3, {1}};
  ForcedPath a, b;
  for (int64_t l = 1; l <= c.core_depth; ++l) {
    a.depths[l][0] = {0, std::nullopt};
    b.depths[l][1] = {c.library_size - 1, 0.7};
  }
  Decoder shared(model, testing::device());
  shared.admit({p1}, &a);
  shared.admit({p2});
  shared.admit({p3}, &b);
  Decoder alone_a(model, testing::device(), &a), alone_free(model, testing::device()),
      alone_b(model, testing::device(), &b);
  alone_a.prefill({p1});
  alone_free.prefill({p2});
  alone_b.prefill({p3});
  for (int64_t i = 0; i < 12; ++i) {  // crosses several window boundaries (W 4, S 2)
    const std::vector<int64_t> t = {(i * 5 + 1) % c.vocab_size, (i * 3 + 2) % c.vocab_size,
                                    (i * 7 + 3) % c.vocab_size};
    auto out = shared.step(t);
    auto oa = alone_a.step({t[0]}), of = alone_free.step({t[1]}), ob = alone_b.step({t[2]});
    EXPECT_LT(testing::max_abs_diff(out.logits.narrow(0, 0, 1), oa.logits), 1e-5) << "step " << i;
    EXPECT_LT(testing::max_abs_diff(out.logits.narrow(0, 1, 1), of.logits), 1e-5) << "step " << i;
    EXPECT_LT(testing::max_abs_diff(out.logits.narrow(0, 2, 1), ob.logits), 1e-5) << "step " << i;
    for (const auto& r : out.routes) {
      if (r.sequence == 0) {
        EXPECT_EQ(r.expert, 0) << "step " << i;
      }
      if (r.sequence == 1) {
        EXPECT_FALSE(r.forced_expert) << "step " << i;
      }
      if (r.sequence == 2) {
        EXPECT_EQ(r.expert, c.library_size - 1) << "step " << i;
        EXPECT_NEAR(r.gate, 0.7, 1e-6);
      }
    }
  }
  shared.retain({0, 2});  // the forced sequences keep their paths after a retain
  for (int64_t i = 12; i < 16; ++i) {
    const std::vector<int64_t> t = {(i * 5 + 1) % c.vocab_size, (i * 7 + 3) % c.vocab_size};
    auto out = shared.step(t);
    EXPECT_LT(testing::max_abs_diff(out.logits.narrow(0, 0, 1), alone_a.step({t[0]}).logits), 1e-5);
    EXPECT_LT(testing::max_abs_diff(out.logits.narrow(0, 1, 1), alone_b.step({t[1]}).logits), 1e-5);
  }
}

TEST(Decode, AdmittedSequencesDecodeAsIfAlone) {
  for (Family family : testing::all_families()) {
    auto c = testing::tiny_config(family);
    auto model = make_model(c, 16);
    std::mt19937 rng(17);
    auto prompt = [&](int64_t n, int64_t p) {
      return Prompt{random_tokens(rng, n, c.vocab_size), p, {}};
    };
    const std::vector<Prompt> first = {prompt(3, 1), prompt(5, 0)};
    const std::vector<Prompt> second = {prompt(21, 3), prompt(2, 0)};
    const std::vector<Prompt> third = {prompt(4, 2)};
    Decoder running(model, testing::device()), a(model, testing::device()),
        b(model, testing::device()), d(model, testing::device());
    running.prefill(first);
    a.prefill(first);
    auto tokens = [&](int64_t i, int64_t n) {
      std::vector<int64_t> t;
      for (int64_t r = 0; r < n; ++r) t.push_back((i * 7 + r * 3 + 1) % c.vocab_size);
      return t;
    };
    for (int64_t i = 0; i < 3; ++i) {
      running.step(tokens(i, 2));
      a.step(tokens(i, 2));
    }
    auto admitted = running.admit(second);
    auto alone = b.prefill(second);
    EXPECT_LT(testing::max_abs_diff(admitted.logits, alone.logits), 1e-5) << enum_name(family);
    ASSERT_EQ(admitted.routes.size(), alone.routes.size());
    for (size_t r = 0; r < alone.routes.size(); ++r)
      EXPECT_EQ(admitted.routes[r].sequence, alone.routes[r].sequence + 2);
    for (int64_t i = 3; i < 6; ++i) {
      auto t = tokens(i, 4);
      auto out = running.step(t);
      auto oa = a.step({t[0], t[1]});
      auto ob = b.step({t[2], t[3]});
      EXPECT_LT(testing::max_abs_diff(out.logits.narrow(0, 0, 2), oa.logits), 1e-5)
          << enum_name(family) << " step " << i;
      EXPECT_LT(testing::max_abs_diff(out.logits.narrow(0, 2, 2), ob.logits), 1e-5)
          << enum_name(family) << " step " << i;
    }
    running.admit(third);
    d.prefill(third);
    ASSERT_EQ(running.batch(), 5);
    for (int64_t i = 6; i < 15; ++i) {  // crosses several window boundaries (W 4, S 2)
      auto t = tokens(i, 5);
      auto out = running.step(t);
      auto oa = a.step({t[0], t[1]});
      auto ob = b.step({t[2], t[3]});
      auto od = d.step({t[4]});
      EXPECT_LT(testing::max_abs_diff(out.logits.narrow(0, 0, 2), oa.logits), 1e-5)
          << enum_name(family) << " step " << i;
      EXPECT_LT(testing::max_abs_diff(out.logits.narrow(0, 2, 2), ob.logits), 1e-5)
          << enum_name(family) << " step " << i;
      EXPECT_LT(testing::max_abs_diff(out.logits.narrow(0, 4, 1), od.logits), 1e-5)
          << enum_name(family) << " step " << i;
      size_t expected_routes = oa.routes.size() + ob.routes.size() + od.routes.size();
      EXPECT_EQ(out.routes.size(), expected_routes) << enum_name(family) << " step " << i;
    }
  }
}

// More prompts than run at once: waiting prompts join as others finish, and every prompt's
// continuation (tokens, finish reason, routes) is the same for any batch size, greedy or
// sampled, since each sequence samples from its own generator.
TEST(Decode, ContinuousBatchingGivesTheSameGenerationsForAnyBatchSize) {
  auto c = testing::tiny_config();
  c.max_seq_len = 40;
  auto model = make_model(c, 18);
  std::mt19937 rng(19);
  std::vector<Prompt> prompts;
  for (int64_t b = 0; b < 7; ++b) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 9)(rng);
    prompts.push_back({random_tokens(rng, n, c.vocab_size), std::min<int64_t>(n, b % 3), {}});
  }
  SamplingOptions greedy;
  greedy.max_tokens = 30;  // some reach max_seq_len first
  greedy.stop = [](int64_t sequence, const std::vector<int64_t>& generated) {
    return static_cast<int64_t>(generated.size()) >= 1 + 6 * ((sequence * 5) % 7);
  };
  SamplingOptions sampled = greedy;
  sampled.temperature = 1.0;
  sampled.top_k = 6;
  sampled.seed = 3;
  for (const auto& options : {greedy, sampled}) {
    std::vector<std::vector<Generation>> runs;
    for (int64_t max_batch : {0, 1, 3}) {
      BatchOptions batching;
      batching.max_batch = max_batch;
      std::vector<int64_t> counts;
      batching.on_finish = [&](int64_t finished) { counts.push_back(finished); };
      runs.push_back(generate(model, prompts, options, testing::device(), nullptr, batching));
      EXPECT_EQ(counts, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7})) << "max_batch " << max_batch;
    }
    std::set<std::string> reasons;
    for (size_t run = 1; run < runs.size(); ++run)
      for (int64_t b = 0; b < 7; ++b) {
        const auto &x = runs[0][b], &y = runs[run][b];
        EXPECT_EQ(x.tokens, y.tokens) << "run " << run << " prompt " << b;
        EXPECT_EQ(x.finish_reason, y.finish_reason) << "run " << run << " prompt " << b;
        reasons.insert(x.finish_reason);
        ASSERT_EQ(x.routes.size(), y.routes.size()) << "run " << run << " prompt " << b;
        for (size_t r = 0; r < x.routes.size(); ++r) {
          EXPECT_EQ(y.routes[r].sequence, b);
          EXPECT_EQ(x.routes[r].expert, y.routes[r].expert);
          EXPECT_EQ(x.routes[r].window, y.routes[r].window);
          EXPECT_EQ(x.routes[r].position, y.routes[r].position);
        }
      }
    EXPECT_EQ(reasons, (std::set<std::string>{"length", "stop"}));
  }
  BatchOptions negative;
  negative.max_batch = -1;
  EXPECT_THROW(generate(model, prompts, greedy, testing::device(), nullptr, negative), Error);
}

TEST(Decode, CoreMemoryIsConstantInContextLength) {
  auto c = testing::tiny_config();
  c.max_seq_len = 1024;
  auto model = make_model(c, 2);
  Decoder decoder(model, testing::device());
  decoder.prefill({Prompt{{1, 2, 3}, 0, {}}});
  std::vector<int64_t> core, growing;
  for (int64_t i = 0; i < 300; ++i) {
    decoder.step({(i * 7) % c.vocab_size});
    if (i == 50 || i == 299) {
      core.push_back(decoder.core_state_bytes());
      growing.push_back(decoder.growing_cache_bytes());
    }
  }
  EXPECT_GT(core[0], 0);
  EXPECT_LE(core[1], core[0]);  // bounded by D windows of W tokens (phase may differ by a slot)
  const int64_t bound =
      c.core_depth * (2 * c.window * c.n_kv_heads * c.head_dim() * 4 + 3 * c.d_model * 4 + 64);
  EXPECT_LE(core[1], bound);
  EXPECT_GT(growing[1], growing[0]);  // prelude and coda caches do grow
}

TEST(Sampling, GreedyTopKTopPAndSeeds) {
  auto logits = torch::tensor({0.1f, 3.0f, 2.9f, -1.0f});
  SamplingOptions greedy;
  auto gen = at::detail::createCPUGenerator(1);
  EXPECT_EQ(sample_token(logits, greedy, gen), 1);
  SamplingOptions top1;
  top1.temperature = 1.0;
  top1.top_k = 1;
  for (int i = 0; i < 10; ++i) EXPECT_EQ(sample_token(logits, top1, gen), 1);
  SamplingOptions nucleus;
  nucleus.temperature = 1.0;
  nucleus.top_p = 0.5;  // token 1 alone holds about half the mass; 1 and 2 together more
  std::set<int64_t> seen;
  for (int i = 0; i < 200; ++i) seen.insert(sample_token(logits, nucleus, gen));
  EXPECT_TRUE(seen.count(1));
  EXPECT_FALSE(seen.count(0));
  EXPECT_FALSE(seen.count(3));
  SamplingOptions limited = top1;  // ids from 2 on do not exist for this caller
  limited.vocab_limit = 1;
  for (int i = 0; i < 10; ++i) EXPECT_EQ(sample_token(logits, limited, gen), 0);
  limited.temperature = 0;
  EXPECT_EQ(sample_token(logits, limited, gen), 0);
  SamplingOptions hot;
  hot.temperature = 2.0;
  auto g1 = at::detail::createCPUGenerator(5), g2 = at::detail::createCPUGenerator(5);
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(sample_token(logits, hot, g1), sample_token(logits, hot, g2));
}

}  // namespace
}  // namespace lol

namespace lol {
namespace {
TEST(GoldenDecoding, CachedGreedyEqualsRecomputingTheWholeSequence) {
  for (Family family : testing::all_families()) {
    auto c = testing::tiny_config(family);
    auto model = testing::make_model(c, 21);
    std::vector<Prompt> prompts = {
        {{5, 3, 8, 1}, 2, {1}}, {{9, 9}, 0, {}}, {{4, 1, 2, 6, 3, 3, 7}, 4, {}}};
    SamplingOptions greedy;
    greedy.max_tokens = 15;
    auto cached = generate(model, prompts, greedy, testing::device());
    for (size_t b = 0; b < prompts.size(); ++b) {
      auto slow = greedy_recompute(model, prompts[b].tokens, prompts[b].prompt_len,
                                   prompts[b].router_only, 15, -1, testing::device());
      std::vector<int64_t> continuation(
          slow.tokens.begin() + static_cast<long>(prompts[b].tokens.size()), slow.tokens.end());
      EXPECT_EQ(cached[b].tokens, continuation) << enum_name(family) << " prompt " << b;
      EXPECT_EQ(cached[b].finish_reason, "length");
    }
  }
}
}  // namespace
}  // namespace lol
