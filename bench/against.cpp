#include "against.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <iostream>
#include <map>
#include <vector>

#include "bench_util.h"
#include "util/error.h"
#include "util/fields.h"
#include "util/files.h"

namespace lol::bench {
namespace {

// This process's arguments after the program name, less --against, --rounds and the output
// format (each in its "--flag value" and "--flag=value" forms), with -o json added.
std::vector<std::string> child_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string a; std::getline(in, a, '\0');) args.push_back(a);
  std::vector<std::string> kept;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--against" || a == "--rounds" || a == "-o" || a == "--output") {
      ++i;  // and its value
      continue;
    }
    const bool joined = a.rfind("--against=", 0) == 0 || a.rfind("--rounds=", 0) == 0 ||
                        a.rfind("--output=", 0) == 0 || (a.size() > 2 && a.rfind("-o", 0) == 0);
    if (!joined) kept.push_back(a);
  }
  kept.push_back("-o");
  kept.push_back("json");
  return kept;
}

std::string own_executable() {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  LOL_CHECK(n > 0, "--against: cannot read this program's path from /proc/self/exe");
  return std::string(path, static_cast<size_t>(n));
}

// One run of a build: its JSON document, read from the file its stdout went to.
json run_build(const std::string& exe, const std::vector<std::string>& args,
               const std::string& out_path) {
  std::string command = shell_quote(exe);
  for (const auto& a : args) command += " " + shell_quote(a);
  const int rc = run_command(command + " > " + shell_quote(out_path));
  LOL_CHECK(rc == 0, "--against: ", exe, " failed (exit status ", rc, "); its output is above");
  json doc;
  try {
    doc = json::parse(read_text_file(out_path));
  } catch (const std::exception& e) {
    fail("--against: ", exe, " did not write a bench suite's JSON: ", e.what());
  }
  LOL_CHECK(doc.is_object() && doc.contains("rows") && doc["rows"].is_array(), "--against: ", exe,
            " wrote JSON without rows");
  return doc;
}

// A row's figures over the rounds, from each build.
struct Series {
  json identity;  // the row's text and integer fields
  std::vector<double> a, b;
};

class Rows {
 public:
  void add(const json& doc, bool from_a) {
    for (const auto& row : doc["rows"]) {
      if (!row.is_object() || !row.contains("tokens_per_s") || !row["tokens_per_s"].is_number())
        continue;
      const double rate = row["tokens_per_s"].get<double>();
      if (rate <= 0) continue;  // rows without a throughput of their own
      json id = json::object();
      for (const auto& [key, value] : row.items())
        if (key != "round" && (value.is_string() || value.is_number_integer())) id[key] = value;
      auto [it, fresh] = index_.emplace(id.dump(), series_.size());
      if (fresh) series_.push_back({id, {}, {}});
      (from_a ? series_[it->second].a : series_[it->second].b).push_back(rate);
    }
  }
  const std::vector<Series>& series() const { return series_; }

 private:
  std::vector<Series> series_;  // in the order rows first appeared
  std::map<std::string, size_t> index_;
};

std::string range(const std::vector<double>& xs) {
  if (xs.empty()) return "-";
  return fixed(*std::min_element(xs.begin(), xs.end()), 1) + ".." +
         fixed(*std::max_element(xs.begin(), xs.end()), 1);
}

std::string cell(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

}  // namespace

void bench_against(const AgainstOptions& o) {
  LOL_CHECK(::access(o.other.c_str(), X_OK) == 0 && !is_directory(o.other), "--against: '", o.other,
            "' is not an executable file (give the other build's lol)");
  LOL_CHECK(o.rounds >= 1, "--rounds: at least 1");
  const std::string self = own_executable();
  const auto args = child_arguments();
  const std::string dir = "/tmp/lol-bench-against-" + std::to_string(::getpid());
  make_directories(dir);
  Rows rows;
  std::string commit_a, commit_b;
  try {
    for (int r = 0; r < o.rounds; ++r) {
      // A B in odd rounds, B A in even ones: a drift in the machine's speed falls on both.
      for (int k = 0; k < 2; ++k) {
        const bool a = (r % 2 == 0) == (k == 0);
        std::cerr << "round " << r + 1 << "/" << o.rounds << ": " << (a ? "A (this build)" : "B")
                  << "\n";
        const json doc = run_build(a ? self : o.other, args, dir + "/run.json");
        (a ? commit_a : commit_b) = doc.value("commit", std::string("?"));
        rows.add(doc, a);
      }
    }
  } catch (...) {
    remove_tree(dir);
    throw;
  }
  remove_tree(dir);
  LOL_CHECK(!rows.series().empty(),
            "--against: the suite's rows carry no tokens/s to compare (model, decode, analysis, "
            "serve and dp do)");

  if (o.output == "json") {
    json j = {{"a", {{"executable", self}, {"commit", commit_a}}},
              {"b", {{"executable", o.other}, {"commit", commit_b}}},
              {"rounds", o.rounds},
              {"rows", json::array()}};
    for (const auto& s : rows.series()) {
      json row = s.identity;
      row["a_tokens_per_s"] = s.a;
      row["b_tokens_per_s"] = s.b;
      row["a_median"] = median(s.a);
      row["b_median"] = median(s.b);
      if (!s.a.empty() && !s.b.empty()) row["b_over_a"] = median(s.b) / median(s.a);
      j["rows"].push_back(row);
    }
    std::cout << j.dump(2) << "\n";
    return;
  }
  // The identity columns: text fields, then integers, each in name order.
  std::vector<std::string> text, numbers;
  for (const auto& s : rows.series())
    for (const auto& [key, value] : s.identity.items()) {
      auto& list = value.is_string() ? text : numbers;
      if (std::find(list.begin(), list.end(), key) == list.end()) list.push_back(key);
    }
  std::sort(text.begin(), text.end());
  std::sort(numbers.begin(), numbers.end());
  std::vector<std::string> keys = text;
  keys.insert(keys.end(), numbers.begin(), numbers.end());
  const bool md = o.output == "md";
  if (md)
    std::cout << "A: this build, commit " << commit_a << " (" << self << ")\nB: commit " << commit_b
              << " (" << o.other << ")\n"
              << o.rounds
              << " rounds, A B then B A alternating; medians of tokens/s over the rounds\n\n";
  std::vector<std::string> header = keys;
  for (const char* h : {"A tokens/s", "B tokens/s", "B / A", "A min..max", "B min..max"})
    header.push_back(h);
  Table table(md);
  table.header(header, text.size());
  for (const auto& s : rows.series()) {
    std::vector<std::string> cells;
    for (const auto& k : keys) cells.push_back(s.identity.contains(k) ? cell(s.identity[k]) : "");
    cells.push_back(s.a.empty() ? "-" : fixed(median(s.a), 1));
    cells.push_back(s.b.empty() ? "-" : fixed(median(s.b), 1));
    cells.push_back(s.a.empty() || s.b.empty() ? "-" : fixed(median(s.b) / median(s.a), 3));
    cells.push_back(range(s.a));
    cells.push_back(range(s.b));
    table.row(cells);
  }
}

}  // namespace lol::bench
