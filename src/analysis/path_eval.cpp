// Forced-path evaluation on held-out task problems (docs/analysis.md).
#include "analysis/path_eval.h"

#include <algorithm>
#include <array>
#include <iomanip>
#include <sstream>

#include "infer/generate.h"
#include "util/files.h"
#include "util/json.h"

namespace lol {
namespace {
// The label whose path lends its depths to label `index` in a depth-range condition.
size_t donor_of(size_t index, size_t labels) {
  return (index + 1) % labels;
}
}  // namespace

std::vector<LabelledPath> load_task_paths(const std::string& dir, tasks::Kind kind,
                                          int64_t core_depth, int64_t library_size, bool skip) {
  LOL_CHECK(is_directory(dir), dir, ": not a directory of paths (lol path extract --out)");
  std::vector<LabelledPath> out;
  for (const auto& name : list_directory(dir)) {
    if (name.size() < 6 || name.compare(name.size() - 5, 5, ".json") != 0) continue;
    const std::string file = dir + "/" + name;
    out.push_back(read_json_file(file, [&](const json& object) {
      LabelledPath p;
      LOL_CHECK(object.is_object() && object.contains("label") && object["label"].is_string(),
                "a mode path needs a \"label\" (lol path extract writes it)");
      p.label = object["label"].get<std::string>();
      p.strategy = tasks::strategy_by_name(kind, p.label);
      LOL_CHECK(
          p.strategy > 0, "label '", p.label, "' names no ", tasks::kind_name(kind), " strategy (",
          [&] {
            std::string names;
            for (int s = 1; s <= 5; ++s)
              names += (s > 1 ? ", " : "") + std::string(tasks::strategy_name(kind, s));
            return names;
          }(),
          ")");
      p.path = ForcedPath::from_json(object);
      p.path.validate(core_depth, library_size, skip);
      return p;
    }));
  }
  LOL_CHECK(!out.empty(), dir, ": holds no mode path (*.json)");
  std::sort(out.begin(), out.end(),
            [](const LabelledPath& a, const LabelledPath& b) { return a.label < b.label; });
  return out;
}

std::string EvalCondition::name() const {
  std::string out = enum_name(intervention);
  if (intervention == Intervention::kDepths)
    out += " " + std::to_string(first_depth) + "-" + std::to_string(last_depth);
  return out;
}

json EvalSample::to_json(tasks::Kind kind) const {
  const auto& vocab = tasks::vocabulary(kind);
  return {{"condition", condition},
          {"label", label},
          {"problem", problem},
          {"prompt", tasks::join_words(vocab.decode(prompt))},
          {"generated", tasks::join_words(vocab.decode(generated))},
          {"requested", tasks::strategy_name(kind, score.requested)},
          {"followed", tasks::strategy_name(kind, score.followed)},
          {"trace_legal", score.trace_legal},
          {"trace_rule_faithful", score.trace_rule_faithful},
          {"answer_correct", score.answer_correct}};
}

json ConditionResult::to_json(tasks::Kind kind) const {
  json j = summary.to_json(kind);
  j["condition"] = condition.name();
  if (condition.intervention == Intervention::kDepths) {
    j["depths"] = {condition.first_depth, condition.last_depth};
    j["donor_followed"] =
        summary.count ? static_cast<double>(donor_followed) / static_cast<double>(summary.count)
                      : 0.0;
  }
  return j;
}

std::string path_eval_table(const std::vector<ConditionResult>& results) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(3) << std::left << std::setw(14) << "condition"
      << std::right << std::setw(7) << "count" << std::setw(13) << "as_requested" << std::setw(8)
      << "legal" << std::setw(10) << "faithful" << std::setw(8) << "answer" << std::setw(8)
      << "donor"
      << "\n";
  for (const auto& r : results) {
    const auto& s = r.summary;
    out << std::left << std::setw(14) << r.condition.name() << std::right << std::setw(7) << s.count
        << std::setw(13) << s.strategy_as_requested << std::setw(8) << s.trace_legal
        << std::setw(10) << s.trace_rule_faithful << std::setw(8) << s.answer_correct;
    if (r.condition.intervention == Intervention::kDepths)
      out << std::setw(8)
          << (s.count ? static_cast<double>(r.donor_followed) / static_cast<double>(s.count) : 0.0);
    out << "\n";
  }
  return out.str();
}

Prompt task_eval_prompt(tasks::Kind kind, const tasks::Tokens& question,
                        const tasks::Tokens& descriptor) {
  const tasks::Sequence seq{question, descriptor, {}, {}};
  const auto doc = seq.document(tasks::vocabulary(kind));
  return prompt_from_document(doc, doc.prompt_len);
}

std::optional<ForcedPath> condition_path(const EvalCondition& condition,
                                         const std::vector<LabelledPath>& paths, size_t index,
                                         int64_t library_size, uint64_t seed) {
  const ForcedPath& path = paths.at(index).path;
  const uint64_t label_seed = seed * 1000003 + index;
  switch (condition.intervention) {
    case Intervention::kDescriptor:
    case Intervention::kFiller:
    case Intervention::kUnbiased:
      return std::nullopt;
    case Intervention::kFull:
      return path;
    case Intervention::kExpertOnly:
      return experts_only(path);
    case Intervention::kGateOnly:
      return gates_only(path);
    case Intervention::kPermute:
      return permute_depths(path, label_seed);
    case Intervention::kRandom:
      return random_experts(path, library_size, label_seed);
    case Intervention::kDepths:
      return replace_depths(path, paths[donor_of(index, paths.size())].path, condition.first_depth,
                            condition.last_depth);
  }
  fail("unknown intervention");
}

