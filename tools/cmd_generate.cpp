// lol generate: continue prompts with the cached decoder; text in and out through the model's
// tokenizer (a task vocabulary, or comma-separated ids).
#include <algorithm>
#include <fstream>
#include <iostream>

#include "commands.h"
#include "infer/generate.h"
#include "model/checkpoint.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/files.h"
#include "util/progress.h"

namespace lol::cli {
namespace {

struct GenerateOptions {
  std::string model, prompt, tokens, prompts_file, router_only, force, routes_out, task;
  std::vector<std::string> stop_strings;
  std::vector<int64_t> stop_tokens;
  int64_t prompt_len = -1, max_tokens = -1, top_k = 0, batch_size = 32;
  double temperature = 0, top_p = 1;
  uint64_t seed = 0;
  bool echo = false;
};

}  // namespace

void add_generate_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  auto* cmd = app.add_subcommand("generate", "continue prompts with exact cached decoding");
  auto o = std::make_shared<GenerateOptions>();
  cmd->add_option("--model", o->model, "model directory")->required();
  cmd->add_option("--prompt", o->prompt, "prompt text in the model's tokenizer");
  cmd->add_option("--tokens", o->tokens, "prompt token ids, comma-separated");
  cmd->add_option("--prompts", o->prompts_file, "file with one prompt per line (text)");
  cmd->add_option("--task", o->task,
                  "sudoku or maze: text in that task's vocabulary (default: the task of the "
                  "model's training run, else comma-separated ids)")
      ->check(CLI::IsMember({"sudoku", "maze"}));
  cmd->add_option("--prompt-len", o->prompt_len,
                  "prompt window P (default: through ']' for task prompts, else 0)");
  cmd->add_flag("--echo", o->echo,
                "print each prompt before its continuation: whole sequences, as `lol task "
                "score` reads them");
  cmd->add_option("--router-only", o->router_only, "router-only prompt positions, comma-separated");
  cmd->add_option("--force", o->force, "forced path JSON (docs/formats.md)");
  cmd->add_option("--max-tokens", o->max_tokens,
                  "tokens to generate at most (-1: until a stop token, a stop string or the "
                  "model's max_seq_len)")
      ->capture_default_str()
      ->check(at_least(-1));
  cmd->add_option("--temperature", o->temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "sample from the k most likely (0 = off)")
      ->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "nucleus mass (1 = off)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "sampling seed")->capture_default_str();
  cmd->add_option("--stop-token", o->stop_tokens,
                  "stop after this token id (repeatable; tasks stop at <eos>)");
  cmd->add_option("--stop", o->stop_strings,
                  "stop when the generated text contains this string, and print it cut before "
                  "the string (repeatable)");
  cmd->add_option("--routes", o->routes_out, "write every routing decision as JSON lines");
  cmd->add_option(
         "--batch-size", o->batch_size,
         "sequences decoded at once; more prompts wait and join as others finish (0 = all at once)")
      ->capture_default_str()
      ->check(at_least(0));
  commands.emplace_back(cmd, [o] {
    const int given = !o->prompt.empty() + !o->tokens.empty() + !o->prompts_file.empty();
    LOL_CHECK(given == 1, "give exactly one of --prompt, --tokens and --prompts");
    const auto device = selected_device();
    auto model = load_model(o->model, device);
    const auto& config = model->config();
    const auto tokenizer = model_tokenizer(o->model, config.vocab_size, o->task);
    std::vector<std::string> lines;
    if (!o->prompts_file.empty()) {
      std::ifstream in(o->prompts_file);
      LOL_CHECK(in.good(), "--prompts: cannot open ", o->prompts_file);
      for (std::string line; std::getline(in, line);)
        if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);
      LOL_CHECK(!lines.empty(), "--prompts: ", o->prompts_file, " holds no prompt");
    } else {
      lines.push_back(o->prompt);
    }
    std::vector<Prompt> prompts;
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string where =
          o->prompts_file.empty() ? "--prompt" : o->prompts_file + " line " + std::to_string(i + 1);
      std::vector<int64_t> ids;
      if (!o->tokens.empty()) {
        ids = parse_int_list("--tokens", o->tokens);
      } else {
        try {
          ids = tokenizer->encode(lines[i]);
        } catch (const Error& e) {
          fail(where, ": ", e.what());
        }
      }
      LOL_CHECK(!ids.empty(), where, ": empty prompt");
      for (auto t : ids)
        LOL_CHECK(t >= 0 && t < config.vocab_size, where, ": token id ", t,
                  " is outside the vocabulary [0, ", config.vocab_size, ")");
      Prompt p = o->tokens.empty() ? tokenizer->prompt(ids) : Prompt{ids, 0, {}};
      if (o->prompt_len >= 0) p.prompt_len = o->prompt_len;
      if (!o->router_only.empty()) p.router_only = parse_int_list("--router-only", o->router_only);
      for (auto r : p.router_only)
        LOL_CHECK(r >= 0 && r < static_cast<int64_t>(p.tokens.size()), "--router-only: position ",
                  r, " is outside the prompt of ", p.tokens.size(), " tokens");
      LOL_CHECK(static_cast<int64_t>(p.tokens.size()) < config.max_seq_len, where, ": ",
                p.tokens.size(), " tokens leave no room under max_seq_len ", config.max_seq_len);
      prompts.push_back(p);
    }
    SamplingOptions sampling;
    sampling.temperature = o->temperature;
    sampling.top_k = o->top_k;
    sampling.top_p = o->top_p;
    sampling.seed = o->seed;
    sampling.max_tokens = o->max_tokens >= 0 ? o->max_tokens : config.max_seq_len;
    sampling.stop_tokens = o->stop_tokens;
    sampling.vocab_limit = tokenizer->vocab_size();  // never an id the text cannot show
    if (auto eos = tokenizer->eos()) sampling.stop_tokens.push_back(*eos);
    if (!o->stop_strings.empty())
      sampling.stop = [&](int64_t, const std::vector<int64_t>& generated) {
        return find_stop(tokenizer->continuation(generated), o->stop_strings) != std::string::npos;
      };
    ForcedPath force;
    const ForcedPath* force_ptr = nullptr;
    if (!o->force.empty()) {
      force = ForcedPath::load(o->force);
      force_ptr = &force;
    }
    BatchOptions batching;
    batching.max_batch = o->batch_size;
    std::unique_ptr<Progress> progress;
    if (prompts.size() > 1) {
      progress = std::make_unique<Progress>("generate", static_cast<int64_t>(prompts.size()));
      batching.on_finish = [&](int64_t finished) { progress->update(finished, "sequences"); };
    }
    auto results = generate(model, prompts, sampling, device, force_ptr, batching);
    if (progress) progress->finish(std::to_string(prompts.size()) + " sequences");
    std::string routes_text;
    for (size_t b = 0; b < results.size(); ++b) {
      const auto& g = results[b];
      // The continuation as it follows the prompt, cut before a stop string; alone, without
      // the separator its first piece has after a prompt (a task vocabulary's space).
      std::string text = tokenizer->continuation(g.tokens);
      text.resize(std::min(text.size(), find_stop(text, o->stop_strings)));
      if (o->echo) {
        text = tokenizer->decode(prompts[b].tokens) + text;
      } else if (!g.tokens.empty()) {
        const size_t separator = tokenizer->piece(g.tokens[0], false).size() -
                                 tokenizer->piece(g.tokens[0], true).size();
        text.erase(0, std::min(separator, text.size()));
      }
      std::cout << text << "\n";
      for (const auto& r : g.routes) routes_text += r.to_json().dump() + "\n";
    }
    if (!o->routes_out.empty()) write_file_atomic(o->routes_out, routes_text);
    // A sequence that reached the model's longest before the --max-tokens asked for, a stop
    // token or a stop string ends there; say so rather than leave it short unexplained.
    const auto cut = std::count_if(results.begin(), results.end(), [&](const auto& g) {
      return g.finish_reason == "length" && static_cast<int64_t>(g.tokens.size()) < o->max_tokens;
    });
    if (cut > 0)
      std::cerr << "lol generate: " << cut << " of " << results.size()
                << " sequences stopped at the model's max_seq_len of " << config.max_seq_len
                << " tokens, before --max-tokens " << o->max_tokens << "\n";
  });
}

}  // namespace lol::cli
