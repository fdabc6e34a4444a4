#include "recompute.h"

namespace lol {

GreedyResult greedy_recompute(LanguageModel& model, const std::vector<int64_t>& prompt,
                              int64_t prompt_len, const std::vector<int64_t>& router_only,
                              int64_t max_new, int64_t eos, torch::Device device,
                              const ForcedPath* force) {
  torch::NoGradGuard no_grad;
  GreedyResult out;
  out.tokens = prompt;
  ForwardOptions options;
  options.force = force;
  const int64_t limit = model->config().max_seq_len;
  for (int64_t i = 0; i < max_new && static_cast<int64_t>(out.tokens.size()) < limit; ++i) {
    Layout layout(Batch::single(out.tokens, prompt_len, router_only), model->config().vocab_size,
                  device);
    auto result = model->forward(layout, options);
    const int64_t next = result.logits[result.logits.size(0) - 1].argmax().item<int64_t>();
    out.tokens.push_back(next);
    if (next == eos) break;
  }
  Layout layout(Batch::single(out.tokens, prompt_len, router_only), model->config().vocab_size,
                device);
  out.routes = model->forward(layout, options).routes;
  return out;
}

}  // namespace lol
