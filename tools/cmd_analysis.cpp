// lol route | path extract | stats | probe | eval | report: read the routes a model takes over
// labelled sequences, the mode path of each label, what the routes encode, and what forcing them
// does (docs/analysis.md).
#include <algorithm>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "analysis/compare.h"
#include "analysis/depth_eval.h"
#include "analysis/path_eval.h"
#include "analysis/paths.h"
#include "analysis/probes.h"
#include "analysis/report.h"
#include "analysis/routes.h"
#include "analysis/stats.h"
#include "analysis/strategy_control.h"
#include "commands.h"
#include "model/checkpoint.h"
#include "text/subword.h"
#include "train/trainer.h"
#include "util/files.h"
#include "util/progress.h"

namespace lol::cli {

namespace {

// Where labelled sequences come from (lol route, lol path depth): held-out task puzzles or a
// labelled TSV set, exactly one of them.
struct LabelledFlags {
  std::string task, data;
  int64_t count;
  uint64_t seed;
  int size = 8;
  int64_t batch_size = 16;
};

void add_labelled_flags(CLI::App* cmd, LabelledFlags& f, const std::string& seed_help) {
  cmd->add_option("--task", f.task,
                  "sudoku or maze: held-out puzzles, every strategy, labelled by strategy")
      ->check(CLI::IsMember({"sudoku", "maze"}));
  cmd->add_option("--count", f.count,
                  "task: puzzles (each gives five sequences); corpus: sequences per label")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--seed", f.seed, seed_help)->capture_default_str();
  cmd->add_option("--size", f.size, "task maze: side n")->capture_default_str();
  cmd->add_option("--data", f.data,
                  "labelled set: corpus:DIR (its val chunks by label, --count per label), or a "
                  "TSV file of label<TAB>text per line (label<TAB>comma-separated ids for a model "
                  "without a text tokenizer)");
  cmd->add_option("--batch-size", f.batch_size, "sequences per forward pass")
      ->capture_default_str()
      ->check(at_least(1));
}

// `text`: the model's text tokenizer, if it has one (a TSV then holds text).
std::unique_ptr<LabelledSource> open_labelled(const LabelledFlags& f, int64_t vocab_size,
                                              const Tokenizer* text) {
  LOL_CHECK(f.task.empty() != f.data.empty(), "give exactly one of --task and --data");
  if (!f.task.empty()) return task_sequences(f.task, f.size, f.count, f.seed);
  if (f.data.rfind("corpus:", 0) == 0)
    return corpus_sequences(f.data.substr(7), "val", f.count, vocab_size);
  return tsv_sequences(f.data, vocab_size, text);
}

// The text tokenizer of a model (tokenizer.json in its run), or none.
std::unique_ptr<Tokenizer> text_tokenizer(const std::string& model) {
  const auto file = model_file(model, "tokenizer.json");
  if (!file) return nullptr;
  return SubwordTokenizer::load(*file);
}

}  // namespace

void add_route_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  auto* cmd = app.add_subcommand(
      "route", "record the routes of labelled sequences (teacher-forced) as JSON lines");
  struct Opts {
    std::string model, out;
    LabelledFlags source{"", "", 100, 0};
    double perturb = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "model or training run directory")->required();
  add_labelled_flags(cmd, o->source, "task generator and perturbation seed");
  cmd->add_option("--perturb", o->perturb,
                  "also route each window's router input plus noise of this relative size "
                  "(eps * rms of the input) and record whether the choice flips")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--out", o->out, "route file (JSON lines, docs/analysis.md)")->required();
  commands.emplace_back(cmd, [o] {
    const auto device = selected_device();
    auto model = load_model(o->model, device);
    const auto& config = model->config();
    const auto text = text_tokenizer(o->model);
    auto source = open_labelled(o->source, config.vocab_size, text.get());
    RouteFileHeader header;
    header.model = resolve_model_dir(o->model);
    header.source = source->describe();
    header.core_depth = config.core_depth;
    header.library_size = config.library_size;
    header.skip = config.router_skip;
    header.sequences = source->size();
    header.perturbation = o->perturb;
    AtomicWriter out(o->out);
    out.write(header.to_json().dump() + "\n");
    Progress progress("route", source->size());
    install_interrupt_handler();
    ExtractOptions options;
    options.batch_size = o->source.batch_size;
    options.perturbation = o->perturb;
    options.seed = o->source.seed;
    options.on_progress = [&](int64_t done) {
      progress.update(done, "sequences");
      LOL_CHECK(!interrupt_requested(), "interrupted; ", o->out, " was not written");
    };
    const int64_t cut = extract_routes(
        model, *source, options, [&](SequenceRoutes&& s) { out.write(s.to_json().dump() + "\n"); });
    out.commit();
    progress.finish("wrote the routes of " + std::to_string(source->size()) + " sequences to " +
                    o->out);
    if (cut > 0)
      std::cerr << "route: " << cut << " of " << source->size()
                << " sequences were longer than the model's max_seq_len of " << config.max_seq_len
                << " tokens; their routes cover the first " << config.max_seq_len << "\n";
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

// "descriptor,filler,full" -> conditions; "depths" expands to one range of `width` depths at a
// time over the core.
std::vector<EvalCondition> parse_conditions(const std::string& text, int64_t width,
                                            int64_t core_depth) {
  std::vector<EvalCondition> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) {
    EvalCondition c;
    c.intervention = parse_enum<Intervention>(item, "--interventions item");
    if (c.intervention != Intervention::kDepths) {
      out.push_back(c);
      continue;
    }
    LOL_CHECK(width >= 1 && width <= core_depth, "--depth-width must be in 1..", core_depth,
              " (the core's depth), got ", width);
    for (int64_t first = 1; first <= core_depth; first += width) {
      c.first_depth = first;
      c.last_depth = std::min(core_depth, first + width - 1);
      out.push_back(c);
    }
  }
  LOL_CHECK(!out.empty(), "--interventions is empty");
  return out;
}

void add_path_eval_command(CLI::App* path, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  struct Opts {
    std::string model, task, paths, interventions = "descriptor,filler,full,id,gate,permute,random";
    std::string json_out, samples_out, paths_out;
    int64_t depth_width = 0;
    bool short_filler = false;
    PathEvalOptions eval;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = path->add_subcommand(
      "eval",
      "generate on held-out problems with the filler and each label's path forced (or an "
      "intervention on it); score, and count requested against followed strategy");
  cmd->add_option("--model", o->model, "model or training run directory")->required();
  cmd->add_option("--task", o->task, "sudoku or maze")
      ->required()
      ->check(CLI::IsMember({"sudoku", "maze"}));
  cmd->add_option("--paths", o->paths, "directory of mode paths (lol path extract --out)")
      ->required();
  cmd->add_option("--count", o->eval.count, "held-out problems per label and condition")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--seed", o->eval.seed,
                  "problem seed (task split 1; use another than lol route's) and intervention seed")
      ->capture_default_str();
  cmd->add_option("--size", o->eval.maze_size, "maze side n")->capture_default_str();
  cmd->add_option("--interventions", o->interventions,
                  "comma-separated conditions: " + enum_choices<Intervention>(", "))
      ->capture_default_str();
  cmd->add_option("--depth-width", o->depth_width,
                  "with 'depths': width of the depth range replaced at a time");
  cmd->add_flag("--short-filler", o->short_filler,
                "filler \"[ ... ]\" instead of the length-matched one");
  cmd->add_option("--batch-size", o->eval.max_batch, "sequences decoded at once")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--json", o->json_out, "also write the results as JSON to this file");
  cmd->add_option("--samples", o->samples_out,
                  "write every generation (prompt, output, score) as JSON lines to this file");
  cmd->add_option("--paths-out", o->paths_out,
                  "write the path each condition forces as DIR/CONDITION/LABEL.json (--force "
                  "reads them)");
  commands.emplace_back(cmd, [o] {
    const auto device = selected_device();
    auto model = load_model(o->model, device);
    const auto& config = model->config();
    o->eval.kind = tasks::parse_kind(o->task);
    o->eval.length_matched = !o->short_filler;
    const auto paths = load_task_paths(o->paths, o->eval.kind, config.core_depth,
                                       config.library_size, config.router_skip);
    const auto conditions = parse_conditions(o->interventions, o->depth_width, config.core_depth);
    if (!o->paths_out.empty())
      for (const auto& c : conditions)
        for (size_t j = 0; j < paths.size(); ++j)
          if (auto p = condition_path(c, paths, j, config.library_size, o->eval.seed)) {
            std::string dir = o->paths_out + "/" + c.name();
            for (auto& ch : dir)
              if (ch == ' ') ch = '_';
            make_directories(dir);
            write_file_atomic(dir + "/" + label_file_name(paths[j].label) + ".json",
                              p->to_json().dump(2) + "\n");
          }
    const int64_t total = static_cast<int64_t>(conditions.size() * paths.size()) * o->eval.count;
    Progress progress("path eval", total);
    int64_t done = 0;
    install_interrupt_handler();
    o->eval.on_sample = [&] {
      progress.update(++done, "generations");
      LOL_CHECK(!interrupt_requested(), "interrupted; nothing was written");
    };
    std::unique_ptr<AtomicWriter> samples;
    if (!o->samples_out.empty()) samples = std::make_unique<AtomicWriter>(o->samples_out);
    const auto results =
        evaluate_paths(model, device, paths, conditions, o->eval, [&](const EvalSample& s) {
          if (samples) samples->write(s.to_json(o->eval.kind).dump() + "\n");
        });
    if (samples) samples->commit();
    progress.finish("evaluated " + std::to_string(total) + " generations");
    std::cout << tasks::kind_name(o->eval.kind) << ", " << o->eval.count
              << " held-out problems per label, greedy, filler "
              << (o->eval.length_matched ? "length-matched" : "short") << "\n";
    std::cout << path_eval_table(results);
    for (const auto& r : results) {
      if (r.condition.intervention == Intervention::kFull)
        std::cout << "\nforced mode paths (full), requested against followed:\n"
                  << r.summary.to_text(o->eval.kind);
      if (r.condition.intervention == Intervention::kUnbiased)
        std::cout << "\nthe descriptor with the balancing bias at zero (unbiased), requested "
                     "against followed:\n"
                  << r.summary.to_text(o->eval.kind);
    }
    if (!o->json_out.empty()) {
      json out = json::array();
      for (const auto& r : results) out.push_back(r.to_json(o->eval.kind));
      write_file_atomic(o->json_out, out.dump(2) + "\n");
    }
  });
}

void add_path_depth_command(CLI::App* path, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  struct Opts {
    std::string model, depths, json_out;
    LabelledFlags source{"", "", 20, 1};
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = path->add_subcommand(
      "depth",
      "teacher-forced loss and accuracy against the executed core depth D', also "
      "deeper than trained (test-time depth extrapolation)");
  cmd->add_option("--model", o->model, "model or training run directory")->required();
  add_labelled_flags(cmd, o->source, "task generator seed");
  cmd->add_option("--depths", o->depths, "comma list of executed depths D' (default 1..2D)");
  cmd->add_option("--json", o->json_out, "also write the results as JSON to this file");
  commands.emplace_back(cmd, [o] {
    const auto device = selected_device();
    auto model = load_model(o->model, device);
    const auto& config = model->config();
    std::vector<int64_t> depths;
    if (o->depths.empty())
      for (int64_t d = 1; d <= std::min<int64_t>(2 * config.core_depth, 1024); ++d)
        depths.push_back(d);
    else
      depths = parse_int_list("--depths", o->depths);
    const auto text = text_tokenizer(o->model);
    auto source = open_labelled(o->source, config.vocab_size, text.get());
    const int64_t batch = o->source.batch_size;
    const int64_t batches = (source->size() + batch - 1) / batch;
    Progress progress("path depth", batches * static_cast<int64_t>(depths.size()));
    int64_t done = 0;
    install_interrupt_handler();
    const auto results = evaluate_depths(model, *source, depths, batch, [&] {
      progress.update(++done, "batches");
      LOL_CHECK(!interrupt_requested(), "interrupted");
    });
    progress.finish(source->describe());
    std::cout << "trained core depth D " << config.core_depth << "; loss and next-token accuracy "
              << "on the targets after the prompt, teacher-forced\n"
              << "D'     loss  accuracy\n";
    json out = json::array();
    for (const auto& r : results) {
      std::cout << std::left << std::setw(4) << r.depth << std::right << std::fixed
                << std::setprecision(4) << std::setw(8) << r.loss << std::setw(10) << r.accuracy
                << (r.depth > config.core_depth ? "  (extrapolated)" : "") << "\n";
      out.push_back(r.to_json());
    }
    if (!o->json_out.empty()) write_file_atomic(o->json_out, out.dump(2) + "\n");
  });
}

// lol path curve RUN: strategy control (descriptor, and forced mode paths with the filler) at
// every checkpoint of a training run, against the tokens it had seen.
void add_path_curve_command(CLI::App* path, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  struct Opts {
    std::string run, task, json_out, html_out, title = "Strategy control during training";
    std::string rule = "probabilities";
    int64_t every = 1, show = 0;
    StrategyControlOptions control;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = path->add_subcommand(
      "curve",
      "strategy control along a training run: at each checkpoint, mode paths from held-out "
      "sequences, then greedy traces with the descriptor and with each mode path forced");
  cmd->add_option("run", o->run, "training run directory (its checkpoints) or a model directory")
      ->required();
  cmd->add_option("--task", o->task, "sudoku or maze")
      ->required()
      ->check(CLI::IsMember({"sudoku", "maze"}));
  cmd->add_option("--size", o->control.maze_size, "maze side n")->capture_default_str();
  cmd->add_option("--count", o->control.count,
                  "held-out problems for the paths, and again per strategy and condition")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--route-seed", o->control.route_seed,
                  "problems the mode paths are extracted from")
      ->capture_default_str();
  cmd->add_option("--seed", o->control.eval_seed, "problems generated on (another seed)")
      ->capture_default_str();
  cmd->add_option("--rule", o->rule,
                  "how mode paths choose experts: probabilities (SPEC 3.6) or routed (as lol "
                  "path extract --rule)")
      ->capture_default_str();
  cmd->add_option("--every", o->every,
                  "evaluate the checkpoints at every k-th checkpoint interval of the run "
                  "(steps that are multiples of k x checkpoint_every), and the last")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--batch-size", o->control.max_batch, "sequences per batch")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--show", o->show,
                  "print the last checkpoint's generations on the first N problems, per strategy "
                  "and condition, beside the reference")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("--json", o->json_out, "write the curve as JSON to this file");
  cmd->add_option("--out", o->html_out, "write the curve as one HTML page");
  cmd->add_option("--title", o->title, "the page's title")->capture_default_str();
  commands.emplace_back(cmd, [o] {
    LOL_CHECK(o->control.route_seed != o->control.eval_seed,
              "--route-seed and --seed must differ: paths are evaluated on problems they were "
              "not extracted from");
    o->control.kind = tasks::parse_kind(o->task);
    o->control.rule = parse_enum<ModeRule>(o->rule, "--rule");
    // (model directory, step, tokens, the run's checkpoint interval) per point; a bare model
    // directory is one point, at the step of its train_state.json when it has one (a
    // checkpoint copied out of its run).
    struct Point {
      std::string dir;
      int64_t step = 0, tokens = 0, interval = 0;
    };
    auto point = [](const std::string& dir) {
      Point p{dir};
      if (!path_exists(dir + "/train_state.json")) return p;
      const auto state = read_json_file(dir + "/train_state.json", TrainState::from_json);
      p.step = state.step;
      p.tokens =
          state.step * state.config.batch_rows * state.config.seq_len * state.config.grad_accum;
      p.interval = state.config.checkpoint_every;
      return p;
    };
    std::vector<Point> points;
    for (const auto& name : checkpoint_names(o->run))
      points.push_back(point(o->run + "/checkpoints/" + name));
    if (points.empty()) {
      points.push_back(point(resolve_model_dir(o->run)));
    } else {
      // Every k-th checkpoint interval of the run (as its last checkpoint has it), and the last.
      std::vector<int64_t> steps;
      for (const auto& p : points) steps.push_back(p.step);
      std::vector<Point> picked;
      for (size_t i : curve_checkpoints(steps, points.back().interval, o->every))
        picked.push_back(points[i]);
      points = std::move(picked);
    }
    const auto device = selected_device();
    const int64_t total = static_cast<int64_t>(points.size()) * 2 * 5 * o->control.count;
    Progress progress("path curve", total);
    int64_t done = 0;
    install_interrupt_handler();
    o->control.on_sample = [&] {
      progress.update(++done, "generations");
      LOL_CHECK(!interrupt_requested(), "interrupted; nothing was written");
    };
    std::vector<StrategyControl> curve;
    std::vector<EvalSample> shown;
    for (const auto& p : points) {
      auto model = load_model(p.dir, device);
      const bool last = &p == &points.back();
      auto c = measure_strategy_control(model, device, o->control, [&](const EvalSample& s) {
        if (last && s.problem < o->show) shown.push_back(s);
      });
      c.step = p.step;
      c.tokens = p.tokens;
      curve.push_back(std::move(c));
    }
    progress.finish("evaluated " + std::to_string(points.size()) + " checkpoint(s)");
    std::cout << tasks::kind_name(o->control.kind) << ", " << o->control.count
              << " held-out problems per strategy and condition (" << o->rule
              << " mode paths from seed " << o->control.route_seed << ", generations on seed "
              << o->control.eval_seed << "), greedy, filler length-matched\n"
              << strategy_curve_table(curve);
    const auto& last = curve.back();
    std::ostringstream by_depth;
    by_depth << std::fixed << std::setprecision(3);
    for (size_t l = 0; l < last.bias_decided_by_depth.size(); ++l)
      by_depth << (l ? " / " : "") << last.bias_decided_by_depth[l];
    std::ostringstream skips;
    skips << std::fixed << std::setprecision(3) << last.skipped << ", "
          << last.skipped_of_bias_decided << " of those the bias decided";
    std::cout << "\nlast checkpoint, windows the bias decided at depth 1.."
              << last.bias_decided_by_depth.size() << ": " << by_depth.str() << "\n"
              << "last checkpoint, windows skipped (gate below " << kSkipGate
              << "): " << skips.str() << "\n"
              << "\nlast checkpoint, descriptor:\n"
              << last.descriptor.summary.to_text(o->control.kind)
              << "\nlast checkpoint, forced mode paths:\n"
              << last.full.summary.to_text(o->control.kind);
    if (!shown.empty()) {
      // Strategy by strategy: the descriptor's generation, then the forced path's.
      std::stable_sort(shown.begin(), shown.end(), [](const EvalSample& a, const EvalSample& b) {
        return std::tie(a.problem, a.label) < std::tie(b.problem, b.label);
      });
      std::cout << "\nlast checkpoint, generations on the first " << o->show
                << " problem(s) (mode paths: the expert at window 0, 1, ... of each depth):\n"
                << strategy_examples(shown, last.paths, o->control.kind);
    }
    if (!o->json_out.empty()) {
      json out = json::array();
      for (const auto& c : curve) out.push_back(c.to_json(o->control.kind));
      write_file_atomic(o->json_out, out.dump(2) + "\n");
    }
    if (!o->html_out.empty())
      write_file_atomic(o->html_out, strategy_curve_html(curve, o->control.kind, o->title));
  });
}

}  // namespace

void add_path_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  auto* path = app.add_subcommand("path", "mode paths of labelled routes");
  path->require_subcommand(1);
  struct Opts {
    std::string routes, out, rule = "probabilities";
  };
  auto o = std::make_shared<Opts>();
  auto* extract = path->add_subcommand("extract",
                                       "one forced-path file per label: the argmax of the mean "
                                       "router probabilities per (depth, window)");
  extract->add_option("routes", o->routes, "route file written by lol route")->required();
  extract->add_option("--out", o->out, "directory for LABEL.json files")->required();
  extract
      ->add_option("--rule", o->rule,
                   "probabilities (SPEC 3.6: argmax of the mean p, before the bias) or routed "
                   "(the expert the windows ran most often, bias included)")
      ->capture_default_str();
  commands.emplace_back(extract, [o] {
    RouteFileHeader header;
    ModePathBuilder builder(parse_enum<ModeRule>(o->rule, "--rule"));
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
    std::vector<ForcedPath> forced;
    for (const auto& p : paths) forced.push_back(p.path);
    std::cout << distinct_paths(forced, header.core_depth) << " distinct paths among "
              << paths.size() << " labels\n"
              << "wrote " << paths.size() << " paths to " << o->out << "\n";
  });

