// Training runs side by side (docs/analysis.md, lol compare).
#include "analysis/compare.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "analysis/svg.h"
#include "model/checkpoint.h"
#include "train/train_config.h"
#include "util/enums.h"
#include "util/error.h"
#include "util/files.h"

namespace lol {

namespace {

std::string format(const char* pattern, double x) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), pattern, x);
  return buffer;
}

// 9.47M, 2.31G, 1.20e+15 above tera.
std::string human(double x) {
  const char* units[] = {"", "k", "M", "G", "T"};
  int u = 0;
  while (u < 4 && std::abs(x) >= 1000) x /= 1000, ++u;
  return std::abs(x) >= 1000 ? format("%.2e", x * 1e12) : format("%.2f", x) + units[u];
}

std::vector<std::string> table_row(const RunSummary& r) {
  return {r.name,
          family_label(r.config),
          human(static_cast<double>(r.stats.stored_params)),
          human(static_cast<double>(r.stats.active_params)),
          human(r.stats.train_flops_per_token),
          std::to_string(r.steps),
          human(static_cast<double>(r.tokens)),
          human(r.train_flops),
          format("%.4f", r.final_loss),
          r.bits_per_byte ? format("%.4f", *r.bits_per_byte) : "-",
          r.final_source};
}

const std::vector<std::string> kHeader = {
    "run",    "family",      "stored params", "active params", "train FLOPs/token", "steps",
    "tokens", "train FLOPs", "held-out loss", "bits/byte",     "loss from"};

}  // namespace

std::string family_label(const ModelConfig& c) {
  const std::string attention = c.core_attention == CoreAttention::kFull
                                    ? ""
                                    : std::string(" ") + enum_name(c.core_attention);
  switch (c.family) {
    case Family::kLol:
      return "lol L=" + std::to_string(c.library_size);
    case Family::kDense:
      return "dense" + attention;
    case Family::kLooped:
      return "looped R=" + std::to_string(c.loop_blocks) + attention;
    case Family::kMoe:
      return "moe E=" + std::to_string(c.moe_experts) + "/top" + std::to_string(c.moe_top_k) +
             attention;
  }
  return enum_name(c.family);
}

RunSummary read_run_summary(const std::string& run_dir) {
  namespace fs = std::filesystem;
  RunSummary r;
  r.dir = run_dir;
  r.name = fs::path(run_dir).lexically_normal().filename().string();
  if (r.name.empty()) r.name = fs::path(run_dir).lexically_normal().parent_path().filename();
  const auto train = read_json_file(run_dir + "/train_config.json", TrainConfig::from_json);
  r.config = load_model_config_from_dir(resolve_model_dir(run_dir));
  r.stats = model_stats(r.config, train.seq_len);

  const std::string metrics = run_dir + "/metrics.jsonl";
  LOL_CHECK(path_exists(metrics), run_dir, " has no metrics.jsonl: not a training run");
  std::ifstream in(metrics);
  std::string line;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.empty()) continue;
    const json j = json::parse(line, nullptr, false);
    auto number = [&](const char* key) {
      LOL_CHECK(j.is_object() && j.contains(key) && j[key].is_number(), metrics, " line ",
                line_number, ": no number \"", key, "\"");
      return j[key].get<double>();
    };
    r.steps = static_cast<int64_t>(number("step"));
    r.train_flops = number("total_flops");
    if (j.contains("eval_loss")) r.curve.push_back({r.steps, r.train_flops, number("eval_loss")});
  }
  r.tokens = r.steps * train.batch_rows * train.seq_len * train.grad_accum;
  const std::string eval = run_dir + "/eval.json";
  if (path_exists(eval)) {
    const json e = read_json_file(eval, [](const json& j) { return j; });
    LOL_CHECK(e.contains("all") && e["all"].contains("loss") && e["all"]["loss"].is_number(), eval,
              ": no all.loss (write it with lol eval --json-out)");
    r.final_loss = e["all"]["loss"].get<double>();
    if (e["all"].contains("bits_per_byte") && e["all"]["bits_per_byte"].is_number() &&
        e["all"]["bits_per_byte"].get<double>() > 0)
      r.bits_per_byte = e["all"]["bits_per_byte"].get<double>();
    r.final_source = "eval.json";
  } else {
    LOL_CHECK(!r.curve.empty(), metrics,
              " has no eval_loss and there is no eval.json: nothing to compare");
    r.final_loss = r.curve.back().loss;
    r.final_source = "metrics";
  }
  return r;
}

