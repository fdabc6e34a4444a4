#include "analysis/stats.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

#include "util/error.h"

namespace lol {

std::string skip_gate_text() {
  std::ostringstream out;
  out << kSkipGate;
  return out.str();
}

double expected_distinct_experts(int64_t library_size, int64_t depth) {
  const double L = static_cast<double>(library_size);
  return L * (1.0 - std::pow(1.0 - 1.0 / L, static_cast<double>(depth)));
}

RouteStatsBuilder::RouteStatsBuilder(int64_t core_depth, int64_t library_size, bool skip)
    : depth_(core_depth), library_(library_size), skip_(skip) {
  LOL_CHECK(core_depth > 0 && library_size > 0,
            "route statistics need core_depth and library_size > 0");
  distinct_counts_.assign(static_cast<size_t>(std::min(core_depth, library_size)) + 1, 0);
  margin_edges_ = {1e-4, 1e-3, 1e-2, 0.05, 0.1, 0.2, 0.5, std::numeric_limits<double>::infinity()};
  margin_counts_.assign(margin_edges_.size(), 0);
  flips_by_depth_.assign(static_cast<size_t>(core_depth), 0);
  measured_by_depth_ = flips_by_depth_;
  flips_by_margin_.assign(margin_edges_.size(), 0);
  measured_by_margin_ = flips_by_margin_;
  decided_by_depth_.assign(static_cast<size_t>(core_depth), 0);
  windows_by_depth_ = decided_by_depth_;
  skipped_by_depth_ = decided_by_depth_;
}

void RouteStatsBuilder::add(const SequenceRoutes& s) {
  ++sequences_;
  const auto L = static_cast<size_t>(library_);
  for (const std::string& label : {std::string("*"), s.label}) {
    auto& counts = window_counts_[label];
    if (counts.empty()) counts.assign(static_cast<size_t>(depth_), std::vector<double>(L, 0.0));
    for (const auto& w : s.windows)
      counts[static_cast<size_t>(w.route.depth - 1)][static_cast<size_t>(w.route.expert)] += 1;
  }
  auto& cells = cells_[s.label];
  auto& decided_here = decided_by_label_[s.label];
  for (const auto& w : s.windows) {
    // The first maximum of p, as the router's argmax takes it.
    const auto& p = w.route.probs;
    const auto top = std::max_element(p.begin(), p.end()) - p.begin();
    const bool decided = w.route.router_choice != top;
    const auto depth = static_cast<size_t>(w.route.depth - 1);
    decided_by_depth_[depth] += decided;
    ++windows_by_depth_[depth];
    const bool chose = skip_ && w.route.expert == library_ - 1;  // the skip itself
    const bool skip = w.route.gate < kSkipGate || chose;
    skipped_by_depth_[depth] += skip;
    skipped_decided_ += skip && decided;
    if (skip_) {
      auto& by_window = skip_by_window_[w.route.window];
      by_window.first += chose;
      ++by_window.second;
      if (w.route.window > 0) {
        auto& by_label = skip_by_label_[s.label];
        by_label.first += chose;
        ++by_label.second;
      }
      if (w.route.length > 0) {
        window_tokens_ += w.route.length;
        skip_tokens_ += chose ? w.route.length : 0;
      }
    }
    decided_here.first += decided;
    ++decided_here.second;
    auto& cell = cells[{w.route.depth, w.route.window}];
    if (cell.first.empty()) {
      cell.first.assign(L, 0.0);
      cell.second.assign(L, 0);
    }
    for (size_t m = 0; m < L; ++m) cell.first[m] += w.route.probs[m];
    ++cell.second[static_cast<size_t>(w.route.expert)];
    size_t bin = 0;
    while (bin + 1 < margin_edges_.size() && !(w.route.margin <= margin_edges_[bin])) ++bin;
    ++margin_counts_[bin];
    if (w.flipped) {
      const auto l = static_cast<size_t>(w.route.depth - 1);
      ++measured_by_depth_[l];
      ++measured_by_margin_[bin];
      flips_by_depth_[l] += *w.flipped;
      flips_by_margin_[bin] += *w.flipped;
    }
  }
  // Token paths: the expert of the window holding each token, at every depth. The path is
  // constant between window boundaries, so it is evaluated once per segment between
  // consecutive boundaries of any depth and weighted by the segment's tokens (memory and time
  // grow with the windows, not with the sequence's length).
  struct Span {
    int64_t start, end, expert;
  };
  std::vector<std::vector<Span>> spans(static_cast<size_t>(depth_));
  std::vector<int64_t> cuts = {0, s.length};
  for (const auto& w : s.windows) {
    if (w.route.length <= 0) continue;
    const int64_t end = std::min(s.length, w.route.position + w.route.length);
    spans[static_cast<size_t>(w.route.depth - 1)].push_back(
        {w.route.position, end, w.route.expert});
    cuts.push_back(w.route.position);
    cuts.push_back(end);
  }
  for (auto& d : spans)
    std::sort(d.begin(), d.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<size_t> cursor(spans.size(), 0);
  std::vector<uint8_t> seen(L);
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const int64_t from = cuts[c], tokens = cuts[c + 1] - cuts[c];
    if (from < 0 || from >= s.length || tokens <= 0) continue;
    std::fill(seen.begin(), seen.end(), 0);
    int64_t distinct = 0;
    bool complete = true;
    for (size_t l = 0; l < spans.size() && complete; ++l) {
      auto& k = cursor[l];
      while (k < spans[l].size() && spans[l][k].end <= from) ++k;
      complete = k < spans[l].size() && spans[l][k].start <= from;
      if (!complete) break;
      const auto e = static_cast<size_t>(spans[l][k].expert);
      distinct += !seen[e];
      seen[e] = 1;
    }
    if (!complete) continue;
    token_paths_ += tokens;
    distinct_sum_ += static_cast<double>(distinct * tokens);
    distinct_counts_[static_cast<size_t>(distinct)] += tokens;
  }
}

RouteStats RouteStatsBuilder::finish() const {
  RouteStats r;
  r.core_depth = depth_;
  r.library_size = library_;
  r.skip = skip_;
  r.sequences = sequences_;
  r.token_paths = token_paths_;
  for (const auto& [label, counts] : window_counts_) {
    auto& shares = r.utilisation[label];
    for (const auto& row : counts) {
      double total = 0;
      for (double x : row) total += x;
      std::vector<double> share;
      for (double x : row) share.push_back(total > 0 ? x / total : 0.0);
      shares.push_back(share);
    }
  }
  if (token_paths_ > 0) {
    const double n = static_cast<double>(token_paths_);
    r.mean_distinct = distinct_sum_ / n;
    r.mean_repeated = static_cast<double>(depth_) - r.mean_distinct;
    r.mean_unused = static_cast<double>(library_) - r.mean_distinct;
    for (size_t u = 1; u < distinct_counts_.size(); ++u)
      r.distinct_share.push_back(static_cast<double>(distinct_counts_[u]) / n);
  }
  r.expected_distinct = expected_distinct_experts(library_, depth_);
  for (const auto& [label, cells] : cells_)
    for (const auto& [key, cell] : cells) {
      size_t mode = 0;
      for (size_t m = 1; m < cell.first.size(); ++m)
        if (cell.first[m] > cell.first[mode]) mode = m;
      int64_t total = 0;
      for (auto c : cell.second) total += c;
      r.agreement[label][key] =
          total > 0 ? static_cast<double>(cell.second[mode]) / static_cast<double>(total) : 0.0;
    }
  r.margin_edges = margin_edges_;
  r.margin_counts = margin_counts_;
  auto rate = [](int64_t flips, int64_t measured) {
    return measured > 0 ? static_cast<double>(flips) / static_cast<double>(measured) : 0.0;
  };
  int64_t flips = 0;
  for (size_t l = 0; l < flips_by_depth_.size(); ++l) {
    flips += flips_by_depth_[l];
    r.flips_measured += measured_by_depth_[l];
  }
  if (r.flips_measured > 0) {
    r.flip_rate = rate(flips, r.flips_measured);
    for (size_t l = 0; l < flips_by_depth_.size(); ++l)
      r.flip_rate_by_depth.push_back(rate(flips_by_depth_[l], measured_by_depth_[l]));
    for (size_t b = 0; b < flips_by_margin_.size(); ++b)
      r.flip_rate_by_margin.push_back(rate(flips_by_margin_[b], measured_by_margin_[b]));
  }
  int64_t decided = 0, windows = 0;
  for (size_t l = 0; l < decided_by_depth_.size(); ++l) {
    decided += decided_by_depth_[l];
    windows += windows_by_depth_[l];
    r.bias_decided_by_depth.push_back(rate(decided_by_depth_[l], windows_by_depth_[l]));
  }
  r.bias_decided = rate(decided, windows);
  int64_t skipped = 0;
  for (size_t l = 0; l < skipped_by_depth_.size(); ++l) {
    skipped += skipped_by_depth_[l];
    r.skipped_by_depth.push_back(rate(skipped_by_depth_[l], windows_by_depth_[l]));
  }
  r.skipped = rate(skipped, windows);
  r.skipped_of_bias_decided = rate(skipped_decided_, decided);
  for (const auto& [label, counts] : decided_by_label_)
    r.bias_decided_by_label[label] = rate(counts.first, counts.second);
  int64_t chose = 0, later = 0;
  for (const auto& [k, counts] : skip_by_window_) {
    r.skip_share_by_window[k] = rate(counts.first, counts.second);
    if (k > 0) chose += counts.first, later += counts.second;
  }
  r.skip_share = rate(chose, later);
  for (const auto& [label, counts] : skip_by_label_)
    r.skip_share_by_label[label] = rate(counts.first, counts.second);
  r.skip_token_depths = rate(skip_tokens_, window_tokens_);
  std::vector<const std::vector<std::vector<double>>*> usage;
  for (const auto& [label, shares] : r.utilisation)
    if (label != "*") r.similarity_labels.push_back(label), usage.push_back(&shares);
  auto dot = [](const std::vector<std::vector<double>>& a,
                const std::vector<std::vector<double>>& b) {
    double sum = 0;
    for (size_t l = 0; l < a.size(); ++l)
      for (size_t e = 0; e < a[l].size(); ++e) sum += a[l][e] * b[l][e];
    return sum;
  };
  const size_t n = usage.size();
  r.label_similarity.assign(n, std::vector<double>(n, 0.0));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      const double norms = std::sqrt(dot(*usage[i], *usage[i]) * dot(*usage[j], *usage[j]));
      r.label_similarity[i][j] = norms > 0 ? dot(*usage[i], *usage[j]) / norms : 0.0;
    }
  return r;
}

