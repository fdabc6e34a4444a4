#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>

#include "data/packer.h"
#include "data/shards.h"
#include "helpers.h"
#include "tasks/copy_task.h"
#include "train/precision.h"
#include "train/sources.h"
#include "train/trainer.h"
#include "util/files.h"

namespace lol {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("lol_train_" + std::to_string(::getpid()) + "_" + name);
  remove_tree(dir.string());
  return dir;
}

// The scalar map one Newton-Schulz iteration applies to each singular value.
double quintic(double s) {
  return 3.4445 * s - 4.7750 * s * s * s + 2.0315 * s * s * s * s * s;
}

TEST(Muon, NewtonSchulzActsOnSingularValuesAndApproachesThePolarFactor) {
  torch::manual_seed(0);
  for (auto shape : std::vector<std::pair<int64_t, int64_t>>{{12, 7}, {7, 12}, {16, 16}}) {
    auto g = torch::randn({shape.first, shape.second}, torch::kFloat64);
    auto [u, s, vh] = at::linalg_svd(g, /*full_matrices=*/false);
    auto scaled = s / g.norm();
    auto f = scaled.clone();
    for (int64_t i = 0; i < f.size(0); ++i) {
      double x = scaled[i].item<double>();
      for (int k = 0; k < 5; ++k) x = quintic(x);
      f[i] = x;
    }
    auto expected = torch::matmul(u * f.unsqueeze(0), vh);
    auto got = newton_schulz(g.to(torch::kFloat32)).to(torch::kFloat64);
    EXPECT_LT(testing::max_abs_diff(got, expected), 2e-4) << shape.first << "x" << shape.second;
    // Close to U V^T: every singular value of the result lies in the quintic's band.
    auto polar = torch::matmul(u, vh);
    auto sv = at::linalg_svdvals(got);
    EXPECT_GT(sv.min().item<double>(), 0.5);
    EXPECT_LT(sv.max().item<double>(), 1.25);
    EXPECT_LT((got - polar).norm().item<double>() / polar.norm().item<double>(), 0.35);
  }
}

TEST(Muon, StepFollowsTheAlgorithm) {
  torch::manual_seed(1);
  auto w = torch::randn({6, 10}).requires_grad_(true);
  auto w0 = w.detach().clone();
  Muon muon({{"w", w}}, MuonOptions{0.95, 0.1, true, 5});
  auto g1 = torch::randn({6, 10}), g2 = torch::randn({6, 10});
  const double lr = 0.02, scale = 0.2 * std::sqrt(10.0);
  w.mutable_grad() = g1.clone();
  muon.step(lr);
  auto b1 = g1 * 0.05;
  auto expected = w0 * (1 - lr * 0.1) - lr * scale * newton_schulz(g1 * 0.05 + b1 * 0.95);
  EXPECT_LT(testing::max_abs_diff(w.detach(), expected), 1e-5);
  w.mutable_grad() = g2.clone();
  muon.step(lr);
  auto b2 = b1 * 0.95 + g2 * 0.05;
  expected = expected * (1 - lr * 0.1) - lr * scale * newton_schulz(g2 * 0.05 + b2 * 0.95);
  EXPECT_LT(testing::max_abs_diff(w.detach(), expected), 1e-5);
}

// A batch orthogonalises each matrix as alone; Muon batches the matrices of one shape (a tall
// one with the wide ones of its transpose's shape) and each still follows the algorithm.
TEST(Muon, BatchesMatricesOfOneShapeAndEachFollowsTheAlgorithm) {
  torch::manual_seed(2);
  auto batch = torch::randn({3, 12, 7});
  auto together = newton_schulz(batch);
  ASSERT_EQ(together.sizes(), batch.sizes());
  for (int64_t i = 0; i < 3; ++i)
    EXPECT_LT(testing::max_abs_diff(together[i], newton_schulz(batch[i])), 1e-6) << i;

  std::vector<torch::Tensor> ws{torch::randn({6, 10}), torch::randn({10, 6}), torch::randn({6, 10}),
                                torch::randn({5, 5})};
  NamedTensors params;
  for (size_t i = 0; i < ws.size(); ++i)
    params.push_back({"w" + std::to_string(i), ws[i].clone().requires_grad_(true)});
  Muon muon(params, MuonOptions{0.95, 0.1, true, 5});
  const double lr = 0.02;
  for (size_t i = 0; i < ws.size(); ++i) params[i].second.mutable_grad() = ws[i] * 0.5 + 1;
  params[2].second.mutable_grad() = torch::Tensor();  // no gradient: left alone
  muon.step(lr);
  for (size_t i = 0; i < ws.size(); ++i) {
    if (i == 2) {
      EXPECT_TRUE(torch::equal(params[i].second.detach(), ws[i]));
      continue;
    }
    const auto g = ws[i] * 0.5 + 1;
    const auto b = g * 0.05;
    const auto expected =
        ws[i] * (1 - lr * 0.1) - lr * Muon::lr_scale(ws[i]) * newton_schulz(g * 0.05 + b * 0.95);
    EXPECT_LT(testing::max_abs_diff(params[i].second.detach(), expected), 1e-5) << "w" << i;
  }
}

TEST(AdamW, MatchesItsFormulaOverSeveralSteps) {
  auto p = torch::tensor({0.5, -1.0, 2.0}, torch::kFloat64).requires_grad_(true);
  AdamW adam({{"p", p}}, {true}, AdamWOptions{0.9, 0.99, 1e-8, 0.1});
  std::vector<double> x = {0.5, -1.0, 2.0}, m(3, 0), v(3, 0);
  const double lr = 0.01;
  for (int t = 1; t <= 4; ++t) {
    std::vector<double> g = {0.3 * t, -0.2, 1.0 / t};
    p.mutable_grad() = torch::tensor(g, torch::kFloat64);
    adam.step(lr);
    for (int i = 0; i < 3; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.99 * v[i] + 0.01 * g[i] * g[i];
      const double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.99, t));
      x[i] = x[i] * (1 - lr * 0.1) - lr * mh / (std::sqrt(vh) + 1e-8);
      EXPECT_NEAR(p[i].item<double>(), x[i], 1e-12) << "step " << t << " element " << i;
    }
  }
}

// An lr scale per element: where it is 1 the update is the plain one, where it is s the update and
// the decay are those of lr s (the moments are the same, so a plain AdamW at lr s matches there).
TEST(AdamW, AnLrScaleScalesEachElementsUpdateAndDecay) {
  const auto init = torch::randn({2, 3, 4}, torch::kFloat64);
  auto a = init.clone().requires_grad_(true), b = init.clone().requires_grad_(true),
       c = init.clone().requires_grad_(true);
  const AdamWOptions options{0.9, 0.95, 1e-8, 0.1};
  AdamW plain({{"w", a}}, {true}, options), scaled({{"w", b}}, {true}, options),
      slow({{"w", c}}, {true}, options);
  auto scale = torch::ones({1, 3, 1}, torch::kFloat64);
  scale[0][1] = 0.25;
  scaled.set_lr_scale("w", scale);
  const double lr = 0.01;
  for (int t = 0; t < 3; ++t) {
    const auto g = torch::randn({2, 3, 4}, torch::kFloat64);
    a.mutable_grad() = g.clone();
    b.mutable_grad() = g.clone();
    c.mutable_grad() = g.clone();
    plain.step(lr);
    scaled.step(lr);
    slow.step(lr * 0.25);
  }
  for (int64_t row : {0, 2})
    EXPECT_TRUE(torch::equal(b.select(1, row), a.select(1, row))) << "row " << row;
  EXPECT_LT(testing::max_abs_diff(b.select(1, 1).detach(), c.select(1, 1).detach()), 1e-12);
  EXPECT_GT(testing::max_abs_diff(b.select(1, 1).detach(), a.select(1, 1).detach()), 1e-4);
  EXPECT_THROW(scaled.set_lr_scale("w", torch::ones({5})), Error);
  EXPECT_THROW(scaled.set_lr_scale("v", scale), Error);
}

