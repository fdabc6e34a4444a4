#include "tasks/sudoku.h"

#include <algorithm>
#include <deque>

#include "util/error.h"

namespace lol::sudoku {
namespace {

struct Tables {
  std::array<std::array<int, 9>, 27> units;    // rows 0-8, columns 9-17, boxes 18-26
  std::array<std::array<int, 20>, 81> peers;   // sorted row-major
  std::array<std::array<int, 3>, 81> unit_of;  // row, column, box unit of each cell
  Tables() {
    for (int r = 0; r < 9; ++r)
      for (int c = 0; c < 9; ++c) {
        units[r][c] = r * 9 + c;
        units[9 + c][r] = r * 9 + c;
        const int b = (r / 3) * 3 + c / 3, k = (r % 3) * 3 + c % 3;
        units[18 + b][k] = r * 9 + c;
        unit_of[r * 9 + c] = {r, 9 + c, 18 + b};
      }
    for (int i = 0; i < 81; ++i) {
      int n = 0;
      for (int j = 0; j < 81; ++j) {
        const bool same = j / 9 == i / 9 || j % 9 == i % 9 ||
                          ((j / 9) / 3 == (i / 9) / 3 && (j % 9) / 3 == (i % 9) / 3);
        if (j != i && same) peers[i][n++] = j;
      }
    }
  }
};
const Tables& tables() {
  static const Tables t;
  return t;
}

int popcount(uint16_t m) {
  return __builtin_popcount(m);
}
int only_digit(uint16_t m) {
  return __builtin_ctz(m);
}
std::string digit(int d) {
  return std::to_string(d);
}

void append_step(Tokens& trace, std::initializer_list<std::string> step) {
  if (!trace.empty()) trace.push_back(";");
  trace.insert(trace.end(), step);
}

// S1: repeated row-major sweeps; a placement is visible to the rest of the same sweep.
Solution naked_singles(Grid g) {
  Solution out;
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = 0; i < 81; ++i) {
      const uint16_t c = candidates(g, i);
      if (g[i] == 0 && popcount(c) == 1) {
        g[i] = static_cast<uint8_t>(only_digit(c));
        append_step(out.trace, {cell_name(i), "=", "{", digit(g[i]), "}"});
        changed = true;
      }
    }
  }
  out.grid = g;
  return out;
}

// S2 and S3 share one scan: for each unit of `unit_list` (S2: rows, columns, boxes; S3: boxes
// inside a digit-major loop) place a digit that has exactly one possible cell in the unit.
int single_position(const Grid& g, int unit, int d) {
  int found = -1;
  for (int cell : tables().units[unit]) {
    if (g[cell] == d) return -2;  // already placed
    if (candidates(g, cell) & (1 << d)) {
      if (found >= 0) return -1;
      found = cell;
    }
  }
  return found;
}

Solution hidden_singles(Grid g) {
  static const char* kinds[] = {"row", "col", "box"};
  Solution out;
  for (bool changed = true; changed;) {
    changed = false;
    for (int unit = 0; unit < 27; ++unit)
      for (int d = 1; d <= 9; ++d) {
        const int cell = single_position(g, unit, d);
        if (cell < 0) continue;
        g[cell] = static_cast<uint8_t>(d);
        append_step(out.trace, {std::string(kinds[unit / 9]) + digit(unit % 9 + 1), digit(d), "->",
                                cell_name(cell)});
        changed = true;
      }
  }
  out.grid = g;
  return out;
}

Solution crosshatching(Grid g) {
  Solution out;
  for (bool changed = true; changed;) {
    changed = false;
    for (int d = 1; d <= 9; ++d)
      for (int box = 0; box < 9; ++box) {
        const int cell = single_position(g, 18 + box, d);
        if (cell < 0) continue;
        g[cell] = static_cast<uint8_t>(d);
        append_step(out.trace, {digit(d), "box" + digit(box + 1), "->", cell_name(cell)});
        changed = true;
      }
  }
  out.grid = g;
  return out;
}

