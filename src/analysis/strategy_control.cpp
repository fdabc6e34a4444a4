#include "analysis/strategy_control.h"

#include <algorithm>
#include <iomanip>
#include <set>
#include <sstream>

#include "analysis/paths.h"
#include "analysis/routes.h"
#include "analysis/stats.h"
#include "analysis/svg.h"
#include "util/error.h"

namespace lol {

TaskModePaths task_mode_paths(LanguageModel& model, const StrategyControlOptions& o) {
  auto source = task_sequences(tasks::kind_name(o.kind), o.maze_size, o.count, o.route_seed);
  ModePathBuilder by_probabilities(ModeRule::kProbabilities), by_routes(ModeRule::kRouted);
  // The bias's share of the windows, counted as `lol path stats` counts it.
  RouteStatsBuilder stats(model->config().core_depth, model->config().route_choices(),
                          model->config().router_skip);
  ExtractOptions extract;
  extract.batch_size = o.max_batch;
  extract_routes(model, *source, extract, [&](SequenceRoutes&& s) {
    by_probabilities.add(s);
    by_routes.add(s);
    stats.add(s);
  });
  TaskModePaths out;
  auto distinct = [&](const std::vector<ModePath>& paths) {
    std::vector<ForcedPath> forced;
    for (const auto& m : paths) forced.push_back(m.path);
    return distinct_paths(forced, model->config().core_depth);
  };
  const auto probabilities = by_probabilities.paths(), routes = by_routes.paths();
  out.distinct_by_probabilities = distinct(probabilities);
  out.distinct_by_routes = distinct(routes);
  const auto route_stats = stats.finish();
  out.bias_decided = route_stats.bias_decided;
  out.bias_decided_by_depth = route_stats.bias_decided_by_depth;
  out.skipped = route_stats.skipped;
  out.skipped_of_bias_decided = route_stats.skipped_of_bias_decided;
  for (const auto& m : o.rule == ModeRule::kRouted ? routes : probabilities) {
    LabelledPath p;
    p.label = m.label;
    p.strategy = tasks::strategy_by_name(o.kind, m.label);
    LOL_CHECK(p.strategy > 0, "label '", m.label, "' names no strategy");
    p.path = m.path;
    out.paths.push_back(std::move(p));
  }
  return out;
}

int64_t distinct_paths(const std::vector<ForcedPath>& paths, int64_t core_depth) {
  int64_t last_ordinal = 0;
  for (const auto& p : paths)
    for (const auto& [depth, ordinals] : p.depths)
      if (!ordinals.empty()) last_ordinal = std::max(last_ordinal, ordinals.rbegin()->first);
  std::set<std::vector<int64_t>> seen;
  for (const auto& p : paths) {
    std::vector<int64_t> experts;
    for (int64_t l = 1; l <= core_depth; ++l)
      for (int64_t k = 0; k <= last_ordinal; ++k) {
        const auto* e = p.find(l, k);
        experts.push_back(e && e->expert ? *e->expert : -1);
      }
    seen.insert(std::move(experts));
  }
  return static_cast<int64_t>(seen.size());
}

std::vector<size_t> curve_checkpoints(const std::vector<int64_t>& steps, int64_t interval,
                                      int64_t every) {
  LOL_CHECK(every >= 1, "a curve takes every k-th checkpoint with k >= 1, got ", every);
  std::vector<size_t> out;
  const size_t n = steps.size();
  for (size_t i = 0; i < n; ++i) {
    const bool picked = i + 1 == n || (interval > 0 ? steps[i] % (every * interval) == 0
                                                    : (n - 1 - i) % every == 0);
    if (picked) out.push_back(i);
  }
  return out;
}

StrategyControl measure_strategy_control(LanguageModel& model, torch::Device device,
                                         const StrategyControlOptions& o,
                                         const std::function<void(const EvalSample&)>& sink) {
  StrategyControl out;
  out.router_skip = model->config().router_skip;
  const auto mode = task_mode_paths(model, o);
  const auto& paths = mode.paths;
  out.paths = paths;
  out.labels = static_cast<int64_t>(paths.size());
  out.distinct_by_probabilities = mode.distinct_by_probabilities;
  out.distinct_by_routes = mode.distinct_by_routes;
  out.distinct_paths =
      o.rule == ModeRule::kRouted ? mode.distinct_by_routes : mode.distinct_by_probabilities;
  out.bias_decided = mode.bias_decided;
  out.bias_decided_by_depth = mode.bias_decided_by_depth;
  out.skipped = mode.skipped;
  out.skipped_of_bias_decided = mode.skipped_of_bias_decided;
  PathEvalOptions eval;
  eval.kind = o.kind;
  eval.maze_size = o.maze_size;
  eval.count = o.count;
  eval.seed = o.eval_seed;
  eval.max_batch = o.max_batch;
  eval.on_sample = o.on_sample;
  EvalCondition descriptor, full;
  descriptor.intervention = Intervention::kDescriptor;
  full.intervention = Intervention::kFull;
  auto results = evaluate_paths(model, device, paths, {descriptor, full}, eval, sink);
  LOL_CHECK(results.size() == 2, "strategy control: expected two conditions");
  out.descriptor = std::move(results[0]);
  out.full = std::move(results[1]);
  return out;
}

json StrategyControl::to_json(tasks::Kind kind) const {
  return json{{"step", step},
              {"tokens", tokens},
              {"labels", labels},
              {"distinct_paths", distinct_paths},
              {"distinct_paths_by_rule",
               {{"probabilities", distinct_by_probabilities}, {"routed", distinct_by_routes}}},
              {"bias_decided", bias_decided},
              {"bias_decided_by_depth", bias_decided_by_depth},
              {"skipped", {{"share", skipped}, {"share_of_bias_decided", skipped_of_bias_decided}}},
              {"descriptor", descriptor.to_json(kind)},
              {"full", full.to_json(kind)},
              {"paths", [&] {
                 json p = json::object();
                 for (const auto& l : paths) p[l.label] = l.path.to_json();
                 return p;
               }()}};
}

namespace {

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

// The header and rows of the curve table (markdown and HTML share them).
std::vector<std::string> curve_header() {
  return {"step",
          "tokens",
          "distinct paths: SPEC / routed rule",
          "bias decided",
          "descriptor: as requested",
          "descriptor: legal",
          "descriptor: answer",
          "forced: as requested",
          "forced: legal",
          "forced: answer"};
}

std::vector<std::vector<std::string>> curve_rows(const std::vector<StrategyControl>& curve) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : curve) {
    const auto& d = c.descriptor.summary;
    const auto& f = c.full.summary;
    rows.push_back({std::to_string(c.step), std::to_string(c.tokens),
                    std::to_string(c.distinct_by_probabilities) + " / " +
                        std::to_string(c.distinct_by_routes) + " of " + std::to_string(c.labels),
                    fixed(c.bias_decided, 3), fixed(d.strategy_as_requested, 3),
                    fixed(d.trace_legal, 3), fixed(d.answer_correct, 3),
                    fixed(f.strategy_as_requested, 3), fixed(f.trace_legal, 3),
                    fixed(f.answer_correct, 3)});
  }
  return rows;
}

