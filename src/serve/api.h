#pragma once
// The OpenAI-compatible API as data: request bodies checked and turned into engine requests,
// engine results turned into response bodies. No sockets here, so every rule is testable (and
// fuzzable) on its own; serve/http_server.cpp binds it to HTTP.
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "serve/engine.h"
#include "text/tokenizer.h"
#include "util/json.h"

namespace lol::serve {

// A request the API refuses: HTTP status, OpenAI error type, the parameter at fault.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status_code, const std::string& message, std::string parameter = "",
           std::string error_type = "invalid_request_error")
      : std::runtime_error(message),
        status(status_code),
        param(std::move(parameter)),
        type(std::move(error_type)) {}
  int status;
  std::string param, type;
};
json error_body(int status, const std::string& message, const std::string& param = "",
                const std::string& type = "invalid_request_error");

// What the API serves: the model's name and config, its tokenizer, the engine's batch limit.
struct ServedModel {
  std::string id;
  const ModelConfig* config = nullptr;
  const Tokenizer* tokenizer = nullptr;
  int64_t parallel = 1;
  json examples = json::array();  // [{label, prompt}] the explorer offers (GET /examples)
};

// One /v1/completions or /v1/chat/completions call: an engine request per prompt and how to
// answer.
struct CompletionCall {
  bool chat = false;
  std::vector<Request> requests;  // one per prompt; choices are numbered prompt-major
  std::vector<std::string> stop;  // stop strings (text is cut before the first)
  bool stream = false, include_usage = false, routes = false, echo = false;
  int64_t logprobs = -1;  // -1: none
};
// Throws ApiError (400) naming the field that is wrong. Unknown fields are ignored.
CompletionCall parse_completion(const json& body, const ServedModel& model, bool chat);

// The whole response once every job finished.
json completion_response(const CompletionCall& call, const std::vector<std::shared_ptr<Job>>& jobs,
                         const ServedModel& model, const std::string& id, int64_t created);

// Streaming: what one choice has sent so far. Its text is built token by token (each piece
// once), and released only where no stop string can still begin.
struct StreamState {
  std::string prefix;  // the prompt's text with echo, else empty
  std::string text;    // the continuation's text of the tokens seen (before cutting at a stop)
  size_t seen_tokens = 0, sent_text = 0;
  bool finished = false;
};
// The next chunk of a choice (null when it has nothing new): the text delta, new logprobs
// (chat), and on finishing the finish reason, logprobs and routes. `choice` may come without
// routes (Job::choices(false)) until it finishes; a finished one must have them when the call
// asked for routes.
json stream_chunk(const CompletionCall& call, const Job& job, const Choice& choice, int64_t index,
                  StreamState& state, const ServedModel& model, const std::string& id,
                  int64_t created);
json usage_chunk(const CompletionCall& call, const std::vector<std::shared_ptr<Job>>& jobs,
                 const ServedModel& model, const std::string& id, int64_t created);

// The remote-tokenizer endpoints lm-eval probes, and the model list.
json tokenize(const json& body, const ServedModel& model);
json detokenize(const json& body, const ServedModel& model);
json tokenizer_info(const ServedModel& model);
json models_list(const ServedModel& model, int64_t created);

// Per token of a choice (prompt first, then generated), the route of the window holding it at
// every routed depth; null for a generated token the model has not read yet.
json token_routes(const std::vector<int64_t>& prompt, const Choice& choice);

}  // namespace lol::serve
