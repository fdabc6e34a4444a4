// The analysis report as one self-contained HTML file (docs/analysis.md).
#include "analysis/report.h"

#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>

#include "analysis/svg.h"
#include "util/error.h"

namespace lol {
namespace {

std::string fixed(double x, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << (std::isfinite(x) ? x : 0.0);
  return out.str();
}

std::string shortest(double x) {  // 0.0001, 0.05, 0.5
  std::ostringstream out;
  out << x;
  return out.str();
}

std::vector<std::string> numbered(const std::string& prefix, size_t n, size_t first) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(prefix + std::to_string(first + i));
  return out;
}

using svg::html_figure;
using svg::html_table;

std::string utilisation_section(const RouteStats& s) {
  std::string out = "<h2>Expert utilisation per depth</h2>\n";
  auto experts = numbered("", static_cast<size_t>(s.library_size), 0);
  if (s.skip) experts.back() = "skip";
  for (const auto& [label, shares] : s.utilisation) {
    svg::Heatmap h;
    h.title = label == "*" ? "all labels" : "label " + label;
    h.row_title = "depth";
    h.column_title = "expert";
    h.rows = numbered("", shares.size(), 1);
    h.columns = experts;
    h.values = shares;
    out += html_figure(svg::heatmap(h), "Share of windows at each depth that ran each expert (" +
                                            svg::escape(h.title) + "); rows sum to 1.");
  }
  return out;
}

std::string paths_section(const RouteStats& s) {
  std::string out = "<h2>Distinct experts per token path</h2>\n";
  svg::BarChart b;
  b.title = "Token paths by distinct experts U";
  b.y_title = "share of token paths";
  b.labels = numbered("U=", s.distinct_share.size(), 1);
  b.values = s.distinct_share;
  out += html_figure(svg::bar_chart(b),
                     "Mean U " + fixed(s.mean_distinct, 3) + " against " +
                         fixed(s.expected_distinct, 3) +
                         " for independent uniform choices, E[U] = L(1 - (1 - 1/L)^D) with L " +
                         std::to_string(s.library_size) + ", D " + std::to_string(s.core_depth) +
                         "; " + std::to_string(s.token_paths) + " token paths. Repeated " +
                         fixed(s.mean_repeated, 3) + ", unused " + fixed(s.mean_unused, 3) + ".");
  return out;
}

std::string agreement_section(const RouteStats& s) {
  std::string out = "<h2>Agreement with each label's mode path</h2>\n";
  for (const auto& [label, cells] : s.agreement) {
    int64_t windows = 0;
    for (const auto& [key, share] : cells) windows = std::max(windows, key.second + 1);
    windows = std::min<int64_t>(windows, 40);  // the first 40 ordinals stay legible
    svg::Heatmap h;
    h.title = "label " + label;
    h.row_title = "depth";
    h.column_title = "window ordinal";
    h.rows = numbered("", static_cast<size_t>(s.core_depth), 1);
    h.columns = numbered("", static_cast<size_t>(windows), 0);
    h.values.assign(static_cast<size_t>(s.core_depth),
                    std::vector<double>(static_cast<size_t>(windows), 0.0));
    for (const auto& [key, share] : cells)
      if (key.first >= 1 && key.first <= s.core_depth && key.second < windows)
        h.values[static_cast<size_t>(key.first - 1)][static_cast<size_t>(key.second)] = share;
    h.digits = windows > 12 ? -1 : 2;
    out += html_figure(
        svg::heatmap(h),
        "Share of the label's sequences whose route at (depth, window) is the mode-path "
        "expert; 0 where no sequence reaches the window.");
  }
  return out;
}

std::string similarity_section(const RouteStats& s) {
  if (s.similarity_labels.size() < 2) return "";
  svg::Heatmap h;
  h.title = "Path similarity between labels";
  h.row_title = h.column_title = "label";
  h.rows = h.columns = s.similarity_labels;
  h.values = s.label_similarity;
  h.digits = s.similarity_labels.size() <= 12 ? 2 : -1;
  return "<h2>Labels that share paths</h2>\n" +
         html_figure(svg::heatmap(h),
                     "Cosine similarity of two labels' expert utilisation (the share of windows "
                     "choosing each expert at each depth, as one vector). 1: the same experts in "
                     "the same proportions at every depth; `lol path stats --group` compares "
                     "groups of labels (e.g. languages by script).");
}

std::string pca_section(const std::optional<PathPca>& pca) {
  if (!pca || pca->explained.size() < 2) return "";
  svg::Scatter sc;
  sc.title = "One-hot routing paths, first two principal components";
  sc.x_title = "PC1 (" + fixed(100 * pca->explained[0], 1) + "% of variance)";
  sc.y_title = "PC2 (" + fixed(100 * pca->explained[1], 1) + "%)";
  std::map<std::string, size_t> index;
  for (const auto& l : pca->labels) index.emplace(l, 0);
  for (auto& [label, i] : index) {
    i = sc.groups.size();
    sc.groups.push_back(label);
  }
  for (size_t s = 0; s < pca->labels.size(); ++s) {
    sc.x.push_back(pca->coordinates[s][0]);
    sc.y.push_back(pca->coordinates[s][1]);
    sc.group.push_back(index[pca->labels[s]]);
  }
  return "<h2>Paths by label</h2>\n" +
         html_figure(svg::scatter(sc),
                     "Each sequence's path (the share of its windows that ran each expert at each "
                     "depth) projected on the first two principal components of the set, coloured "
                     "by label. Separate clouds: the labels take different paths.");
}

std::string margins_section(const RouteStats& s) {
  std::string out = "<h2>Routing margins</h2>\n";
  std::vector<std::string> labels;
  for (double e : s.margin_edges) labels.push_back(std::isfinite(e) ? "≤" + shortest(e) : "more");
  std::vector<double> shares;
  int64_t total = 0;
  for (auto c : s.margin_counts) total += c;
  for (auto c : s.margin_counts)
    shares.push_back(total ? static_cast<double>(c) / static_cast<double>(total) : 0.0);
  svg::BarChart b;
  b.title = "Top-2 margin of p + b";
  b.y_title = "share of routing decisions";
  b.labels = labels;
  b.values = shares;
  out +=
      html_figure(svg::bar_chart(b), std::to_string(total) +
                                         " decisions. Small margins mean the router is close to a "
                                         "tie between its two best experts.");
  if (s.flips_measured > 0) {
    svg::BarChart f;
    f.title = "Route flips under a perturbation of the router input, by margin";
    f.y_title = "share of windows whose choice flipped";
    f.labels = labels;
    f.values = s.flip_rate_by_margin;
    f.max = 1;
    std::string by_depth;
    for (size_t l = 0; l < s.flip_rate_by_depth.size(); ++l)
      by_depth += (l ? ", " : "") + fixed(s.flip_rate_by_depth[l], 3);
    out += html_figure(svg::bar_chart(f), "Flip rate " + fixed(s.flip_rate, 4) + " over " +
                                              std::to_string(s.flips_measured) +
                                              " windows; by depth: " + by_depth + ".");
  }
  return out;
}

std::string bias_section(const RouteStats& s) {
  std::string out = "<h2>Windows the balancing bias decided</h2>\n";
  svg::BarChart b;
  b.title = "Router choice (argmax of the balanced scores) other than the argmax of p, by depth";
  b.y_title = "share of windows";
  b.labels = numbered("depth ", s.bias_decided_by_depth.size(), 1);
  b.values = s.bias_decided_by_depth;
  b.max = 1;
  std::string by_label;
  for (const auto& [label, share] : s.bias_decided_by_label)
    by_label += (by_label.empty() ? "" : ", ") + svg::escape(label) + " " + fixed(share, 3);
  return out +
         html_figure(
             svg::bar_chart(b),
             "Share of all windows " + fixed(s.bias_decided, 3) + "; by label: " + by_label +
                 ". There the bias, not the router's preference, picked the "
                 "expert, and a mode path by the mean p (SPEC 3.6) can name an "
                 "expert those windows did not run (the routed rule follows "
                 "them). Windows run with a gate below " +
                 skip_gate_text() + (s.skip ? " or routed to the skip" : "") +
                 " (skips: the block adds almost nothing): " + fixed(s.skipped, 3) + " of all, " +
                 fixed(s.skipped_of_bias_decided, 3) + " of those the bias decided.");
}

std::string probes_section(const std::vector<ProbeResult>& probes,
                           const std::optional<ReadoutResult>& readouts) {
  if (probes.empty())
    return "<h2>Probes</h2>\n<p>Not run: the route file holds a single label.</p>\n";
  std::string out = "<h2>Probes: what the router's probabilities encode</h2>\n";
  svg::BarChart b;
  b.title = "Cross-validated AUROC of a ridge probe";
  b.y_title = "AUROC (0.5 = chance)";
  b.max = 1;
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : probes) {
    b.labels.push_back(p.level);
    b.values.push_back(p.auroc);
    b.labels.push_back(p.level + " shuffled");
    b.values.push_back(p.shuffled_mean);
    rows.push_back({p.level, std::to_string(p.samples), std::to_string(p.features),
                    fixed(p.auroc, 4), fixed(p.shuffled_mean, 4), fixed(p.shuffled_max, 4)});
  }
  out += html_figure(svg::bar_chart(b),
                     "Each level's AUROC beside the mean of its label-shuffled control.");
  out +=
      html_table({"level", "samples", "features", "AUROC", "shuffled mean", "shuffled max"}, rows);
  if (readouts)
    out +=
        "<p>Simpler window-level readouts (paper table 2), cross-validated AUROC:</p>\n" +
        html_table({"readout", "AUROC"},
                   {{"top-1 ridge (winning-expert probability at every depth)",
                     fixed(readouts->top1_ridge, 4)},
                    {"single winning-expert probability (depth and sign from training folds)",
                     fixed(readouts->winning_expert, 4)},
                    {"expert-frequency log-likelihood ratio", fixed(readouts->frequency_llr, 4)}});
  return out;
}