namespace {

// The model's balancing biases (Core::balance_biases, and the skip's, Core::skip_biases) at zero
// while this lives, restored after.
class BiasAtZero {
 public:
  explicit BiasAtZero(LanguageModel& model) : biases_(model->core().balance_biases()) {
    for (auto& b : model->core().skip_biases()) biases_.push_back(b);
    torch::NoGradGuard no_grad;
    for (auto& b : biases_) {
      saved_.push_back(b.clone());
      b.zero_();
    }
  }
  ~BiasAtZero() {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < biases_.size(); ++i) biases_[i].copy_(saved_[i]);
  }
  BiasAtZero(const BiasAtZero&) = delete;
  BiasAtZero& operator=(const BiasAtZero&) = delete;

 private:
  std::vector<torch::Tensor> biases_, saved_;  // views of the model's buffers, their values
};

}  // namespace

std::vector<ConditionResult> evaluate_paths(LanguageModel& model, torch::Device device,
                                            const std::vector<LabelledPath>& paths,
                                            const std::vector<EvalCondition>& conditions,
                                            const PathEvalOptions& options,
                                            const std::function<void(const EvalSample&)>& sink) {
  LOL_CHECK(!paths.empty(), "path eval: no paths");
  LOL_CHECK(options.count > 0, "path eval: the number of problems must be > 0");
  const auto& vocab = tasks::vocabulary(options.kind);
  const auto& config = model->config();
  LOL_CHECK(vocab.size() <= config.vocab_size, "the ", tasks::kind_name(options.kind),
            " vocabulary (", vocab.size(), ") does not fit the model's (", config.vocab_size, ")");
  // The problems: questions, every strategy's descriptor, and a budget that fits the longest
  // reference continuation of any strategy.
  tasks::TaskSource source(options.kind, options.maze_size, options.seed, /*split=*/1);
  std::vector<tasks::Tokens> questions;
  std::vector<std::array<tasks::Tokens, 6>> descriptors;
  int64_t budget = 0;
  for (int64_t i = 0; i < options.count; ++i) {
    std::array<tasks::Tokens, 6> d;
    for (int s = 1; s <= 5; ++s) {
      const auto seq = source.sequence(i * 5 + s - 1);
      d[s] = seq.descriptor;
      if (s == 1) questions.push_back(seq.question);
      budget = std::max<int64_t>(
          budget, static_cast<int64_t>(seq.tokens().size()) -
                      (2 + static_cast<int64_t>(seq.question.size() + seq.descriptor.size())));
    }
    descriptors.push_back(std::move(d));
  }
  SamplingOptions sampling;
  sampling.max_tokens = budget + options.extra_tokens;
  sampling.stop_tokens = {vocab.id("<eos>", "path eval")};
  sampling.vocab_limit = vocab.size();
  const auto filler = tasks::filler(options.kind, options.length_matched);

  std::vector<ConditionResult> results;
  for (const auto& condition : conditions) {
    ConditionResult result;
    result.condition = condition;
    // Nothing forced and the same filler prompt for every label: one generation serves all.
    const bool shared = condition.intervention == Intervention::kFiller;
    std::optional<BiasAtZero> unbiased;
    if (condition.intervention == Intervention::kUnbiased) unbiased.emplace(model);
    std::vector<Generation> generations;
    for (size_t j = 0; j < paths.size(); ++j) {
      const auto& label = paths[j];
      const auto force = condition_path(condition, paths, j, config.library_size, options.seed);
      std::vector<Prompt> prompts;
      for (int64_t i = 0; i < options.count; ++i)
        prompts.push_back(task_eval_prompt(options.kind, questions[i],
                                           condition.intervention == Intervention::kDescriptor ||
                                                   condition.intervention == Intervention::kUnbiased
                                               ? descriptors[i][label.strategy]
                                               : filler));
      BatchOptions batching;
      batching.max_batch = options.max_batch;
      if (options.on_sample) batching.on_finish = [&](int64_t) { options.on_sample(); };
      if (!shared || generations.empty())
        generations =
            generate(model, prompts, sampling, device, force ? &*force : nullptr, batching);
      else if (options.on_sample)
        for (int64_t i = 0; i < options.count; ++i) options.on_sample();
      for (int64_t i = 0; i < options.count; ++i) {
        EvalSample sample;
        sample.condition = condition.name();
        sample.label = label.label;
        sample.problem = i;
        sample.prompt = prompts[i].tokens;
        sample.generated = generations[i].tokens;
        auto words = vocab.decode(sample.prompt);
        const auto generated = vocab.decode(sample.generated);
        words.insert(words.end(), generated.begin(), generated.end());
        sample.score = tasks::score_sequence(options.kind, words, label.strategy,
                                             "problem " + std::to_string(i));
        result.summary.add(sample.score);
        if (condition.intervention == Intervention::kDepths &&
            sample.score.followed == paths[donor_of(j, paths.size())].strategy)
          ++result.donor_followed;
        if (sink) sink(sample);
      }
    }
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace lol