TEST(Schedule, WarmupCosineWsdAndGrowth) {
  TrainConfig c;
  c.steps = 100;
  c.warmup_steps = 10;
  c.lr = 1.0;
  c.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(c, 9), 1.0);
  EXPECT_NEAR(learning_rate(c, 55), 0.55, 1e-9);  // halfway down the cosine
  EXPECT_NEAR(learning_rate(c, 100), 0.1, 1e-9);
  c.schedule = Schedule::kWsd;
  c.decay_fraction = 0.2;
  EXPECT_DOUBLE_EQ(learning_rate(c, 50), 1.0);
  EXPECT_NEAR(learning_rate(c, 90), 0.55, 1e-9);
  // SPEC 1.8: D_t = D0 + round((D - D0) (1 - sqrt(1 - min(1, t / T_grow)))).
  c.grow_start_depth = 2;
  c.grow_fraction = 0.75;
  for (int64_t t : {0, 10, 30, 50, 74, 75, 99}) {
    const double frac = std::min(1.0, t / 75.0);
    EXPECT_EQ(grown_depth(c, 8, t), 2 + std::llround(6 * (1 - std::sqrt(1 - frac)))) << t;
  }
  EXPECT_EQ(grown_depth(c, 8, 0), 2);
  EXPECT_EQ(grown_depth(c, 8, 80), 8);
  c.grow_start_depth = 0;
  EXPECT_EQ(grown_depth(c, 8, 0), 8);
}

TEST(Shards, RoundTripAndMalformedFiles) {
  auto dir = temp_dir("shards");
  fs::create_directories(dir);
  std::vector<Document> docs;
  for (int i = 0; i < 5; ++i) docs.push_back(StrategyTask::make(3, 0, i));
  docs.push_back(Document{{1, 2, 3}, 0, {}, {}});
  const auto path = (dir / "a.shard").string();
  write_shard(path, docs, 20);
  int64_t vocab = 0;
  auto back = read_shard(path, &vocab);
  EXPECT_EQ(vocab, 20);
  ASSERT_EQ(back.size(), docs.size());
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(back[i].tokens, docs[i].tokens);
    EXPECT_EQ(back[i].prompt_len, docs[i].prompt_len);
    EXPECT_EQ(back[i].router_only, docs[i].router_only);
    EXPECT_EQ(back[i].loss_mask, docs[i].loss_mask);
  }
  auto error_of = [&](const std::string& bytes) {
    const auto bad = (dir / "bad.shard").string();
    std::ofstream(bad, std::ios::binary) << bytes;
    return testing::error_message([&] { read_shard(bad); });
  };
  std::ifstream in(path, std::ios::binary);
  std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(error_of("LOL").find("truncated"), std::string::npos);
  EXPECT_NE(error_of("X" + good.substr(1)).find("bad magic"), std::string::npos);
  EXPECT_NE(error_of(good.substr(0, good.size() - 1)).find("does not match the header"),
            std::string::npos);
  auto big_id = good;
  big_id[48 + 6 * 24] = 99;  // first token of the first document
  EXPECT_NE(error_of(big_id).find("outside the vocabulary"), std::string::npos);
  EXPECT_THROW(write_shard(path, {Document{{25}, 0, {}, {}}}, 20), Error);
  remove_tree(dir.string());
}

TEST(Packer, KeepsEveryDocumentWholeAndSeeksExactly) {
  StrategyTask source(4, 0);
  Packer packer(source, 3, 40);
  int64_t expected_index = 0;
  json saved;
  std::vector<int64_t> after_seek;
  for (int step = 0; step < 5; ++step) {
    if (step == 2) saved = packer.position();
    auto b = packer.next();
    auto tokens = b.batch.tokens;
    for (int64_t r = 0; r < 3; ++r)
      for (const auto& span : b.batch.documents[r]) {
        auto doc = StrategyTask::make(4, 0, expected_index++);  // documents in order, whole
        ASSERT_EQ(span.length, static_cast<int64_t>(doc.tokens.size()));
        EXPECT_EQ(span.prompt_len, doc.prompt_len);
        for (int64_t i = 0; i < span.length; ++i)
          EXPECT_EQ(tokens[r][span.start + i].item<int64_t>(), doc.tokens[i]);
      }
    if (step >= 2)
      for (int64_t i = 0; i < b.targets.size(0); ++i)
        after_seek.push_back(b.targets[i].item<int64_t>());
    EXPECT_EQ(b.targets.size(0), b.tokens);
  }
  packer.seek(saved);
  std::vector<int64_t> replay;
  for (int step = 2; step < 5; ++step) {
    auto b = packer.next();
    for (int64_t i = 0; i < b.targets.size(0); ++i) replay.push_back(b.targets[i].item<int64_t>());
  }
  EXPECT_EQ(replay, after_seek);
}

ModelConfig train_model_config(Family family) {
  auto c = testing::tiny_config(family);
  c.vocab_size = 20;
  c.d_model = 32;
  c.ffn_hidden = 64;
  c.window = 8;
  c.stride = 4;
  c.core_depth = 2;
  c.library_size = 2;
  c.router_noise_std = 0.01;
  return c;
}

TrainConfig small_run() {
  TrainConfig t;
  t.steps = 150;
  t.batch_rows = 4;
  t.seq_len = 64;
  t.warmup_steps = 5;
  t.lr = 1e-2;
  t.eval_every = 0;
  t.eval_batches = 1;
  t.checkpoint_every = 0;
  return t;
}

TEST(Training, LossFallsOnTheStrategyTaskForLolAndDense) {
  for (Family family : {Family::kLol, Family::kDense}) {
    auto dir = temp_dir(std::string("learn_") + enum_name(family));
    LanguageModel model(train_model_config(family));
    model->initialize(1);
    Trainer trainer(model, small_run(), dir.string(), testing::device());
    const auto before = trainer.evaluate();
    std::vector<double> losses;
    trainer.run({}, [&](const StepMetrics& m) { losses.push_back(m.loss); });
    ASSERT_EQ(losses.size(), 150u);
    const double first = losses[0], last = (losses[147] + losses[148] + losses[149]) / 3;
    EXPECT_LT(last, 0.6 * first) << enum_name(family) << ": " << first << " -> " << last;
    // Held-out: the loss falls with it and the next-token accuracy climbs well above chance.
    const auto after = trainer.evaluate();
    EXPECT_LT(after.loss, 0.6 * before.loss) << enum_name(family);
    EXPECT_GT(after.accuracy, before.accuracy + 0.2)
        << enum_name(family) << ": " << before.accuracy << " -> " << after.accuracy;
    EXPECT_LE(after.accuracy, 1.0);
    remove_tree(dir.string());
  }
}

