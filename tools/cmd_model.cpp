// lol init | forward | info: create, run and describe models.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "analysis/weights.h"
#include "commands.h"
#include "model/checkpoint.h"
#include "model/stats.h"
#include "util/files.h"
#include "util/parse.h"

namespace lol::cli {

GlobalOptions& global_options() {
  static GlobalOptions options;
  return options;
}

torch::Device selected_device() {
  const auto& name = global_options().device;
  std::optional<torch::Device> device;
  try {
    device = torch::Device(name);
  } catch (const c10::Error&) {
    fail("--device: '", name, "' is not a device (use cpu, cuda or cuda:N)");
  }
  if (device->is_cuda())
    LOL_CHECK(torch::cuda::is_available() &&
                  device->index() < static_cast<int>(torch::cuda::device_count()),
              "--device: ", name, " is not available on this machine");
  return *device;
}

std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto value = parse_int(item);
    LOL_CHECK(value.has_value(), flag, ": '", item,
              "' is not an integer (expected a comma-separated list like 1,2,3)");
    out.push_back(*value);
  }
  return out;
}

ModelConfig ModelFlags::resolve() const {
  LOL_CHECK(config_file.empty() != preset.empty(), "give exactly one of --config and --preset");
  if (!config_file.empty()) {
    LOL_CHECK(path_exists(config_file), "--config: no such file ", config_file);
    return load_model_config(config_file, overrides);
  }
  return load_model_config(preset, overrides);
}

CLI::Validator at_least(int64_t minimum) {
  return CLI::Validator(
      [minimum](std::string& text) -> std::string {
        const auto value = parse_finite(text);
        if (!value) return "'" + text + "' is not a number";
        if (*value < static_cast<double>(minimum))
          return "must be >= " + std::to_string(minimum) + ", got " + text;
        return "";
      },
      "NUMBER>=" + std::to_string(minimum));
}

void add_model_flags(CLI::App* cmd, ModelFlags& flags) {
  cmd->add_option("--config", flags.config_file, "model config JSON file");
  cmd->add_option("--preset", flags.preset, "model preset from configs/ (tiny, maze-cpu, ...)");
  cmd->add_option("--set", flags.overrides,
                  "override a model config key: --set window=64 (repeatable)");
}

namespace {

std::string human(double value) {
  std::ostringstream out;
  const char* units[] = {"", "K", "M", "G", "T"};
  int u = 0;
  while (std::abs(value) >= 1000 && u < 4) {
    value /= 1000;
    ++u;
  }
  out << std::fixed << std::setprecision(u == 0 ? 0 : 2) << value << units[u];
  return out.str();
}

}  // namespace

void add_init_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  auto* cmd = app.add_subcommand("init", "write a randomly initialised model directory");
  struct Opts {
    ModelFlags model;
    std::string out;
    uint64_t seed = 0;
    bool overwrite = false;
  };
  auto o = std::make_shared<Opts>();
  add_model_flags(cmd, o->model);
  cmd->add_option("--seed", o->seed, "initialisation seed")->required();
  cmd->add_option("--out", o->out, "output model directory")->required();
  cmd->add_flag("--overwrite", o->overwrite, "replace an existing model in --out");
  commands.emplace_back(cmd, [o] {
    auto config = o->model.resolve();
    LOL_CHECK(o->overwrite || !path_exists(o->out + "/model.safetensors"), "--out: ", o->out,
              " already holds a model (pass --overwrite to replace it)");
    LanguageModel model(config);
    model->initialize(o->seed);
    save_model(model, o->out);
    auto stats = model_stats(config, config.max_seq_len);
    std::cout << "wrote " << o->out << ": " << enum_name(config.family) << " model, "
              << human(static_cast<double>(stats.stored_params)) << " parameters\n";
  });
}