  struct StatsOpts {
    std::string routes, json_out;
    std::vector<std::string> groups;
  };
  auto so = std::make_shared<StatsOpts>();
  auto* stats = path->add_subcommand("stats",
                                     "expert utilisation, distinct experts per path against the "
                                     "uniform null, mode-path agreement, margins, windows the "
                                     "balancing bias decided, labels that share paths");
  stats->add_option("routes", so->routes, "route file written by lol route")->required();
  stats->add_option("--json", so->json_out, "also write every statistic as JSON to this file");
  stats->add_option("--group", so->groups,
                    "NAME=label,label,...: a group of labels (e.g. languages of one script); "
                    "repeat it, and the mean path similarity within groups is compared with the "
                    "mean across them");
  commands.emplace_back(stats, [so] {
    std::map<std::string, std::string> group_of;
    for (const auto& g : so->groups) {
      const auto eq = g.find('=');
      LOL_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < g.size(),
                "--group must be NAME=label,label,..., got '", g, "'");
      std::stringstream labels(g.substr(eq + 1));
      for (std::string label; std::getline(labels, label, ',');) {
        LOL_CHECK(!label.empty(), "--group '", g, "' has an empty label");
        LOL_CHECK(group_of.emplace(label, g.substr(0, eq)).second, "label '", label,
                  "' is in two --group flags");
      }
    }
    std::unique_ptr<RouteStatsBuilder> builder;
    read_route_file(
        so->routes,
        [&](const RouteFileHeader& h) {
          builder = std::make_unique<RouteStatsBuilder>(h.core_depth, h.choices(), h.skip);
        },
        [&](const SequenceRoutes& s) { builder->add(s); });
    const auto result = builder->finish();
    std::cout << result.to_text();
    json out = result.to_json();
    if (!group_of.empty()) {
      for (const auto& [label, group] : group_of)
        LOL_CHECK(std::find(result.similarity_labels.begin(), result.similarity_labels.end(),
                            label) != result.similarity_labels.end(),
                  "--group names label '", label, "', which ", so->routes, " does not have");
      const auto g = group_similarity(result, group_of);
      std::cout << std::fixed << std::setprecision(3) << "path similarity within groups "
                << g.within << " (" << g.within_pairs << " pairs), across groups " << g.across
                << " (" << g.across_pairs << " pairs)\n";
      out["groups"] = {{"of_label", group_of},
                       {"within", g.within},
                       {"within_pairs", g.within_pairs},
                       {"across", g.across},
                       {"across_pairs", g.across_pairs}};
    }
    if (!so->json_out.empty()) write_file_atomic(so->json_out, out.dump(2) + "\n");
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
          data = std::make_unique<ProbeData>(h.core_depth, h.choices());
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
    const auto readouts = data->readouts(po->probe);
    std::cout << "window-level readouts (paper table 2): top-1 ridge " << readouts.top1_ridge
              << ", winning-expert probability " << readouts.winning_expert
              << ", expert-frequency log-likelihood ratio " << readouts.frequency_llr << "\n";
    out.push_back(readouts.to_json());
    if (!po->json_out.empty()) write_file_atomic(po->json_out, out.dump(2) + "\n");
  });

  add_path_eval_command(path, commands);
  add_path_curve_command(path, commands);
  add_path_depth_command(path, commands);
}

