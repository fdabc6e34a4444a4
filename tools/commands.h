#pragma once
// Each subcommand registers itself on the app and returns the callback that runs it.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "model/config.h"

namespace lol::cli {

struct GlobalOptions {
  int threads = 0;             // 0 = all cores
  std::string device = "cpu";  // cpu | cuda | cuda:N
};
GlobalOptions& global_options();
// The --device flag as a torch::Device, checked to exist on this machine.
torch::Device selected_device();

using Runner = std::function<void()>;

// Thrown by a command that a signal stopped early after it saved its work (lol train's
// checkpoint): the process exits with `status`, 128 + the signal as shells report a process the
// signal ended, so a script that chains stages does not take a cut-short run for a finished one.
struct StoppedBySignal {
  int status;
};
[[noreturn]] void stopped_by_signal();  // throws StoppedBySignal{128 + interrupt_signal()}

void add_init_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands);
void add_forward_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands);
void add_info_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands);
void add_bench_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands);
void add_data_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands);
void add_task_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands);
void add_generate_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands);
void add_train_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands);
void add_route_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands);
void add_path_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands);
void add_report_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands);
void add_compare_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands);
void add_tokenizer_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands);
void add_eval_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands);
void add_corpus_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands);
void add_serve_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands);

// --config FILE or --preset NAME with --set overrides: how init, info and train name a model.
struct ModelFlags {
  std::string config_file, preset;
  std::vector<std::string> overrides;
  bool given() const { return !config_file.empty() || !preset.empty() || !overrides.empty(); }
  ModelConfig resolve() const;  // exactly one of --config and --preset
};
void add_model_flags(CLI::App* cmd, ModelFlags& flags);

// A numeric flag's lower bound, with a plain message ("must be >= 0, got -1") where CLI11's
// own NonNegativeNumber prints the whole double range.
CLI::Validator at_least(int64_t minimum);

// "1,2,3" -> {1, 2, 3}; names the flag and the item that is not an integer.
std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& text);

}  // namespace lol::cli
