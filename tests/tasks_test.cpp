#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "helpers.h"
#include "tasks/score.h"
#include "tasks/task.h"
#include "util/error.h"

namespace lol::tasks {
namespace {

std::vector<std::string> read_lines(const std::string& name) {
  std::ifstream in(std::string(LOL_TEST_DATA_DIR) + "/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

// Regenerates a sequence from its question and descriptor only.
std::string regenerate(Kind kind, const std::string& line) {
  auto tokens = split_words(line);
  auto parsed = parse_sequence(kind, tokens, "paper example");
  const int strategy = descriptor_strategy(kind, parsed.descriptor);
  EXPECT_GE(strategy, 1);
  return join_words(
      solve_question(kind, parsed.question, parsed.descriptor, strategy, "paper").tokens());
}

TEST(GoldenTasks, ReproduceThePapersTenSequencesByteForByte) {
  auto sudoku = read_lines("paper_sudoku.txt");
  auto maze = read_lines("paper_maze.txt");
  ASSERT_EQ(sudoku.size(), 5u);
  ASSERT_EQ(maze.size(), 5u);
  for (const auto& line : sudoku) EXPECT_EQ(regenerate(Kind::kSudoku, line), line);
  for (const auto& line : maze) EXPECT_EQ(regenerate(Kind::kMaze, line), line);
}

TEST(Tasks, GeneratedSudokuMeetTheirRules) {
  std::set<sudoku::Grid> seen;
  for (int64_t i = 0; i < 12; ++i) {
    auto p = sudoku::generate(7, i);
    int givens = 0;
    for (auto v : p.givens) givens += v != 0;
    EXPECT_GE(givens, 30);
    EXPECT_LE(givens, 36);
    for (int c = 0; c < 81; ++c)
      if (p.givens[c]) {
        EXPECT_EQ(p.givens[c], p.solution[c]);
      }
    for (int s = 1; s <= 5; ++s) {
      auto solved = sudoku::solve(p.givens, s);
      EXPECT_TRUE(solved.solved) << "puzzle " << i << " strategy " << s;
      EXPECT_EQ(solved.grid, p.solution);
    }
    EXPECT_TRUE(seen.insert(p.givens).second);
    // The same (seed, index) always gives the same puzzle.
    EXPECT_EQ(sudoku::generate(7, i).givens, p.givens);
  }
}

TEST(Tasks, GeneratedMazesPassThePapersFilters) {
  for (int n : {5, 8, 10}) {
    for (int64_t i = 0; i < 10; ++i) {
      auto m = maze::generate(n, 3, i);
      EXPECT_TRUE(maze::passes_filters(m));
      auto path = maze::solution_path(m);
      EXPECT_GE(static_cast<int>(path.size()), maze::min_solution_length(n));
      EXPECT_EQ(path.front(), m.start);
      EXPECT_EQ(path.back(), m.goal);
      // The question round-trips through the parser.
      auto back = maze::parse_question(maze::question_tokens(m), "test");
      EXPECT_EQ(back.open, m.open);
      EXPECT_EQ(back.start, m.start);
      EXPECT_EQ(back.goal, m.goal);
      std::set<std::vector<int>> traces;
      for (int s = 1; s <= 5; ++s) traces.insert(maze::trace(m, s));
      EXPECT_EQ(traces.size(), 5u);
    }
  }
}

TEST(Tasks, DocumentsMarkPromptDescriptorAndLoss) {
  for (Kind kind : {Kind::kSudoku, Kind::kMaze}) {
    TaskSource source(kind, 8, 1, 0);
    for (int i = 0; i < 5; ++i) {
      auto seq = source.sequence(i);
      auto doc = seq.document(vocabulary(kind));
      auto words = vocabulary(kind).decode(doc.tokens);
      EXPECT_EQ(words, seq.tokens());
      ASSERT_GT(doc.prompt_len, 0);
      EXPECT_EQ(words[doc.prompt_len - 1], "]");
      EXPECT_EQ(words[doc.prompt_len], "R");
      for (size_t t = 0; t < words.size(); ++t) {
        const bool in_descriptor =
            static_cast<int64_t>(t) >=
                doc.prompt_len - static_cast<int64_t>(seq.descriptor.size()) &&
            static_cast<int64_t>(t) < doc.prompt_len;
        EXPECT_EQ(doc.router_only[t] != 0, in_descriptor) << t;
        EXPECT_EQ(doc.loss_mask[t] != 0, static_cast<int64_t>(t) >= doc.prompt_len) << t;
      }
      EXPECT_EQ(descriptor_strategy(kind, seq.descriptor), i + 1);
    }
    EXPECT_EQ(descriptor_strategy(kind, filler(kind, false)), 0);
    EXPECT_EQ(descriptor_strategy(kind, filler(kind, true)), 0);
  }
  EXPECT_EQ(filler(Kind::kMaze, true).size(), 8u);
}

// Replaces the trace of a correct sequence and returns the new line's tokens.
Tokens with_trace(const Sequence& seq, Tokens trace) {
  Sequence s = seq;
  s.trace = std::move(trace);
  return s.tokens();
}

TEST(Scoring, CorrectTracesScoreOneAndEachCorruptionIsCaught) {
  auto p = sudoku::generate(11, 0);
  for (int s = 1; s <= 5; ++s) {
    auto seq = sudoku_sequence(p, s);
    auto score = score_sequence(Kind::kSudoku, seq.tokens(), 0, "test");
    EXPECT_TRUE(score.strategy_as_requested && score.trace_legal && score.trace_rule_faithful &&
                score.answer_correct)
        << "S" << s;
    EXPECT_EQ(score.followed, s);
    EXPECT_EQ(score.padding_fraction, 0.0);
  }
  // Requested S1 but the trace is S2's: syntax mismatch.
  auto s1 = sudoku_sequence(p, 1);
  auto s2 = sudoku_sequence(p, 2);
  auto wrong_strategy = with_trace(s1, s2.trace);
  auto score = score_sequence(Kind::kSudoku, wrong_strategy, 0, "test");
  EXPECT_FALSE(score.strategy_as_requested);
  EXPECT_EQ(score.followed, 2);
  // Wrong step syntax.
  auto bad_syntax = s1.trace;
  bad_syntax[2] = "[";
  score = score_sequence(Kind::kSudoku, with_trace(s1, bad_syntax), 0, "test");
  EXPECT_FALSE(score.strategy_as_requested);
  EXPECT_EQ(score.followed, 0);
  // Illegal placement: the first step's digit changed to one its row already holds.
  auto illegal = s1.trace;
  const int cell = (illegal[0][1] - '1') * 9 + (illegal[0][3] - '1');
  int used = 0;
  for (int c = (cell / 9) * 9; c < (cell / 9) * 9 + 9; ++c)
    if (p.givens[c]) used = p.givens[c];
  illegal[3] = std::to_string(used);
  score = score_sequence(Kind::kSudoku, with_trace(s1, illegal), 0, "test");
  EXPECT_TRUE(score.strategy_as_requested);
  EXPECT_FALSE(score.trace_legal);
  EXPECT_FALSE(score.trace_rule_faithful);
  // A step that does not follow from its rule: the last S1 step moved first. Every placement
  // is still legal and the grid ends solved, but that cell was not a naked single yet.
  auto steps = s1.trace;
  std::vector<Tokens> split(1);
  for (auto& t : steps) {
    if (t == ";")
      split.emplace_back();
    else
      split.back().push_back(t);
  }
  bool caught = false;
  for (size_t k = 1; k < split.size() && !caught; ++k) {
    auto reordered = split;
    std::rotate(reordered.begin(), reordered.begin() + static_cast<long>(k),
                reordered.begin() + static_cast<long>(k) + 1);
    Tokens joined;
    for (size_t j = 0; j < reordered.size(); ++j) {
      if (j) joined.push_back(";");
      joined.insert(joined.end(), reordered[j].begin(), reordered[j].end());
    }
    score = score_sequence(Kind::kSudoku, with_trace(s1, joined), 0, "test");
    if (score.trace_legal && !score.trace_rule_faithful) caught = true;
  }
  EXPECT_TRUE(caught) << "no reordering produced a legal but unfaithful S1 trace";
  // Wrong answer.
  auto wrong_answer = s1;
  wrong_answer.answer[0] = wrong_answer.answer[0] == "1" ? "2" : "1";
  score = score_sequence(Kind::kSudoku, wrong_answer.tokens(), 0, "test");
  EXPECT_FALSE(score.answer_correct);
  EXPECT_TRUE(score.trace_rule_faithful);
  // Padding inside the generated part is counted.
  auto padded = s1.tokens();
  padded.insert(padded.end() - 1, {"<pad>", "<pad>"});
  score = score_sequence(Kind::kSudoku, padded, 0, "test");
  EXPECT_GT(score.padding_fraction, 0.0);
  EXPECT_TRUE(score.answer_correct);

  // Mazes: the right trace, then two cells of the exploration order swapped.
  auto m = maze::generate(8, 5, 0);
  for (int s = 1; s <= 5; ++s) {
    auto seq = maze_sequence(m, s);
    score = score_sequence(Kind::kMaze, seq.tokens(), 0, "test");
    EXPECT_TRUE(score.strategy_as_requested && score.trace_legal && score.trace_rule_faithful &&
                score.answer_correct);
    auto swapped = seq.trace;
    std::swap(swapped[1], swapped[2]);
    score = score_sequence(Kind::kMaze, with_trace(seq, swapped), 0, "test");
    EXPECT_FALSE(score.strategy_as_requested);
    EXPECT_FALSE(score.trace_rule_faithful);
  }
  // A filler prompt scores against the strategy given by the caller.
  auto bfs = maze_sequence(m, 1);
  bfs.descriptor = filler(Kind::kMaze, false);
  score = score_sequence(Kind::kMaze, bfs.tokens(), 1, "test");
  EXPECT_TRUE(score.strategy_as_requested);
  EXPECT_THROW(score_sequence(Kind::kMaze, bfs.tokens(), 0, "test"), Error);
  ScoreSummary summary;
  summary.add(score);
  EXPECT_EQ(summary.confusion[1][1], 1);
  EXPECT_EQ(summary.to_json(Kind::kMaze)["count"], 1);
}

TEST(Tasks, MalformedInputNamesTheLineAndToken) {
  auto message = [](Kind kind, const std::string& line) {
    return testing::error_message([&] { score_sequence(kind, split_words(line), 1, "line 7"); });
  };
  EXPECT_EQ(message(Kind::kSudoku, "Q : 1 2 banana [ S1 ]"),
            "line 7: unknown token 'banana' at position 4");
  EXPECT_NE(
      message(Kind::kSudoku, "Q : 1 2 3 [ S1 ]").find("line 7: a sudoku grid has 81 cells, got 3"),
      std::string::npos);
  EXPECT_NE(message(Kind::kSudoku, "Q : 1 2 3").find("truncated"), std::string::npos);
  EXPECT_NE(message(Kind::kMaze, "R : r1c1").find("starts with 'Q :'"), std::string::npos);
  std::string grid;
  for (int i = 0; i < 81; ++i) grid += i < 2 ? "5 " : ". ";
  EXPECT_NE(message(Kind::kSudoku, "Q : " + grid + "[ S1 ]").find("repeats in its row"),
            std::string::npos);
  auto m = maze::generate(5, 1, 0);
  auto q = maze::question_tokens(m);
  q[1] = q[1] == "N" ? "E" : "N";  // a side that does not open back
  auto line = "Q : " + join_words(q) + " [ ... ]";
  EXPECT_NE(message(Kind::kMaze, line).find("line 7: "), std::string::npos);
}

}  // namespace
}  // namespace lol::tasks
