#include "train/sources.h"

#include "data/shards.h"
#include "tasks/copy_task.h"
#include "tasks/task.h"
#include "util/error.h"
#include "util/files.h"

namespace lol {

std::string corpus_shard(const std::string& dir, const std::string& split) {
  const auto path = dir + "/" + split + ".shard";
  LOL_CHECK(path_exists(path), "corpus ", dir, " has no ", split,
            ".shard (make it with `lol corpus build --out ", dir, "`)");
  return path;
}

std::unique_ptr<DocumentSource> open_source(const std::string& spec, uint64_t seed, int split) {
  tasks::TaskData task;
  if (tasks::parse_task_data(spec, &task))
    return std::make_unique<tasks::TaskSource>(task.kind, task.maze_size, seed, split);
  if (spec == "task:copy") return std::make_unique<StrategyTask>(seed, split);
  if (spec.rfind("corpus:", 0) == 0)  // a `lol corpus build` directory: train or val split
    return std::make_unique<ShardSource>(corpus_shard(spec.substr(7), split == 0 ? "train" : "val"),
                                         seed);
  LOL_CHECK(spec.rfind("task:", 0) != 0, "unknown task in data spec '", spec,
            "' (tasks: task:copy, task:sudoku, task:maze, task:maze:N)");
  return std::make_unique<ShardSource>(spec, seed);
}

void check_source_vocab(const DocumentSource& source, const std::string& spec, int64_t vocab_size) {
  LOL_CHECK(source.vocab_size() <= vocab_size, "data '", spec, "' uses ", source.vocab_size(),
            " token ids but the model's vocab_size is ", vocab_size);
}

}  // namespace lol
