#include "tasks/score.h"

#include <iomanip>
#include <set>
#include <sstream>

#include "util/error.h"

namespace lol::tasks {
namespace {

using Step = Tokens;

std::vector<Step> split_steps(const Tokens& trace) {
  std::vector<Step> steps(1);
  for (const auto& t : trace) {
    if (t == ";")
      steps.emplace_back();
    else
      steps.back().push_back(t);
  }
  if (steps.size() == 1 && steps[0].empty()) steps.clear();
  return steps;
}

int cell_of(const std::string& t) {
  if (t.size() != 4 || t[0] != 'r' || t[2] != 'c' || t[1] < '1' || t[1] > '9' || t[3] < '1' ||
      t[3] > '9')
    return -1;
  return (t[1] - '1') * 9 + (t[3] - '1');
}
int digit_of(const std::string& t) {
  return t.size() == 1 && t[0] >= '1' && t[0] <= '9' ? t[0] - '0' : -1;
}
int unit_of(const std::string& t, const std::string& kind) {  // "row3" -> 2 for kind "row"
  if (t.size() != kind.size() + 1 || t.compare(0, kind.size(), kind) != 0) return -1;
  return digit_of(t.substr(kind.size())) - 1;
}

// Which strategy's step syntax a step has (1..5), 0 if none.
int syntax_of(const Step& s) {
  if (s.size() == 5 && cell_of(s[0]) >= 0 && s[1] == "=" && s[2] == "{" && digit_of(s[3]) > 0 &&
      s[4] == "}")
    return 1;
  if (s.size() == 4 &&
      (unit_of(s[0], "row") >= 0 || unit_of(s[0], "col") >= 0 || unit_of(s[0], "box") >= 0) &&
      digit_of(s[1]) > 0 && s[2] == "->" && cell_of(s[3]) >= 0)
    return 2;
  if (s.size() == 4 && digit_of(s[0]) > 0 && unit_of(s[1], "box") >= 0 && s[2] == "->" &&
      cell_of(s[3]) >= 0)
    return 3;
  if (s.size() >= 4 && s[0] == "set" && cell_of(s[1]) >= 0 && s[2] == "=" && digit_of(s[3]) > 0) {
    if (s.size() == 4) return 4;
    if (s[4] != ":" || (s.size() - 5) % 5 != 0 || s.size() == 5) return 0;
    for (size_t k = 5; k < s.size(); k += 5)
      if (cell_of(s[k]) < 0 || s[k + 1] != "->" || s[k + 2] != "{" || digit_of(s[k + 3]) < 0 ||
          s[k + 4] != "}")
        return 0;
    return 4;
  }
  if ((s.size() == 3 || (s.size() == 4 && s[3] == "x")) && cell_of(s[0]) >= 0 && s[1] == "=" &&
      digit_of(s[2]) > 0)
    return 5;
  if (s.size() == 2 && cell_of(s[0]) >= 0 && s[1] == "back") return 5;
  return 0;
}

// Replays the steps on the grid; `faithful` becomes false at the first deduction that does not
// hold (the rules of docs/tasks.md). Returns whether every placement was legal.
bool replay_sudoku(int strategy, const std::vector<Step>& steps, sudoku::Grid& g, bool& faithful) {
  std::set<int> forced;  // S4: cells announced as forced (initial singles + listed peers)
  if (strategy == 4)
    for (int i = 0; i < 81; ++i)
      if (g[i] == 0 && __builtin_popcount(sudoku::candidates(g, i)) == 1) forced.insert(i);
  const sudoku::Grid givens = g;
  for (const auto& s : steps) {
    int cell = -1, d = -1;
    switch (strategy) {
      case 1: {
        cell = cell_of(s[0]);
        d = digit_of(s[3]);
        faithful &= sudoku::candidates(g, cell) == (1 << d);
        break;
      }
      case 2:
      case 3: {
        const bool hidden = strategy == 2;
        d = digit_of(s[hidden ? 1 : 0]);
        cell = cell_of(s[3]);
        const std::string& unit_token = s[hidden ? 0 : 1];
        const std::string kind = unit_token.substr(0, 3);
        const int k = unit_of(unit_token, kind);
        // The digit must have exactly one possible cell in the unit, and it is this one.
        int positions = 0;
        bool contains = false;
        for (int c = 0; c < 81; ++c) {
          const int r = c / 9, col = c % 9, b = (r / 3) * 3 + col / 3;
          const bool in = kind == "row" ? r == k : kind == "col" ? col == k : b == k;
          if (!in) continue;
          positions += (sudoku::candidates(g, c) >> d) & 1;
          contains |= c == cell;
        }
        faithful &= contains && positions == 1 && ((sudoku::candidates(g, cell) >> d) & 1);
        break;
      }
      case 4: {
        cell = cell_of(s[1]);
        d = digit_of(s[3]);
        faithful &= sudoku::candidates(g, cell) == (1 << d) && forced.count(cell);
        if (!sudoku::placement_is_legal(g, cell, d)) return false;
        std::vector<int> before(81);
        for (int c = 0; c < 81; ++c) before[c] = __builtin_popcount(sudoku::candidates(g, c));
        g[cell] = static_cast<uint8_t>(d);
        // The listed peers must be exactly the newly forced ones, row-major, with their digit.
        Tokens expected;
        for (int p = 0; p < 81; ++p) {
          if (p == cell || g[p] != 0 || forced.count(p)) continue;
          const bool peer = p / 9 == cell / 9 || p % 9 == cell % 9 ||
                            ((p / 9) / 3 == (cell / 9) / 3 && (p % 9) / 3 == (cell % 9) / 3);
          const uint16_t pc = sudoku::candidates(g, p);
          if (peer && __builtin_popcount(pc) == 1 && before[p] > 1) {
            expected.insert(expected.end(), {sudoku::cell_name(p), "->", "{",
                                             std::to_string(__builtin_ctz(pc)), "}"});
            forced.insert(p);
          }
        }
        Tokens listed(s.size() > 4 ? s.begin() + 5 : s.end(), s.end());
        faithful &= listed == expected;
        continue;
      }
      case 5: {
        cell = cell_of(s[0]);
        if (s[1] == "back") {
          if (givens[cell] != 0) return false;  // a given is never taken back
          g[cell] = 0;
          continue;
        }
        d = digit_of(s[2]);
        const bool rejected = s.size() == 4;
        if (g[cell] != 0 && givens[cell] == 0) g[cell] = 0;  // trying the next digit of a cell
        if (!sudoku::placement_is_legal(g, cell, d)) return false;
        if (rejected) continue;
        break;
      }
    }
    if (!sudoku::placement_is_legal(g, cell, d)) return false;
    g[cell] = static_cast<uint8_t>(d);
  }
  return true;
}

Score score_sudoku(const Parsed& p, int requested, const std::string& where) {
  Score out;
  out.requested = requested;
  const auto givens = sudoku::parse_grid(p.question, where);
  auto reference = sudoku::solve(givens, 5);
  LOL_CHECK(reference.solved, where, ": the sudoku has no solution");
  const auto steps = split_steps(p.trace);
  int followed = steps.empty() ? 0 : syntax_of(steps[0]);
  for (const auto& s : steps)
    if (syntax_of(s) != followed) followed = 0;
  out.followed = followed;
  out.strategy_as_requested = followed != 0 && followed == requested;
  if (followed != 0) {
    sudoku::Grid g = givens;
    bool faithful = true;
    const bool legal = replay_sudoku(followed, steps, g, faithful);
    out.trace_legal = legal && g == reference.grid;
    if (followed == 5)
      faithful = p.trace == sudoku::solve(givens, 5).trace;  // DFS is fully determined
    out.trace_rule_faithful = out.trace_legal && faithful;
  }
  out.answer_correct = p.answer == sudoku::answer_tokens(reference.grid);
  return out;
}

Score score_maze(const Parsed& p, int requested, const std::string& where) {
  Score out;
  out.requested = requested;
  const auto m = maze::parse_question(p.question, where);
  std::vector<int> cells;
  bool all_cells = true;
  for (const auto& t : p.trace) {
    const int c = maze::parse_cell(m.n, t);
    all_cells &= c >= 0;
    cells.push_back(c);
  }
  if (all_cells)
    for (int s = 1; s <= maze::kStrategies && out.followed == 0; ++s)
      if (cells == maze::trace(m, s)) out.followed = s;
  out.strategy_as_requested = out.followed != 0 && out.followed == requested;
  out.trace_legal = all_cells && out.followed != 0;
  out.trace_rule_faithful = all_cells && requested >= 1 && cells == maze::trace(m, requested);
  out.answer_correct = p.answer == maze::cells_tokens(m, maze::solution_path(m));
  return out;
}

}  // namespace

Score score_sequence(Kind kind, const Tokens& sequence, int requested, const std::string& where) {
  const Parsed p = parse_sequence(kind, sequence, where);
  if (requested <= 0) {
    requested = descriptor_strategy(kind, p.descriptor);
    LOL_CHECK(requested >= 1, where, ": the prompt holds no strategy descriptor (",
              join_words(p.descriptor), "); give the requested strategy with --strategy");
  }
  Score s =
      kind == Kind::kSudoku ? score_sudoku(p, requested, where) : score_maze(p, requested, where);
  s.padding_fraction =
      p.generated > 0 ? static_cast<double>(p.padding) / static_cast<double>(p.generated) : 0.0;
  if (!p.complete) s.answer_correct = false;
  return s;
}

void ScoreSummary::add(const Score& s) {
  const double n = static_cast<double>(++count);
  auto mean = [&](double& m, double x) { m += (x - m) / n; };
  mean(strategy_as_requested, s.strategy_as_requested);
  mean(trace_legal, s.trace_legal);
  mean(trace_rule_faithful, s.trace_rule_faithful);
  mean(answer_correct, s.answer_correct);
  mean(padding_fraction, s.padding_fraction);
  confusion[std::clamp(s.requested, 0, 5)][std::clamp(s.followed, 0, 5)]++;
}

json ScoreSummary::to_json(Kind kind) const {
  json names = json::array({"none"});
  for (int s = 1; s <= 5; ++s) names.push_back(strategy_name(kind, s));
  json matrix = json::array();
  for (int r = 1; r <= 5; ++r)
    matrix.push_back(std::vector<int64_t>(confusion[r].begin(), confusion[r].end()));
  return json{{"task", kind_name(kind)},
              {"count", count},
              {"strategy_as_requested", strategy_as_requested},
              {"trace_legal", trace_legal},
              {"trace_rule_faithful", trace_rule_faithful},
              {"answer_correct", answer_correct},
              {"padding_fraction", padding_fraction},
              {"strategies", names},
              {"confusion", matrix},
              {"confusion_layout",
               "rows: requested strategy 1..5; columns: followed strategy, none then 1..5"}};
}

std::string ScoreSummary::to_text(Kind kind) const {
  std::ostringstream out;
  out << std::fixed << std::setprecision(4);
  out << kind_name(kind) << ": " << count << " sequences\n"
      << "strategy_as_requested " << strategy_as_requested << "\n"
      << "trace_legal           " << trace_legal << "\n"
      << "trace_rule_faithful   " << trace_rule_faithful << "\n"
      << "answer_correct        " << answer_correct << "\n"
      << "padding_fraction      " << padding_fraction << "\n"
      << "confusion (rows: requested, columns: followed)\n"
      << std::setw(14) << "";
  auto name = [&](int s) { return strategy_name(kind, s); };
  for (int f = 0; f <= 5; ++f) out << std::setw(14) << name(f);
  out << "\n";
  for (int r = 1; r <= 5; ++r) {
    out << std::setw(14) << name(r);
    for (int f = 0; f <= 5; ++f) out << std::setw(14) << confusion[r][f];
    out << "\n";
  }
  return out.str();
}

}  // namespace lol::tasks
