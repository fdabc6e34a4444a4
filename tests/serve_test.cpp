// The server: log-probabilities against the full forward, determinism under continuous
// batching, and (with cpp-httplib) the HTTP layer driven by a real client: streaming, bad
// requests, disconnects, the queue bound, authentication, routes and forcing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <thread>

#include "helpers.h"
#include "serve/api.h"
#include "serve/engine.h"
#include "tasks/task.h"
#include "text/bpe_train.h"
#include "text/subword.h"
#include "text/tokenizer.h"
#include "text/utf8.h"
#ifdef LOL_HAVE_HTTPLIB
#include <httplib.h>

#include "serve/http_server.h"
#endif

namespace lol {
namespace {

using serve::Engine;
using serve::EngineOptions;
using serve::Job;
using serve::Request;

// A small lol model with the maze vocabulary's room (the tokenizer's ids fit).
ModelConfig maze_config(int64_t context = 128) {
  auto c = testing::tiny_config();
  c.vocab_size = 160;
  c.window = 8;
  c.stride = 4;
  c.max_seq_len = context;
  return c;
}

// Held-out maze prompts (4x4, through "]") as token ids; each strategy in turn.
std::vector<std::vector<int64_t>> maze_prompts(int count) {
  tasks::TaskSource source(tasks::Kind::kMaze, 4, /*seed=*/3, /*split=*/1);
  std::vector<std::vector<int64_t>> out;
  for (int i = 0; i < count; ++i) {
    auto doc = source.next();
    out.emplace_back(doc.tokens.begin(), doc.tokens.begin() + doc.prompt_len);
  }
  return out;
}

void wait_finished(const std::shared_ptr<Job>& job) {
  while (!job->wait([](const Job& j) { return j.finished_locked(); }, std::chrono::seconds(1))) {
  }
  ASSERT_EQ(job->error(), "");
}

// Echoed prompt log-probabilities are the full forward's log-softmax at every prompt token,
// with the task's prompt window and router-only descriptor; a greedy token's log-probability
// is the top alternative's, the same float (lm-eval's greedy check compares them exactly).
TEST(GoldenServe, EchoLogprobsAreTheForwardLogSoftmax) {
  const auto c = maze_config();
  auto model = testing::make_model(c, 31);
  auto tokenizer = task_tokenizer("maze");
  Engine engine(model, testing::device(), EngineOptions{4, 8}, nullptr);
  for (const auto& ids : maze_prompts(3)) {
    Request r;
    r.prompt = tokenizer->prompt(ids);
    ASSERT_GT(r.prompt.prompt_len, 0);
    ASSERT_FALSE(r.prompt.router_only.empty());
    r.echo = true;
    r.logprobs = 3;
    r.sampling.max_tokens = 1;
    r.sampling.vocab_limit = tokenizer->vocab_size();
    auto job = engine.submit(r);
    wait_finished(job);

    torch::NoGradGuard no_grad;
    Layout layout(Batch::single(ids, r.prompt.prompt_len, r.prompt.router_only), c.vocab_size,
                  testing::device());
    auto lsm =
        torch::log_softmax(model->forward(layout, {}).logits.to(torch::kCPU, torch::kFloat32), 1);
    const auto prompt_lps = job->prompt_logprobs();
    ASSERT_EQ(prompt_lps.size(), ids.size());
    for (size_t t = 1; t < ids.size(); ++t) {
      const auto row = lsm[static_cast<int64_t>(t) - 1];
      EXPECT_NEAR(prompt_lps[t].logprob, row[ids[t]].item<float>(), 1e-5) << "token " << t;
      ASSERT_EQ(prompt_lps[t].top.size(), 3u);
      EXPECT_NEAR(prompt_lps[t].top[0].second,
                  row.narrow(0, 0, tokenizer->vocab_size()).max().item<float>(), 1e-5);
    }
    const auto choice = job->choices()[0];
    ASSERT_EQ(choice.tokens.size(), 1u);
    const auto last =
        lsm[static_cast<int64_t>(ids.size()) - 1].narrow(0, 0, tokenizer->vocab_size());
    EXPECT_EQ(choice.tokens[0], last.argmax().item<int64_t>());
    EXPECT_NEAR(choice.logprobs[0].logprob, last.max().item<float>(), 1e-5);
    EXPECT_EQ(choice.logprobs[0].logprob, choice.logprobs[0].top[0].second);
  }
}

// Eight requests (sampled, each its own seed, some forced) give the same tokens and routes
// whether they run one at a time or all together in one batch.
TEST(ServeEngine, SameSeedSameTokensWhateverElseRuns) {
  const auto c = maze_config();
  auto model = testing::make_model(c, 32);
  auto tokenizer = task_tokenizer("maze");
  auto force = std::make_shared<ForcedPath>();
  for (int64_t l = 1; l <= c.core_depth; ++l) force->depths[l][1] = {l % c.library_size, 0.6};
  std::vector<Request> requests;
  const auto prompts = maze_prompts(8);
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request r;
    r.prompt = tokenizer->prompt(prompts[i]);
    r.sampling.temperature = 0.9;
    r.sampling.seed = 100 + i;
    r.sampling.max_tokens = 12 + 3 * static_cast<int64_t>(i);  // rows leave at different steps
    r.sampling.vocab_limit = tokenizer->vocab_size();
    r.n = i == 5 ? 2 : 1;
    if (i % 3 == 1) r.force = force;
    requests.push_back(r);
  }
  auto run = [&](int64_t parallel, bool all_at_once) {
    Engine engine(model, testing::device(), EngineOptions{parallel, 64}, nullptr);
    std::vector<std::vector<serve::Choice>> out;
    std::vector<std::shared_ptr<Job>> jobs;
    for (const auto& r : requests) {
      jobs.push_back(engine.submit(r));
      if (!all_at_once) wait_finished(jobs.back());
    }
    for (auto& j : jobs) {
      wait_finished(j);
      out.push_back(j->choices());
    }
    return out;
  };
  const auto alone = run(2, false), together = run(8, true);
  for (size_t i = 0; i < requests.size(); ++i)
    for (size_t k = 0; k < alone[i].size(); ++k) {
      EXPECT_EQ(together[i][k].tokens, alone[i][k].tokens) << "request " << i << " choice " << k;
      EXPECT_EQ(together[i][k].finish_reason, alone[i][k].finish_reason);
      ASSERT_EQ(together[i][k].routes.size(), alone[i][k].routes.size());
      for (size_t w = 0; w < alone[i][k].routes.size(); ++w)
        EXPECT_EQ(together[i][k].routes[w].expert, alone[i][k].routes[w].expert);
      if (requests[i].force)
        for (const auto& r : together[i][k].routes)
          if (r.window >= 1) {
            EXPECT_EQ(r.expert, r.depth % c.library_size);
          }
    }
  // The two choices of request 5 sample differently (their own generators).
  EXPECT_NE(together[5][0].tokens, together[5][1].tokens);
}

serve::ServedModel served(const ModelConfig& c, const Tokenizer& tok) {
  serve::ServedModel m;
  m.id = "test";
  m.config = &c;
  m.tokenizer = &tok;
  m.parallel = 4;
  return m;
}

// Bad fields are refused naming the field; unknown fields are ignored.
TEST(ServeApi, RefusesBadFieldsByName) {
  const auto c = maze_config();
  auto tok = task_tokenizer("maze");
  const auto m = served(c, *tok);
  const std::string prompt = tok->decode(maze_prompts(1)[0]);
  auto param_of = [&](json body) -> std::string {
    try {
      serve::parse_completion(body, m, false);
    } catch (const serve::ApiError& e) {
      EXPECT_EQ(e.status, 400);
      return e.param;
    }
    return "(accepted)";
  };
  EXPECT_EQ(param_of({{"prompt", prompt}, {"unknown_field", 3}}), "(accepted)");
  EXPECT_EQ(param_of({{"prompt", prompt}, {"temperature", -1}}), "temperature");
  EXPECT_EQ(param_of({{"prompt", prompt}, {"top_p", 0}}), "top_p");
  EXPECT_EQ(param_of({{"prompt", prompt}, {"max_tokens", -1}}), "max_tokens");
  EXPECT_EQ(param_of({{"prompt", prompt}, {"max_tokens", 2.5}}), "max_tokens");
  EXPECT_EQ(param_of({{"prompt", prompt}, {"n", 5}}), "n");  // above --parallel 4
  EXPECT_EQ(param_of({{"prompt", prompt}, {"logprobs", 21}}), "logprobs");
  EXPECT_EQ(param_of({{"prompt", prompt}, {"stop", {1, 2}}}), "stop");
  EXPECT_EQ(param_of({{"prompt", "Q : nowhere"}}), "prompt");
  EXPECT_EQ(param_of({{"prompt", json::array({1, 2, 160})}}), "prompt");
  EXPECT_EQ(param_of({{"prompt", json::array()}}), "prompt");
  EXPECT_EQ(param_of({{"prompt", prompt},
                      {"force", {{"entries", {{{"depth", 9}, {"window", 0}, {"expert", 0}}}}}}}),
            "force");
  EXPECT_EQ(param_of({{"max_tokens", 3}}), "prompt");
  // Every prompt form lm-eval and the clients send.
  const auto ids = tok->encode(prompt);
  for (const json& p :
       {json(prompt), json::array({prompt, prompt}), json(ids), json::array({ids, ids})}) {
    auto call = serve::parse_completion({{"prompt", p}}, m, false);
    for (const auto& r : call.requests) EXPECT_EQ(r.prompt.tokens, ids);
  }
}

// A byte-level BPE without merges makes every byte a token, so a streamed character arrives in
// pieces: every delta must still be whole UTF-8, and the deltas must add up to the text.
TEST(ServeApi, StreamedBytesAreReleasedAsWholeCharacters) {
  BpeTrainOptions o;
  o.vocab_size = 258;  // the 256 bytes and two special tokens: no merges
  const auto tok = train_bpe({"x"}, o);
  ModelConfig c = maze_config();
  c.vocab_size = 258;
  const auto m = served(c, *tok);
  const std::string text = "a東😀é!";
  auto call = serve::parse_completion({{"prompt", "q"}, {"stream", true}}, m, false);
  serve::Job job(call.requests[0]);
  serve::Choice choice;
  serve::StreamState state;
  std::string streamed;
  for (unsigned char byte : text) {
    choice.tokens.push_back(byte);
    if (choice.tokens.size() == text.size()) choice.finish_reason = "stop";
    const auto chunk = serve::stream_chunk(call, job, choice, 0, state, m, "id", 0);
    if (chunk.is_null()) continue;
    const auto delta = chunk["choices"][0]["text"].get<std::string>();
    EXPECT_TRUE(valid_utf8(delta))
        << "a delta cut a character after " << choice.tokens.size() << " bytes";
    streamed += delta;
  }
  EXPECT_EQ(streamed, text);
}

#ifdef LOL_HAVE_HTTPLIB

// A server on a free loopback port with a small maze model, listening on its own thread.
class TestServer {
 public:
  // `context`: the model's max_seq_len (long for requests that must still be running later).
  explicit TestServer(serve::ServerOptions options = {}, int64_t context = 128) {
    options.host = "127.0.0.1";
    options.port = 0;
    server_ = std::make_unique<serve::HttpServer>(options);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->listen(); });
    server_->attach(testing::make_model(maze_config(context), 33), testing::device(),
                    task_tokenizer("maze"), "test");
  }
  ~TestServer() {
    server_->stop(std::chrono::milliseconds(0));
    thread_.join();
  }
  int port() const { return port_; }
  httplib::Client client() const {
    httplib::Client cli("127.0.0.1", port_);
    cli.set_read_timeout(30, 0);
    return cli;
  }
  serve::HttpServer& server() { return *server_; }

 private:
  std::unique_ptr<serve::HttpServer> server_;
  int port_ = 0;
  std::thread thread_;
};

