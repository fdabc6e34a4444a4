#include "tasks/task.h"

#include <optional>
#include <sstream>

#include "data/mixture.h"
#include "util/error.h"
#include "util/parse.h"

namespace lol::tasks {

Kind parse_kind(const std::string& name) {
  if (name == "sudoku") return Kind::kSudoku;
  if (name == "maze") return Kind::kMaze;
  fail("unknown task '", name, "' (tasks: sudoku, maze)");
}

const char* kind_name(Kind kind) {
  return kind == Kind::kSudoku ? "sudoku" : "maze";
}

const char* strategy_name(Kind kind, int strategy) {
  return kind == Kind::kSudoku ? sudoku::strategy_name(strategy) : maze::strategy_name(strategy);
}

int strategy_by_name(Kind kind, const std::string& name) {
  for (int s = 1; s <= 5; ++s)
    if (name == strategy_name(kind, s)) return s;
  return 0;
}

Vocabulary::Vocabulary(std::vector<std::string> words) : words_(std::move(words)) {
  for (size_t i = 0; i < words_.size(); ++i) ids_[words_[i]] = static_cast<int64_t>(i);
}

int64_t Vocabulary::id(const std::string& word, const std::string& where) const {
  auto it = ids_.find(word);
  LOL_CHECK(it != ids_.end(), where, ": unknown token '", word, "'");
  return it->second;
}

const std::string& Vocabulary::word(int64_t id) const {
  LOL_CHECK(id >= 0 && id < size(), "token id ", id, " is outside the task vocabulary of ", size());
  return words_[id];
}

std::vector<int64_t> Vocabulary::encode(const Tokens& tokens, const std::string& where) const {
  std::vector<int64_t> out;
  for (const auto& t : tokens) out.push_back(id(t, where));
  return out;
}

Tokens Vocabulary::decode(const std::vector<int64_t>& ids) const {
  Tokens out;
  for (auto i : ids) out.push_back(word(i));
  return out;
}

const Vocabulary& vocabulary(Kind kind) {
  static const Vocabulary sudoku_vocab = [] {
    std::vector<std::string> w = {"<pad>", "<eos>", "Q", "R", "A",  ":",   "[", "]",    "...",
                                  ";",     "=",     "{", "}", "->", "set", "x", "back", "."};
    for (int d = 1; d <= 9; ++d) w.push_back(std::to_string(d));
    for (int s = 1; s <= 5; ++s) w.push_back("S" + std::to_string(s));
    for (int c = 0; c < 81; ++c) w.push_back(sudoku::cell_name(c));
    for (const char* unit : {"row", "col", "box"})
      for (int k = 1; k <= 9; ++k) w.push_back(unit + std::to_string(k));
    return Vocabulary(w);
  }();
  static const Vocabulary maze_vocab = [] {
    std::vector<std::string> w = {"<pad>", "<eos>", "Q",    "R", "A", ":", "[", "]",
                                  "...",   "start", "goal", "N", "E", "S", "W"};
    for (int c = 0; c < maze::kMaxSize * maze::kMaxSize; ++c)
      w.push_back(maze::cell_name(maze::kMaxSize, c));
    return Vocabulary(w);
  }();
  return kind == Kind::kSudoku ? sudoku_vocab : maze_vocab;
}

Tokens Sequence::tokens() const {
  Tokens out = {"Q", ":"};
  out.insert(out.end(), question.begin(), question.end());
  out.insert(out.end(), descriptor.begin(), descriptor.end());
  out.insert(out.end(), {"R", ":"});
  out.insert(out.end(), trace.begin(), trace.end());
  out.insert(out.end(), {"A", ":"});
  out.insert(out.end(), answer.begin(), answer.end());
  out.push_back("<eos>");
  return out;
}

Document Sequence::document(const Vocabulary& vocab) const {
  Document doc;
  doc.tokens = vocab.encode(tokens(), "task sequence");
  const int64_t descriptor_start = 2 + static_cast<int64_t>(question.size());
  doc.prompt_len = descriptor_start + static_cast<int64_t>(descriptor.size());
  doc.router_only.assign(doc.tokens.size(), 0);
  for (int64_t i = descriptor_start; i < doc.prompt_len; ++i) doc.router_only[i] = 1;
  doc.loss_mask.assign(doc.tokens.size(), 0);
  for (size_t i = static_cast<size_t>(doc.prompt_len); i < doc.tokens.size(); ++i)
    doc.loss_mask[i] = 1;
  return doc;
}

Sequence sudoku_sequence(const sudoku::Puzzle& p, int strategy) {
  auto solved = sudoku::solve(p.givens, strategy);
  LOL_CHECK(solved.solved && solved.grid == p.solution, "sudoku strategy S", strategy,
            " does not solve this puzzle");
  return Sequence{sudoku::question_tokens(p.givens), sudoku::descriptor_tokens(strategy),
                  solved.trace, sudoku::answer_tokens(p.solution)};
}

Sequence maze_sequence(const maze::Maze& m, int strategy) {
  return Sequence{maze::question_tokens(m), maze::descriptor_tokens(strategy),
                  maze::cells_tokens(m, maze::trace(m, strategy)),
                  maze::cells_tokens(m, maze::solution_path(m))};
}

Tokens filler(Kind kind, bool length_matched) {
  const size_t inner = length_matched ? (kind == Kind::kSudoku ? 1 : 6) : 1;
  Tokens out = {"["};
  out.insert(out.end(), inner, "...");
  out.push_back("]");
  return out;
}

int descriptor_strategy(Kind kind, const Tokens& descriptor) {
  for (int s = 1; s <= 5; ++s) {
    auto d = kind == Kind::kSudoku ? sudoku::descriptor_tokens(s) : maze::descriptor_tokens(s);
    if (d == descriptor) return s;
  }
  if (descriptor.size() >= 3 && descriptor.front() == "[" && descriptor.back() == "]") {
    bool all_dots = true;
    for (size_t i = 1; i + 1 < descriptor.size(); ++i) all_dots &= descriptor[i] == "...";
    if (all_dots) return 0;
  }
  return -1;
}

Tokens split_words(const std::string& line) {
  Tokens out;
  std::istringstream in(line);
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

std::string join_words(const Tokens& tokens) {
  std::string out;
  for (const auto& t : tokens) {
    if (!out.empty()) out += ' ';
    out += t;
  }
  return out;
}

Parsed parse_sequence(Kind kind, const Tokens& t, const std::string& where) {
  const auto& vocab = vocabulary(kind);
  for (size_t i = 0; i < t.size(); ++i)
    LOL_CHECK(vocab.contains(t[i]), where, ": unknown token '", t[i], "' at position ", i);
  LOL_CHECK(t.size() >= 2 && t[0] == "Q" && t[1] == ":", where, ": a sequence starts with 'Q :'",
            t.empty() ? std::string(" (empty line)") : ", got '" + t[0] + "'");
  Parsed p;
  size_t i = 2;
  while (i < t.size() && t[i] != "[") p.question.push_back(t[i++]);
  LOL_CHECK(i < t.size(), where, ": truncated: no '[' opens the strategy descriptor");
  while (i < t.size() && t[i] != "]") p.descriptor.push_back(t[i++]);
  LOL_CHECK(i < t.size(), where, ": truncated: no ']' closes the strategy descriptor");
  p.descriptor.push_back("]");
  p.has_descriptor = true;
  ++i;
  // The generated part: R : trace A : answer <eos>, scored rather than rejected.
  const size_t generated_start = i;
  size_t eos = i;
  while (eos < t.size() && t[eos] != "<eos>") ++eos;
  for (size_t k = generated_start; k < eos; ++k) p.padding += t[k] == "<pad>";
  p.generated = static_cast<int64_t>(eos - generated_start);
  Tokens body;
  for (size_t k = generated_start; k < eos; ++k)
    if (t[k] != "<pad>") body.push_back(t[k]);
  size_t k = 0;
  if (body.size() >= 2 && body[0] == "R" && body[1] == ":") {
    p.has_trace = true;
    k = 2;
    while (k < body.size() && body[k] != "A") p.trace.push_back(body[k++]);
    if (k + 1 < body.size() && body[k + 1] == ":") {
      p.has_answer = true;
      p.answer.assign(body.begin() + static_cast<long>(k) + 2, body.end());
    }
  }
  p.complete = p.has_trace && p.has_answer && eos < t.size();
  return p;
}

bool parse_task_data(const std::string& spec, TaskData* out) {
  if (is_mixture(spec)) {  // one task throughout: that task, at its largest maze size
    std::optional<TaskData> mixed;
    for (const auto& part : parse_mixture(spec)) {
      TaskData data;
      if (!parse_task_data(part.spec, &data) || (mixed && mixed->kind != data.kind)) return false;
      if (!mixed || data.maze_size > mixed->maze_size) mixed = data;
    }
    *out = *mixed;
    return true;
  }
  if (spec.rfind("task:", 0) != 0) return false;
  std::string name = spec.substr(5);
  TaskData data;
  if (name.rfind("maze:", 0) == 0) {
    const std::string n = name.substr(5);
    const auto size = parse_int(n);
    LOL_CHECK(size && *size >= 0 && *size < 1000, "data spec '", spec,
              "': the maze size must be a number");
    data.maze_size = static_cast<int>(*size);
    name = "maze";
  }
  if (name != "sudoku" && name != "maze") return false;
  data.kind = parse_kind(name);
  *out = data;
  return true;
}

TaskSource::TaskSource(Kind kind, int maze_size, uint64_t seed, int split)
    : kind_(kind), maze_size_(maze_size), seed_(seed * 2 + static_cast<uint64_t>(split)) {
  if (kind == Kind::kMaze)
    LOL_CHECK(maze_size >= 4 && maze_size <= maze::kMaxSize, "maze size must be in 4..",
              maze::kMaxSize, ", got ", maze_size);
}

Sequence TaskSource::sequence(int64_t index) const {
  const int64_t puzzle = index / 5;
  const int strategy = static_cast<int>(index % 5) + 1;
  // The five strategies of a puzzle are consecutive: generate each puzzle once.
  if (puzzle != cached_index_) {
    if (kind_ == Kind::kSudoku)
      cached_sudoku_ = sudoku::generate(seed_, puzzle);
    else
      cached_maze_ = maze::generate(maze_size_, seed_, puzzle);
    cached_index_ = puzzle;
  }
  if (kind_ == Kind::kSudoku) return sudoku_sequence(cached_sudoku_, strategy);
  return maze_sequence(cached_maze_, strategy);
}

Sequence solve_question(Kind kind, const Tokens& question, const Tokens& descriptor, int strategy,
                        const std::string& where) {
  LOL_CHECK(strategy >= 1 && strategy <= 5, where, ": strategy must be 1..5, got ", strategy);
  Sequence s;
  if (kind == Kind::kSudoku) {
    sudoku::Puzzle p;
    p.givens = sudoku::parse_grid(question, where);
    auto full = sudoku::solve(p.givens, 5);
    LOL_CHECK(full.solved, where, ": the sudoku has no solution");
    p.solution = full.grid;
    auto solved = sudoku::solve(p.givens, strategy);
    LOL_CHECK(solved.solved, where, ": strategy S", strategy, " (", sudoku::strategy_name(strategy),
              ") gets stuck on this sudoku");
    s = Sequence{question, descriptor, solved.trace, sudoku::answer_tokens(p.solution)};
  } else {
    auto m = maze::parse_question(question, where);
    s = Sequence{question, descriptor, maze::cells_tokens(m, maze::trace(m, strategy)),
                 maze::cells_tokens(m, maze::solution_path(m))};
  }
  return s;
}

Document TaskSource::next() {
  return sequence(index_++).document(vocabulary(kind_));
}

void TaskSource::seek(const json& position) {
  index_ = position_field(position, "index");
}

std::string TaskSource::describe() const {
  return kind_ == Kind::kSudoku ? "task:sudoku" : "task:maze:" + std::to_string(maze_size_);
}

}  // namespace lol::tasks
