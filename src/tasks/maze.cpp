#include "tasks/maze.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <queue>
#include <set>

#include "util/error.h"

namespace lol::maze {
namespace {

constexpr uint8_t kDirections[4] = {kNorth, kEast, kSouth, kWest};
constexpr int kDr[4] = {-1, 0, 1, 0}, kDc[4] = {0, 1, 0, -1};
constexpr const char* kDirectionNames[4] = {"N", "E", "S", "W"};

uint8_t opposite(int k) {
  return kDirections[(k + 2) % 4];
}

std::vector<int> bfs(const Maze& m) {
  std::vector<int> order;
  std::vector<uint8_t> seen(m.open.size(), 0);
  std::deque<int> queue = {m.start};
  seen[m.start] = 1;
  while (!queue.empty()) {
    const int c = queue.front();
    queue.pop_front();
    order.push_back(c);  // cells in the order they are expanded (= discovered, for BFS)
    if (c == m.goal) break;
    for (int n : m.neighbours(c))
      if (!seen[n]) {
        seen[n] = 1;
        queue.push_back(n);
      }
  }
  return order;
}

// Every cell entered, and the cell returned to after each dead end, until the goal.
std::vector<int> dfs_walk(const Maze& m) {
  std::vector<int> order = {m.start};
  std::vector<uint8_t> seen(m.open.size(), 0);
  seen[m.start] = 1;
  struct Frame {
    int cell;
    std::vector<int> next;
    size_t i = 0;
  };
  std::vector<Frame> stack = {{m.start, m.neighbours(m.start)}};
  if (m.start == m.goal) return order;
  while (!stack.empty()) {
    auto& top = stack.back();
    if (top.i < top.next.size()) {
      const int n = top.next[top.i++];
      if (seen[n]) continue;
      seen[n] = 1;
      order.push_back(n);
      if (n == m.goal) return order;
      stack.push_back({n, m.neighbours(n)});
    } else {
      stack.pop_back();
      if (!stack.empty()) order.push_back(stack.back().cell);
    }
  }
  return order;
}

// Expansion order of A* with h = Manhattan distance; ties on f go to lower g, then to the
// earlier insertion.
std::vector<int> astar(const Maze& m) {
  auto h = [&](int c) {
    return std::abs(c / m.n - m.goal / m.n) + std::abs(c % m.n - m.goal % m.n);
  };
  using Key = std::tuple<int, int, int64_t, int>;  // f, g, insertion, cell
  std::priority_queue<Key, std::vector<Key>, std::greater<Key>> open;
  std::vector<int> best(m.open.size(), -1);
  std::vector<uint8_t> closed(m.open.size(), 0);
  int64_t inserted = 0;
  open.emplace(h(m.start), 0, inserted++, m.start);
  best[m.start] = 0;
  std::vector<int> order;
  while (!open.empty()) {
    auto [f, g, ins, c] = open.top();
    open.pop();
    if (closed[c]) continue;
    closed[c] = 1;
    order.push_back(c);
    if (c == m.goal) break;
    for (int n : m.neighbours(c))
      if (best[n] < 0 || g + 1 < best[n]) {
        best[n] = g + 1;
        open.emplace(g + 1 + h(n), g + 1, inserted++, n);
      }
  }
  return order;
}

// BFS from start and from goal, one expansion each in turn (start first). An expansion that
// finds a cell already discovered by the other side appends that meeting cell and stops.
std::vector<int> bidirectional(const Maze& m) {
  std::vector<int> order;
  if (m.start == m.goal) return {m.start};
  std::deque<int> queues[2] = {{m.start}, {m.goal}};
  std::vector<uint8_t> seen[2] = {std::vector<uint8_t>(m.open.size(), 0),
                                  std::vector<uint8_t>(m.open.size(), 0)};
  seen[0][m.start] = seen[1][m.goal] = 1;
  while (!queues[0].empty() || !queues[1].empty()) {
    for (int side = 0; side < 2; ++side) {
      if (queues[side].empty()) continue;
      const int c = queues[side].front();
      queues[side].pop_front();
      order.push_back(c);
      for (int n : m.neighbours(c)) {
        if (seen[1 - side][n]) {
          order.push_back(n);
          return order;
        }
        if (!seen[side][n]) {
          seen[side][n] = 1;
          queues[side].push_back(n);
        }
      }
    }
  }
  return order;
}

// Row-major sweeps, repeated until one fills nothing: a cell other than start and goal with at
// most one open, unfilled neighbour is a dead end and is filled at once (later cells of the
// same sweep see it filled).
std::vector<int> dead_end_fill(const Maze& m) {
  std::vector<int> order;
  std::vector<uint8_t> filled(m.open.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (int c = 0; c < static_cast<int>(m.open.size()); ++c) {
      if (filled[c] || c == m.start || c == m.goal) continue;
      int exits = 0;
      for (int n : m.neighbours(c)) exits += !filled[n];
      if (exits <= 1) {
        filled[c] = 1;
        order.push_back(c);
        changed = true;
      }
    }
  }
  return order;
}

}  // namespace

const char* strategy_name(int strategy) {
  static const char* names[] = {"bfs", "dfs", "astar", "bidirectional", "deadend"};
  return strategy >= 1 && strategy <= 5 ? names[strategy - 1] : "none";
}

std::vector<int> Maze::neighbours(int cell) const {
  std::vector<int> out;
  for (int k = 0; k < 4; ++k)
    if (open[cell] & kDirections[k]) out.push_back(cell + kDr[k] * n + kDc[k]);
  return out;
}

std::string cell_name(int n, int cell) {
  return "r" + std::to_string(cell / n + 1) + "c" + std::to_string(cell % n + 1);
}

int parse_cell(int n, const std::string& t) {
  if (t.size() < 4 || t[0] != 'r') return -1;
  const auto c = t.find('c');
  if (c == std::string::npos || c < 2 || c + 1 >= t.size()) return -1;
  int r = 0, col = 0;
  for (size_t i = 1; i < c; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(t[i]))) return -1;
    r = r * 10 + (t[i] - '0');
  }
  for (size_t i = c + 1; i < t.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(t[i]))) return -1;
    col = col * 10 + (t[i] - '0');
  }
  if (r < 1 || r > n || col < 1 || col > n) return -1;
  return (r - 1) * n + (col - 1);
}