TEST(Precision, AutocastGuardSwitchesMatrixProductsToBf16AndRestores) {
  const auto dev = testing::device();
  auto x = torch::randn({4, 8}, dev), w = torch::randn({3, 8}, dev);
  EXPECT_EQ(torch::nn::functional::linear(x, w).scalar_type(), torch::kFloat32);
  {
    AutocastGuard bf16(dev, true);
    EXPECT_EQ(torch::nn::functional::linear(x, w).scalar_type(), torch::kBFloat16);
    {
      AutocastGuard nested_off(dev, false);  // does nothing
      EXPECT_EQ(torch::nn::functional::linear(x, w).scalar_type(), torch::kBFloat16);
    }
  }
  EXPECT_EQ(torch::nn::functional::linear(x, w).scalar_type(), torch::kFloat32);
  EXPECT_TRUE(uses_bf16_autocast(Precision::kBf16, torch::kCPU));
  EXPECT_FALSE(uses_bf16_autocast(Precision::kAuto, torch::kCPU));
  EXPECT_TRUE(uses_bf16_autocast(Precision::kAuto, torch::Device("cuda")));
  EXPECT_FALSE(uses_bf16_autocast(Precision::kFp32, torch::Device("cuda")));
  // bf16 on a CPU without AVX-512 is LibTorch's reference loops: the user is told so.
  EXPECT_NE(bf16_speed_note(torch::kCPU, false).find("no AVX-512"), std::string::npos);
  EXPECT_EQ(bf16_speed_note(torch::kCPU, true), "");
  EXPECT_EQ(bf16_speed_note(torch::Device("cuda"), false), "");
}

// bf16 autocast (the default on CUDA): the same run learns as in fp32, its first loss agrees
// with fp32 to bf16 accuracy, and weights and optimizer state stay fp32.
TEST(Precision, Bf16AutocastTrainingLearnsWithFp32Weights) {
  std::map<std::string, std::vector<double>> losses;
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    auto dir = temp_dir(std::string("bf16_") + enum_name(precision));
    LanguageModel model(train_model_config(Family::kLol));
    model->initialize(1);
    auto config = small_run();
    config.steps = 100;
    config.precision = precision;
    Trainer trainer(model, config, dir.string(), testing::device());
    trainer.run({}, [&](const StepMetrics& m) { losses[enum_name(precision)].push_back(m.loss); });
    for (const auto& p : model->parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat32);
    remove_tree(dir.string());
  }
  const auto& fp32 = losses["fp32"];
  const auto& bf16 = losses["bf16"];
  ASSERT_EQ(bf16.size(), 100u);
  EXPECT_NEAR(bf16[0], fp32[0], 0.02 * fp32[0]);
  EXPECT_NE(bf16[0], fp32[0]);  // autocast was really on
  const double last = (bf16[97] + bf16[98] + bf16[99]) / 3,
               last32 = (fp32[97] + fp32[98] + fp32[99]) / 3;
  EXPECT_LT(last, 0.6 * bf16[0]);
  EXPECT_LT(last, 1.2 * last32);
}

// On the CPU, where SPEC promises bit-identical resumption (CUDA kernels with atomics are not
// deterministic).
// Two runs of the same config give the same losses whatever the process's generator held
// before (LibTorch seeds it differently in every process; router noise draws from it).
TEST(Training, TheSameConfigGivesTheSameRun) {
  auto config = small_run();
  config.steps = 4;
  std::vector<std::vector<double>> losses(2);
  for (int run = 0; run < 2; ++run) {
    torch::manual_seed(100 + run);
    LanguageModel model(train_model_config(Family::kLol));
    model->initialize(2);
    Trainer trainer(model, config, temp_dir("same_" + std::to_string(run)).string(), torch::kCPU);
    trainer.run({}, [&](const StepMetrics& m) { losses[run].push_back(m.loss); });
  }
  ASSERT_EQ(losses[0].size(), 4u);
  EXPECT_EQ(losses[0], losses[1]);
}

TEST(Training, KillAndResumeGivesTheSameLossSequence) {
  auto config = small_run();
  config.steps = 10;
  config.grad_accum = 2;
  config.grow_start_depth = 1;
  config.checkpoint_every = 4;
  auto dir_a = temp_dir("resume_a"), dir_b = temp_dir("resume_b");
  auto fresh = [&] {
    LanguageModel model(train_model_config(Family::kLol));
    model->initialize(2);
    return model;
  };
  std::vector<double> straight, resumed;
  torch::manual_seed(5);
  Trainer a(fresh(), config, dir_a.string(), torch::kCPU);
  a.run({}, [&](const StepMetrics& m) { straight.push_back(m.loss); });

  torch::manual_seed(5);
  {
    Trainer b(fresh(), config, dir_b.string(), torch::kCPU);
    b.run([&] { return b.step() == 6; }, [&](const StepMetrics& m) { resumed.push_back(m.loss); });
    EXPECT_EQ(b.step(), 6);
  }
  torch::manual_seed(12345);  // the resumed run must restore the generator itself
  auto c = Trainer::resume(dir_b.string(), torch::kCPU);
  EXPECT_EQ(c->step(), 6);
  c->run({}, [&](const StepMetrics& m) { resumed.push_back(m.loss); });
  ASSERT_EQ(resumed.size(), straight.size());
  for (size_t i = 0; i < straight.size(); ++i)
    EXPECT_EQ(resumed[i], straight[i]) << "step " << i + 1;
  // Only the newest keep_checkpoints remain.
  int count = 0;
  for (const auto& name : list_directory((dir_b / "checkpoints").string()))
    count += is_directory((dir_b / "checkpoints" / name).string());
  EXPECT_EQ(count, 2);
  remove_tree(dir_a.string());
  remove_tree(dir_b.string());
}

// Exact resume at every step boundary (SPEC 2: "a resumed run continues exactly"), by both ways
// a run stops: the interrupt path (SIGINT sets the flag run() polls; it saves where it stops)
// and a kill after a periodic checkpoint (the run resumes from the latest one it finds). Each
// resumed step must leave the same bytes as the uninterrupted run: weights, balance biases,
// optimizer state, generator, data position.
struct ResumeCase {
  std::string name;
  ModelConfig model;
  TrainConfig train;
};

// gtest prints a parameter's bytes unless told otherwise: print the case's name.
void PrintTo(const ResumeCase& c, std::ostream* os) {
  *os << c.name;
}

