// Test-time depth: teacher-forced loss and accuracy against the executed core depth.
#include "analysis/depth_eval.h"

#include <algorithm>

#include "util/error.h"

namespace lol {

json DepthResult::to_json() const {
  return {{"depth", depth}, {"loss", loss}, {"accuracy", accuracy}, {"targets", targets}};
}

std::vector<DepthResult> evaluate_depths(LanguageModel& model, LabelledSource& source,
                                         const std::vector<int64_t>& depths, int64_t batch_size,
                                         const std::function<void()>& on_batch) {
  LOL_CHECK(batch_size > 0, "the batch size must be > 0, got ", batch_size);
  LOL_CHECK(!depths.empty(), "give at least one depth");
  const auto& c = model->config();
  for (int64_t d : depths) LOL_CHECK(d >= 1 && d <= 1024, "depths must be in 1..1024, got ", d);
  LOL_CHECK(
      c.family == Family::kLol || *std::max_element(depths.begin(), depths.end()) <= c.core_depth,
      "only a lol core executes more depths than it has (", enum_name(c.family), " has ",
      c.core_depth, ")");
  std::vector<TokenSequence> sequences;
  while (auto item = source.next()) {
    LOL_CHECK(static_cast<int64_t>(item->sequence.tokens.size()) <= c.max_seq_len,
              source.describe(), ": sequence ", sequences.size(), " has ",
              item->sequence.tokens.size(), " tokens, more than the model's max_seq_len ",
              c.max_seq_len);
    sequences.push_back(std::move(item->sequence));
  }
  LOL_CHECK(!sequences.empty(), source.describe(), ": no sequences");
  torch::NoGradGuard no_grad;
  model->eval();
  const auto device = model->parameters().front().device();
  std::vector<DepthResult> out;
  for (int64_t depth : depths) {
    DepthResult r;
    r.depth = depth;
    double loss_sum = 0;
    int64_t correct = 0;
    for (size_t at = 0; at < sequences.size(); at += static_cast<size_t>(batch_size)) {
      std::vector<std::vector<TokenSequence>> rows;
      for (size_t i = at; i < std::min(sequences.size(), at + static_cast<size_t>(batch_size)); ++i)
        rows.push_back({sequences[i]});
      Layout layout(Batch::from_documents(rows), c.vocab_size, device);
      ForwardOptions options;
      options.executed_depth = depth;
      options.extrapolate_depth = true;
      const auto logits = model->forward(layout, options).logits.to(torch::kFloat32);
      // Targets: position t predicts token t + 1, scored from the last prompt token on.
      std::vector<int64_t> positions, targets;
      for (size_t i = 0; i < rows.size(); ++i) {
        const auto& s = rows[i][0];
        const int64_t start = layout.documents()[i].start;
        for (int64_t t = std::max<int64_t>(0, s.prompt_len - 1);
             t + 1 < static_cast<int64_t>(s.tokens.size()); ++t) {
          positions.push_back(start + t);
          targets.push_back(s.tokens[static_cast<size_t>(t + 1)]);
        }
      }
      if (positions.empty()) continue;
      const auto picked = logits.index_select(0, torch::tensor(positions).to(device));
      const auto target_t = torch::tensor(targets).to(device);
      loss_sum += torch::nn::functional::cross_entropy(
                      picked, target_t,
                      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                      .item<double>();
      correct += (picked.argmax(-1) == target_t).sum().item<int64_t>();
      r.targets += static_cast<int64_t>(targets.size());
      if (on_batch) on_batch();
    }
    const double n = static_cast<double>(std::max<int64_t>(1, r.targets));
    r.loss = loss_sum / n;
    r.accuracy = static_cast<double>(correct) / n;
    out.push_back(r);
  }
  return out;
}

}  // namespace lol