void add_forward_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  auto* cmd = app.add_subcommand("forward", "full-sequence forward: logits and routes as JSON");
  struct Opts {
    std::string model, tokens, router_only, force, out;
    int64_t prompt_len = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "model directory")->required();
  cmd->add_option("--tokens", o->tokens, "token ids, comma-separated")->required();
  cmd->add_option("--prompt-len", o->prompt_len, "prompt window length P (0: none)")
      ->check(at_least(0));
  cmd->add_option("--router-only", o->router_only, "router-only positions, comma-separated");
  cmd->add_option("--force", o->force, "forced path JSON (docs/formats.md, forced paths)");
  cmd->add_option("--out", o->out, "output JSON file (docs/formats.md, forward output)")
      ->required();
  commands.emplace_back(cmd, [o] {
    auto tokens = parse_int_list("--tokens", o->tokens);
    LOL_CHECK(!tokens.empty(), "--tokens: give at least one token id");
    auto router_only = o->router_only.empty() ? std::vector<int64_t>{}
                                              : parse_int_list("--router-only", o->router_only);
    const auto device = selected_device();
    auto model = load_model(o->model, device);
    model->eval();
    const auto& config = model->config();
    LOL_CHECK(static_cast<int64_t>(tokens.size()) <= config.max_seq_len,
              "--tokens: ", tokens.size(), " tokens exceed the model's max_seq_len ",
              config.max_seq_len);
    ForcedPath force;
    ForwardOptions options;
    if (!o->force.empty()) {
      force = ForcedPath::load(o->force);
      const auto* routing = model->core().routing();
      LOL_CHECK(routing, "--force: a ", enum_name(config.family),
                " model has no window routes to force (family lol has)");
      routing->check(force);
      options.force = &force;
    }
    torch::NoGradGuard no_grad;
    Layout layout(Batch::single(tokens, o->prompt_len, router_only), config.vocab_size, device);
    auto result = model->forward(layout, options);
    auto logits = result.logits.to(torch::kCPU, torch::kFloat32).contiguous();
    json out;
    out["family"] = enum_name(config.family);
    out["tokens"] = tokens;
    out["prompt_len"] = o->prompt_len;
    out["router_only"] = router_only;
    out["vocab_size"] = config.vocab_size;
    json rows = json::array();
    const float* data = logits.data_ptr<float>();
    for (int64_t i = 0; i < logits.size(0); ++i)
      rows.push_back(
          std::vector<float>(data + i * logits.size(1), data + (i + 1) * logits.size(1)));
    out["logits"] = rows;
    json routes = json::array();
    for (const auto& r : result.routes)
      for (const auto& record : r.records(&layout)) routes.push_back(record.to_json());
    out["routes"] = routes;
    write_file_atomic(o->out, out.dump() + "\n");
  });
}