std::vector<ResumeCase> resume_cases() {
  auto preset = [](const std::string& name, std::vector<std::string> overrides = {}) {
    return load_model_config(name, overrides);
  };
  auto run = [](const std::string& data, int64_t steps, int64_t rows, int64_t seq_len) {
    TrainConfig t;
    t.data = data;
    t.steps = steps;
    t.batch_rows = rows;
    t.seq_len = seq_len;
    t.eval_every = 0;
    t.checkpoint_every = 1000;
    t.warmup_steps = 3;
    return t;
  };
  // The configuration of the report that found the bug: tiny preset, 5 x 5 mazes, 128 tokens.
  auto issue = run("task:maze:5", 12, 8, 128);
  auto grown = run("task:copy", 8, 4, 64);
  grown.grow_start_depth = 1;
  grown.grad_accum = 2;
  auto adamw = run("task:copy", 6, 4, 64);
  adamw.optimizer = Optimizer::kAdamW;
  return {
      {"tiny_maze", preset("tiny", {"vocab_size=160"}), issue},
      {"tiny_maze_mixture", preset("tiny", {"vocab_size=160"}),
       run("mix:3..1@2k*task:maze:5,1..3@2k*task:maze:4", 5, 4, 128)},
      {"tiny_grown_accumulated", preset("tiny", {"router_noise_std=0.05"}), grown},
      {"tiny_moe", preset("tiny", {"family=moe", "moe_experts=4", "moe_top_k=1"}), adamw},
      {"tiny_looped_strided",
       preset("tiny", {"family=looped", "loop_blocks=2", "core_attention=strided"}), adamw},
      {"maze_demo", preset("maze-demo"), run("task:maze:5", 6, 2, 256)},
      {"maze_cpu", preset("maze-cpu"), run("task:maze:5", 3, 2, 128)},
      {"sudoku_cpu", preset("sudoku-cpu"), run("task:sudoku", 3, 1, 256)},
  };
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Checkpoint `step` of two runs holds the same training state. train_state.json may differ only
// in the training config's checkpoint_every and keep_checkpoints (how a run saves is not state).
void expect_same_checkpoint(const fs::path& a_run, const fs::path& b_run, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  const auto a = a_run / "checkpoints" / name, b = b_run / "checkpoints" / name;
  ASSERT_TRUE(fs::exists(a / "model.safetensors")) << a;
  ASSERT_TRUE(fs::exists(b / "model.safetensors")) << b;
  for (const char* file : {"model.safetensors", "train_state.safetensors", "config.json"})
    EXPECT_TRUE(file_bytes(a / file) == file_bytes(b / file))
        << file << " differs at step " << step;
  auto meta_a = json::parse(file_bytes(a / "train_state.json"));
  auto meta_b = json::parse(file_bytes(b / "train_state.json"));
  for (auto* meta : {&meta_a, &meta_b})
    for (const char* key : {"checkpoint_every", "keep_checkpoints"})
      (*meta)["train_config"].erase(key);
  EXPECT_EQ(meta_a, meta_b) << "train_state.json differs at step " << step;
}

class ResumeTest : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(ResumeTest, ResumingAtEveryStepReproducesTheUninterruptedRun) {
  const auto& rc = GetParam();
  const int64_t steps = rc.train.steps;
  auto fresh = [&] {
    LanguageModel model(rc.model);
    model->initialize(3);
    return model;
  };
  // The uninterrupted run, a checkpoint after every step.
  auto straight_dir = temp_dir("straight_" + rc.name);
  auto every = rc.train;
  every.checkpoint_every = 1;
  every.keep_checkpoints = steps;
  std::vector<double> straight;
  {
    Trainer t(fresh(), every, straight_dir.string(), torch::kCPU);
    t.run({}, [&](const StepMetrics& m) { straight.push_back(m.loss); });
  }
  ASSERT_EQ(static_cast<int64_t>(straight.size()), steps);

  // Interrupt path: stop after every step (the checkpoint is the one the stop writes), resume.
  auto chain_dir = temp_dir("chain_" + rc.name);
  {
    Trainer t(fresh(), rc.train, chain_dir.string(), torch::kCPU);
    t.run([] { return true; });
    EXPECT_EQ(t.step(), 1);
  }
  expect_same_checkpoint(straight_dir, chain_dir, 1);
  for (int64_t k = 1; k < steps; ++k) {
    auto t = Trainer::resume(chain_dir.string(), torch::kCPU);
    ASSERT_EQ(t->step(), k);
    double loss = 0;
    t->run([] { return true; }, [&](const StepMetrics& m) { loss = m.loss; });
    EXPECT_EQ(loss, straight[k]) << "interrupt path: step " << k + 1 << " after resuming at " << k;
    expect_same_checkpoint(straight_dir, chain_dir, k + 1);
  }

  // Kill path: a run killed after the periodic checkpoint of step k resumes from it.
  for (int64_t k = 1; k < steps; ++k) {
    auto killed_dir = temp_dir("killed_" + rc.name);
    char name[32];
    std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(k));
    fs::create_directories(killed_dir / "checkpoints");
    fs::copy(straight_dir / "checkpoints" / name, killed_dir / "checkpoints" / name);
    auto t = Trainer::resume(killed_dir.string(), torch::kCPU);
    double loss = 0;
    t->run([] { return true; }, [&](const StepMetrics& m) { loss = m.loss; });
    EXPECT_EQ(loss, straight[k]) << "kill path: step " << k + 1 << " after resuming at " << k;
    expect_same_checkpoint(straight_dir, killed_dir, k + 1);
    remove_tree(killed_dir.string());
  }
  remove_tree(straight_dir.string());
  remove_tree(chain_dir.string());
}

INSTANTIATE_TEST_SUITE_P(PresetsAndFamilies, ResumeTest, ::testing::ValuesIn(resume_cases()),
                         [](const auto& test) { return test.param.name; });

// For every family whose core balances its routers (lol's window router, or each of its depths
// with balance_per_depth; each MoE layer).
TEST(Balancing, BiasMovesLoadTowardUniform) {
  int balanced_families = 0;
  std::vector<std::pair<Family, bool>> cases;  // family, balance_per_depth
  for (Family family : testing::all_families()) cases.emplace_back(family, false);
  cases.emplace_back(Family::kLol, true);
  for (auto [family, per_depth] : cases) {
    auto c = train_model_config(family);
    c.balance_per_depth = per_depth;
    c.library_size = 4;
    c.moe_experts = 4;
    c.moe_top_k = 1;
    c.balance_rate = 0.02;
    auto model = testing::make_model(c, 3);
    const auto biases = model->core().balance_biases();
    if (biases.empty()) continue;
    ++balanced_families;
    {
      // Expert 0 favoured by a bias larger than any difference of probabilities.
      torch::NoGradGuard no_grad;
      for (auto b : biases) b.copy_(torch::tensor({1.05, -0.35, -0.35, -0.35}));
    }
    StrategyTask source(1, 0);
    Packer packer(source, 4, 64);
    auto batch = packer.next();
    Layout layout(batch.batch, c.vocab_size, testing::device());
    std::vector<std::vector<double>> first_load,
        last_load(biases.size(), std::vector<double>(4, 0.0));
    torch::NoGradGuard no_grad;
    for (int step = 0; step < 120; ++step) {
      BalanceLoads loads;
      model->core().count_loads(model->forward(layout).routes, loads);
      ASSERT_EQ(loads.loads.size(), biases.size()) << enum_name(family);
      if (step == 0) first_load = loads.loads;
      if (step >= 100)  // the load it settles at
        for (size_t r = 0; r < biases.size(); ++r)
          for (int m = 0; m < 4; ++m) last_load[r][m] += loads.loads[r][m];
      apply_balance(model->core(), loads, c.balance_rate, c.router_skip_share);
    }
    for (size_t r = 0; r < biases.size(); ++r) {
      EXPECT_EQ(first_load[r][1] + first_load[r][2] + first_load[r][3], 0.0)
          << enum_name(family) << " router " << r;
      EXPECT_LT(load_entropy(first_load[r]), 1e-9) << enum_name(family) << " router " << r;
      EXPECT_GT(load_entropy(last_load[r]), 0.9 * std::log(4.0))
          << enum_name(family) << " router " << r;
      EXPECT_NEAR(biases[r].sum().item<double>(), 0.0, 1e-6);
    }
  }
  EXPECT_EQ(balanced_families, 3);  // lol, lol per depth and moe
}

// One packed batch of the strategy task, laid out for a model of config c.
Layout strategy_layout(const ModelConfig& c) {
  StrategyTask source(1, 0);
  Packer packer(source, 4, 64);
  return Layout(packer.next().batch, c.vocab_size, testing::device());
}

