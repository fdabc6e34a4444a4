// lol bench --suite serve: the HTTP server under N concurrent streaming clients on loopback
// against generate() on the same prompts (docs/serving.md).
#ifdef LOL_HAVE_HTTPLIB
#include <httplib.h>

#include <atomic>
#include <iostream>
#include <mutex>
#include <thread>

#include "bench_util.h"
#include "infer/generate.h"
#include "serve/http_server.h"
#include "suites.h"
#include "text/tokenizer.h"
#include "util/runtime.h"

namespace lol::bench {
namespace {

// One streamed request as the client saw it.
struct Timing {
  bool ok = false;
  std::string error;  // why not ok
  int64_t tokens = 0;
  double first_token_s = 0;
  std::vector<double> gaps_s;  // between consecutive tokens
};

Timing stream_request(httplib::Client& cli, const std::string& body) {
  Timing t;
  const auto start = Clock::now();
  auto last = start;
  std::string pending;
  bool done = false;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = body;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    pending.append(data, n);
    size_t end;
    while ((end = pending.find("\n\n")) != std::string::npos) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event == "data: [DONE]") {
        done = true;
        continue;
      }
      // A chunk with text is a token (the ids tokenizer writes every token as text); found
      // without parsing, so the clients cost the 2-core machine little.
      if (event.rfind("data: ", 0) != 0 || event.find("\"text\":\"\"") != std::string::npos ||
          event.find("\"text\":\"") == std::string::npos)
        continue;
      const auto now = Clock::now();
      if (t.tokens == 0)
        t.first_token_s = std::chrono::duration<double>(now - start).count();
      else
        t.gaps_s.push_back(std::chrono::duration<double>(now - last).count());
      last = now;
      ++t.tokens;
    }
    return true;
  };
  auto res = cli.send(req);
  t.ok = res && res->status == 200 && done;
  if (!res)
    t.error = "client error: " + httplib::to_string(res.error());
  else if (!t.ok)
    t.error = "HTTP " + std::to_string(res->status) + (done ? "" : ", no [DONE]") + ": " +
              res->body.substr(0, 200);
  return t;
}

}  // namespace

