// Weighted mixtures of document sources (data/mixture.h, `mix:` data specs).
#include "data/mixture.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "helpers.h"
#include "tasks/task.h"
#include "train/sources.h"

namespace lol {
namespace {

bool same(const Document& a, const Document& b) {
  return a.tokens == b.tokens && a.prompt_len == b.prompt_len && a.router_only == b.router_only &&
         a.loss_mask == b.loss_mask;
}

std::string error_of(const std::string& spec) {
  return testing::error_message([&] { open_source(spec, 1, 0); });
}

// Each document comes from the part furthest behind its share, so after every document each
// part's count is within one of weight x documents; the parts' documents are their own streams
// in order (the run's seed, the split asked for).
TEST(Mixture, DealsDocumentsByWeightEvenlyFromEachPartsOwnStream) {
  for (int split : {0, 1}) {
    auto mixed = open_source("mix:3*task:maze:5,task:maze:4", 7, split);
    tasks::TaskSource five(tasks::Kind::kMaze, 5, 7, split), four(tasks::Kind::kMaze, 4, 7, split);
    auto* mixture = dynamic_cast<MixtureSource*>(mixed.get());
    ASSERT_NE(mixture, nullptr);
    int64_t taken[2] = {0, 0};
    for (int64_t n = 1; n <= 40; ++n) {
      const size_t part = mixture->next_part();
      ASSERT_LT(part, 2u);
      const auto doc = mixed->next();
      EXPECT_TRUE(same(doc, part == 0 ? five.next() : four.next())) << "document " << n;
      ++taken[part];
      EXPECT_LT(std::abs(static_cast<double>(taken[0]) - 0.75 * static_cast<double>(n)), 1.0)
          << "after " << n << " documents";
    }
    EXPECT_EQ(taken[0], 30);
    EXPECT_EQ(taken[1], 10);
  }
  // A mixture of one part is that part.
  auto alone = open_source("mix:task:maze:5", 7, 0);
  tasks::TaskSource five(tasks::Kind::kMaze, 5, 7, 0);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(same(alone->next(), five.next()));
}

// A schedule's weight is linear between its points and constant after the last; two points at
// one count of tokens make a step.
TEST(Mixture, WeightSchedulesInterpolateBetweenTheirPoints) {
  const auto ramp = WeightSchedule::parse("4..1@20M");
  EXPECT_FALSE(ramp.constant());
  EXPECT_DOUBLE_EQ(ramp.at(0), 4);
  EXPECT_DOUBLE_EQ(ramp.at(10e6), 2.5);
  EXPECT_DOUBLE_EQ(ramp.at(20e6), 1);
  EXPECT_DOUBLE_EQ(ramp.at(1e12), 1);
  const auto step = WeightSchedule::parse("2..2@1k..0@1k..3@3K");
  EXPECT_DOUBLE_EQ(step.at(999), 2);
  EXPECT_DOUBLE_EQ(step.at(1000), 0);
  EXPECT_DOUBLE_EQ(step.at(2000), 1.5);
  EXPECT_DOUBLE_EQ(step.last(), 3);
  EXPECT_TRUE(WeightSchedule::parse("0.25").constant());
  EXPECT_DOUBLE_EQ(WeightSchedule::parse("1.5..0.5@2G").at(1e9), 1.0);
  // Shares do not overflow for the largest finite weights.
  const std::vector<WeightSchedule> huge{WeightSchedule(1e308), WeightSchedule(1e308)};
  EXPECT_EQ(mixture_shares(huge, 0), std::vector<double>({0.5, 0.5}));
}

// With a schedule, each part is owed its share at the tokens dealt so far for every document:
// after each document its count is within one of that sum (computed here from the documents'
// lengths and the ramp's formula), the first documents come from the part the ramp starts on,
// those after the ramp from the part it ends on, and the held-out stream mixes by the weights
// the schedule ends on.
TEST(Mixture, AScheduleMovesTheSharesAlongTheTokensDealt) {
  const double ramp = 20000;
  const std::string spec = "mix:1..0@20k*task:maze:4,0..1@20k*task:maze:5";
  auto mixed = open_source(spec, 7, 0);
  tasks::TaskSource four(tasks::Kind::kMaze, 4, 7, 0), five(tasks::Kind::kMaze, 5, 7, 0);
  double tokens = 0, owed_five = 0;
  int64_t fives = 0, n = 0, fives_after_ramp = 0, after_ramp = 0;
  while (tokens < 2 * ramp) {
    const double share_five = std::min(tokens / ramp, 1.0);
    const auto doc = mixed->next();
    const bool is_five = doc.tokens.size() > 100;  // 4 x 4 sequences are 77-97 tokens long
    EXPECT_TRUE(same(doc, is_five ? five.next() : four.next())) << "document " << n;
    if (n == 0) {
      EXPECT_FALSE(is_five);
    }
    if (tokens >= ramp) ++after_ramp, fives_after_ramp += is_five;
    fives += is_five, owed_five += share_five, ++n;
    EXPECT_LT(std::abs(static_cast<double>(fives) - owed_five), 1.0) << "after " << n;
    tokens += static_cast<double>(doc.tokens.size());
  }
  EXPECT_GT(after_ramp, 100);
  EXPECT_EQ(fives_after_ramp, after_ramp);
  EXPECT_NE(mixed->describe().find("mixture of 100..0% "), std::string::npos) << mixed->describe();
  auto held_out = open_source(spec, 7, 1);
  tasks::TaskSource five_held_out(tasks::Kind::kMaze, 5, 7, 1);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(same(held_out->next(), five_held_out.next()));
}

// The position holds every part's position and the counts dealt (with a schedule, the tokens
// dealt and what each part is owed too): seeking there, in this source or a fresh one, replays
// the same documents.
TEST(Mixture, SeekingToASavedPositionReplaysTheStream) {
  for (const std::string spec : {"mix:2*task:maze:5,task:maze:4,0.5*task:maze:6",
                                 "mix:2..0@1k*task:maze:5,task:maze:4,0..3@2k*task:maze:6"}) {
    auto source = open_source(spec, 3, 0);
    for (int i = 0; i < 11; ++i) source->next();
    const json saved = source->position();
    std::vector<Document> after;
    for (int i = 0; i < 19; ++i) after.push_back(source->next());
    for (int pass = 0; pass < 2; ++pass) {
      auto replay = pass == 0 ? std::move(source) : open_source(spec, 3, 0);
      replay->seek(saved);
      for (size_t i = 0; i < after.size(); ++i)
        EXPECT_TRUE(same(replay->next(), after[i]))
            << spec << " pass " << pass << ", document " << i;
      source = std::move(replay);
    }
    EXPECT_THROW(source->seek(json{{"taken", {1, 2}}, {"parts", {saved["parts"][0]}}}), Error);
    EXPECT_THROW(source->seek(json{{"taken", {1, -2, 0}}, {"parts", saved["parts"]}}), Error);
    EXPECT_THROW(source->seek(json{{"index", 3}}), Error);
    if (saved.contains("owed")) {
      EXPECT_EQ(saved["tokens"].get<int64_t>() > 0, true);
      auto bad = saved;
      bad["owed"][1] = -1;
      EXPECT_THROW(source->seek(bad), Error);
      bad.erase("owed");
      EXPECT_THROW(source->seek(bad), Error);
    } else {
      EXPECT_EQ(saved["taken"], json::array({6, 3, 2}));  // 11 x (4/7, 2/7, 1/7) = 6.3, 3.1, 1.6
    }
  }
}

// Bad mixtures are one clear error naming what is wrong.
TEST(Mixture, BadSpecsNameTheProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"mix:", "needs parts"},
      {"mix:task:maze:5,", "needs parts"},
      {"mix:task:maze:5,,task:maze:4", "part 2 names no data"},
      {"mix:0*task:maze:5", "weight '0'"},
      {"mix:-1*task:maze:5", "weight '-1'"},
      {"mix:x*task:maze:5", "weight 'x'"},
      {"mix:inf*task:maze:5", "weight 'inf'"},
      {"mix:*task:maze:5", "weight ''"},
      {"mix:task:maze:5,2*task:maze:5", "given twice"},
      {"mix:mix:task:maze:5", "cannot hold a mixture"},
      {"mix:task:maze:5,task:sudoku", "different vocabularies"},
      {"mix:task:copy,task:maze:4", "different vocabularies"},
      {"mix:task:maze:5,task:maze:99", "maze size"},
      {"mix:task:maze:5,/no/such.shard", "/no/such.shard"},
      {"mix:nan*task:maze:5", "weight 'nan'"},
      {"mix: 2*task:maze:5", "weight ' 2'"},
      {"mix:1..2@ 5k*task:maze:5", "' 5k' in '2@ 5k'"},
      {"mix:task:maze:-5", "maze size must be a number"},
      {"mix:1..*task:maze:5", "'' is not WEIGHT@TOKENS"},
      {"mix:1..2*task:maze:5", "'2' is not WEIGHT@TOKENS"},
      {"mix:1..2@*task:maze:5", "'' in '2@' is not a count of tokens"},
      {"mix:1..2@-5*task:maze:5", "'-5' in '2@-5' is not a count of tokens"},
      {"mix:1..2@5x*task:maze:5", "'5x' in '2@5x'"},
      {"mix:1..-1@5*task:maze:5", "'-1' in '-1@5' is not a weight"},
      {"mix:x..1@5*task:maze:5", "its start 'x'"},
      {"mix:0..0@5*task:maze:5", "zero throughout"},
      {"mix:1..2@10..3@5*task:maze:5", "'3@5' goes back in tokens"},
      {"mix:1..0@1k*task:maze:5", "all zero at 1000 tokens"},
      {"mix:1..0@1k*task:maze:5,0..0@2k..1@3k*task:maze:4", "all zero at 1000 tokens"},
  };
  for (const auto& [spec, message] : cases)
    EXPECT_NE(error_of(spec).find(message), std::string::npos) << spec << " -> " << error_of(spec);
}

// A mixture of one task is that task (its tokenizer, the largest maze size for reports);
// anything else is not a task.
TEST(Mixture, AMixtureOfOneTaskIsThatTask) {
  tasks::TaskData data;
  ASSERT_TRUE(tasks::parse_task_data("mix:task:maze:4,3*task:maze:6,task:maze:5", &data));
  EXPECT_EQ(data.kind, tasks::Kind::kMaze);
  EXPECT_EQ(data.maze_size, 6);
  ASSERT_TRUE(tasks::parse_task_data("mix:task:sudoku", &data));
  EXPECT_EQ(data.kind, tasks::Kind::kSudoku);
  EXPECT_FALSE(tasks::parse_task_data("mix:task:maze:4,task:sudoku", &data));
  EXPECT_FALSE(tasks::parse_task_data("mix:task:maze:4,data.shard", &data));
  EXPECT_EQ(open_source("mix:task:maze:5,task:maze:4", 1, 0)->vocab_size(),
            tasks::vocabulary(tasks::Kind::kMaze).size());
}

}  // namespace
}  // namespace lol