// Each balanced router's bias set apart (the experts' 0, 0.3, 0.6, 0.9 rolled by the router's
// index), so the routers' loads differ and a mix-up between them shows.
void roll_biases(const LanguageModel& model) {
  torch::NoGradGuard no_grad;
  const auto biases = model->core().balance_biases();
  for (size_t i = 0; i < biases.size(); ++i)
    biases[i].copy_(torch::arange(4, torch::kFloat32).roll(static_cast<int64_t>(i)) * 0.3);
}

// balance_per_depth: each routed depth's load is its own count of windows per expert (ordinal
// >= 1), the loads of the depths past the executed one are zero, and together they are the one
// load of the shared bias.
TEST(Balancing, PerDepthLoadsAreEachDepthsOwnCounts) {
  auto c = train_model_config(Family::kLol);
  c.core_depth = 4;
  c.library_size = 4;
  c.balance_per_depth = true;
  auto model = testing::make_model(c, 6);
  const auto layout = strategy_layout(c);
  ASSERT_EQ(model->core().balance_biases().size(), 4u);
  roll_biases(model);
  torch::NoGradGuard no_grad;
  ForwardOptions options;
  options.executed_depth = 3;
  const auto routes = model->forward(layout, options).routes;
  BalanceLoads loads;
  model->core().count_loads(routes, loads);
  ASSERT_EQ(loads.loads.size(), 4u);
  std::vector<std::vector<double>> expected(4, std::vector<double>(4, 0.0));
  for (const auto& r : routes)
    for (size_t w = 0; w < r.partition->windows.size(); ++w)
      if (r.partition->windows[w].ordinal > 0) expected[r.depth - 1][r.host().experts[w]] += 1;
  EXPECT_EQ(loads.loads, expected);
  EXPECT_NE(expected[0], expected[1]);
  // The shared bias's one load is the sum over depths.
  auto shared_config = c;
  shared_config.balance_per_depth = false;
  auto shared = testing::make_model(shared_config, 6);
  BalanceLoads one;
  shared->core().count_loads(routes, one);
  ASSERT_EQ(one.loads.size(), 1u);
  for (int m = 0; m < 4; ++m)
    EXPECT_EQ(one.loads[0][m], expected[0][m] + expected[1][m] + expected[2][m] + expected[3][m]);
  EXPECT_EQ(one.decisions, loads.decisions);
  EXPECT_EQ(one.agreements, loads.agreements);
}

// balance_count=gates: an expert's load is the sum of the gates of the windows it ran (ordinal >=
// 1, or every window with balance_window0), so a window run at a gate near 0 adds almost nothing;
// windows counts 1 per window on the same routes.
TEST(Balancing, GateLoadsAreTheGatesOfTheWindowsEachExpertRan) {
  auto c = train_model_config(Family::kLol);
  c.core_depth = 4;
  c.library_size = 4;
  auto model = testing::make_model(c, 6);
  const auto layout = strategy_layout(c);
  roll_biases(model);
  torch::NoGradGuard no_grad;
  const auto routes = model->forward(layout).routes;
  for (bool window0 : {false, true}) {
    std::vector<double> gates(4, 0.0), windows(4, 0.0);
    for (const auto& r : routes) {
      const auto alpha = r.gates.to(torch::kCPU, torch::kFloat64).contiguous();
      for (size_t w = 0; w < r.partition->windows.size(); ++w) {
        if (r.partition->windows[w].ordinal == 0 && !window0) continue;
        gates[r.host().experts[w]] += alpha.data_ptr<double>()[w];
        windows[r.host().experts[w]] += 1;
      }
    }
    auto counted = c;
    counted.balance_window0 = window0;
    for (auto [count, expected] :
         {std::pair{BalanceCount::kGates, gates}, std::pair{BalanceCount::kWindows, windows}}) {
      counted.balance_count = count;
      BalanceLoads loads;
      testing::make_model(counted, 6)->core().count_loads(routes, loads);
      ASSERT_EQ(loads.loads.size(), 1u);
      for (int m = 0; m < 4; ++m)
        EXPECT_NEAR(loads.loads[0][m], expected[m], 1e-9)
            << enum_name(count) << " window0 " << window0 << " expert " << m;
    }
    // The two counts differ on these routes (gates below 1), so the check above tells them apart.
    EXPECT_LT(gates[0] + gates[1] + gates[2] + gates[3],
              windows[0] + windows[1] + windows[2] + windows[3]);
  }
}

// router_skip: a window routed to the skip is no load on any expert; every other window of
// ordinal >= 1 counts 1 for its expert, as without the skip. The skip's share counts the same
// windows: all of ordinal >= 1, and those of them that skipped.
TEST(Balancing, TheSkipIsNoLoad) {
  auto c = train_model_config(Family::kLol);
  c.core_depth = 4;
  c.library_size = 4;
  c.router_skip = true;
  auto model = testing::make_model(c, 6);
  const auto layout = strategy_layout(c);
  roll_biases(model);
  ForcedPath skips;
  skips.depths[2][1] = {4, std::nullopt};  // windows 1, 2, ... of depth 2
  skips.depths[3][2] = {4, 0.5};           // windows 2, 3, ... of depth 3, at a forced gate
  torch::NoGradGuard no_grad;
  ForwardOptions options;
  options.force = &skips;
  const auto routes = model->forward(layout, options).routes;
  std::vector<double> expected(4, 0.0);
  int64_t skipped = 0;
  for (const auto& r : routes)
    for (size_t w = 0; w < r.partition->windows.size(); ++w) {
      if (r.partition->windows[w].ordinal == 0) continue;
      const int64_t e = r.host().experts[w];
      if (e == 4)
        ++skipped;
      else
        expected[e] += 1;
    }
  ASSERT_GT(skipped, 0);
  BalanceLoads loads;
  model->core().count_loads(routes, loads);
  ASSERT_EQ(loads.loads.size(), 1u);
  EXPECT_EQ(loads.loads[0], expected);
  const double counted = expected[0] + expected[1] + expected[2] + expected[3] + skipped;
  EXPECT_EQ(loads.counted, std::vector<double>{counted});
  EXPECT_EQ(loads.skipped, std::vector<double>{static_cast<double>(skipped)});
  EXPECT_DOUBLE_EQ(skip_share(loads), skipped / counted);
}

// router_skip_share: the skip's bias steers the share of counted windows that skip toward the
// target, from above (a bias that sends every window to the skip) and from below (one that sends
// none), with one bias for the router and one per depth; the experts' biases still balance. The
// router is scaled up so that windows score apart: where every window scores alike, a step of the
// bias moves all of them at once and the share swings between none and all.
TEST(Balancing, TheSkipBiasSteersTheSkipShare) {
  for (bool per_depth : {false, true})
    for (float start : {0.3f, -0.3f}) {
      SCOPED_TRACE(std::string(per_depth ? "per depth" : "one bias") + ", skip bias " +
                   std::to_string(start));
      auto c = train_model_config(Family::kLol);
      c.core_depth = 3;
      c.library_size = 4;
      c.router_skip = true;
      c.router_skip_share = 0.25;
      c.balance_per_depth = per_depth;
      c.balance_rate = 0.005;
      auto model = testing::make_model(c, 8, 300.0);
      const auto layout = strategy_layout(c);
      const auto skips = model->core().skip_biases();
      ASSERT_EQ(skips.size(), per_depth ? 3u : 1u);
      torch::NoGradGuard no_grad;
      for (auto b : skips) b.fill_(start);
      double first = -1, settled = 0;
      std::vector<double> settled_rows(skips.size(), 0.0);
      for (int step = 0; step < 300; ++step) {
        BalanceLoads loads;
        model->core().count_loads(model->forward(layout).routes, loads);
        ASSERT_EQ(loads.counted.size(), skips.size());
        if (step == 0) first = skip_share(loads);
        if (step >= 200) {
          settled += skip_share(loads) / 100;
          for (size_t r = 0; r < skips.size(); ++r)
            settled_rows[r] += loads.skipped[r] / loads.counted[r] / 100;
        }
        apply_balance(model->core(), loads, c.balance_rate, c.router_skip_share);
      }
      EXPECT_EQ(first, start > 0 ? 1.0 : 0.0);
      EXPECT_NEAR(settled, 0.25, 0.08);
      for (size_t r = 0; r < skips.size(); ++r) EXPECT_NEAR(settled_rows[r], 0.25, 0.12) << r;
      for (auto b : model->core().balance_biases()) EXPECT_NEAR(b.sum().item<double>(), 0.0, 1e-5);
    }
}