std::string eval_section(const json& eval) {
  if (eval.is_null()) return "";
  check_path_eval_results(eval);
  std::string out = "<h2>Forced paths on held-out problems</h2>\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : eval) {
    auto number = [&](const char* key) {
      return c.contains(key) && c[key].is_number() ? c[key].get<double>() : 0.0;
    };
    rows.push_back({c["condition"].get<std::string>(), std::to_string(c["count"].get<int64_t>()),
                    fixed(number("strategy_as_requested"), 3), fixed(number("trace_legal"), 3),
                    fixed(number("trace_rule_faithful"), 3), fixed(number("answer_correct"), 3),
                    c.contains("donor_followed") ? fixed(number("donor_followed"), 3) : ""});
  }
  out += html_table({"condition", "count", "as requested", "legal", "faithful", "answer", "donor"},
                    rows);
  for (const auto& c : eval) {
    const auto names = c["strategies"].get<std::vector<std::string>>();  // none, 1..5
    const auto matrix = c["confusion"].get<std::vector<std::vector<double>>>();
    svg::Heatmap h;
    h.title = "condition: " + c["condition"].get<std::string>();
    h.row_title = "requested";
    h.column_title = "followed";
    h.rows.assign(names.begin() + 1, names.end());
    h.columns = names;
    h.values = matrix;
    h.min = 0;
    h.max = 0;
    for (const auto& row : matrix)
      for (double v : row) h.max = std::max(h.max, v);
    h.digits = 0;
    out += html_figure(svg::heatmap(h),
                       "Generations per requested strategy (row) by the strategy the "
                       "trace followed (column; none: no strategy's exact trace).");
  }
  return out;
}

}  // namespace