svg::Heatmap confusion_map(const tasks::ScoreSummary& s, tasks::Kind kind,
                           const std::string& title) {
  svg::Heatmap h;
  h.title = title;
  h.row_title = "requested";
  h.column_title = "followed";
  for (int f = 0; f <= 5; ++f) h.columns.push_back(tasks::strategy_name(kind, f));
  for (int r = 1; r <= 5; ++r) {
    h.rows.push_back(tasks::strategy_name(kind, r));
    int64_t total = 0;
    for (int f = 0; f <= 5; ++f) total += s.confusion[r][f];
    std::vector<double> row;
    for (int f = 0; f <= 5; ++f)
      row.push_back(total ? static_cast<double>(s.confusion[r][f]) / static_cast<double>(total)
                          : 0.0);
    h.values.push_back(std::move(row));
  }
  return h;
}

// The routing figures of each checkpoint against tokens: the distinct mode paths by each rule
// as a share of the strategies, the skipped windows, and the bias's share of the windows,
// overall and per depth.
// What the curve counts as skipped: a gate below kSkipGate, and the skip where a model has one.
std::string skipped_text(const std::vector<StrategyControl>& curve) {
  const bool skip = std::any_of(curve.begin(), curve.end(),
                                [](const StrategyControl& c) { return c.router_skip; });
  return "a gate below " + skip_gate_text() + (skip ? " or routed to the skip" : "");
}

svg::Scatter routing_scatter(const std::vector<StrategyControl>& curve) {
  svg::Scatter s;
  s.title = "Routes along training";
  s.x_title = "training tokens";
  s.y_title = "share";
  s.lines = true;
  s.groups = {"distinct paths / strategies: SPEC rule", "distinct paths / strategies: routed rule",
              "skipped (" + skipped_text(curve) + ")", "bias decided: all depths"};
  size_t depths = 0;
  for (const auto& c : curve) depths = std::max(depths, c.bias_decided_by_depth.size());
  for (size_t l = 1; l <= depths; ++l)
    s.groups.push_back("bias decided: depth " + std::to_string(l));
  auto add = [&](const StrategyControl& c, size_t group, double value) {
    s.x.push_back(static_cast<double>(c.tokens));
    s.y.push_back(value);
    s.group.push_back(group);
  };
  for (const auto& c : curve) {
    const double labels = static_cast<double>(std::max<int64_t>(c.labels, 1));
    add(c, 0, static_cast<double>(c.distinct_by_probabilities) / labels);
    add(c, 1, static_cast<double>(c.distinct_by_routes) / labels);
    add(c, 2, c.skipped);
    add(c, 3, c.bias_decided);
    for (size_t l = 0; l < c.bias_decided_by_depth.size(); ++l)
      add(c, 4 + l, c.bias_decided_by_depth[l]);
  }
  return s;
}

}  // namespace