// A moe core reads every block's loads in one transfer: each block's row is that block's own
// count of tokens per expert, and blocks past the executed depth count nothing.
TEST(Balancing, MoeLoadsAreEachBlocksOwnCountsUpToTheExecutedDepth) {
  auto c = train_model_config(Family::kMoe);
  c.core_depth = 4;
  c.moe_experts = 4;
  c.moe_top_k = 2;
  auto model = testing::make_model(c, 5);
  const auto layout = strategy_layout(c);
  roll_biases(model);
  torch::NoGradGuard no_grad;
  ForwardOptions options;
  options.executed_depth = 3;
  BalanceLoads loads;
  for (int pass = 0; pass < 2; ++pass)  // loads add up over micro-batches
    model->core().count_loads(model->forward(layout, options).routes, loads);
  const auto blocks = model->core().blocks();
  ASSERT_EQ(loads.loads.size(), blocks.size());
  const double tokens = static_cast<double>(layout.num_tokens());
  for (size_t b = 0; b < blocks.size(); ++b) {
    ASSERT_EQ(loads.loads[b].size(), 4u);
    const auto own = blocks[b]->moe->last_load_on_host();
    double total = 0;
    for (int e = 0; e < 4; ++e) {
      const double expected = b < 3 ? 2.0 * static_cast<double>(own.at(e)) : 0.0;
      EXPECT_EQ(loads.loads[b][e], expected) << "block " << b << " expert " << e;
      total += loads.loads[b][e];
    }
    EXPECT_EQ(total, b < 3 ? 2 * 2 * tokens : 0.0) << "block " << b;
  }
}

// A step's load summary: the shares of all routers together, each router's own counts, and the
// entropy of the least balanced router among those that counted windows.
TEST(Balancing, SummaryGivesEachRoutersCountsAndTheLeastBalancedOnesEntropy) {
  BalanceLoads loads;
  loads.loads = {{2, 2, 0, 0}, {1, 3, 0, 0}, {0, 0, 0, 0}};  // the last depth not executed
  const auto s = summarize_loads(loads);
  EXPECT_EQ(s.shares, (std::vector<double>{0.375, 0.625, 0, 0}));
  EXPECT_NEAR(s.entropy, -(0.375 * std::log(0.375) + 0.625 * std::log(0.625)), 1e-12);
  EXPECT_EQ(s.by_router, loads.loads);
  EXPECT_NEAR(s.entropy_min, -(0.25 * std::log(0.25) + 0.75 * std::log(0.75)), 1e-12);
  // One router: no per-router rows, and its entropy is the least.
  loads.loads = {{1, 3, 0, 0}};
  const auto one = summarize_loads(loads);
  EXPECT_TRUE(one.by_router.empty());
  EXPECT_EQ(one.entropy_min, one.entropy);
  EXPECT_EQ(one.shares, (std::vector<double>{0.25, 0.75, 0, 0}));
  loads.loads = {{1, 3}, {1, 3, 0}};
  EXPECT_THROW(summarize_loads(loads), Error);
}

// The training metrics carry each depth's counts with balance_per_depth (whole numbers of
// windows, every depth routing some), and the shares of all depths together are their sum
// normalised; the least balanced depth's entropy is the smallest of theirs.
TEST(Training, MetricsGiveEachDepthsLoadWhenEachDepthIsBalanced) {
  for (bool per_depth : {false, true}) {
    auto c = train_model_config(Family::kLol);
    c.balance_per_depth = per_depth;
    c.core_depth = 3;
    c.library_size = 4;
    auto config = small_run();
    config.steps = 3;
    auto dir = temp_dir(std::string("per_depth_metrics_") + (per_depth ? "1" : "0"));
    LanguageModel model(c);
    model->initialize(4);
    Trainer trainer(model, config, dir.string(), testing::device());
    std::vector<StepMetrics> steps;
    trainer.run({}, [&](const StepMetrics& m) { steps.push_back(m); });
    ASSERT_EQ(steps.size(), 3u);
    for (const auto& m : steps) {
      ASSERT_EQ(m.load.size(), 4u);
      const json j = m.to_json();
      if (!per_depth) {
        EXPECT_TRUE(m.load_counts_by_router.empty());
        EXPECT_FALSE(j.contains("load_counts_by_router"));
        EXPECT_EQ(m.load_entropy_min, m.load_entropy);
        continue;
      }
      ASSERT_EQ(m.load_counts_by_router.size(), 3u);  // core_depth 3
      std::vector<double> sum(4, 0.0);
      double least = std::numeric_limits<double>::infinity();
      for (const auto& row : m.load_counts_by_router) {
        ASSERT_EQ(row.size(), 4u);
        for (size_t e = 0; e < 4; ++e) {
          EXPECT_EQ(row[e], std::round(row[e]));
          EXPECT_GE(row[e], 0.0);
          sum[e] += row[e];
        }
        EXPECT_GT(std::accumulate(row.begin(), row.end(), 0.0), 0.0);
        least = std::min(least, load_entropy(row));
      }
      const double total = std::accumulate(sum.begin(), sum.end(), 0.0);
      for (size_t e = 0; e < 4; ++e)
        EXPECT_NEAR(m.load[e], sum[e] / total, 1e-12) << "step " << m.step << " expert " << e;
      EXPECT_EQ(m.load_entropy_min, least);
      EXPECT_LE(m.load_entropy_min, m.load_entropy + 1e-12);
      EXPECT_EQ(j.at("load_counts_by_router").get<std::vector<std::vector<double>>>(),
                m.load_counts_by_router);
      EXPECT_EQ(j.at("load_entropy_min").get<double>(), m.load_entropy_min);
    }
    remove_tree(dir.string());
  }
}

// With a steered skip, each step's metrics give the share of counted windows that skipped and
// the skip's bias after the step's update: it moves by the balancing rate at each step, down
// while more windows skip than the target, up while fewer do; the model keeps the last value.
TEST(Training, MetricsFollowTheSteeredSkip) {
  auto c = train_model_config(Family::kLol);
  c.core_depth = 3;
  c.library_size = 4;
  c.router_skip = true;
  c.router_skip_share = 0.5;
  c.balance_rate = 0.01;
  auto config = small_run();
  config.steps = 4;
  auto dir = temp_dir("steered_skip_metrics");
  LanguageModel model(c);
  model->initialize(4);
  Trainer trainer(model, config, dir.string(), testing::device());
  std::vector<StepMetrics> steps;
  trainer.run({}, [&](const StepMetrics& m) { steps.push_back(m); });
  ASSERT_EQ(steps.size(), 4u);
  double bias = 0;
  for (const auto& m : steps) {
    ASSERT_TRUE(m.skip_share.has_value());
    EXPECT_GE(*m.skip_share, 0.0);
    EXPECT_LE(*m.skip_share, 1.0);
    ASSERT_EQ(m.skip_bias.size(), 1u);
    const double expected = bias + c.balance_rate * ((*m.skip_share < 0.5) - (*m.skip_share > 0.5));
    EXPECT_NEAR(m.skip_bias[0], expected, 1e-6) << "step " << m.step;
    bias = m.skip_bias[0];
    EXPECT_EQ(m.to_json().at("skip_share").get<double>(), *m.skip_share);
  }
  EXPECT_EQ(model->core().skip_biases().at(0).item<float>(), static_cast<float>(bias));
  remove_tree(dir.string());
}