void add_info_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  auto* cmd = app.add_subcommand("info", "parameters, FLOPs per token and cache sizes");
  struct Opts {
    std::string model;
    ModelFlags flags;
    int64_t seq_len = 0;
    bool as_json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "model directory");
  add_model_flags(cmd, o->flags);
  cmd->add_option("--seq-len", o->seq_len,
                  "sequence length for attention FLOPs (default max_seq_len)");
  cmd->add_flag("--json", o->as_json, "print JSON");
  commands.emplace_back(cmd, [o] {
    ModelConfig config;
    if (!o->model.empty()) {
      LOL_CHECK(!o->flags.given(), "--model excludes --preset, --config and --set");
      config = load_model_config_from_dir(o->model);
    } else {
      config = o->flags.resolve();
    }
    const int64_t T = o->seq_len > 0 ? o->seq_len : config.max_seq_len;
    auto s = model_stats(config, T);
    json j = {{"family", enum_name(config.family)},
              {"seq_len", T},
              {"stored_params", s.stored_params},
              {"active_params", s.active_params},
              {"executed_blocks", s.executed_blocks},
              {"executed_matmul_params", s.executed_matmul_params},
              {"forward_flops_per_token", s.forward_flops_per_token},
              {"train_flops_per_token", s.train_flops_per_token},
              {"core_cache_bytes_per_sequence", s.core_cache_bytes},
              {"fixed_cache_bytes_per_token", s.fixed_cache_bytes_per_token},
              {"config", config.to_json()}};
    // What training made of the routing tensors, read without loading the blocks.
    RoutingWeights trained;
    if (!o->model.empty()) {
      trained = routing_weights(
          read_safetensors(resolve_model_dir(o->model) + "/model.safetensors", is_routing_weight));
      j.update(trained.to_json());
    }
    if (o->as_json) {
      std::cout << j.dump(2) << "\n";
      return;
    }
    std::cout << "family                 " << enum_name(config.family) << "\n"
              << "stored parameters      " << human(static_cast<double>(s.stored_params)) << "\n"
              << "active parameters      " << human(static_cast<double>(s.active_params))
              << " per token\n"
              << "executed blocks        " << s.executed_blocks << " per token\n"
              << "forward FLOPs          " << human(s.forward_flops_per_token)
              << " per token at length " << T << "\n"
              << "training FLOPs         " << human(s.train_flops_per_token) << " per token\n"
              << "core decode state      " << human(static_cast<double>(s.core_cache_bytes))
              << "B per sequence (constant in context)\n"
              << "prelude/coda KV cache  "
              << human(static_cast<double>(s.fixed_cache_bytes_per_token))
              << "B per token of context\n";
    if (trained.empty()) return;
    // One line per row: its name, then one figure per depth / expert.
    auto print_rows = [](const char* title, const std::string& about,
                         const std::vector<WeightRow>& rows, bool signed_figures, bool range) {
      if (rows.empty()) return;
      std::cout << std::left << std::setw(23) << title << about << "\n";
      for (const auto& [name, row] : rows) {
        std::cout << "  " << std::left << std::setw(21) << name << std::right << std::fixed
                  << std::setprecision(3) << (signed_figures ? std::showpos : std::noshowpos);
        for (double v : row) std::cout << " " << v;
        std::cout << std::noshowpos;
        if (range) std::cout << "  range " << std::setprecision(2) << value_range(row);
        std::cout << "\n";
      }
    };
    print_rows("balance bias",
               std::string("balance_space=") + enum_name(config.balance_space) +
                   "; range = largest - smallest",
               trained.balance_bias, true, true);
    if (config.balance_space == BalanceSpace::kProbs &&
        std::any_of(trained.balance_bias.begin(), trained.balance_bias.end(),
                    [](const WeightRow& r) { return bias_at_probability_limit(r.values); }))
      std::cout << "  (a range of 1 is the most a bias on the probabilities can do: the expert "
                   "lowest in it runs only where its probability leads by nearly 1; "
                   "balance_space=logits has no such limit)\n";
    // With the target the bias sets the threshold p_skip > sigmoid(-b) on the head's own
    // probability; otherwise it is added to the skip's balanced score.
    print_rows("skip bias",
               "router_skip_share=" + json(config.router_skip_share).dump() +
                   (config.router_skip_target ? "; skip where p_skip > sigmoid(-bias)" : "") +
                   (config.router_skip_window0 ? "" : "; not offered to window 0") +
                   (config.balance_per_depth ? "; per depth 1..D" : ""),
               trained.skip_bias, true, false);
    print_rows("FiLM", "rms over d_model per depth 1..D (0 at initialisation)", trained.film, false,
               false);
    print_rows("router depth vectors", "|e[l]| per depth 1..D", trained.depth_vectors, false,
               false);
    print_rows(
        "router rows",
        std::string("|R[m]| per expert 0..L-1") +
            (!config.router_skip       ? ""
             : config.router_skip_head ? ", then the skip head's (p_skip = sigmoid(z - log L))"
                                       : ", then the skip's") +
            " (logits scale with it)",
        trained.router_rows, false, false);
  });
}

}  // namespace lol::cli
