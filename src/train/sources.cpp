#include "train/sources.h"

#include "data/shards.h"
#include "tasks/copy_task.h"
#include "tasks/task.h"
#include "util/error.h"

namespace lol {

std::unique_ptr<DocumentSource> open_source(const std::string& spec, uint64_t seed, int split) {
  tasks::TaskData task;
  if (tasks::parse_task_data(spec, &task))
    return std::make_unique<tasks::TaskSource>(task.kind, task.maze_size, seed, split);
  if (spec == "task:copy") return std::make_unique<StrategyTask>(seed, split);
  LOL_CHECK(spec.rfind("task:", 0) != 0, "unknown task in data spec '", spec,
            "' (tasks: task:copy, task:sudoku, task:maze, task:maze:N)");
  return std::make_unique<ShardSource>(spec, seed);
}

}  // namespace lol
