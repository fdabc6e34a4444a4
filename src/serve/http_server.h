#pragma once
// lol serve: the OpenAI-compatible HTTP server on cpp-httplib. It listens before the model is
// loaded (GET /health answers 503 until attach()), answers every bad request with a 4xx and a
// JSON error, and stops gracefully: new requests get 503 while running ones finish.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "serve/api.h"
#include "serve/engine.h"
#include "serve/metrics.h"

namespace httplib {
class Server;
}

namespace lol::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (bind() says which)
  EngineOptions engine;
  std::string api_key;               // non-empty: all but /health and GET / need the bearer
  size_t max_body_bytes = 8u << 20;  // larger bodies get 413
  int io_timeout_seconds = 30;       // a client that sends or reads slower is dropped
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();
  // Binds the listening socket and returns its port; throws lol::Error when it cannot.
  int bind();
  // Serves until stop(); call from one thread after bind().
  void listen();
  // Starts answering with this model (until then /health says 503 and the API 503).
  // `examples`: [{label, prompt}] prompts the explorer page offers.
  void attach(LanguageModel model, torch::Device device, std::unique_ptr<Tokenizer> tokenizer,
              const std::string& model_id, json examples = json::array());
  // Refuses new requests, gives running ones `grace` to finish, then closes. Idempotent;
  // any thread (not a request handler).
  void stop(std::chrono::milliseconds grace);
  Metrics& metrics() { return metrics_; }

 private:
  void routes();
  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  Metrics metrics_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Engine> engine_;
  ServedModel served_;
  std::atomic<bool> ready_{false}, draining_{false};
  std::atomic<int64_t> next_id_{0};
};

// The explorer page served at GET / (serve/explorer.html, embedded at build time).
extern const char* const kExplorerHtml;

}  // namespace lol::serve