Maze carve(int n, std::mt19937_64& rng) {
  Maze m;
  m.n = n;
  m.open.assign(n * n, 0);
  std::vector<uint8_t> visited(n * n, 0);
  std::vector<int> stack = {static_cast<int>(rng() % (n * n))};
  visited[stack[0]] = 1;
  while (!stack.empty()) {
    const int c = stack.back();
    int options[4], count = 0;
    for (int k = 0; k < 4; ++k) {
      const int r = c / n + kDr[k], col = c % n + kDc[k];
      if (r >= 0 && r < n && col >= 0 && col < n && !visited[r * n + col]) options[count++] = k;
    }
    if (count == 0) {
      stack.pop_back();
      continue;
    }
    const int k = options[rng() % count];
    const int next = c + kDr[k] * n + kDc[k];
    m.open[c] |= kDirections[k];
    m.open[next] |= opposite(k);
    visited[next] = 1;
    stack.push_back(next);
  }
  return m;
}

std::vector<int> trace(const Maze& m, int strategy) {
  switch (strategy) {
    case 1:
      return bfs(m);
    case 2:
      return dfs_walk(m);
    case 3:
      return astar(m);
    case 4:
      return bidirectional(m);
    case 5:
      return dead_end_fill(m);
  }
  fail("maze strategy must be 1..5, got ", strategy);
}

std::vector<int> solution_path(const Maze& m) {
  std::vector<int> parent(m.open.size(), -1);
  std::deque<int> queue = {m.start};
  parent[m.start] = m.start;
  while (!queue.empty()) {
    const int c = queue.front();
    queue.pop_front();
    for (int n : m.neighbours(c))
      if (parent[n] < 0) {
        parent[n] = c;
        queue.push_back(n);
      }
  }
  LOL_CHECK(parent[m.goal] >= 0, "maze: the goal is not reachable from the start");
  std::vector<int> path = {m.goal};
  while (path.back() != m.start) path.push_back(parent[path.back()]);
  std::reverse(path.begin(), path.end());
  return path;
}

int min_solution_length(int n) {
  return static_cast<int>(std::ceil(1.5 * n));
}

bool passes_filters(const Maze& m) {
  const auto path = solution_path(m);
  if (static_cast<int>(path.size()) < min_solution_length(m.n)) return false;
  const auto dfs = trace(m, 2);
  if (std::set<int>(dfs.begin(), dfs.end()).size() == dfs.size()) return false;  // no backtrack
  const std::set<int> on_path(path.begin(), path.end());
  int off = 0;
  for (int c : trace(m, 1)) off += !on_path.count(c);
  if (off < 3) return false;
  std::set<std::vector<int>> traces;
  for (int s = 1; s <= kStrategies; ++s) traces.insert(trace(m, s));
  return traces.size() == kStrategies;
}

Maze generate(int n, uint64_t seed, int64_t index) {
  LOL_CHECK(n >= 4 && n <= kMaxSize, "maze size must be in 4..", kMaxSize, ", got ", n);
  std::seed_seq seq{seed, static_cast<uint64_t>(index), static_cast<uint64_t>(n), uint64_t{0x3a2e}};
  std::mt19937_64 rng(seq);
  for (;;) {
    Maze m = carve(n, rng);
    m.start = static_cast<int>(rng() % (n * n));
    do m.goal = static_cast<int>(rng() % (n * n));
    while (m.goal == m.start);
    if (passes_filters(m)) return m;
  }
}