std::string maze_text(int i = 0) {
  return task_tokenizer("maze")->decode(maze_prompts(i + 1)[static_cast<size_t>(i)]);
}

// The text of a streamed completion: every "data:" chunk's choice text, until [DONE].
std::string sse_text(const std::string& body, bool* done) {
  std::string text;
  *done = false;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    const std::string payload = body.substr(at + 6, end - at - 6);
    at = end;
    if (payload == "[DONE]") {
      *done = true;
      break;
    }
    const json chunk = json::parse(payload);
    for (const auto& c : chunk["choices"])
      text += c.contains("text") ? c["text"].get<std::string>()
                                 : c["delta"].value("content", std::string());
  }
  return text;
}

// A raw connection that sends a request and can be dropped mid-response.
int open_request(int port, const std::string& body) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
      "application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  EXPECT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  return fd;
}

// Reads the response on `fd` until `marker` has arrived (false if the connection ends first).
bool read_until(int fd, const std::string& marker) {
  std::string got;
  char buf[512];
  while (got.find(marker) == std::string::npos) {
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    got.append(buf, static_cast<size_t>(n));
  }
  return true;
}

TEST(ServeHttp, StreamedTextEqualsTheWholeResponse) {
  TestServer server;
  auto cli = server.client();
  // Greedy, sampled, cut at a stop string (" r" begins most maze tokens), and echoed.
  for (const json& sampling : {json{{"temperature", 0}}, json{{"temperature", 1.0}, {"seed", 7}},
                               json{{"temperature", 1.0}, {"seed", 8}, {"stop", {" r", "A :"}}},
                               json{{"temperature", 0}, {"echo", true}}}) {
    for (bool chat : {false, true}) {
      if (chat && sampling.contains("echo")) continue;
      json body = sampling;
      body["max_tokens"] = 30;
      if (chat)
        body["messages"] = {{{"role", "user"}, {"content", maze_text()}}};
      else
        body["prompt"] = maze_text();
      const char* path = chat ? "/v1/chat/completions" : "/v1/completions";
      auto whole = cli.Post(path, body.dump(), "application/json");
      ASSERT_TRUE(whole);
      ASSERT_EQ(whole->status, 200) << whole->body;
      const json w = json::parse(whole->body);
      const std::string expected = chat ? w["choices"][0]["message"]["content"].get<std::string>()
                                        : w["choices"][0]["text"].get<std::string>();
      if (sampling.contains("stop")) {
        EXPECT_EQ(expected.find(" r"), std::string::npos) << expected;  // cut before the stop
        EXPECT_EQ(w["choices"][0]["finish_reason"], "stop");
      } else {
        EXPECT_FALSE(expected.empty());
      }
      if (sampling.contains("echo")) {
        EXPECT_EQ(expected.rfind(maze_text(), 0), 0u);
      }
      body["stream"] = true;
      auto streamed = cli.Post(path, body.dump(), "application/json");
      ASSERT_TRUE(streamed);
      ASSERT_EQ(streamed->status, 200);
      EXPECT_EQ(streamed->get_header_value("Content-Type"), "text/event-stream");
      bool done = false;
      EXPECT_EQ(sse_text(streamed->body, &done), expected) << (chat ? "chat" : "completions");
      EXPECT_TRUE(done);
    }
  }
}