json check_path_eval_results(const json& results) {
  LOL_CHECK(results.is_array() && !results.empty(),
            "path eval results must be the non-empty JSON array lol path eval --json writes");
  for (const auto& c : results) {
    LOL_CHECK(c.is_object() && c.contains("condition") && c["condition"].is_string() &&
                  c.contains("count") && c["count"].is_number_integer(),
              "each path eval result needs a \"condition\" string and a \"count\"");
    const std::string where = "condition '" + c["condition"].get<std::string>() + "': ";
    LOL_CHECK(c.contains("strategies") && c["strategies"].is_array() && c["strategies"].size() == 6,
              where, "\"strategies\" must list 6 names (none, then 1..5)");
    for (const auto& n : c["strategies"])
      LOL_CHECK(n.is_string(), where, "\"strategies\" must hold strings");
    LOL_CHECK(c.contains("confusion") && c["confusion"].is_array() && c["confusion"].size() == 5,
              where, "\"confusion\" must have 5 rows (requested 1..5)");
    for (const auto& row : c["confusion"]) {
      LOL_CHECK(row.is_array() && row.size() == 6, where,
                "each confusion row must have 6 counts (followed none, 1..5)");
      for (const auto& v : row)
        LOL_CHECK(v.is_number() && v.get<double>() >= 0, where, "counts must be numbers >= 0");
    }
  }
  return results;
}

std::string html_report(const ReportInputs& in) {
  const auto& s = in.stats;
  std::string body = html_table({"model", "source", "sequences", "core depth D", "library L"},
                                {{in.header.model, in.header.source, std::to_string(s.sequences),
                                  std::to_string(s.core_depth), std::to_string(s.library_size)}});
  body += utilisation_section(s) + paths_section(s) + agreement_section(s) + similarity_section(s) +
          pca_section(in.pca) + margins_section(s) + bias_section(s) +
          probes_section(in.probes, in.readouts) + eval_section(in.path_eval);
  body += "<p><small>Written by lol (docs/analysis.md explains every picture).</small></p>\n";
  return svg::html_page(in.title, body);
}

}  // namespace lol
