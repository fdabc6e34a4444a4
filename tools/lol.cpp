// lol-engine: one binary, git-style subcommands over the library. Users run it through the
// `lol` launcher (tools/launcher/), which sets the thread runtimes' environment first.
#include <torch/torch.h>

#include <iostream>

#include "commands.h"
#include "train/distributed.h"
#include "util/error.h"
#include "util/runtime.h"
#include "util/version.h"

int main(int argc, char** argv) {
  CLI::App app{"lol: Library-of-Layers engine (train, run, inspect LoL models)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(lol::version()) + " (" + lol::git_commit() +
                                        "; data parallel: " + lol::Distributed::backends() + ")");
  auto& global = lol::cli::global_options();
  app.add_option("--device", global.device, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--threads", global.threads,
                 "compute threads for LibTorch and OpenBLAS (0 = all cores)")
      ->check(lol::cli::at_least(0));
  std::vector<std::pair<CLI::App*, lol::cli::Runner>> commands;
  lol::cli::add_init_command(app, commands);
  lol::cli::add_forward_command(app, commands);
  lol::cli::add_info_command(app, commands);
  lol::cli::add_train_command(app, commands);
  lol::cli::add_generate_command(app, commands);
  lol::cli::add_eval_command(app, commands);
  lol::cli::add_data_command(app, commands);
  lol::cli::add_task_command(app, commands);
  lol::cli::add_tokenizer_command(app, commands);
  lol::cli::add_corpus_command(app, commands);
  lol::cli::add_route_command(app, commands);
  lol::cli::add_path_command(app, commands);
  lol::cli::add_report_command(app, commands);
  lol::cli::add_compare_command(app, commands);
#ifdef LOL_HAVE_HTTPLIB
  lol::cli::add_serve_command(app, commands);
#endif
  lol::cli::add_bench_command(app, commands);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success))
      return app.exit(e);  // --help, --version
    std::cerr << "lol: error: " << e.what() << " (see --help)\n";
    return 1;
  }
  try {
    lol::configure_runtime(global.threads);
    lol::cli::selected_device();  // a bad --device fails before any work, whatever the command
    for (auto& [sub, run] : commands)
      if (sub->parsed() && (sub->get_subcommands().empty())) run();
  } catch (const lol::cli::StoppedBySignal& stopped) {
    return stopped.status;  // what was saved and how to continue are printed already
  } catch (const lol::Error& e) {
    std::cerr << "lol: error: " << e.what() << "\n";
    return 1;
  } catch (const c10::Error& e) {
    std::cerr << "lol: error: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "lol: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
