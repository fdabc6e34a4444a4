// lol data | task trace | task score: the synthetic tasks of the paper as data and scorers.
#include <iostream>
#include <set>

#include "commands.h"
#include "data/shards.h"
#include "tasks/score.h"
#include "tasks/task.h"
#include "util/error.h"
#include "util/files.h"
#include "util/progress.h"

namespace lol::cli {

void add_data_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  auto* cmd = app.add_subcommand("data", "generate task datasets (every strategy of every puzzle)");
  struct Opts {
    std::string task, format = "text", out;
    int64_t count = 0;
    uint64_t seed = 0;
    int size = 8;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("task", o->task, "sudoku or maze")
      ->required()
      ->check(CLI::IsMember({"sudoku", "maze"}));
  cmd->add_option("--count", o->count, "puzzles (each gives five sequences)")
      ->required()
      ->check(at_least(1));
  cmd->add_option("--seed", o->seed, "generator seed");
  cmd->add_option("--size", o->size, "maze side n (4..12)")->capture_default_str();
  cmd->add_option("--format", o->format, "text (one sequence per line) or shards")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "shards"}));
  cmd->add_option("--out", o->out, "output file")->required();
  commands.emplace_back(cmd, [o] {
    const auto kind = tasks::parse_kind(o->task);
    tasks::TaskSource source(kind, o->size, o->seed, 0);
    const auto& vocab = tasks::vocabulary(kind);
    std::set<std::string> seen;  // questions, for deduplication
    std::string text;
    std::vector<Document> documents;
    Progress progress("data", o->count);
    int64_t puzzle = 0, kept = 0, duplicates = 0;
    while (kept < o->count) {
      auto first = source.sequence(puzzle * 5);
      const auto key = tasks::join_words(first.question);
      if (!seen.insert(key).second) {
        ++duplicates;
        ++puzzle;
        continue;
      }
      for (int s = 0; s < 5; ++s) {
        auto seq = s == 0 ? first : source.sequence(puzzle * 5 + s);
        if (o->format == "text")
          text += tasks::join_words(seq.tokens()) + "\n";
        else
          documents.push_back(seq.document(vocab));
      }
      ++puzzle;
      ++kept;
      progress.update(kept, std::to_string(kept * 5) + " sequences");
    }
    if (o->format == "text")
      write_file_atomic(o->out, text);
    else
      write_shard(o->out, documents, vocab.size());
    progress.finish("wrote " + std::to_string(kept * 5) + " sequences of " + std::to_string(kept) +
                    " puzzles to " + o->out + " (" + std::to_string(duplicates) +
                    " duplicates skipped)");
  });
}

namespace {
int line_strategy(tasks::Kind kind, const tasks::Parsed& p, int flag, const std::string& where) {
  if (flag > 0) return flag;
  const int s = tasks::descriptor_strategy(kind, p.descriptor);
  LOL_CHECK(s >= 1, where, ": the prompt holds no strategy descriptor (",
            tasks::join_words(p.descriptor), "); give the strategy with --strategy");
  return s;
}
}  // namespace

void add_task_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  auto* task = app.add_subcommand("task", "trace and score task sequences");
  task->require_subcommand(1);
  struct Opts {
    std::string task, json_out;
    int strategy = 0;
  };
  auto trace_o = std::make_shared<Opts>();
  auto* trace = task->add_subcommand(
      "trace", "read 'Q : ... [ descriptor ]' lines on stdin, print full sequences");
  trace->add_option("task", trace_o->task, "sudoku or maze")
      ->required()
      ->check(CLI::IsMember({"sudoku", "maze"}));
  trace
      ->add_option("--strategy", trace_o->strategy,
                   "strategy 1..5 (default: the line's descriptor)")
      ->check(CLI::Range(1, 5));
  commands.emplace_back(trace, [trace_o] {
    const auto kind = tasks::parse_kind(trace_o->task);
    std::string line;
    for (int64_t number = 1; std::getline(std::cin, line); ++number) {
      const std::string where = "line " + std::to_string(number);
      auto tokens = tasks::split_words(line);
      if (tokens.empty()) continue;
      auto p = tasks::parse_sequence(kind, tokens, where);
      LOL_CHECK(p.generated == 0, where, ": expected a question ending at the descriptor, found ",
                p.generated, " more tokens after ']'");
      const int strategy = line_strategy(kind, p, trace_o->strategy, where);
      std::cout
          << tasks::join_words(
                 tasks::solve_question(kind, p.question, p.descriptor, strategy, where).tokens())
          << "\n";
    }
  });
  auto score_o = std::make_shared<Opts>();
  auto* score = task->add_subcommand(
      "score", "score generated sequences read on stdin: metrics and confusion matrix");
  score->add_option("task", score_o->task, "sudoku or maze")
      ->required()
      ->check(CLI::IsMember({"sudoku", "maze"}));
  score
      ->add_option("--strategy", score_o->strategy,
                   "requested strategy for lines whose prompt holds a filler")
      ->check(CLI::Range(1, 5));
  score->add_option("--json", score_o->json_out, "also write the summary as JSON to this file");
  commands.emplace_back(score, [score_o] {
    const auto kind = tasks::parse_kind(score_o->task);
    tasks::ScoreSummary summary;
    std::string line;
    for (int64_t number = 1; std::getline(std::cin, line); ++number) {
      auto tokens = tasks::split_words(line);
      if (tokens.empty()) continue;
      summary.add(
          tasks::score_sequence(kind, tokens, score_o->strategy, "line " + std::to_string(number)));
    }
    LOL_CHECK(summary.count > 0, "no sequences on stdin");
    std::cout << summary.to_text(kind);
    if (!score_o->json_out.empty())
      write_file_atomic(score_o->json_out, summary.to_json(kind).dump(2) + "\n");
  });
}

}  // namespace lol::cli
