// Weighted mixtures of document sources (data/mixture.h, `mix:` data specs).
#include "data/mixture.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tasks/task.h"
#include "train/sources.h"

namespace lol {
namespace {

bool same(const Document& a, const Document& b) {
  return a.tokens == b.tokens && a.prompt_len == b.prompt_len && a.router_only == b.router_only &&
         a.loss_mask == b.loss_mask;
}

std::string error_of(const std::string& spec) {
  try {
    open_source(spec, 1, 0);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
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

// The position holds every part's position and the counts dealt: seeking there, in this source
// or a fresh one, replays the same documents.
TEST(Mixture, SeekingToASavedPositionReplaysTheStream) {
  const std::string spec = "mix:2*task:maze:5,task:maze:4,0.5*task:maze:6";
  auto source = open_source(spec, 3, 0);
  for (int i = 0; i < 11; ++i) source->next();
  const json saved = source->position();
  std::vector<Document> after;
  for (int i = 0; i < 9; ++i) after.push_back(source->next());
  for (int pass = 0; pass < 2; ++pass) {
    auto replay = pass == 0 ? std::move(source) : open_source(spec, 3, 0);
    replay->seek(saved);
    for (size_t i = 0; i < after.size(); ++i)
      EXPECT_TRUE(same(replay->next(), after[i])) << "pass " << pass << ", document " << i;
    source = std::move(replay);
  }
  EXPECT_EQ(saved["taken"], json::array({6, 3, 2}));  // 11 x (4/7, 2/7, 1/7) = 6.3, 3.1, 1.6
  EXPECT_THROW(source->seek(json{{"taken", {1, 2}}, {"parts", {saved["parts"][0]}}}), Error);
  EXPECT_THROW(source->seek(json{{"taken", {1, -2, 0}}, {"parts", saved["parts"]}}), Error);
  EXPECT_THROW(source->seek(json{{"index", 3}}), Error);
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
