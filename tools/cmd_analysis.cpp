// lol route | path extract: read the routes a model takes over labelled sequences, and the mode
// path of each label (docs/analysis.md).
#include <fstream>
#include <functional>
#include <iostream>

#include "analysis/paths.h"
#include "analysis/probes.h"
#include "analysis/routes.h"
#include "analysis/stats.h"
#include "commands.h"
#include "model/checkpoint.h"
#include "util/files.h"
#include "util/progress.h"

namespace lol::cli {

void add_route_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  auto* cmd = app.add_subcommand(
      "route", "record the routes of labelled sequences (teacher-forced) as JSON lines");
  struct Opts {
    std::string model, task, data, out;
    int64_t count = 100, batch_size = 16;
    uint64_t seed = 0;
    int size = 8;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "model or training run directory")->required();
  cmd->add_option("--task", o->task,
                  "sudoku or maze: held-out puzzles, every strategy, labelled by strategy")
      ->check(CLI::IsMember({"sudoku", "maze"}));
  cmd->add_option("--count", o->count, "task: puzzles (each gives five sequences)")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--seed", o->seed, "task: generator seed")->capture_default_str();
  cmd->add_option("--size", o->size, "task maze: side n")->capture_default_str();
  cmd->add_option("--data", o->data,
                  "labelled set: a TSV file of label<TAB>comma-separated ids per line");
  cmd->add_option("--batch-size", o->batch_size, "sequences per forward pass")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--out", o->out, "route file (JSON lines, docs/analysis.md)")->required();
  commands.emplace_back(cmd, [o] {
    LOL_CHECK(o->task.empty() != o->data.empty(), "give exactly one of --task and --data");
    const auto device = selected_device();
    auto model = load_model(o->model, device);
    const auto& config = model->config();
    auto source = o->task.empty() ? tsv_sequences(o->data, config.vocab_size)
                                  : task_sequences(o->task, o->size, o->count, o->seed);
    RouteFileHeader header{resolve_model_dir(o->model), source->describe(), config.core_depth,
                           config.library_size, source->size()};
    AtomicWriter out(o->out);
    out.write(header.to_json().dump() + "\n");
    Progress progress("route", source->size());
    install_interrupt_handler();
    ExtractOptions options;
    options.batch_size = o->batch_size;
    options.on_progress = [&](int64_t done) {
      progress.update(done, "sequences");
      LOL_CHECK(!interrupt_requested(), "interrupted; ", o->out, " was not written");
    };
    extract_routes(model, *source, options,
                   [&](SequenceRoutes&& s) { out.write(s.to_json().dump() + "\n"); });
    out.commit();
    progress.finish("wrote the routes of " + std::to_string(source->size()) + " sequences to " +
                    o->out);
  });
}

namespace {
// Reads the route file at `path` line by line: `begin` sees its header, `visit` each sequence.
// A file without a sequence is an error.
void read_route_file(const std::string& path,
                     const std::function<void(const RouteFileHeader&)>& begin,
                     const std::function<void(const SequenceRoutes&)>& visit) {
  std::ifstream in(path);
  LOL_CHECK(in.good(), path, ": cannot open");
  RouteReader reader(in, path);
  begin(reader.header());
  int64_t count = 0;
  for (; auto s = reader.next(); ++count) visit(*s);
  LOL_CHECK(count > 0, path, ": holds no sequence");
}
}  // namespace

void add_path_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  auto* path = app.add_subcommand("path", "mode paths of labelled routes");
  path->require_subcommand(1);
  struct Opts {
    std::string routes, out;
  };
  auto o = std::make_shared<Opts>();
  auto* extract = path->add_subcommand("extract",
                                       "one forced-path file per label: the argmax of the mean "
                                       "router probabilities per (depth, window)");
  extract->add_option("routes", o->routes, "route file written by lol route")->required();
  extract->add_option("--out", o->out, "directory for LABEL.json files")->required();
  commands.emplace_back(extract, [o] {
    RouteFileHeader header;
    ModePathBuilder builder;
    read_route_file(
        o->routes, [&](const RouteFileHeader& h) { header = h; },
        [&](const SequenceRoutes& s) { builder.add(s); });
    const auto paths = builder.paths();
    make_directories(o->out);
    std::cout << "mode paths of " << header.sequences << " sequences (" << header.source
              << "), experts per depth at window 1:\n";
    for (const auto& p : paths) {
      write_file_atomic(o->out + "/" + label_file_name(p.label) + ".json",
                        p.to_json().dump(2) + "\n");
      std::cout << "  " << p.label << " (" << p.sequences << "):";
      for (const auto& [depth, entries] : p.path.depths) {
        const auto* e = p.path.find(depth, 1);
        std::cout << " " << (e && e->expert ? std::to_string(*e->expert) : "-");
      }
      std::cout << "\n";
    }
    std::cout << "wrote " << paths.size() << " paths to " << o->out << "\n";
  });

  struct StatsOpts {
    std::string routes, json_out;
  };
  auto so = std::make_shared<StatsOpts>();
  auto* stats = path->add_subcommand("stats",
                                     "expert utilisation, distinct experts per path against the "
                                     "uniform null, mode-path agreement, margins");
  stats->add_option("routes", so->routes, "route file written by lol route")->required();
  stats->add_option("--json", so->json_out, "also write every statistic as JSON to this file");
  commands.emplace_back(stats, [so] {
    std::unique_ptr<RouteStatsBuilder> builder;
    read_route_file(
        so->routes,
        [&](const RouteFileHeader& h) {
          builder = std::make_unique<RouteStatsBuilder>(h.core_depth, h.library_size);
        },
        [&](const SequenceRoutes& s) { builder->add(s); });
    const auto result = builder->finish();
    std::cout << result.to_text();
    if (!so->json_out.empty()) write_file_atomic(so->json_out, result.to_json().dump(2) + "\n");
  });

  struct ProbeOpts {
    std::string routes, json_out;
    ProbeOptions probe;
  };
  auto po = std::make_shared<ProbeOpts>();
  auto* probe = path->add_subcommand("probe",
                                     "ridge probes of the label on router probabilities (window "
                                     "and sequence level), cross-validated AUROC");
  probe->add_option("routes", po->routes, "route file written by lol route")->required();
  probe->add_option("--folds", po->probe.folds, "cross-validation folds (split by sequence)")
      ->capture_default_str()
      ->check(at_least(2));
  probe->add_option("--shuffles", po->probe.shuffles, "label permutations for the chance control")
      ->capture_default_str()
      ->check(at_least(0));
  probe->add_option("--lambda", po->probe.lambda, "ridge penalty")->capture_default_str();
  probe->add_option("--seed", po->probe.seed, "fold and permutation seed")->capture_default_str();
  probe->add_option("--json", po->json_out, "also write the results as JSON to this file");
  commands.emplace_back(probe, [po] {
    std::unique_ptr<ProbeData> data;
    read_route_file(
        po->routes,
        [&](const RouteFileHeader& h) {
          data = std::make_unique<ProbeData>(h.core_depth, h.library_size);
        },
        [&](const SequenceRoutes& s) { data->add(s); });
    json out = json::array();
    for (const char* level : {"window", "sequence"}) {
      const auto r = data->run(level, po->probe);
      std::cout << level << " level: AUROC " << r.auroc << " (" << r.samples << " samples, "
                << r.features << " features); labels shuffled: mean " << r.shuffled_mean << ", max "
                << r.shuffled_max << "\n";
      out.push_back(r.to_json());
    }
    if (!po->json_out.empty()) write_file_atomic(po->json_out, out.dump(2) + "\n");
  });
}

}  // namespace lol::cli