std::string path_line(const ForcedPath& path) {
  std::ostringstream out;
  for (const auto& [depth, ordinals] : path.depths) {
    if (depth != path.depths.begin()->first) out << " | ";
    out << depth << ":";
    const int64_t last = ordinals.empty() ? -1 : ordinals.rbegin()->first;
    for (int64_t k = 0; k <= last; ++k) {
      const auto* e = path.find(depth, k);
      out << " " << (e && e->expert ? std::to_string(*e->expert) : std::string("-"));
    }
  }
  return out.str();
}

std::string strategy_examples(const std::vector<EvalSample>& samples,
                              const std::vector<LabelledPath>& paths, tasks::Kind kind) {
  const auto& vocab = tasks::vocabulary(kind);
  std::ostringstream out;
  for (const auto& sample : samples) {
    const LabelledPath* path = nullptr;
    for (const auto& p : paths)
      if (p.label == sample.label) path = &p;
    LOL_CHECK(path, "strategy examples: no mode path for label '", sample.label, "'");
    const auto words = vocab.decode(sample.prompt);
    const auto generated = vocab.decode(sample.generated);
    const auto where = "problem " + std::to_string(sample.problem);
    const auto prompt = tasks::parse_sequence(kind, words, where);
    const auto reference =
        tasks::solve_question(kind, prompt.question, prompt.descriptor, path->strategy, where);
    const auto& sc = sample.score;
    out << sample.label << ", "
        << (sample.condition == "descriptor"
                ? std::string("true descriptor")
                : "filler, mode path forced (" + path_line(path->path) + ")")
        << ": followed " << tasks::strategy_name(kind, sc.followed)
        << (sc.answer_correct ? ", answer right\n" : ", answer wrong\n");
    out << "  model      " << tasks::join_words(generated) << "\n";
    const auto whole = reference.tokens();  // the same prompt, then the reference continuation
    out << "  reference  "
        << tasks::join_words(tasks::Tokens(
               whole.begin() + static_cast<std::ptrdiff_t>(std::min(words.size(), whole.size())),
               whole.end()))
        << "\n";
  }
  return out.str();
}

std::string strategy_curve_table(const std::vector<StrategyControl>& curve) {
  const auto header = curve_header();
  std::ostringstream out;
  out << "|";
  for (const auto& h : header) out << " " << h << " |";
  out << "\n|";
  for (size_t i = 0; i < header.size(); ++i) out << " ---: |";
  out << "\n";
  for (const auto& row : curve_rows(curve)) {
    out << "|";
    for (const auto& v : row) out << " " << v << " |";
    out << "\n";
  }
  return out.str();
}

std::string strategy_curve_html(const std::vector<StrategyControl>& curve, tasks::Kind kind,
                                const std::string& title) {
  svg::Scatter s;
  s.title = "Strategy control against training tokens";
  s.x_title = "training tokens";
  s.y_title = "share of held-out generations";
  s.lines = true;
  s.groups = {"descriptor: as requested", "descriptor: legal", "descriptor: answer",
              "forced mode path: as requested", "forced mode path: legal"};
  for (const auto& c : curve) {
    const double values[] = {c.descriptor.summary.strategy_as_requested,
                             c.descriptor.summary.trace_legal, c.descriptor.summary.answer_correct,
                             c.full.summary.strategy_as_requested, c.full.summary.trace_legal};
    for (size_t g = 0; g < 5; ++g) {
      s.x.push_back(static_cast<double>(c.tokens));
      s.y.push_back(values[g]);
      s.group.push_back(g);
    }
  }
  std::string body =
      svg::html_figure(svg::scatter(s),
                       "(a) the true descriptor in the prompt; (b) the length-matched filler "
                       "with each strategy's mode path forced (SPEC 3.6). 'as requested': the "
                       "trace is the requested strategy's reference trace.");
  body += svg::html_figure(
      svg::scatter(routing_scatter(curve)),
      "How the routes separate the strategies: the share of the held-out windows whose expert "
      "is not the router's top choice, so the balancing bias chose it (over all depths and per "
      "depth), and the strategies whose mode paths differ, out of all of them, by SPEC 3.6's "
      "rule (the router's mean probability) and by the routed rule (the expert the windows "
      "ran), and the windows run with " +
          skipped_text(curve) +
          " (skips). Routed above SPEC: the bias, not the router, tells some strategies apart.");
  body += svg::html_table(curve_header(), curve_rows(curve));
  if (!curve.empty()) {
    const auto& last = curve.back();
    const std::string at = " at step " + std::to_string(last.step);
    body += svg::html_figure(
        svg::heatmap(confusion_map(last.descriptor.summary, kind, "(a) descriptor" + at)),
        "Share of each requested strategy's generations that followed each strategy (none: no "
        "strategy's trace exactly).");
    body += svg::html_figure(
        svg::heatmap(confusion_map(last.full.summary, kind, "(b) forced mode path" + at)),
        "The same with the filler and the requested strategy's mode path forced.");
  }
  return svg::html_page(title, body);
}

}  // namespace lol
