#include "serve/http_server.h"

#include <httplib.h>

#include <ctime>

#include "util/error.h"

namespace lol::serve {
namespace {

constexpr const char* kJson = "application/json";

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n", kJson);
}

void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& param = "", const std::string& type = "invalid_request_error") {
  send_json(res, status, error_body(status, message, param, type));
}

int64_t unix_now() {
  return static_cast<int64_t>(std::time(nullptr));
}

// The request body as JSON, or a 400 naming the parse error.
json parse_body(const httplib::Request& req) {
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded())
    throw ApiError(
        400, "the request body is not valid JSON (" + std::to_string(req.body.size()) + " bytes)");
  return body;
}

}  // namespace

HttpServer::HttpServer(ServerOptions options)
    : options_(std::move(options)), http_(std::make_unique<httplib::Server>()) {
  Engine::declare_metrics(metrics_);
  metrics_.declare("lol_requests_total", Metrics::Type::kCounter,
                   "HTTP requests answered, by path and status.");
  metrics_.declare("lol_up", Metrics::Type::kGauge, "1 once the model is loaded.");
  metrics_.set("lol_up", 0);
  const auto& e = options_.engine;
  const size_t threads = static_cast<size_t>(std::min<int64_t>(e.parallel + e.max_queue + 16, 512));
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_read_timeout(options_.io_timeout_seconds, 0);
  http_->set_write_timeout(options_.io_timeout_seconds, 0);
  http_->set_keep_alive_timeout(5);
  http_->set_keep_alive_max_count(100000);
  http_->set_tcp_nodelay(true);  // each SSE chunk leaves at once (no Nagle delay)
  // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, with which a second server on
  // the same port starts silently and takes half the connections.
  http_->set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  routes();
}

HttpServer::~HttpServer() {
  stop(std::chrono::milliseconds(0));
}

int HttpServer::bind() {
  int port = options_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(options_.host);
    LOL_CHECK(port > 0, "cannot listen on ", options_.host, " (any port)");
  } else {
    LOL_CHECK(http_->bind_to_port(options_.host, port), "cannot listen on ", options_.host, ":",
              port, " (in use, or not an address of this machine)");
  }
  return port;
}

void HttpServer::listen() {
  http_->listen_after_bind();
}

void HttpServer::attach(LanguageModel model, torch::Device device,
                        std::unique_ptr<Tokenizer> tokenizer, const std::string& model_id,
                        json examples) {
  tokenizer_ = std::move(tokenizer);
  engine_ = std::make_unique<Engine>(model, device, options_.engine, &metrics_);
  served_.id = model_id;
  served_.config = &engine_->config();
  served_.tokenizer = tokenizer_.get();
  served_.parallel = options_.engine.parallel;
  served_.examples = std::move(examples);
  metrics_.set("lol_up", 1);
  ready_ = true;
}

void HttpServer::stop(std::chrono::milliseconds grace) {
  if (draining_.exchange(true)) return;
  if (engine_) engine_->shutdown(grace);
  http_->stop();
}