void add_report_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  struct Opts {
    std::string routes, eval, title, out;
    ProbeOptions probe;
  };
  auto o = std::make_shared<Opts>();
  o->probe.shuffles = 19;
  auto* cmd = app.add_subcommand(
      "report",
      "one self-contained HTML page: route statistics, probes and forced-path results "
      "as pictures with their numbers");
  cmd->add_option("routes", o->routes, "route file written by lol route")->required();
  cmd->add_option("--eval", o->eval, "results of lol path eval --json to include");
  cmd->add_option("--title", o->title, "page title (default: the route file's source)");
  cmd->add_option("--folds", o->probe.folds, "probe cross-validation folds")
      ->capture_default_str()
      ->check(at_least(2));
  cmd->add_option("--shuffles", o->probe.shuffles, "probe label permutations for the control")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("--out", o->out, "HTML file to write")->required();
  commands.emplace_back(cmd, [o] {
    ReportInputs in;
    std::unique_ptr<RouteStatsBuilder> stats;
    std::unique_ptr<ProbeData> probes;
    std::unique_ptr<PathPcaBuilder> pca;
    std::set<std::string> labels;
    read_route_file(
        o->routes,
        [&](const RouteFileHeader& h) {
          in.header = h;
          stats = std::make_unique<RouteStatsBuilder>(h.core_depth, h.choices(), h.skip);
          probes = std::make_unique<ProbeData>(h.core_depth, h.choices());
          if (h.core_depth * h.choices() <= 4096)
            pca = std::make_unique<PathPcaBuilder>(h.core_depth, h.choices());
        },
        [&](const SequenceRoutes& s) {
          stats->add(s);
          probes->add(s);
          if (pca) pca->add(s);
          labels.insert(s.label);
        });
    in.stats = stats->finish();
    if (pca) in.pca = pca->finish();
    if (labels.size() >= 2 && probes->sequences() >= o->probe.folds) {
      for (const char* level : {"window", "sequence"})
        in.probes.push_back(probes->run(level, o->probe));
      in.readouts = probes->readouts(o->probe);
    }
    if (!o->eval.empty()) in.path_eval = read_json_file(o->eval, check_path_eval_results);
    in.title = o->title.empty() ? "Routing analysis: " + in.header.source : o->title;
    write_file_atomic(o->out, html_report(in));
    std::cout << "wrote " << o->out << " (" << in.stats.sequences << " sequences"
              << (in.path_eval.is_null() ? "" : ", forced-path results") << ")\n";
  });
}

void add_compare_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  struct Opts {
    std::vector<std::string> runs;
    std::string out, json_out, title = "Training runs compared";
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "compare",
      "training runs side by side: size, executed FLOPs, held-out loss against FLOPs and "
      "parameters (a table on stdout, plots with --out)");
  cmd->add_option("runs", o->runs,
                  "training run directories (lol eval --json-out RUN/eval.json "
                  "gives each its final held-out loss)")
      ->required();
  cmd->add_option("--out", o->out, "HTML page to write: the table and the plots");
  cmd->add_option("--json-out", o->json_out, "also write the figures as JSON");
  cmd->add_option("--title", o->title, "page title")->capture_default_str();
  commands.emplace_back(cmd, [o] {
    std::vector<RunSummary> runs;
    for (const auto& dir : o->runs) runs.push_back(read_run_summary(dir));
    std::cout << comparison_markdown(runs);
    if (!o->json_out.empty()) write_file_atomic(o->json_out, comparison_json(runs).dump(2) + "\n");
    if (!o->out.empty()) {
      write_file_atomic(o->out, comparison_html(runs, o->title));
      std::cout << "wrote " << o->out << "\n";
    }
  });
}

}  // namespace lol::cli