GroupSimilarity group_similarity(const RouteStats& stats,
                                 const std::map<std::string, std::string>& group_of) {
  GroupSimilarity g;
  const auto& labels = stats.similarity_labels;
  for (size_t i = 0; i < labels.size(); ++i) {
    for (size_t j = 0; j < labels.size(); ++j) {
      if (i == j) continue;
      const double s = stats.label_similarity[i][j];
      auto near = g.nearest.find(labels[i]);
      if (near == g.nearest.end() || s > near->second.second) g.nearest[labels[i]] = {labels[j], s};
      if (j < i) continue;
      const auto a = group_of.find(labels[i]), b = group_of.find(labels[j]);
      if (a == group_of.end() || b == group_of.end()) continue;
      if (a->second == b->second)
        g.within += s, ++g.within_pairs;
      else
        g.across += s, ++g.across_pairs;
    }
  }
  if (g.within_pairs) g.within /= static_cast<double>(g.within_pairs);
  if (g.across_pairs) g.across /= static_cast<double>(g.across_pairs);
  return g;
}

json RouteStats::to_json() const {
  json agreement_json = json::object();
  for (const auto& [label, cells] : agreement) {
    json list = json::array();
    for (const auto& [key, share] : cells)
      list.push_back({{"depth", key.first}, {"window", key.second}, {"share", share}});
    agreement_json[label] = list;
  }
  json edges = json::array();
  for (double e : margin_edges) edges.push_back(std::isfinite(e) ? json(e) : json(nullptr));
  json j = {{"core_depth", core_depth},
            {"library_size", library_size},
            {"router_skip", skip},
            {"sequences", sequences},
            {"token_paths", token_paths},
            {"utilisation", utilisation},
            {"distinct_experts",
             {{"mean", mean_distinct},
              {"expected_uniform", expected_distinct},
              {"mean_repeated", mean_repeated},
              {"mean_unused", mean_unused},
              {"share_by_count", distinct_share}}},
            {"mode_path_agreement", agreement_json},
            {"label_similarity", {{"labels", similarity_labels}, {"cosine", label_similarity}}},
            {"margins", {{"upper_edges", edges}, {"counts", margin_counts}}},
            {"bias_decided",
             {{"share", bias_decided},
              {"by_depth", bias_decided_by_depth},
              {"by_label", bias_decided_by_label}}},
            {"skipped",
             {{"gate_below", kSkipGate},
              {"share", skipped},
              {"by_depth", skipped_by_depth},
              {"share_of_bias_decided", skipped_of_bias_decided}}}};
  if (skip) {
    json by_window = json::object();
    for (const auto& [k, share] : skip_share_by_window) by_window[std::to_string(k)] = share;
    j["skip_chosen"] = {{"share_after_window0", skip_share},
                        {"by_window", by_window},
                        {"by_label", skip_share_by_label},
                        {"token_depths", skip_token_depths}};
  }
  if (flips_measured > 0)
    j["flips"] = {{"measured", flips_measured},
                  {"rate", flip_rate},
                  {"by_depth", flip_rate_by_depth},
                  {"by_margin_bin", flip_rate_by_margin}};
  return j;
}

