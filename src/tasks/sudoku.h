#pragma once
// Sudoku (paper appendix C.3, SPEC 3.2): grids, the five solving strategies with their exact
// step syntax, and the puzzle generator. Every rule recovered from the paper's examples is in
// docs/tasks.md; tests reproduce the paper's five sequences byte for byte.
#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace lol::sudoku {

using Grid = std::array<uint8_t, 81>;  // row-major, 0 = empty
using Tokens = std::vector<std::string>;

constexpr int kStrategies = 5;  // S1..S5
// Short names used in docs and the CLI: naked, hidden, crosshatch, propagate, backtrack.
const char* strategy_name(int strategy);

std::string cell_name(int cell);                  // "r1c1" .. "r9c9"
uint16_t candidates(const Grid& grid, int cell);  // bit d set = digit d possible (0 if filled)
bool is_complete(const Grid& grid);
bool placement_is_legal(const Grid& grid, int cell, int digit);  // empty and no peer holds it
// Every empty cell keeps a candidate and every unit can still place each missing digit.
bool is_consistent(const Grid& grid);

struct Solution {
  Tokens trace;  // steps joined by ";"
  Grid grid{};   // the grid when the strategy stopped
  bool solved = false;
};

// strategy 1..5. Strategies 1-4 stop when they find no more steps (solved or stuck);
// strategy 5 (backtracking) gives up after max_steps steps.
Solution solve(const Grid& givens, int strategy, int64_t max_steps = 200000);

struct Puzzle {
  Grid givens{}, solution{};
};

// A full grid by randomized depth-first filling (cells row-major, digits shuffled).
Grid random_filled_grid(std::mt19937_64& rng);
// A puzzle with 30-36 givens that strategies 1-5 all solve, from (seed, index) alone.
Puzzle generate(uint64_t seed, int64_t index);

Tokens question_tokens(const Grid& givens);  // 81 tokens, "." for empty
Tokens answer_tokens(const Grid& solution);  // 81 digits
Tokens descriptor_tokens(int strategy);      // "[", "S1", "]"
// Parses 81 question tokens (digits or "."); throws naming the bad token.
Grid parse_grid(const Tokens& tokens, const std::string& where);

}  // namespace lol::sudoku
