#pragma once
// Mazes (paper appendix C.4, SPEC 3.3): loop-free n x n mazes, the five search strategies (all
// tracing visited cells), the generator with the paper's filters. Rules recovered from the
// paper's examples are in docs/tasks.md.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace lol::maze {

using Tokens = std::vector<std::string>;
constexpr int kStrategies = 5;  // 1 BFS, 2 DFS walk, 3 A*, 4 bidirectional BFS, 5 dead-end fill
constexpr int kMaxSize = 12;    // the fixed vocabulary holds cells up to r12c12
enum Direction : uint8_t { kNorth = 1, kEast = 2, kSouth = 4, kWest = 8 };

const char* strategy_name(int strategy);

struct Maze {
  int n = 8;
  std::vector<uint8_t> open;  // per cell (row-major), Direction bits of its open sides
  int start = 0, goal = 0;
  // Open neighbours of a cell in the order N, E, S, W.
  std::vector<int> neighbours(int cell) const;
};

std::string cell_name(int n, int cell);  // "r1c1" (1-based)
// Reads "rRcC" for an n x n maze; -1 when the token is not such a cell.
int parse_cell(int n, const std::string& token);

// A spanning-tree maze by randomized recursive backtracking from a random cell.
Maze carve(int n, std::mt19937_64& rng);
// The visited-cell trace of a strategy (1..5) from maze.start to maze.goal.
std::vector<int> trace(const Maze& maze, int strategy);
std::vector<int> solution_path(const Maze& maze);

// Shortest accepted solution (12 cells at n = 8, scaled linearly with n: ceil(1.5 n)).
int min_solution_length(int n);
// The paper's filters: solution length, DFS backtracks, BFS explores >= 3 cells off the
// solution, and the five traces pairwise different.
bool passes_filters(const Maze& maze);
Maze generate(int n, uint64_t seed, int64_t index);

Tokens question_tokens(const Maze& maze);  // cells with open sides, then start / goal
Tokens cells_tokens(const Maze& maze, const std::vector<int>& cells);
Tokens descriptor_tokens(int strategy);  // "[", six demonstration cells (paper table 4), "]"
// Parses question tokens (without "Q :"); throws naming the bad token.
Maze parse_question(const Tokens& tokens, const std::string& where);

}  // namespace lol::maze
