// lol serve: the OpenAI-compatible server (docs/serving.md).
#include <atomic>
#include <filesystem>
#include <iostream>
#include <thread>

#include "commands.h"
#include "model/checkpoint.h"
#include "serve/http_server.h"
#include "tasks/task.h"
#include "util/error.h"
#include "util/files.h"
#include "util/progress.h"
#include "util/runtime.h"

namespace lol::cli {
namespace {

// Prompts the explorer page offers: for a task model, one held-out puzzle with each strategy's
// descriptor and with the length-matched filler.
json example_prompts(const std::string& model_path, const Tokenizer& tokenizer) {
  json out = json::array();
  if (tokenizer.name().rfind("task:", 0) != 0) return out;
  tasks::TaskData data = model_task(model_path).value_or(tasks::TaskData{});
  data.kind = tasks::parse_kind(tokenizer.name().substr(5));
  tasks::TaskSource source(data.kind, data.maze_size, /*seed=*/0, /*split=*/1);
  std::vector<int64_t> question;
  for (int s = 1; s <= 5; ++s) {
    const auto doc = source.next();
    const std::vector<int64_t> prompt(doc.tokens.begin(), doc.tokens.begin() + doc.prompt_len);
    out.push_back({{"label", std::string(tasks::strategy_name(data.kind, s)) + " descriptor"},
                   {"prompt", tokenizer.decode(prompt)}});
    if (s == 1) {
      const auto open = std::find(prompt.begin(), prompt.end(), tokenizer.encode("[")[0]);
      question.assign(prompt.begin(), open);
    }
  }
  auto filler = tokenizer.encode(tasks::join_words(tasks::filler(data.kind, true)));
  question.insert(question.end(), filler.begin(), filler.end());
  out.push_back({{"label", "filler (no strategy named)"}, {"prompt", tokenizer.decode(question)}});
  return out;
}

}  // namespace

void add_serve_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with routes and forcing");
  struct Opts {
    std::string model, task, name, port_file;
    serve::ServerOptions server;
    double grace = 30;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "model directory or training run")->required();
  cmd->add_option("--host", o->server.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->server.port, "port (0: any free port, printed)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--parallel", o->server.engine.parallel, "sequences decoded at once")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--max-queue", o->server.engine.max_queue,
                  "requests waiting for a place; more get 429")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("--api-key", o->server.api_key, "require 'Authorization: Bearer KEY'");
  cmd->add_option("--task", o->task,
                  "sudoku or maze: the model's text vocabulary (default: from its training run, "
                  "else token ids)")
      ->check(CLI::IsMember({"sudoku", "maze"}));
  cmd->add_option("--name", o->name, "model id in the API (default: the directory's name)");
  cmd->add_option("--max-body", o->server.max_body_bytes, "largest request body in bytes")
      ->capture_default_str();
  cmd->add_option("--timeout", o->server.io_timeout_seconds,
                  "seconds a client may take to send or read")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--shutdown-grace", o->grace,
                  "seconds running requests get to finish on SIGTERM/SIGINT")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--port-file", o->port_file, "write the port here once listening (tests)");
  commands.emplace_back(cmd, [o] {
    // SIGTERM and SIGINT set a flag (whichever thread takes them); a watcher stops the server.
    install_interrupt_handler();
    const auto device = selected_device();
    if (global_options().threads == 0) configure_runtime(serve::default_serving_threads(device));
    const std::string dir = resolve_model_dir(o->model);
    const auto config = load_model_config_from_dir(dir);
    auto tokenizer = model_tokenizer(o->model, config.vocab_size, o->task);
    json examples = example_prompts(o->model, *tokenizer);
    std::string name = o->name;
    if (name.empty()) {
      auto p = std::filesystem::path(o->model).lexically_normal();
      if (p.filename().empty()) p = p.parent_path();
      name = p.filename().string();
    }
    serve::HttpServer server(o->server);
    const int port = server.bind();
    std::cerr << "lol serve: listening on http://" << o->server.host << ":" << port << " (model "
              << name << ", " << tokenizer->name() << " tokenizer, --parallel "
              << o->server.engine.parallel << ")" << std::endl;
    if (!o->port_file.empty()) write_file_atomic(o->port_file, std::to_string(port) + "\n");
    std::atomic<bool> ended{false};
    std::thread stopper([&server, &ended, grace = o->grace] {
      while (!ended && !interrupt_requested())
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (ended) return;  // the server already ended on its own
      std::cerr << "lol serve: interrupted: finishing running requests, then exiting" << std::endl;
      server.stop(std::chrono::milliseconds(static_cast<int64_t>(grace * 1000)));
    });
    std::thread listener([&server] { server.listen(); });
    auto finish = [&] {
      listener.join();
      ended = true;
      stopper.join();
    };
    try {
      server.attach(load_model(dir, device), device, std::move(tokenizer), name, examples);
    } catch (...) {
      server.stop(std::chrono::milliseconds(0));
      finish();
      throw;
    }
    std::cerr << "lol serve: model loaded, ready" << std::endl;
    finish();
    std::cerr << "lol serve: stopped" << std::endl;
  });
}

}  // namespace lol::cli