// S4: a FIFO of forced cells, seeded with the naked singles of the givens in row-major order.
// Setting a cell lists, in row-major order, the peers that this placement left with exactly
// one candidate (they join the queue).
Solution propagation(Grid g) {
  Solution out;
  std::deque<int> queue;
  std::array<bool, 81> queued{};
  for (int i = 0; i < 81; ++i)
    if (g[i] == 0 && popcount(candidates(g, i)) == 1) {
      queue.push_back(i);
      queued[i] = true;
    }
  while (!queue.empty()) {
    const int i = queue.front();
    queue.pop_front();
    const uint16_t c = candidates(g, i);
    if (popcount(c) != 1) break;  // a contradiction: stop unsolved
    std::array<int, 20> before{};
    const auto& peers = tables().peers[i];
    for (int k = 0; k < 20; ++k) before[k] = popcount(candidates(g, peers[k]));
    g[i] = static_cast<uint8_t>(only_digit(c));
    Tokens step = {"set", cell_name(i), "=", digit(g[i])};
    bool any = false;
    for (int k = 0; k < 20; ++k) {
      const int p = peers[k];
      if (g[p] != 0 || queued[p]) continue;
      const uint16_t pc = candidates(g, p);
      if (popcount(pc) == 1 && before[k] > 1) {
        if (!any) step.push_back(":");
        any = true;
        step.insert(step.end(), {cell_name(p), "->", "{", digit(only_digit(pc)), "}"});
        queue.push_back(p);
        queued[p] = true;
      }
    }
    if (!out.trace.empty()) out.trace.push_back(";");
    out.trace.insert(out.trace.end(), step.begin(), step.end());
  }
  out.grid = g;
  return out;
}

// S5: empty cells in row-major order, digits ascending among the cell's candidates; "x" marks a
// placement after which the grid is inconsistent (is_consistent), "back" a cell whose digits
// are exhausted (it is cleared and the previous cell tries its next digit).
Solution backtracking(Grid g, int64_t max_steps) {
  Solution out;
  std::vector<int> empties;
  for (int i = 0; i < 81; ++i)
    if (g[i] == 0) empties.push_back(i);
  int64_t k = 0, steps = 0;
  while (k < static_cast<int64_t>(empties.size())) {
    if (++steps > max_steps) {
      out.grid = g;
      return out;
    }
    const int i = empties[k];
    const int from = g[i];
    g[i] = 0;
    const uint16_t c = candidates(g, i);
    bool placed = false;
    for (int d = from + 1; d <= 9 && !placed; ++d) {
      if (!(c & (1 << d))) continue;
      g[i] = static_cast<uint8_t>(d);
      if (!is_consistent(g)) {
        append_step(out.trace, {cell_name(i), "=", digit(d), "x"});
        g[i] = 0;
        continue;
      }
      append_step(out.trace, {cell_name(i), "=", digit(d)});
      placed = true;
    }
    if (placed) {
      ++k;
    } else {
      append_step(out.trace, {cell_name(i), "back"});
      if (--k < 0) break;
    }
  }
  out.grid = g;
  return out;
}

}  // namespace

const char* strategy_name(int strategy) {
  static const char* names[] = {"naked", "hidden", "crosshatch", "propagate", "backtrack"};
  return strategy >= 1 && strategy <= 5 ? names[strategy - 1] : "none";
}

std::string cell_name(int cell) {
  return "r" + std::to_string(cell / 9 + 1) + "c" + std::to_string(cell % 9 + 1);
}

uint16_t candidates(const Grid& g, int cell) {
  if (g[cell] != 0) return 0;
  uint16_t used = 0;
  for (int p : tables().peers[cell]) used |= static_cast<uint16_t>(1 << g[p]);
  return static_cast<uint16_t>(~used & 0x3fe);
}

bool is_complete(const Grid& g) {
  return std::all_of(g.begin(), g.end(), [](uint8_t v) { return v != 0; });
}

bool placement_is_legal(const Grid& g, int cell, int d) {
  return d >= 1 && d <= 9 && g[cell] == 0 && (candidates(g, cell) & (1 << d));
}

bool is_consistent(const Grid& g) {
  std::array<uint16_t, 81> cand{};
  for (int i = 0; i < 81; ++i) {
    cand[i] = candidates(g, i);
    if (g[i] == 0 && cand[i] == 0) return false;
  }
  for (const auto& unit : tables().units) {
    uint16_t present = 0, possible = 0;
    for (int cell : unit) {
      present |= static_cast<uint16_t>(1 << g[cell]);
      possible |= cand[cell];
    }
    if (((present | possible) & 0x3fe) != 0x3fe) return false;
  }
  return true;
}