void bench_serve(const ServeBenchOptions& o) {
  auto config = family_config(o.base, "lol");
  config.max_seq_len = std::max(config.max_seq_len, o.prompt_len + o.max_tokens + 8);
  LanguageModel model(config);
  model->initialize(0);
  model->to(o.device);
  model->eval();
  std::vector<Prompt> prompts;
  for (int64_t r = 0; r < o.requests; ++r) {
    Prompt p;
    for (int64_t i = 0; i < o.prompt_len; ++i)
      p.tokens.push_back((i * 7919 + r * 104729 + 13) % config.vocab_size);
    prompts.push_back(p);
  }
  // The same work through generate(): the engine without HTTP, batching up to --parallel.
  SamplingOptions greedy;
  greedy.max_tokens = o.max_tokens;
  BatchOptions batching;
  batching.max_batch = o.parallel;
  generate(model, {prompts.front()}, greedy, o.device, nullptr, batching);  // warm-up
  auto t0 = Clock::now();
  auto gens = generate(model, prompts, greedy, o.device, nullptr, batching);
  const double generate_s = seconds_since(t0);
  int64_t generate_tokens = 0;
  for (const auto& g : gens) generate_tokens += static_cast<int64_t>(g.tokens.size());
  const double generate_tps = static_cast<double>(generate_tokens) / generate_s;

  serve::ServerOptions options;
  options.port = 0;
  options.engine.parallel = o.parallel;
  options.engine.max_queue = o.requests;
  serve::HttpServer server(options);
  const int port = server.bind();
  std::thread listener([&] { server.listen(); });
  server.attach(model, o.device, id_tokenizer(config.vocab_size), "bench");
  auto body_of = [&](const Prompt& p) {
    return json{
        {"prompt", p.tokens}, {"max_tokens", o.max_tokens}, {"temperature", 0}, {"stream", true}}
        .dump();
  };
  struct Row {
    int64_t clients = 0, errors = 0, tokens = 0;
    std::string first_error;
    double seconds = 0, ttft_p50 = 0, ttft_p95 = 0, tok_p50 = 0, tok_p95 = 0;
  };
  std::vector<Row> rows;
  {
    httplib::Client warm("127.0.0.1", port);
    stream_request(warm, body_of(prompts.front()));
  }
  for (int64_t clients : o.clients) {
    std::atomic<int64_t> next{0}, connected{0};
    std::atomic<bool> go{false};
    std::mutex mutex;
    std::vector<Timing> timings;
    std::vector<std::thread> threads;
    // Each client connects first (keep-alive), so the timing is of serving, not of 16 connects
    // at one instant overflowing the listen backlog of 5 that cpp-httplib is built with.
    for (int64_t c = 0; c < clients; ++c)
      threads.emplace_back([&] {
        httplib::Client cli("127.0.0.1", port);
        cli.set_read_timeout(300, 0);
        cli.set_tcp_nodelay(true);
        cli.Get("/health");
        ++connected;
        while (!go) std::this_thread::yield();
        for (int64_t r; (r = next++) < o.requests;) {
          auto t = stream_request(cli, body_of(prompts[static_cast<size_t>(r)]));
          std::lock_guard<std::mutex> lock(mutex);
          timings.push_back(std::move(t));
        }
      });
    while (connected < clients) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    auto start = Clock::now();
    go = true;
    for (auto& t : threads) t.join();
    Row row;
    row.clients = clients;
    row.seconds = seconds_since(start);
    std::vector<double> ttft, gaps;
    for (const auto& t : timings) {
      row.errors += t.ok ? 0 : 1;
      if (!t.ok && row.first_error.empty()) row.first_error = t.error;
      row.tokens += t.tokens;
      ttft.push_back(t.first_token_s);
      gaps.insert(gaps.end(), t.gaps_s.begin(), t.gaps_s.end());
    }
    row.ttft_p50 = percentile(ttft, 0.5) * 1e3;
    row.ttft_p95 = percentile(ttft, 0.95) * 1e3;
    row.tok_p50 = gaps.empty() ? 0 : percentile(gaps, 0.5) * 1e3;
    row.tok_p95 = gaps.empty() ? 0 : percentile(gaps, 0.95) * 1e3;
    rows.push_back(row);
  }
  server.stop(std::chrono::milliseconds(0));
  listener.join();

  if (o.output == "json") {
    json j = machine_fields(o.device);
    j.update({{"suite", "serve"},
              {"config", config.to_json()},
              {"parallel", o.parallel},
              {"requests", o.requests},
              {"prompt_len", o.prompt_len},
              {"max_tokens", o.max_tokens},
              {"generate_tokens_per_s", generate_tps},
              {"rows", json::array()}});
    for (const auto& r : rows)
      j["rows"].push_back(
          {{"clients", r.clients},
           {"errors", r.errors},
           {"requests_per_s", static_cast<double>(o.requests) / r.seconds},
           {"tokens_per_s", static_cast<double>(r.tokens) / r.seconds},
           {"vs_generate", static_cast<double>(r.tokens) / r.seconds / generate_tps},
           {"ttft_p50_ms", r.ttft_p50},
           {"ttft_p95_ms", r.ttft_p95},
           {"token_p50_ms", r.tok_p50},
           {"token_p95_ms", r.tok_p95}});
    std::cout << j.dump(2) << "\n";
    return;
  }
  const bool md = o.output == "md";
  if (md)
    std::cout << machine_lines(o.device) << " | --parallel " << o.parallel << ", " << o.requests
              << " requests of " << o.prompt_len << " prompt + " << o.max_tokens
              << " generated tokens, streamed | generate(): " << fixed(generate_tps, 0)
              << " tokens/s\n\n";
  Table table(md);
  table.header({"clients", "errors", "requests/s", "tokens/s", "x generate", "TTFT p50 ms",
                "TTFT p95 ms", "token p50 ms", "token p95 ms"},
               1);
  for (const auto& r : rows)
    if (!r.first_error.empty())
      std::cerr << "serve bench: " << r.errors << " failed requests at " << r.clients
                << " clients, first: " << r.first_error << "\n";
  for (const auto& r : rows) {
    const double tps = static_cast<double>(r.tokens) / r.seconds;
    table.row({std::to_string(r.clients), std::to_string(r.errors),
               fixed(static_cast<double>(o.requests) / r.seconds, 2), fixed(tps, 0),
               fixed(tps / generate_tps, 2), fixed(r.ttft_p50, 1), fixed(r.ttft_p95, 1),
               fixed(r.tok_p50, 2), fixed(r.tok_p95, 2)});
  }
}

}  // namespace lol::bench
#endif  // LOL_HAVE_HTTPLIB
