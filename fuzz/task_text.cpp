// Task text (`lol task trace`, `lol task score`, `lol generate --task` prompts): every line as
// a sudoku and as a maze sequence is parsed, scored against each requested strategy, and, when
// it is a question, traced; each gives a result or one error naming the line.
#include <sstream>

#include "fuzz_target.h"
#include "tasks/score.h"
#include "tasks/task.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lol;
  std::istringstream lines(fuzz::text_of(data, size));
  std::string line;
  for (int count = 0; std::getline(lines, line) && count < 8; ++count) {
    const auto words = tasks::split_words(line);
    for (auto kind : {tasks::Kind::kSudoku, tasks::Kind::kMaze}) {
      fuzz::guarded([&] { (void)tasks::vocabulary(kind).encode(words, "line"); });
      fuzz::guarded([&] {
        const auto parsed = tasks::parse_sequence(kind, words, "line");
        for (int requested : {0, 1, 3})
          fuzz::guarded([&] { (void)tasks::score_sequence(kind, words, requested, "line"); });
        if (parsed.generated == 0) {
          const int strategy = tasks::descriptor_strategy(kind, parsed.descriptor);
          for (int s : {strategy, 2, 5})
            if (s >= 1 && s <= 5)
              fuzz::guarded([&] {
                (void)tasks::solve_question(kind, parsed.question, parsed.descriptor, s, "line");
              });
        }
      });
    }
  }
  return 0;
}