json comparison_json(const std::vector<RunSummary>& runs) {
  json out = json::array();
  for (const auto& r : runs) {
    json curve = json::array();
    for (const auto& p : r.curve)
      curve.push_back({{"step", p.step}, {"flops", p.flops}, {"loss", p.loss}});
    json j = {{"run", r.name},
              {"dir", r.dir},
              {"family", family_label(r.config)},
              {"stored_params", r.stats.stored_params},
              {"active_params", r.stats.active_params},
              {"train_flops_per_token", r.stats.train_flops_per_token},
              {"steps", r.steps},
              {"tokens", r.tokens},
              {"train_flops", r.train_flops},
              {"final_loss", r.final_loss},
              {"final_loss_from", r.final_source},
              {"curve", curve}};
    if (r.bits_per_byte) j["bits_per_byte"] = *r.bits_per_byte;
    out.push_back(j);
  }
  return out;
}

std::string comparison_markdown(const std::vector<RunSummary>& runs) {
  std::string out = "|";
  for (const auto& h : kHeader) out += " " + h + " |";
  out += "\n|";
  for (size_t i = 0; i < kHeader.size(); ++i) out += i < 2 ? " --- |" : " ---: |";
  out += "\n";
  for (const auto& r : runs) {
    out += "|";
    for (const auto& cell : table_row(r)) out += " " + cell + " |";
    out += "\n";
  }
  return out;
}

std::string comparison_html(const std::vector<RunSummary>& runs, const std::string& title) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> names;
  svg::Scatter curves, by_params, by_cost;
  curves.title = "Held-out loss during training";
  curves.x_title = "training FLOPs";
  curves.y_title = "held-out loss (nats/token)";
  curves.lines = curves.log_x = true;
  by_params.title = "Final held-out loss against parameters";
  by_params.x_title = "stored parameters";
  by_cost.title = "Final held-out loss against executed cost";
  by_cost.x_title = "training FLOPs per token";
  for (auto* s : {&by_params, &by_cost}) {
    s->y_title = curves.y_title;
    s->log_x = true;
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    rows.push_back(table_row(r));
    names.push_back(r.name + " (" + family_label(r.config) + ")");
    for (const auto& p : r.curve) {
      curves.x.push_back(p.flops);
      curves.y.push_back(p.loss);
      curves.group.push_back(i);
    }
    by_params.x.push_back(static_cast<double>(r.stats.stored_params));
    by_cost.x.push_back(r.stats.train_flops_per_token);
    for (auto* s : {&by_params, &by_cost}) {
      s->y.push_back(r.final_loss);
      s->group.push_back(i);
    }
  }
  for (auto* s : {&curves, &by_params, &by_cost}) s->groups = names;
  std::string body = svg::html_table(kHeader, rows);
  body += svg::html_figure(svg::scatter(curves),
                           "The eval_loss lines of each run's metrics.jsonl (a few held-out "
                           "batches) against the training FLOPs spent so far.");
  body += svg::html_figure(svg::scatter(by_params),
                           "Final held-out loss (lol eval over the whole split when the run has "
                           "eval.json) against every stored parameter.");
  body += svg::html_figure(svg::scatter(by_cost),
                           "The same losses against the FLOPs one training token executes "
                           "(forward and backward, attention included).");
  body += "<p><small>Written by lol compare (docs/analysis.md).</small></p>\n";
  return svg::html_page(title, body);
}

}  // namespace lol