std::string RouteStats::to_text() const {
  std::ostringstream out;
  out << std::fixed << std::setprecision(3);
  out << sequences << " sequences, " << token_paths << " token paths, D " << core_depth << ", L "
      << (skip ? library_size - 1 : library_size) << (skip ? " and the skip" : "") << "\n";
  out << "distinct experts per path U " << mean_distinct
      << " (independent uniform: " << expected_distinct << "), repeated " << mean_repeated
      << ", unused " << mean_unused << "\n";
  out << "utilisation per depth (all labels):\n";
  const auto& all = utilisation.at("*");
  for (size_t l = 0; l < all.size(); ++l) {
    out << "  depth " << l + 1 << ":";
    for (double x : all[l]) out << " " << x;
    out << "\n";
  }
  out << "agreement with the label's mode path, mean over cells:\n";
  for (const auto& [label, cells] : agreement) {
    double sum = 0;
    for (const auto& [key, share] : cells) sum += share;
    out << "  " << label << " " << (cells.empty() ? 0.0 : sum / static_cast<double>(cells.size()))
        << "\n";
  }
  if (similarity_labels.size() >= 2) {
    out << "labels sharing paths (cosine of utilisation), nearest other label:\n";
    for (const auto& [label, near] : group_similarity(*this, {}).nearest)
      out << "  " << label << " ~ " << near.first << " " << near.second << "\n";
  }
  auto bin_name = [&](size_t i) {
    return std::isfinite(margin_edges[i]) ? "<=" + std::to_string(margin_edges[i]).substr(0, 6)
                                          : std::string("more");
  };
  out << "margins (top-2 of p + b):";
  int64_t total = 0;
  for (auto c : margin_counts) total += c;
  for (size_t i = 0; i < margin_edges.size(); ++i)
    out << " " << bin_name(i) << ":"
        << (total > 0 ? static_cast<double>(margin_counts[i]) / static_cast<double>(total) : 0.0);
  out << "\n";
  out << "windows the balancing bias decided (router choice not the argmax of p): " << bias_decided
      << "\n  by depth:";
  for (double x : bias_decided_by_depth) out << " " << x;
  out << "\n  by label:";
  for (const auto& [label, share] : bias_decided_by_label) out << " " << label << ":" << share;
  out << "\n";
  out << "windows skipped (gate below " << skip_gate_text() << (skip ? " or the skip" : "")
      << "): " << skipped << "\n  by depth:";
  for (double x : skipped_by_depth) out << " " << x;
  out << "\n  of the windows the bias decided: " << skipped_of_bias_decided << "\n";
  if (skip) {
    out << "the skip chosen: " << skip_share << " of the windows after window 0, "
        << skip_token_depths << " of the core's token-depths\n  by window:";
    size_t n = 0;  // ten windows a line: a long text sequence holds many
    for (const auto& [k, share] : skip_share_by_window) {
      if (n > 0 && n % 10 == 0) out << "\n   ";
      out << " " << k << ":" << share;
      ++n;
    }
    out << "\n  by label (after window 0):";
    for (const auto& [label, share] : skip_share_by_label) out << " " << label << ":" << share;
    out << "\n";
  }
  if (flips_measured > 0) {
    out << "route flips under a perturbation of the router input: " << flip_rate << " of "
        << flips_measured << " windows\n  by depth:";
    for (double x : flip_rate_by_depth) out << " " << x;
    out << "\n  by margin:";
    for (size_t i = 0; i < margin_edges.size(); ++i)
      if (margin_counts[i] > 0) out << " " << bin_name(i) << ":" << flip_rate_by_margin[i];
    out << "\n";
  }
  return out.str();
}

}  // namespace lol
