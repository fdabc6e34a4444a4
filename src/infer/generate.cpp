#include "infer/generate.h"

#include <cmath>

#include "util/error.h"

namespace lol {

void SamplingOptions::validate() const {
  LOL_CHECK(std::isfinite(temperature), "temperature must be a finite number, got ", temperature);
  LOL_CHECK(top_k >= 0, "top-k must be >= 0, got ", top_k);
  LOL_CHECK(top_p > 0 && top_p <= 1, "top-p must be in (0, 1], got ", top_p);
  LOL_CHECK(max_tokens >= 0, "max tokens must be >= 0, got ", max_tokens);
}

Prompt prompt_from_document(const Document& doc, int64_t length) {
  LOL_CHECK(length > 0 && length <= static_cast<int64_t>(doc.tokens.size()), "prompt length ", length,
            " is outside the document of ", doc.tokens.size(), " tokens");
  Prompt p;
  p.tokens.assign(doc.tokens.begin(), doc.tokens.begin() + length);
  p.prompt_len = doc.prompt_len;
  for (int64_t i = 0; i < length && i < static_cast<int64_t>(doc.router_only.size()); ++i)
    if (doc.router_only[i]) p.router_only.push_back(i);
  return p;
}

int64_t sample_token(const torch::Tensor& logits_in, const SamplingOptions& o, torch::Generator& generator) {
  auto logits = logits_in.to(torch::kCPU, torch::kFloat32);
  if (o.temperature <= 0) return logits.argmax().item<int64_t>();
  logits = logits / o.temperature;
  if (o.top_k > 0 && o.top_k < logits.size(0)) {
    auto kth = std::get<0>(logits.topk(o.top_k)).min();
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
  }
  auto probs = torch::softmax(logits, 0);
  if (o.top_p < 1.0) {
    auto sorted = probs.sort(0, /*descending=*/true);
    auto values = std::get<0>(sorted), order = std::get<1>(sorted);
    auto before = values.cumsum(0) - values;  // mass of strictly more likely tokens
    auto drop = before >= o.top_p;            // keep the smallest prefix reaching top_p
    auto dropped = torch::zeros_like(drop).index_put_({order}, drop);
    probs = probs.masked_fill(dropped, 0.0);
  }
  return at::multinomial(probs, 1, false, generator).item<int64_t>();
}

std::vector<Generation> generate(LanguageModel model, const std::vector<Prompt>& prompts,
                                 const SamplingOptions& options, torch::Device device, const ForcedPath* force) {
  options.validate();
  Decoder decoder(model, device, force);
  auto out = decoder.prefill(prompts);
  const int64_t B = static_cast<int64_t>(prompts.size());
  const int64_t limit = model->config().max_seq_len;
  std::vector<Generation> gens(B);
  for (const auto& r : out.routes) gens[r.sequence].routes.push_back(r);
  std::vector<uint8_t> done(B, 0);
  auto generator = at::detail::createCPUGenerator(options.seed);
  int64_t remaining = B;
  for (int64_t b = 0; b < B; ++b)
    if (options.max_tokens == 0) {
      done[b] = 1;
      gens[b].finish_reason = "length";
      --remaining;
    }
  // The decoder's rows: rows[r] is the prompt decoder row r continues. Finished rows keep
  // stepping on their last token, unread, until they are a quarter of the batch; then the
  // decoder drops them (one copy of the caches instead of their compute on every step).
  std::vector<int64_t> rows(B), next(B, 0);
  for (int64_t b = 0; b < B; ++b) rows[b] = b;
  while (remaining > 0) {
    for (size_t r = 0; r < rows.size(); ++r) {
      const int64_t b = rows[r];
      if (done[b]) continue;
      next[r] = sample_token(out.logits[static_cast<int64_t>(r)], options, generator);
      auto& g = gens[b];
      g.tokens.push_back(next[r]);
      const bool stop_token = std::find(options.stop_tokens.begin(), options.stop_tokens.end(), next[r]) !=
                              options.stop_tokens.end();
      if (stop_token || (options.stop && options.stop(b, g.tokens))) {
        g.finish_reason = "stop";
      } else if (static_cast<int64_t>(g.tokens.size()) >= options.max_tokens ||
                 decoder.position(static_cast<int64_t>(r)) + 1 >= limit) {
        g.finish_reason = "length";
      } else {
        continue;
      }
      done[b] = 1;
      --remaining;
    }
    if (remaining == 0) break;
    std::vector<int64_t> keep;
    for (size_t r = 0; r < rows.size(); ++r)
      if (!done[rows[r]]) keep.push_back(static_cast<int64_t>(r));
    if ((rows.size() - keep.size()) * 4 >= rows.size()) {
      decoder.retain(keep);
      std::vector<int64_t> kept_rows, kept_next;
      for (auto r : keep) {
        kept_rows.push_back(rows[r]);
        kept_next.push_back(next[r]);
      }
      rows = std::move(kept_rows);
      next = std::move(kept_next);
    }
    out = decoder.step(next);
    for (auto r : out.routes) {
      r.sequence = rows[r.sequence];
      if (!done[r.sequence]) gens[r.sequence].routes.push_back(std::move(r));
    }
  }
  return gens;
}

}  // namespace lol