// router_skip_target through the trainer: the skip head starts below 1/2 on every window (no
// window skips), the target's gradient reaches its router row at each step (the carrier is in the
// loss), and the skip's bias brings the share from 0 toward the target.
TEST(Training, TheSkipTargetAndItsBiasLeadTheSkipShareTowardIt) {
  auto c = testing::skip_head_config(train_model_config(Family::kLol), 3, 4);
  c.router_skip_share = 0.25;
  c.router_skip_target = true;
  c.balance_rate = 0.05;
  auto config = small_run();
  config.steps = 60;
  auto dir = temp_dir("skip_target");
  LanguageModel model(c);
  model->initialize(4);
  Trainer trainer(model, config, dir.string(), testing::device());
  std::vector<double> shares;
  auto weight = model->named_parameters()["router.weight"];
  trainer.run({}, [&](const StepMetrics& m) {
    ASSERT_TRUE(m.skip_share.has_value());
    shares.push_back(*m.skip_share);
    ASSERT_TRUE(weight.grad().defined());
    EXPECT_GT(weight.grad()[0][c.library_size].abs().max().item<double>(), 0.0)
        << "step " << m.step;
  });
  ASSERT_EQ(shares.size(), 60u);
  EXPECT_EQ(shares.front(), 0.0);
  const double late = std::accumulate(shares.end() - 10, shares.end(), 0.0) / 10;
  EXPECT_GT(late, 0.05);
  EXPECT_LT(late, 0.6);
  remove_tree(dir.string());
}

// skip_lr_scale through the trainer: at 0 the skip's row of router.weight keeps its values while
// it gets a gradient and the experts' rows move; a model without a skip refuses the option.
TEST(Training, TheSkipLrScaleActsOnTheSkipsRouterRowOnly) {
  auto c = testing::skip_head_config(train_model_config(Family::kLol), 3, 4);
  c.router_skip_share = 0.25;
  c.router_skip_target = true;
  auto config = small_run();
  config.steps = 5;
  config.skip_lr_scale = 0;
  auto dir = temp_dir("skip_lr_scale");
  LanguageModel model(c);
  model->initialize(4);
  auto weight = model->named_parameters()["router.weight"];
  const auto before = weight.detach().clone();
  Trainer trainer(model, config, dir.string(), testing::device());
  double skip_grad = 0;
  trainer.run({}, [&](const StepMetrics&) {
    skip_grad += weight.grad()[0][c.library_size].abs().sum().item<double>();
  });
  EXPECT_GT(skip_grad, 0.0);
  EXPECT_TRUE(torch::equal(weight.detach()[0][c.library_size], before[0][c.library_size]));
  EXPECT_GT(testing::max_abs_diff(weight.detach()[0].narrow(0, 0, c.library_size),
                                  before[0].narrow(0, 0, c.library_size)),
            1e-4);
  remove_tree(dir.string());

  LanguageModel plain(train_model_config(Family::kLol));
  plain->initialize(4);
  auto plain_dir = temp_dir("skip_lr_scale_plain");
  EXPECT_THROW(Trainer(plain, config, plain_dir.string(), testing::device()), Error);
  remove_tree(plain_dir.string());
}

// The evaluation's skip share is the share of the held-out windows after window 0 that took the
// skip, counted here window by window from the routes of the same rows; a skip bias far above or
// below every score gives 1 and 0. It reaches metrics.jsonl at each evaluation.
TEST(Training, TheEvaluationCountsTheSkipOnTheWindowsTheBalancingCounts) {
  auto c = testing::skip_head_config(train_model_config(Family::kLol), 3, 4);
  c.router_skip_share = 0.25;
  auto config = small_run();
  config.steps = 2;
  config.eval_every = 2;
  config.eval_batches = 3;
  auto dir = temp_dir("eval_skip");
  LanguageModel model(c);
  model->initialize(5);
  Trainer trainer(model, config, dir.string(), testing::device());
  auto by_hand = [&] {
    torch::NoGradGuard no_grad;
    model->eval();
    auto source = open_source(config.data, config.seed, 1);
    Packer packer(*source, config.batch_rows, config.seq_len);
    int64_t counted = 0, skipped = 0;
    for (int64_t i = 0; i < config.eval_batches; ++i) {
      Layout layout(packer.next().batch, c.vocab_size, testing::device());
      const auto result = model->forward(layout, ForwardOptions{});
      for (const auto& r : result.routes) {
        EXPECT_EQ(r.skip, c.library_size);
        const auto ordinals = r.partition->ordinals_t.to(torch::kCPU);
        const auto experts = r.experts.to(torch::kCPU);
        for (int64_t w = 0; w < experts.size(0); ++w) {
          if (ordinals[w].item<int64_t>() == 0) continue;
          ++counted;
          skipped += experts[w].item<int64_t>() == r.skip;
        }
      }
    }
    model->train();
    EXPECT_GT(counted, 0);
    return static_cast<double>(skipped) / static_cast<double>(counted);
  };
  auto skip_bias = model->core().skip_biases().at(0);
  auto set_bias = [&](double b) {
    torch::NoGradGuard no_grad;
    skip_bias.fill_(b);
  };
  for (double b : {100.0, -100.0}) {
    set_bias(b);
    const auto share = trainer.evaluate().skip_share;
    ASSERT_TRUE(share.has_value());
    EXPECT_EQ(*share, b > 0 ? 1.0 : 0.0) << b;
  }
  // A bias between, found by bisection, where some windows skip and some do not.
  double lo = -100, hi = 100, mixed = 0;
  for (int i = 0; i < 60; ++i) {
    set_bias((lo + hi) / 2);
    mixed = by_hand();
    if (mixed > 0 && mixed < 1) break;
    (mixed == 0 ? lo : hi) = (lo + hi) / 2;
  }
  ASSERT_GT(mixed, 0.0);
  ASSERT_LT(mixed, 1.0);
  EXPECT_DOUBLE_EQ(*trainer.evaluate().skip_share, mixed);
  trainer.run({}, {});
  std::ifstream lines(dir / "metrics.jsonl");
  std::string line, last;
  while (std::getline(lines, line)) last = line;
  const auto j = json::parse(last);
  ASSERT_TRUE(j.contains("eval_skip_share")) << last;
  EXPECT_GE(j["eval_skip_share"].get<double>(), 0.0);
  remove_tree(dir.string());

  LanguageModel plain(train_model_config(Family::kLol));
  plain->initialize(5);
  auto plain_dir = temp_dir("eval_skip_plain");
  EXPECT_FALSE(Trainer(plain, config, plain_dir.string(), testing::device())
                   .evaluate()
                   .skip_share.has_value());
  remove_tree(plain_dir.string());
}

