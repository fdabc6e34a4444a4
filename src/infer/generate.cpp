#include "infer/generate.h"

#include <cmath>

#include "util/error.h"
#include "util/hash.h"

namespace lol {

void SamplingOptions::validate() const {
  LOL_CHECK(std::isfinite(temperature) && temperature >= 0,
            "temperature must be a finite number >= 0 (0: greedy), got ", temperature);
  LOL_CHECK(top_k >= 0, "top-k must be >= 0, got ", top_k);
  LOL_CHECK(top_p > 0 && top_p <= 1, "top-p must be in (0, 1], got ", top_p);
  LOL_CHECK(max_tokens >= 0, "max tokens must be >= 0, got ", max_tokens);
  LOL_CHECK(vocab_limit >= 0, "the vocabulary limit must be >= 0 (0: none), got ", vocab_limit);
}

Prompt prompt_from_document(const Document& doc, int64_t length) {
  LOL_CHECK(length > 0 && length <= static_cast<int64_t>(doc.tokens.size()), "prompt length ",
            length, " is outside the document of ", doc.tokens.size(), " tokens");
  Prompt p;
  p.tokens.assign(doc.tokens.begin(), doc.tokens.begin() + length);
  p.prompt_len = doc.prompt_len;
  for (int64_t i = 0; i < length && i < static_cast<int64_t>(doc.router_only.size()); ++i)
    if (doc.router_only[i]) p.router_only.push_back(i);
  return p;
}

int64_t sample_token(const torch::Tensor& logits_in, const SamplingOptions& o,
                     torch::Generator& generator) {
  auto logits = logits_in.to(torch::kCPU, torch::kFloat32);
  if (o.vocab_limit > 0 && o.vocab_limit < logits.size(0))
    logits = logits.narrow(0, 0, o.vocab_limit);
  if (o.temperature == 0) return logits.argmax().item<int64_t>();
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

torch::Generator sequence_generator(uint64_t seed, int64_t sequence) {
  // splitmix64 of the pair: nearby seeds and indices give unrelated streams.
  return at::detail::createCPUGenerator(
      mix64(seed + 0x9E3779B97F4A7C15ULL * (static_cast<uint64_t>(sequence) + 1)));
}

std::vector<Generation> generate(LanguageModel model, const std::vector<Prompt>& prompts,
                                 const SamplingOptions& options, torch::Device device,
                                 const ForcedPath* force, const BatchOptions& batching) {
  options.validate();
  LOL_CHECK(!prompts.empty(), "generate needs at least one prompt");
  LOL_CHECK(batching.max_batch >= 0, "the batch size must be >= 0 (0: all prompts at once), got ",
            batching.max_batch);
  const int64_t N = static_cast<int64_t>(prompts.size());
  const int64_t cap = batching.max_batch > 0 ? std::min(batching.max_batch, N) : N;
  const int64_t limit = model->config().max_seq_len;
  std::vector<Generation> gens(N);
  std::vector<uint8_t> done(N, 0);
  std::vector<torch::Generator> generators(N);  // made on admission, freed on finishing
  int64_t finished = 0, admitted = 0;
  auto decoder = std::make_unique<Decoder>(model, device, force);
  // The decoder's rows: rows[r] is the prompt decoder row r continues, next[r] the token it is
  // fed at the next step (a finished row keeps being fed its last token, unread, until dropped).
  std::vector<int64_t> rows, next;
  auto finish = [&](int64_t b, const char* reason) {
    gens[b].finish_reason = reason;
    done[b] = 1;
    generators[b] = torch::Generator();
    ++finished;
    if (batching.on_finish) batching.on_finish(finished);
  };
  // Samples row r's next token; finishes its sequence at a stop or at its length limit.
  auto take = [&](size_t r, const torch::Tensor& logits) {
    const int64_t b = rows[r];
    next[r] = sample_token(logits, options, generators[b]);
    auto& g = gens[b];
    g.tokens.push_back(next[r]);
    const bool stop_token = std::find(options.stop_tokens.begin(), options.stop_tokens.end(),
                                      next[r]) != options.stop_tokens.end();
    if (stop_token || (options.stop && options.stop(b, g.tokens)))
      finish(b, "stop");
    else if (static_cast<int64_t>(g.tokens.size()) >= options.max_tokens ||
             decoder->position(static_cast<int64_t>(r)) + 1 >= limit)
      finish(b, "length");
  };
  // The next `count` waiting prompts join the batch and sample their first token.
  auto admit = [&](int64_t count) {
    const std::vector<Prompt> batch(prompts.begin() + admitted, prompts.begin() + admitted + count);
    const size_t first = rows.size();
    for (int64_t i = 0; i < count; ++i) {
      rows.push_back(admitted + i);
      next.push_back(0);
      generators[admitted + i] = sequence_generator(options.seed, admitted + i);
    }
    admitted += count;
    auto out = decoder->admit(batch);
    for (auto r : out.routes) {
      r.sequence = rows[r.sequence];
      gens[r.sequence].routes.push_back(std::move(r));
    }
    for (int64_t i = 0; i < count; ++i) {
      if (options.max_tokens == 0)
        finish(rows[first + i], "length");
      else
        take(first + i, out.logits[i]);
    }
  };

  admit(cap);
  while (finished < N) {
    // Drop finished rows once they are a quarter of the batch (one copy of the caches instead
    // of their compute on every later step), and fill their places from the waiting prompts
    // in one prefill (fewer, larger prefills than admitting each as a row frees).
    std::vector<int64_t> keep;
    for (size_t r = 0; r < rows.size(); ++r)
      if (!done[rows[r]]) keep.push_back(static_cast<int64_t>(r));
    const size_t dropped = rows.size() - keep.size();
    if (dropped > 0 && dropped * 4 >= rows.size()) {
      if (keep.empty()) {
        decoder = std::make_unique<Decoder>(model, device, force);
      } else {
        decoder->retain(keep);
      }
      rows = kept_rows(rows, keep);
      next = kept_rows(next, keep);
      if (admitted < N) {
        admit(std::min(cap - static_cast<int64_t>(rows.size()), N - admitted));
        continue;  // the new rows may have finished on their first token
      }
    }
    auto out = decoder->step(next);
    for (auto r : out.routes) {
      r.sequence = rows[r.sequence];
      if (!done[r.sequence]) gens[r.sequence].routes.push_back(std::move(r));
    }
    for (size_t r = 0; r < rows.size(); ++r)
      if (!done[rows[r]]) take(r, out.logits[static_cast<int64_t>(r)]);
  }
  return gens;
}

}  // namespace lol
