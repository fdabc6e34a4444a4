// Request bodies of the server (POST /v1/completions, /v1/chat/completions, /tokenize,
// /detokenize): an engine request or one ApiError naming the field, never another exception.
// The first byte picks the endpoint; the rest is the body. Accepted requests keep the limits
// the engine relies on.
#include "fuzz_target.h"
#include "serve/api.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lol;
  if (size == 0) return 0;
  static const auto tokenizer = task_tokenizer("maze");
  static const ModelConfig config = [] {
    ModelConfig c;
    c.vocab_size = 160;
    c.max_seq_len = 256;
    return c;
  }();
  serve::ServedModel model;
  model.id = "fuzz";
  model.config = &config;
  model.tokenizer = tokenizer.get();
  model.parallel = 8;
  const json body = json::parse(fuzz::text_of(data + 1, size - 1), nullptr, false);
  if (body.is_discarded()) return 0;
  try {
    switch (data[0] % 4) {
      case 0:
      case 1: {
        const auto call = serve::parse_completion(body, model, data[0] % 4 == 1);
        fuzz::expect(!call.requests.empty(), "a completion call has a request");
        for (const auto& r : call.requests) {
          fuzz::expect(!r.prompt.tokens.empty() &&
                           static_cast<int64_t>(r.prompt.tokens.size()) <= config.max_seq_len,
                       "prompts are non-empty and fit the context");
          for (auto t : r.prompt.tokens)
            fuzz::expect(t >= 0 && t < config.vocab_size, "prompt ids are in the vocabulary");
          fuzz::expect(r.n >= 1 && r.n <= model.parallel, "n within --parallel");
          fuzz::expect(r.logprobs >= -1 && r.logprobs <= 20, "logprobs within [0, 20] or off");
          r.sampling.validate();
          if (r.stop) (void)r.stop({1, 2, 3});
        }
        break;
      }
      case 2:
        (void)serve::tokenize(body, model);
        break;
      default:
        (void)serve::detokenize(body, model);
    }
  } catch (const serve::ApiError& e) {
    fuzz::expect(e.status >= 400 && e.status < 500, "a refused request is a 4xx");
  }
  return 0;
}