Tokens question_tokens(const Maze& m) {
  Tokens out;
  for (int c = 0; c < m.n * m.n; ++c) {
    out.push_back(cell_name(m.n, c));
    for (int k = 0; k < 4; ++k)
      if (m.open[c] & kDirections[k]) out.push_back(kDirectionNames[k]);
  }
  out.insert(out.end(), {"start", cell_name(m.n, m.start), "goal", cell_name(m.n, m.goal)});
  return out;
}

Tokens cells_tokens(const Maze& m, const std::vector<int>& cells) {
  Tokens out;
  for (int c : cells) out.push_back(cell_name(m.n, c));
  return out;
}

Tokens descriptor_tokens(int strategy) {
  static const Tokens demos[5] = {
      {"r1c1", "r1c2", "r2c1", "r1c3", "r2c2", "r3c1"},  // BFS in discovery order
      {"r1c1", "r1c2", "r1c3", "r1c4", "r1c3", "r1c2"},  // DFS walk with backtracking
      {"r1c1", "r1c2", "r2c2", "r2c3", "r3c3", "r3c4"},  // A*
      {"r1c1", "r8c8", "r1c2", "r8c7", "r1c3", "r8c6"},  // bidirectional
      {"r8c1", "r8c2", "r8c3", "r1c8", "r2c8", "r3c8"},  // dead-end filling
  };
  LOL_CHECK(strategy >= 1 && strategy <= 5, "maze strategy must be 1..5, got ", strategy);
  Tokens out = {"["};
  out.insert(out.end(), demos[strategy - 1].begin(), demos[strategy - 1].end());
  out.push_back("]");
  return out;
}

Maze parse_question(const Tokens& t, const std::string& where) {
  // The size is the number of cells listed before "start": n * n of them.
  int cells = 0;
  size_t i = 0;
  for (; i < t.size() && t[i] != "start"; ++i)
    if (!t[i].empty() && t[i][0] == 'r') ++cells;
  const int n = static_cast<int>(std::lround(std::sqrt(cells)));
  LOL_CHECK(n >= 2 && n * n == cells && n <= kMaxSize, where,
            ": a maze lists n x n cells (n <= ", kMaxSize, "), got ", cells);
  Maze m;
  m.n = n;
  m.open.assign(n * n, 0);
  int cell = -1, expected = 0;
  for (size_t k = 0; k < i; ++k) {
    const auto& tok = t[k];
    int d = -1;
    for (int j = 0; j < 4; ++j)
      if (tok == kDirectionNames[j]) d = j;
    if (d >= 0) {
      LOL_CHECK(cell >= 0, where, ": direction '", tok, "' before any cell");
      const int r = cell / n + kDr[d], c = cell % n + kDc[d];
      LOL_CHECK(r >= 0 && r < n && c >= 0 && c < n, where, ": ", cell_name(n, cell), " opens ", tok,
                " out of the grid");
      m.open[cell] |= kDirections[d];
      continue;
    }
    cell = parse_cell(n, tok);
    LOL_CHECK(cell == expected, where, ": token '", tok, "' should be cell ",
              cell_name(n, expected));
    ++expected;
  }
  for (int c = 0; c < n * n; ++c)
    for (int k = 0; k < 4; ++k)
      if (m.open[c] & kDirections[k]) {
        const int nb = c + kDr[k] * n + kDc[k];
        LOL_CHECK(m.open[nb] & opposite(k), where, ": ", cell_name(n, c), " opens ",
                  kDirectionNames[k], " but ", cell_name(n, nb), " does not open back");
      }
  LOL_CHECK(i + 4 == t.size() && t[i + 2] == "goal", where,
            ": the question must end with 'start rRcC goal rRcC'");
  m.start = parse_cell(n, t[i + 1]);
  m.goal = parse_cell(n, t[i + 3]);
  LOL_CHECK(m.start >= 0, where, ": start '", t[i + 1], "' is not a cell of the maze");
  LOL_CHECK(m.goal >= 0, where, ": goal '", t[i + 3], "' is not a cell of the maze");
  // Loop-free and connected: a spanning tree has n*n - 1 passages and reaches every cell.
  int passages = 0;
  for (auto o : m.open) passages += __builtin_popcount(o);
  std::vector<uint8_t> reached(n * n, 0);
  std::vector<int> todo = {m.start};
  reached[m.start] = 1;
  int count = 1;
  while (!todo.empty()) {
    const int c = todo.back();
    todo.pop_back();
    for (int nb : m.neighbours(c))
      if (!reached[nb]) {
        reached[nb] = 1;
        ++count;
        todo.push_back(nb);
      }
  }
  LOL_CHECK(passages / 2 == n * n - 1 && count == n * n, where,
            ": the maze is not a loop-free maze reaching every cell (", passages / 2, " passages, ",
            count, " of ", n * n, " cells reachable)");
  return m;
}

}  // namespace lol::maze
