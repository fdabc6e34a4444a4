#include <functional>
#include <iostream>

#include "bench_util.h"
#include "suites.h"
#include "tasks/task.h"
#include "util/version.h"

namespace lol::bench {

void bench_tasks(int64_t count, int reps, const std::string& output) {
  struct TaskRow {
    std::string task, what;
    Spread per_s;
    std::string unit;
  };
  std::vector<TaskRow> rows;
  auto time_it = [&](const std::function<double()>& body) {  // body returns units done
    std::vector<double> rates;
    for (int r = 0; r < reps; ++r) {
      auto t0 = Clock::now();
      const double units = body();
      rates.push_back(units / seconds_since(t0));
    }
    return spread(rates);
  };
  uint64_t seed = 1000;
  for (auto kind : {tasks::Kind::kSudoku, tasks::Kind::kMaze}) {
    const std::string name = tasks::kind_name(kind);
    std::vector<sudoku::Puzzle> sudokus;
    std::vector<maze::Maze> mazes;
    rows.push_back({name, "generate", time_it([&] {
                      sudokus.clear();
                      mazes.clear();
                      ++seed;
                      for (int64_t i = 0; i < count; ++i) {
                        if (kind == tasks::Kind::kSudoku)
                          sudokus.push_back(sudoku::generate(seed, i));
                        else
                          mazes.push_back(maze::generate(8, seed, i));
                      }
                      return static_cast<double>(count);
                    }),
                    "puzzles/s"});
    for (int s = 1; s <= 5; ++s) {
      const std::string strategy =
          kind == tasks::Kind::kSudoku ? sudoku::strategy_name(s) : maze::strategy_name(s);
      rows.push_back({name, "trace " + strategy, time_it([&] {
                        const auto& vocab = tasks::vocabulary(kind);
                        for (int64_t i = 0; i < count; ++i) {
                          auto seq = kind == tasks::Kind::kSudoku
                                         ? tasks::sudoku_sequence(sudokus[i], s)
                                         : tasks::maze_sequence(mazes[i], s);
                          seq.document(vocab);
                        }
                        return static_cast<double>(count);
                      }),
                      "puzzles/s"});
    }
    rows.push_back({name, "stream (all strategies)", time_it([&] {
                      tasks::TaskSource source(kind, 8, ++seed, 0);
                      int64_t tokens = 0;
                      for (int64_t i = 0; i < count * 5; ++i)
                        tokens += static_cast<int64_t>(source.next().tokens.size());
                      return static_cast<double>(tokens);
                    }),
                    "tokens/s"});
  }
  if (output == "json") {
    json j = {{"commit", git_commit()}, {"count", count}, {"reps", reps}, {"rows", json::array()}};
    for (const auto& r : rows)
      j["rows"].push_back({{"task", r.task},
                           {"what", r.what},
                           {"rate", r.per_s.mean},
                           {"stddev", r.per_s.stddev},
                           {"unit", r.unit}});
    std::cout << j.dump(2) << "\n";
    return;
  }
  const bool md = output == "md";
  if (md)
    std::cout << "commit " << git_commit() << " | " << count << " puzzles x " << reps
              << " reps, one thread\n\n";
  Table table(md);
  table.header({"task", "what", "rate", "±", "unit"}, 2);
  for (const auto& r : rows)
    table.row({r.task, r.what, fixed(r.per_s.mean, 0), fixed(r.per_s.stddev, 0), r.unit});
}

}  // namespace lol::bench
