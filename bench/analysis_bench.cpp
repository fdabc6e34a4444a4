// lol bench --suite analysis: how fast routes are extracted (docs/analysis.md), against the
// forward pass alone over the same batches of the same sequences.
#include <iostream>

#include "analysis/routes.h"
#include "bench_util.h"
#include "suites.h"
#include "tasks/task.h"
#include "util/version.h"

namespace lol::bench {
namespace {

// Labelled sequences held in memory and replayed, so task generation is not timed.
class Replay : public LabelledSource {
 public:
  explicit Replay(std::vector<LabelledSequence> items) : items_(std::move(items)) {}
  std::optional<LabelledSequence> next() override {
    if (at_ >= items_.size()) return std::nullopt;
    return items_[at_++];
  }
  int64_t size() const override { return static_cast<int64_t>(items_.size()); }
  std::string describe() const override { return "replayed"; }
  void rewind() { at_ = 0; }
  const std::vector<LabelledSequence>& items() const { return items_; }

 private:
  std::vector<LabelledSequence> items_;
  size_t at_ = 0;
};

}  // namespace

void bench_analysis(const AnalysisBenchOptions& o) {
  ModelConfig config = o.base;
  config.family = Family::kLol;
  config.vocab_size = std::max(config.vocab_size, tasks::vocabulary(tasks::Kind::kMaze).size());
  auto task = task_sequences("maze", o.maze_size, o.puzzles, 7);
  std::vector<LabelledSequence> items;
  int64_t tokens = 0;
  while (auto item = task->next()) {
    tokens += static_cast<int64_t>(item->sequence.tokens.size());
    config.max_seq_len =
        std::max(config.max_seq_len, static_cast<int64_t>(item->sequence.tokens.size()));
    items.push_back(std::move(*item));
  }
  config.validate();
  LanguageModel model(config);
  model->initialize(0);
  model->to(o.device);
  Replay source(std::move(items));

  auto time_it = [&](const std::function<void()>& body) {
    std::vector<double> rates;
    for (int r = 0; r < o.warmup + o.reps; ++r) {
      synchronize(o.device);
      const auto t0 = Clock::now();
      body();
      synchronize(o.device);
      if (r >= o.warmup) rates.push_back(static_cast<double>(tokens) / seconds_since(t0));
    }
    return spread(rates);
  };
  const Spread forward = time_it([&] {
    torch::NoGradGuard no_grad;
    model->eval();
    const auto& all = source.items();
    for (size_t at = 0; at < all.size(); at += static_cast<size_t>(o.batch)) {
      std::vector<std::vector<TokenSequence>> rows;
      for (size_t i = at; i < std::min(all.size(), at + static_cast<size_t>(o.batch)); ++i)
        rows.push_back({all[i].sequence});
      Layout layout(Batch::from_documents(rows), config.vocab_size, o.device);
      (void)model->forward(layout);
    }
  });
  ExtractOptions extract;
  extract.batch_size = o.batch;
  const Spread routes = time_it([&] {
    source.rewind();
    extract_routes(model, source, extract, [](SequenceRoutes&&) {});
  });
  int64_t bytes = 0;
  const Spread routes_json = time_it([&] {
    source.rewind();
    bytes = 0;
    extract_routes(model, source, extract, [&](SequenceRoutes&& s) {
      bytes += static_cast<int64_t>(s.to_json().dump().size()) + 1;
    });
  });

  const double seqs_per_token = static_cast<double>(source.size()) / static_cast<double>(tokens);
  if (o.output == "json") {
    json j = machine_fields(o.device);
    j["suite"] = "analysis";
    j["sequences"] = source.size();
    j["tokens"] = tokens;
    j["batch"] = o.batch;
    j["route_file_bytes"] = bytes;
    j["rows"] = json::array();
    for (const auto& [what, s] : {std::pair<const char*, Spread>{"forward", forward},
                                  {"extract", routes},
                                  {"extract+json", routes_json}})
      j["rows"].push_back({{"what", what},
                           {"tokens_per_s", s.mean},
                           {"stddev", s.stddev},
                           {"sequences_per_s", s.mean * seqs_per_token},
                           {"vs_forward", s.mean / forward.mean}});
    std::cout << j.dump(2) << "\n";
    return;
  }
  const bool md = o.output == "md";
  if (md)
    std::cout << machine_lines(o.device) << " | maze " << o.maze_size << "x" << o.maze_size << ", "
              << source.size() << " sequences (" << tokens << " tokens), batch " << o.batch << ", "
              << o.reps << " reps | d " << config.d_model << ", D " << config.core_depth << ", L "
              << config.library_size << " | route file "
              << fixed(static_cast<double>(bytes) / 1e6, 2) << " MB\n\n";
  Table table(md);
  table.header({"what", "tokens/s", "±", "sequences/s", "vs forward"}, 1);
  for (const auto& [what, s] : {std::pair<const char*, Spread>{"forward only", forward},
                                {"routes extracted", routes},
                                {"routes extracted + JSON", routes_json}})
    table.row({what, fixed(s.mean, 0), fixed(s.stddev, 0), fixed(s.mean * seqs_per_token, 1),
               fixed(s.mean / forward.mean, 2) + "x"});
}

}  // namespace lol::bench