// A window of metrics by hand: means of the per-step figures, the tokens over the wall time,
// counts summed, the last step's state; an empty window has nothing to summarise.
TEST(Training, MetricsWindowAveragesSumsAndKeepsTheLastState) {
  MetricsWindow window;
  EXPECT_TRUE(window.empty());
  EXPECT_THROW(window.take(), Error);
  StepMetrics a, b;
  a.step = 7, b.step = 8;
  a.loss = 1.0, b.loss = 3.0;
  a.grad_norm = 0.5, b.grad_norm = 1.5;
  a.lr = 0.1, b.lr = 0.2;
  a.tokens = 100, b.tokens = 300;
  a.seconds = 1.0, b.seconds = 0.5;  // 100 and 600 tokens/s: 400 tokens in 1.5 s, not 350/s
  a.tokens_per_s = 100, b.tokens_per_s = 600;
  a.depth = 2, b.depth = 3;
  a.load = {0.5, 0.5}, b.load = {0.25, 0.75};
  a.load_counts_by_router = {{1, 1}, {2, 0}}, b.load_counts_by_router = {{0, 2}, {1, 1}};
  a.load_entropy = 0.6, b.load_entropy = 0.4;
  a.agreement = 1.0, b.agreement = 0.5;
  a.bias_max = 0.1, b.bias_max = 0.3;
  a.skip_share = 0.25, b.skip_share = 0.5;
  a.skip_bias = {0.01}, b.skip_bias = {-0.01};
  a.comm_bytes = 10, b.comm_bytes = 10;
  a.comm_buckets = 3, b.comm_buckets = 4;
  b.eval_loss = 2.5;
  window.add(a);
  window.add(b);
  const auto m = window.take();
  EXPECT_TRUE(window.empty());
  EXPECT_EQ(m.steps, 2);
  EXPECT_EQ(m.step, 8);
  EXPECT_DOUBLE_EQ(m.loss, 2.0);
  EXPECT_DOUBLE_EQ(m.grad_norm, 1.0);
  EXPECT_DOUBLE_EQ(m.lr, 0.2);
  EXPECT_DOUBLE_EQ(m.tokens_per_s, 400.0 / 1.5);
  EXPECT_EQ(m.depth, 3);
  EXPECT_EQ(m.load, (std::vector<double>{0.375, 0.625}));
  EXPECT_EQ(m.load_counts_by_router, (std::vector<std::vector<double>>{{1, 3}, {3, 1}}));
  EXPECT_DOUBLE_EQ(m.load_entropy, 0.5);
  EXPECT_DOUBLE_EQ(m.agreement, 0.75);
  EXPECT_DOUBLE_EQ(m.bias_max, 0.3);
  EXPECT_DOUBLE_EQ(m.skip_share.value(), 0.375);
  EXPECT_EQ(m.skip_bias, std::vector<double>{-0.01});
  EXPECT_EQ(m.to_json().at("skip_bias"), json({-0.01}));
  EXPECT_EQ(m.comm_bytes, 10);
  EXPECT_EQ(m.comm_buckets, 4);  // 3.5 rounded
  EXPECT_EQ(m.eval_loss, 2.5);
  EXPECT_EQ(m.to_json().at("steps"), 2);
  // A window of one step is that step.
  window.add(a);
  const auto one = window.take();
  EXPECT_EQ(one.to_json(), a.to_json());
  EXPECT_FALSE(one.to_json().contains("steps"));
  // Steps that route over different numbers of experts or routers cannot be summed.
  window.add(a);
  EXPECT_THROW(window.add(StepMetrics{}), Error);
}

// metrics.jsonl has a line every log_every steps and one ending at each evaluation and each
// checkpoint (here the stop's); each line summarises the steps since the one before, as the
// steps' own metrics say; a run stopped and resumed covers every step once.
TEST(Training, MetricsLinesSummariseTheStepsSinceTheLast) {
  auto c = train_model_config(Family::kLol);
  c.balance_per_depth = true;
  c.core_depth = 2;
  auto config = small_run();
  config.steps = 7;
  config.log_every = 3;
  config.eval_every = 5;
  auto dir = temp_dir("metrics_window");
  LanguageModel model(c);
  model->initialize(4);
  std::vector<StepMetrics> steps;
  {
    Trainer trainer(model, config, dir.string(), testing::device());
    trainer.run([&] { return steps.size() == 4; },
                [&](const StepMetrics& m) { steps.push_back(m); });
  }
  auto resumed = Trainer::resume(dir.string(), testing::device());
  resumed->run({}, [&](const StepMetrics& m) { steps.push_back(m); });
  ASSERT_EQ(steps.size(), 7u);
  const auto lines = testing::metrics_lines(dir.string() + "/metrics.jsonl");
  std::vector<int64_t> ends;
  for (const auto& j : lines) ends.push_back(j.at("step").get<int64_t>());
  EXPECT_EQ(ends, (std::vector<int64_t>{3, 4, 5, 6, 7}));  // log_every, stop, eval, log_every, last
  int64_t covered = 0;
  for (const auto& j : lines) {
    const int64_t end = j.at("step"), n = j.value("steps", 1);
    EXPECT_EQ(end - n, covered) << "line ending at step " << end;
    double loss = 0, grad_norm = 0, seconds = 0, tokens = 0;
    std::vector<std::vector<double>> counts(2, std::vector<double>(c.library_size, 0.0));
    for (int64_t t = covered; t < end; ++t) {
      const auto& m = steps[static_cast<size_t>(t)];
      loss += m.loss / static_cast<double>(n);
      grad_norm += m.grad_norm / static_cast<double>(n);
      seconds += m.seconds;
      tokens += static_cast<double>(m.tokens);
      for (size_t r = 0; r < 2; ++r)
        for (size_t e = 0; e < counts[r].size(); ++e) counts[r][e] += m.load_counts_by_router[r][e];
    }
    const auto& last = steps[static_cast<size_t>(end - 1)];
    EXPECT_NEAR(j.at("loss").get<double>(), loss, 1e-12) << end;
    EXPECT_NEAR(j.at("grad_norm").get<double>(), grad_norm, 1e-12) << end;
    EXPECT_NEAR(j.at("tokens_per_s").get<double>(), tokens / seconds, 1e-9 * tokens / seconds);
    EXPECT_EQ(j.at("load_counts_by_router").get<std::vector<std::vector<double>>>(), counts);
    EXPECT_EQ(j.at("lr").get<double>(), last.lr) << end;
    EXPECT_EQ(j.contains("eval_loss"), end == 5 || end == 7) << end;
    covered = end;
  }
  EXPECT_EQ(covered, 7);
  remove_tree(dir.string());
}

TEST(Training, GrowingChangesTheExecutedDepthOnSchedule) {
  auto c = train_model_config(Family::kLol);
  c.core_depth = 4;
  auto config = small_run();
  config.steps = 8;
  config.grow_start_depth = 1;
  config.grow_fraction = 0.5;
  auto dir = temp_dir("grow");
  LanguageModel model(c);
  model->initialize(4);
  Trainer trainer(model, config, dir.string(), testing::device());
  std::vector<int64_t> depths;
  trainer.run({}, [&](const StepMetrics& m) { depths.push_back(m.depth); });
  std::vector<int64_t> expected;
  for (int64_t t = 0; t < 8; ++t) expected.push_back(grown_depth(config, 4, t));
  EXPECT_EQ(depths, expected);
  EXPECT_EQ(depths.front(), 1);
  EXPECT_EQ(depths.back(), 4);
  remove_tree(dir.string());
}

}  // namespace
}  // namespace lol
