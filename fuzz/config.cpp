// config.json, train_config.json / train_state.json, `--set key=value` and a `mix:` data spec: a
// valid config or one error; what is accepted survives a JSON round trip, and its derived counts
// (parameters, FLOPs, cache bytes) are computed without overflow (UBSan would report it).
#include "model/config.h"

#include <cmath>
#include <memory>
#include <vector>

#include "data/mixture.h"
#include "fuzz_target.h"
#include "model/stats.h"
#include "tasks/copy_task.h"
#include "train/trainer.h"

namespace {
void check_model(const lol::ModelConfig& c) {
  c.validate();
  auto again = lol::ModelConfig::from_json(c.to_json());
  lol::fuzz::expect(again.to_json() == c.to_json(), "model config JSON round trip");
  const auto stats = lol::model_stats(c, c.max_seq_len);
  lol::fuzz::expect(stats.stored_params > 0 && stats.forward_flops_per_token > 0,
                    "model stats positive");
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lol;
  const std::string text = fuzz::text_of(data, size);
  const json object = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!object.is_discarded()) {
    fuzz::guarded([&] { check_model(ModelConfig::from_json(object)); });
    fuzz::guarded([&] {
      auto t = TrainConfig::from_json(object);
      lol::fuzz::expect(TrainConfig::from_json(t.to_json()).to_json() == t.to_json(),
                        "train config round trip");
      for (int64_t step : {int64_t{0}, int64_t{1}, t.steps / 2, t.steps}) {
        (void)learning_rate(t, step);
        (void)grown_depth(t, 8, step);
      }
    });
    fuzz::guarded([&] {
      auto state = TrainState::from_json(object);
      StrategyTask source(0, 0);
      source.seek(state.data_position);
    });
    fuzz::guarded([&] {  // the same position as a mixture's of two parts
      std::vector<std::unique_ptr<DocumentSource>> parts;
      parts.push_back(std::make_unique<StrategyTask>(0, 0));
      parts.push_back(std::make_unique<StrategyTask>(1, 0));
      MixtureSource mixture({WeightSchedule(1.0), WeightSchedule::parse("2..1@64")},
                            std::move(parts));
      mixture.seek(TrainState::from_json(object).data_position);
      (void)mixture.next();
    });
  }
  // The same bytes as the parts of a mixture data spec: every accepted part has finite weights
  // >= 0 at points in order and names data that is not a mixture, and the weights never all
  // vanish; the parts then deal as a mixture.
  fuzz::guarded([&] {
    const auto parts = parse_mixture(kMixturePrefix + text);
    std::vector<WeightSchedule> weights;
    std::vector<std::unique_ptr<DocumentSource>> sources;
    for (const auto& part : parts) {
      double tokens = 0;
      for (const auto& [t, w] : part.weight.points()) {
        lol::fuzz::expect(std::isfinite(t) && t >= tokens && std::isfinite(w) && w >= 0,
                          "mixture weight schedule");
        tokens = t;
      }
      lol::fuzz::expect(!part.spec.empty() && !is_mixture(part.spec), "mixture parts");
      weights.push_back(part.weight);
      sources.push_back(std::make_unique<StrategyTask>(1, 0));
    }
    MixtureSource mixture(std::move(weights), std::move(sources));
    for (int i = 0; i < 4; ++i) (void)mixture.next();
  });
  // The same bytes as one --set override on the defaults.
  fuzz::guarded([&] {
    ModelConfig c;
    apply_override(ModelConfig::fields(), text, c);
    check_model(c);
  });
  return 0;
}