Solution solve(const Grid& givens, int strategy, int64_t max_steps) {
  Solution out;
  switch (strategy) {
    case 1:
      out = naked_singles(givens);
      break;
    case 2:
      out = hidden_singles(givens);
      break;
    case 3:
      out = crosshatching(givens);
      break;
    case 4:
      out = propagation(givens);
      break;
    case 5:
      out = backtracking(givens, max_steps);
      break;
    default:
      fail("sudoku strategy must be 1..5, got ", strategy);
  }
  out.solved = is_complete(out.grid);
  return out;
}

Grid random_filled_grid(std::mt19937_64& rng) {
  Grid g{};
  std::array<std::array<int, 9>, 81> order{};
  std::array<int, 81> tried{};
  int i = 0;
  auto shuffle_digits = [&](int cell) {
    for (int d = 0; d < 9; ++d) order[cell][d] = d + 1;
    for (int d = 8; d > 0; --d) std::swap(order[cell][d], order[cell][rng() % (d + 1)]);
    tried[cell] = 0;
  };
  shuffle_digits(0);
  while (i < 81) {
    g[i] = 0;
    bool placed = false;
    while (tried[i] < 9 && !placed) {
      const int d = order[i][tried[i]++];
      if (candidates(g, i) & (1 << d)) {
        g[i] = static_cast<uint8_t>(d);
        placed = true;
      }
    }
    if (placed) {
      if (++i < 81) shuffle_digits(i);
    } else {
      --i;  // exhausted: back to the previous cell, which tries its next digit
    }
  }
  return g;
}

Puzzle generate(uint64_t seed, int64_t index) {
  std::seed_seq seq{seed, static_cast<uint64_t>(index), uint64_t{0x5d0c}};
  std::mt19937_64 rng(seq);
  auto all_solve = [](const Grid& g) {
    for (int s = 1; s <= 4; ++s)
      if (!solve(g, s).solved) return false;
    return true;  // S5 solves whatever S1-S4 solve (the solution is then unique)
  };
  for (;;) {
    Puzzle p;
    p.solution = random_filled_grid(rng);
    const int target = 30 + static_cast<int>(rng() % 7);
    Grid g = p.solution;
    std::array<int, 81> cells{};
    for (int i = 0; i < 81; ++i) cells[i] = i;
    for (int i = 80; i > 0; --i) std::swap(cells[i], cells[rng() % (i + 1)]);
    int givens = 81;
    for (int k = 0; k < 81 && givens > target; ++k) {
      const uint8_t keep = g[cells[k]];
      g[cells[k]] = 0;
      if (all_solve(g))
        --givens;
      else
        g[cells[k]] = keep;
    }
    if (givens != target) continue;
    p.givens = g;
    if (solve(g, 5).solved) return p;
  }
}

Tokens question_tokens(const Grid& givens) {
  Tokens out;
  for (uint8_t v : givens) out.push_back(v ? std::to_string(v) : ".");
  return out;
}

Tokens answer_tokens(const Grid& solution) {
  Tokens out;
  for (uint8_t v : solution) out.push_back(std::to_string(v));
  return out;
}

Tokens descriptor_tokens(int strategy) {
  LOL_CHECK(strategy >= 1 && strategy <= 5, "sudoku strategy must be 1..5, got ", strategy);
  return {"[", "S" + std::to_string(strategy), "]"};
}

Grid parse_grid(const Tokens& tokens, const std::string& where) {
  LOL_CHECK(tokens.size() == 81, where, ": a sudoku grid has 81 cells, got ", tokens.size());
  Grid g{};
  for (int i = 0; i < 81; ++i) {
    const auto& t = tokens[i];
    if (t == ".") continue;
    LOL_CHECK(t.size() == 1 && t[0] >= '1' && t[0] <= '9', where, ": cell ", cell_name(i),
              " holds '", t, "', expected a digit 1-9 or '.'");
    g[i] = static_cast<uint8_t>(t[0] - '0');
  }
  for (int i = 0; i < 81; ++i)
    if (g[i]) {
      Grid without = g;
      without[i] = 0;
      LOL_CHECK(placement_is_legal(without, i, g[i]), where, ": given ", int(g[i]), " at ",
                cell_name(i), " repeats in its row, column or box");
    }
  return g;
}

}  // namespace lol::sudoku
