#pragma once
// The task sequences (SPEC 3.1): "Q : <question> [ <descriptor> ] R : <trace> A : <answer>
// <eos>", their fixed vocabularies, the neutral filler, and training documents built from them
// (prompt window up to "]", descriptor router-only, loss after the prompt).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/document.h"
#include "tasks/maze.h"
#include "tasks/sudoku.h"

namespace lol::tasks {

using Tokens = std::vector<std::string>;

enum class Kind { kSudoku, kMaze };
Kind parse_kind(const std::string& name);  // "sudoku" | "maze"
const char* kind_name(Kind kind);
// A strategy's name (1..5; "none" otherwise) and back (0 when no strategy has the name).
const char* strategy_name(Kind kind, int strategy);
int strategy_by_name(Kind kind, const std::string& name);

class Vocabulary {
 public:
  explicit Vocabulary(std::vector<std::string> words);
  int64_t size() const { return static_cast<int64_t>(words_.size()); }
  int64_t id(const std::string& word, const std::string& where) const;  // throws naming it
  bool contains(const std::string& word) const { return ids_.count(word) != 0; }
  const std::string& word(int64_t id) const;
  std::vector<int64_t> encode(const Tokens& tokens, const std::string& where) const;
  Tokens decode(const std::vector<int64_t>& ids) const;

 private:
  std::vector<std::string> words_;
  std::map<std::string, int64_t> ids_;
};

// Fixed per task; id 0 is "<pad>", id 1 is "<eos>".
const Vocabulary& vocabulary(Kind kind);

struct Sequence {
  Tokens question, descriptor, trace, answer;  // descriptor includes its brackets
  Tokens tokens() const;                       // the full sequence with Q/R/A markers and <eos>
  Document document(const Vocabulary& vocab) const;
};

Sequence sudoku_sequence(const sudoku::Puzzle& puzzle, int strategy);
Sequence maze_sequence(const maze::Maze& maze, int strategy);
// "[ ... ]", or with as many "..." as the strategy descriptor has cells when length_matched.
Tokens filler(Kind kind, bool length_matched);

// The strategy a descriptor names (1..5), 0 for a filler, -1 when it is neither.
int descriptor_strategy(Kind kind, const Tokens& descriptor);

Tokens split_words(const std::string& line);
std::string join_words(const Tokens& tokens);

// A whole sequence split at its markers. Missing parts are empty; `complete` says whether
// every marker and the final <eos> were found.
struct Parsed {
  Tokens question, descriptor, trace, answer;
  bool has_descriptor = false, has_trace = false, has_answer = false, complete = false;
  int64_t padding = 0, generated = 0;  // <pad> tokens and all tokens after the prompt, before <eos>
};
// Throws (naming `where` and the token) when the prompt part is malformed: no "Q :", no
// closing "]", or a token outside the task vocabulary.
Parsed parse_sequence(Kind kind, const Tokens& tokens, const std::string& where);

// Streams every strategy of every generated puzzle: document i is puzzle i / 5 with strategy
// i % 5 + 1. Split 1 (held-out) uses a disjoint seed stream.
class TaskSource : public DocumentSource {
 public:
  TaskSource(Kind kind, int maze_size, uint64_t seed, int split);
  Document next() override;
  json position() const override { return json{{"index", index_}}; }
  void seek(const json& position) override;
  int64_t vocab_size() const override { return vocabulary(kind_).size(); }
  std::string describe() const override;
  Sequence sequence(int64_t index) const;

 private:
  Kind kind_;
  int maze_size_;
  uint64_t seed_;
  int64_t index_ = 0;
  mutable int64_t cached_index_ = -1;
  mutable sudoku::Puzzle cached_sudoku_;
  mutable maze::Maze cached_maze_;
};

// "task:sudoku", "task:maze" or "task:maze:N" -> kind and maze size; a mixture of one task
// (mix:task:maze:4,task:maze:5) -> that task and its largest maze size; false for other specs.
struct TaskData {
  Kind kind = Kind::kMaze;
  int maze_size = 8;
};
bool parse_task_data(const std::string& spec, TaskData* out);

// The full sequence for a question (without "Q :") and its descriptor or filler, solved with
// `strategy`. Throws naming `where` for a bad grid or maze, or a strategy that gets stuck.
Sequence solve_question(Kind kind, const Tokens& question, const Tokens& descriptor, int strategy,
                        const std::string& where);

}  // namespace lol::tasks