void HttpServer::routes() {
  auto& s = *http_;
  // Authentication, and 503 before the model is loaded or while stopping.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // The health check and the explorer page itself (static; its API calls send the key) are
    // open; everything else needs the key.
    if (req.path == "/health" || (req.path == "/" && req.method == "GET"))
      return httplib::Server::HandlerResponse::Unhandled;
    if (!options_.api_key.empty() &&
        req.get_header_value("Authorization") != "Bearer " + options_.api_key) {
      send_error(res, 401, "missing or wrong API key (send 'Authorization: Bearer KEY')", "",
                 "authentication_error");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!ready_ || draining_) {
      send_error(res, 503, draining_ ? "the server is shutting down" : "the model is loading", "",
                 "unavailable");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.add("lol_requests_total", 1,
                 {{"path", req.path.size() > 40 ? "other" : req.path},
                  {"status", std::to_string(res.status)}});
  });
  // Errors httplib decides (404, 405, 413, 400 for a broken request line) get a JSON body.
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = "error";
    if (res.status == 404) message = "no endpoint " + req.method + " " + req.path;
    if (res.status == 413) message = "the request body is too large";
    if (res.status == 400) message = "malformed HTTP request";
    send_error(res, res.status, message);
  });
  s.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        try {
          std::rethrow_exception(ep);
        } catch (const ApiError& e) {
          send_error(res, e.status, e.what(), e.param, e.type);
        } catch (const QueueFull& e) {
          send_error(res, 429, e.what(), "", "rate_limit_error");
        } catch (const Error& e) {
          send_error(res, 400, e.what());
        } catch (const std::exception& e) {
          send_error(res, 500, std::string("internal error: ") + e.what(), "", "server_error");
        } catch (...) {
          send_error(res, 500, "internal error", "", "server_error");
        }
      });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining_)
      send_json(res, 503, {{"status", "shutting down"}});
    else if (!ready_)
      send_json(res, 503, {{"status", "loading"}});
    else
      send_json(res, 200, {{"status", "ok"}});
  });
  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kExplorerHtml, "text/html; charset=utf-8");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.render(), "text/plain; version=0.0.4");
  });
  s.Get("/examples", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"examples", served_.examples}});
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, models_list(served_, unix_now()));
  });
  for (const std::string prefix : {"", "/v1"}) {
    s.Get(prefix + "/tokenizer_info", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, tokenizer_info(served_));
    });
    s.Post(prefix + "/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      send_json(res, 200, tokenize(parse_body(req), served_));
    });
    s.Post(prefix + "/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
      send_json(res, 200, detokenize(parse_body(req), served_));
    });
  }
  auto complete = [this](bool chat) {
    return [this, chat](const httplib::Request& req, httplib::Response& res) {
      auto call =
          std::make_shared<CompletionCall>(parse_completion(parse_body(req), served_, chat));
      auto jobs = std::make_shared<std::vector<std::shared_ptr<Job>>>();
      try {
        for (auto& r : call->requests) jobs->push_back(engine_->submit(r));
      } catch (...) {
        for (auto& j : *jobs) j->cancel();
        throw;
      }
      const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(++next_id_);
      const int64_t created = unix_now();
      auto failure = [jobs]() -> std::string {
        for (const auto& j : *jobs)
          if (auto e = j->error(); !e.empty()) return e;
        return "";
      };
      if (!call->stream) {
        for (auto& j : *jobs)
          while (!j->wait([](const Job& x) { return x.finished_locked(); },
                          std::chrono::milliseconds(1000))) {
          }
        if (auto e = failure(); !e.empty()) return send_error(res, 500, e, "", "server_error");
        return send_json(res, 200, completion_response(*call, *jobs, served_, id, created));
      }
      // Server-sent events: one chunk per choice and new text, then the usage chunk when asked
      // for, then [DONE]. A client that goes away cancels its sequences.
      auto states = std::make_shared<std::vector<StreamState>>();
      for (const auto& j : *jobs)
        states->resize(states->size() + static_cast<size_t>(j->request().n));
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [this, call, jobs, states, id, created, failure](size_t, httplib::DataSink& sink) {
            auto send = [&](const json& chunk) {
              const std::string line =
                  "data: " + chunk.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
              return sink.write(line.data(), line.size());
            };
            for (;;) {
              bool all_done = true;
              size_t state = 0;
              int64_t index = 0;
              for (const auto& j : *jobs) {
                const auto choices = j->choices(/*with_routes=*/false);
                for (size_t k = 0; k < choices.size(); ++k, ++state, ++index) {
                  auto& st = (*states)[state];
                  if (st.finished) continue;
                  // A finished choice's last chunk carries its routes: take them then.
                  const bool last = !choices[k].finish_reason.empty();
                  const json chunk =
                      stream_chunk(*call, *j, last && call->routes ? j->choices()[k] : choices[k],
                                   index, st, served_, id, created);
                  if (!chunk.is_null() && !send(chunk)) {
                    for (auto& x : *jobs) x->cancel();
                    return false;
                  }
                  if (!st.finished) all_done = false;
                }
              }
              if (auto e = failure(); !e.empty()) {
                send(error_body(500, e, "", "server_error"));
                sink.done();
                return true;
              }
              if (all_done) {
                if (call->include_usage) send(usage_chunk(*call, *jobs, served_, id, created));
                const std::string end = "data: [DONE]\n\n";
                sink.write(end.data(), end.size());
                sink.done();
                return true;
              }
              if (!sink.is_writable()) {
                for (auto& x : *jobs) x->cancel();
                return false;
              }
              // Sleep until a choice of the first unfinished job has a token not yet seen.
              state = 0;
              for (const auto& j : *jobs) {
                const size_t first = state;
                state += static_cast<size_t>(j->request().n);
                if (j->finished()) continue;
                j->wait(
                    [&](const Job& x) {
                      const auto& now = x.choices_locked();
                      for (size_t k = 0; k < now.size(); ++k)
                        if (now[k].tokens.size() != (*states)[first + k].seen_tokens ||
                            !now[k].finish_reason.empty() != (*states)[first + k].finished)
                          return true;
                      return !x.error_locked().empty();
                    },
                    std::chrono::milliseconds(200));
                break;
              }
            }
          },
          [jobs](bool success) {
            if (!success)
              for (auto& x : *jobs) x->cancel();
          });
    };
  };
  s.Post("/v1/completions", complete(false));
  s.Post("/v1/chat/completions", complete(true));
}

}  // namespace lol::serve
