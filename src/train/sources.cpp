#include "train/sources.h"

#include "data/mixture.h"
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

namespace {

std::unique_ptr<DocumentSource> open_single(const std::string& spec, uint64_t seed, int split) {
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

// What the token ids of a (non-mixture) spec mean: a task's vocabulary, a corpus's tokenizer
// (its tokenizer.json), or "" when the data does not say (a shard file).
std::string vocabulary_of(const std::string& spec) {
  tasks::TaskData task;
  if (tasks::parse_task_data(spec, &task))
    return std::string("task:") + tasks::kind_name(task.kind);
  if (spec == "task:copy") return spec;
  if (spec.rfind("corpus:", 0) == 0)
    return "tokenizer " + read_text_file(spec.substr(7) + "/tokenizer.json");
  return "";
}

}  // namespace

std::unique_ptr<DocumentSource> open_source(const std::string& spec, uint64_t seed, int split) {
  if (!is_mixture(spec)) return open_single(spec, seed, split);
  // Every part reads with the run's seed; parts whose ids mean different things (two tasks,
  // a task and a corpus, corpora with different tokenizers) cannot share a model.
  const auto parts = parse_mixture(spec);
  // A held-out stream is read from its start at every evaluation, so it mixes by the weights
  // the schedule ends on: the mixture a curriculum aims at.
  std::vector<WeightSchedule> weights;
  std::vector<std::unique_ptr<DocumentSource>> sources;
  std::string vocabulary, vocabulary_part;
  for (const auto& part : parts) {
    sources.push_back(open_single(part.spec, seed, split));
    weights.push_back(split == 0 ? part.weight : WeightSchedule(part.weight.last()));
    const auto v = vocabulary_of(part.spec);
    if (v.empty()) continue;
    LOL_CHECK(vocabulary.empty() || v == vocabulary, "data spec '", spec, "': '", part.spec,
              "' and '", vocabulary_part,
              "' use different vocabularies (a mixture's parts must share one: one task, or "
              "corpora with the same tokenizer.json)");
    vocabulary = v, vocabulary_part = part.spec;
  }
  return std::make_unique<MixtureSource>(std::move(weights), std::move(sources));
}

std::optional<std::string> data_tokenizer_file(const std::string& spec) {
  std::vector<std::string> specs{spec};
  if (is_mixture(spec)) {
    specs.clear();
    for (const auto& part : parse_mixture(spec)) specs.push_back(part.spec);
  }
  for (const auto& s : specs)
    if (s.rfind("corpus:", 0) == 0) return s.substr(7) + "/tokenizer.json";
  return std::nullopt;
}

void check_source_vocab(const DocumentSource& source, const std::string& spec, int64_t vocab_size) {
  LOL_CHECK(source.vocab_size() <= vocab_size, "data '", spec, "' uses ", source.vocab_size(),
            " token ids but the model's vocab_size is ", vocab_size,
            " (set vocab_size=", source.vocab_size(),
            " or more: --set vocab_size=", source.vocab_size(), ")");
}

}  // namespace lol