// At least 300 malformed requests: each gets a 4xx with a JSON error, never a crash, and the
// server answers a good request correctly afterwards.
TEST(ServeHttp, MalformedRequestCorpusGets4xx) {
  serve::ServerOptions options;
  options.max_body_bytes = 1 << 16;
  TestServer server(options);
  auto cli = server.client();
  const std::string prompt = maze_text();
  const json good = {{"prompt", prompt}, {"max_tokens", 3}, {"temperature", 0}};
  struct Case {
    std::string method, path, body;
  };
  std::vector<Case> cases;
  auto post = [&](const std::string& path, const std::string& body) {
    cases.push_back({"POST", path, body});
  };
  // Every prefix of a good body is broken JSON.
  const std::string text = good.dump();
  for (size_t n = 0; n < text.size(); ++n) post("/v1/completions", text.substr(0, n));
  for (const char* b : {"[]", "1", "\"s\"", "null", "true", "{\"prompt\": }", "{'prompt': 'x'}",
                        "{\"prompt\": \"\\ud800\"}", "\xff\xfe{}"})
    post("/v1/completions", b);
  // Wrong values for each field.
  const std::vector<std::pair<std::string, std::vector<json>>> bad_values = {
      {"prompt",
       {1, true, json::object(), json::array(), json::array({json::array()}), json::array({-1}),
        json::array({160}), json::array({1.5}),
        json::array({json::array({1}), json::array({2, "x"})}), json::array({"Q", 3}), "",
        "Q : nowhere", "  ", json::array({json::object()})}},
      {"max_tokens", {-1, 1.5, "3", true, json::array(), json::object(), -1000000, 2000000000}},
      {"temperature", {-0.1, "hot", true, json::array(), json::object(), -1e300}},
      {"top_p", {0, 1.5, -1, "x", true, json::array()}},
      {"top_k", {-2, 2.5, "x", true, json::array()}},
      {"seed", {1.5, "x", true, json::array(), json::object()}},
      {"n", {0, -1, 9, 1.5, "x", true, 1000}},
      {"echo", {1, "yes", json::array(), json::object()}},
      {"logprobs", {-1, 21, 1.5, "x", json::array()}},
      {"stop",
       {1, json::array({1}), "", json::array({""}), json::object(),
        json::array({"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p",
                     "q"})}},
      {"stream", {1, "true", json::array()}},
      {"stream_options", {1, "x", json::array(), json{{"include_usage", "yes"}}}},
      {"routes", {1, "yes", json::object()}},
      {"force",
       {1, "x", json::array(), json::object({{"entries", 1}}),
        json{{"entries", {{{"depth", 0}, {"window", 0}, {"expert", 0}}}}},
        json{{"entries", {{{"depth", 1}, {"window", 0}, {"expert", 9}}}}},
        json{{"entries", {{{"depth", 1}, {"window", -1}, {"expert", 0}}}}},
        json{{"entries", {{{"depth", 1}, {"window", 0}, {"gate", "x"}}}}},
        json{{"entries", {{{"depth", 1}, {"window", 0}, {"colour", 2}}}}}}},
      {"model", {1, true, json::array()}},
      {"best_of", {0, 3, "x"}},
      {"presence_penalty", {0.5, "x"}},
      {"frequency_penalty", {-0.5, json::array()}},
      {"logit_bias", {json{{"3", 10}}, 1}},
      {"suffix", {"tail", 1}}};
  for (const auto& [name, values] : bad_values)
    for (const auto& v : values) {
      json body = good;
      body[name] = v;
      post("/v1/completions", body.dump());
    }
  // A prompt longer than the context (128).
  {
    json body = good;
    body["prompt"] = std::vector<int64_t>(129, 5);
    post("/v1/completions", body.dump());
  }
  // Chat, tokenizer endpoints, methods and paths.
  for (const json& messages :
       {json(nullptr), json(1), json::array(), json::array({1}), json::array({{{"content", "x"}}}),
        json::array({{{"role", "user"}, {"content", 1}}}),
        json::array({{{"role", "assistant"}, {"content", prompt}}}),
        json::array({{{"role", "user"}, {"content", json::array({{{"type", "image"}}})}}}),
        json::array({{{"role", "user"}, {"content", json::array({{{"type", 5}, {"text", "x"}}})}}}),
        json::array({{{"role", "user"}, {"content", ""}}})})
    post("/v1/chat/completions", json{{"messages", messages}}.dump());
  for (const json& b : {json::object(), json{{"prompt", 1}}, json{{"prompt", "Q : nowhere"}},
                        json{{"prompt", "Q"}, {"add_special_tokens", "x"}}})
    post("/tokenize", b.dump());
  for (const json& b : {json::object(), json{{"tokens", "x"}}, json{{"tokens", {-1}}},
                        json{{"tokens", {159}}}, json{{"tokens", {1.5}}}, json{{"tokens", {1e30}}}})
    post("/detokenize", b.dump());
  cases.push_back({"GET", "/v1/completions", ""});
  cases.push_back({"GET", "/nowhere", ""});
  cases.push_back({"POST", "/v1/nowhere", "{}"});
  cases.push_back({"DELETE", "/v1/models", ""});
  post("/v1/completions", std::string((1 << 16) + 10, ' '));  // over --max-body: 413

  ASSERT_GE(cases.size(), 300u);
  std::cout << cases.size() << " malformed requests\n";
  for (const auto& k : cases) {
    httplib::Result res = k.method == "POST"  ? cli.Post(k.path.c_str(), k.body, "application/json")
                          : k.method == "GET" ? cli.Get(k.path.c_str())
                                              : cli.Delete(k.path.c_str());
    ASSERT_TRUE(res) << k.method << " " << k.path << " " << k.body.substr(0, 200);
    EXPECT_GE(res->status, 400) << k.body.substr(0, 200);
    EXPECT_LT(res->status, 500) << k.body.substr(0, 200) << " -> " << res->body;
    const json e = json::parse(res->body, nullptr, false);
    EXPECT_TRUE(e.is_object() && e.contains("error") && e["error"]["message"].is_string())
        << k.path << " " << k.body.substr(0, 120) << " -> " << res->body;
  }
  auto health = cli.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto ok = cli.Post("/v1/completions", good.dump(), "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(json::parse(ok->body)["usage"]["completion_tokens"], 3);
}

// A client that goes away mid-stream: its sequence leaves the batch and the server goes on.
TEST(ServeHttp, ClientThatDisconnectsMidStreamIsDropped) {
  TestServer server({}, /*context=*/4096);
  json body = {{"prompt", maze_text()}, {"max_tokens", 100000}, {"stream", true},
               {"temperature", 1.0},    {"ignore_eos", true},   {"seed", 1}};
  const int fd = open_request(server.port(), body.dump());
  ASSERT_TRUE(read_until(fd, "data: "));  // tokens are flowing
  auto& metrics = server.server().metrics();
  for (int i = 0; i < 200 && metrics.value("lol_batch_size") != 1; ++i)  // set after the token
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(metrics.value("lol_batch_size"), 1);
  ::close(fd);
  for (int i = 0; i < 200 && metrics.value("lol_batch_size") != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  EXPECT_EQ(metrics.value("lol_batch_size"), 0);
  EXPECT_LT(metrics.value("lol_generated_tokens_total"), 3000);  // dropped, not run to the end
  auto cli = server.client();
  auto ok = cli.Post("/v1/completions", json{{"prompt", maze_text()}, {"max_tokens", 2}}.dump(),
                     "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

// A full queue answers 429 at once.
TEST(ServeHttp, FullQueueAnswers429) {
  serve::ServerOptions options;
  options.engine = EngineOptions{1, 0};
  TestServer server(options, /*context=*/4096);
  json body = {{"prompt", maze_text()}, {"max_tokens", 100000}, {"stream", true},
               {"ignore_eos", true},    {"temperature", 1.0},   {"seed", 1}};
  const int fd = open_request(server.port(), body.dump());
  ASSERT_TRUE(read_until(fd, "data: "));
  auto cli = server.client();
  auto refused =
      cli.Post("/v1/completions", json{{"prompt", maze_text()}}.dump(), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 429) << refused->body;
  ::close(fd);
}

// The server listens before the model is loaded and says so.
TEST(ServeHttp, HealthIs503UntilTheModelIsLoaded) {
  serve::ServerOptions options;
  options.port = 0;
  serve::HttpServer server(options);
  const int port = server.bind();
  std::thread listener([&] { server.listen(); });
  httplib::Client cli("127.0.0.1", port);
  auto loading = cli.Get("/health");
  ASSERT_TRUE(loading);
  EXPECT_EQ(loading->status, 503);
  EXPECT_NE(loading->body.find("loading"), std::string::npos);
  auto early =
      cli.Post("/v1/completions", json{{"prompt", maze_text()}}.dump(), "application/json");
  ASSERT_TRUE(early);
  EXPECT_EQ(early->status, 503);
  server.attach(testing::make_model(maze_config(), 33), testing::device(), task_tokenizer("maze"),
                "test");
  auto ready = cli.Get("/health");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  server.stop(std::chrono::milliseconds(0));
  listener.join();
}

// A client that sends half a request and stalls is dropped after --timeout; others go on.
TEST(ServeHttp, SlowClientIsDropped) {
  serve::ServerOptions options;
  options.io_timeout_seconds = 1;
  TestServer server(options);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string partial =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{";
  ASSERT_EQ(::send(fd, partial.data(), partial.size(), 0), static_cast<ssize_t>(partial.size()));
  const auto start = std::chrono::steady_clock::now();
  char buf[256];
  const auto n = ::recv(fd, buf, sizeof buf, 0);  // returns when the server gives up on it
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::close(fd);
  EXPECT_LT(waited, 10.0) << "received " << n;
  auto cli = server.client();
  auto ok = cli.Get("/health");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST(ServeHttp, ApiKeyIsRequiredWhenSet) {
  serve::ServerOptions options;
  options.api_key = "sesame";
  TestServer server(options);
  auto cli = server.client();
  auto health = cli.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto refused = cli.Get("/v1/models");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401);
  auto wrong = cli.Get("/v1/models", {{"Authorization", "Bearer wrong"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  auto page = cli.Get("/");  // the explorer page is open; its API calls send the key
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  auto ok = cli.Get("/v1/models", {{"Authorization", "Bearer sesame"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

// routes: true gives every read token's window route at every depth; force pins them, and the
// metrics count windows per expert.
TEST(ServeHttp, RoutesAndForcedPaths) {
  TestServer server;
  auto cli = server.client();
  const auto c = maze_config();
  json body = {{"prompt", maze_text()},
               {"max_tokens", 20},
               {"temperature", 0},
               {"routes", true},
               {"ignore_eos", true}};
  auto free_run = cli.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(free_run);
  ASSERT_EQ(free_run->status, 200) << free_run->body;
  const json r = json::parse(free_run->body)["choices"][0]["routes"];
  const int64_t prompt_len = static_cast<int64_t>(maze_prompts(1)[0].size());
  ASSERT_EQ(static_cast<int64_t>(r.size()), prompt_len + 20);
  EXPECT_TRUE(r.back().is_null());  // the last token was never read
  for (int64_t t = 0; t < prompt_len + 19; ++t) {
    ASSERT_EQ(static_cast<int64_t>(r[t]["windows"].size()), c.core_depth) << "token " << t;
    EXPECT_EQ(r[t]["position"], t);
    for (const auto& w : r[t]["windows"]) EXPECT_FALSE(w["forced"].get<bool>());
  }
  json force = {{"entries", json::array()}};
  for (int64_t l = 1; l <= c.core_depth; ++l)
    force["entries"].push_back({{"depth", l}, {"window", 0}, {"expert", 1}});
  body["force"] = force;
  auto forced = cli.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(forced);
  ASSERT_EQ(forced->status, 200) << forced->body;
  const json f = json::parse(forced->body)["choices"][0]["routes"];
  for (int64_t t = 0; t < prompt_len + 19; ++t)
    for (const auto& w : f[t]["windows"]) {
      EXPECT_EQ(w["expert"], 1) << "token " << t;
      EXPECT_TRUE(w["forced"].get<bool>());
    }
  // The request counter is updated after a response is written: poll until both are in.
  std::string text;
  for (int i = 0; i < 100; ++i) {
    auto metrics = cli.Get("/metrics");
    ASSERT_TRUE(metrics);
    text = metrics->body;
    if (text.find("lol_requests_total{path=\"/v1/completions\",status=\"200\"} 2") !=
        std::string::npos)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_NE(text.find("lol_expert_windows_total{depth=\"1\",expert=\"1\"}"), std::string::npos);
  EXPECT_NE(text.find("lol_time_to_first_token_seconds_bucket"), std::string::npos);
  EXPECT_NE(text.find("lol_requests_total{path=\"/v1/completions\",status=\"200\"} 2"),
            std::string::npos)
      << text;
}

#endif  // LOL_HAVE_HTTPLIB

}  // namespace
}  // namespace lol
