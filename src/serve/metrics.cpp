#include "serve/metrics.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "util/error.h"

namespace lol::serve {
namespace {

const char* type_name(Metrics::Type t) {
  switch (t) {
    case Metrics::Type::kCounter:
      return "counter";
    case Metrics::Type::kGauge:
      return "gauge";
    case Metrics::Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  std::ostringstream out;
  out.precision(12);
  out << v;
  return out.str();
}

// {a="x",b="y"} with `extra` appended (the histogram's le); empty when there are no labels.
std::string label_text(const Metrics::Labels& labels, const std::string& extra = "") {
  std::string out;
  for (const auto& [k, v] : labels) {
    out += (out.empty() ? "" : ",") + k + "=\"";
    for (char c : v) {
      if (c == '\\' || c == '"') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    out += "\"";
  }
  if (!extra.empty()) out += (out.empty() ? "" : ",") + extra;
  return out.empty() ? "" : "{" + out + "}";
}

}  // namespace

void Metrics::declare(const std::string& name, Type type, const std::string& help,
                      std::vector<double> buckets) {
  std::lock_guard<std::mutex> lock(mutex_);
  LOL_CHECK(std::is_sorted(buckets.begin(), buckets.end()), "metric ", name,
            ": bucket bounds must ascend");
  auto& f = families_[name];
  f.type = type;
  f.help = help;
  f.buckets = std::move(buckets);
}

Metrics::Family& Metrics::family(const std::string& name, Type expected) {
  auto it = families_.find(name);
  LOL_CHECK(it != families_.end() && it->second.type == expected, "metric ", name,
            " is not declared as a ", type_name(expected));
  return it->second;
}

void Metrics::add(const std::string& name, double value, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mutex_);
  family(name, Type::kCounter).series[labels].value += value;
}

void Metrics::set(const std::string& name, double value, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mutex_);
  family(name, Type::kGauge).series[labels].value = value;
}

void Metrics::observe(const std::string& name, double value, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& f = family(name, Type::kHistogram);
  auto& s = f.series[labels];
  if (s.counts.empty()) s.counts.assign(f.buckets.size() + 1, 0);
  const auto bucket =
      std::lower_bound(f.buckets.begin(), f.buckets.end(), value) - f.buckets.begin();
  ++s.counts[static_cast<size_t>(bucket)];
  ++s.count;
  s.value += value;
}

double Metrics::value(const std::string& name, const Labels& labels) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto s = it->second.series.find(labels);
  return s == it->second.series.end() ? 0 : s->second.value;
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  for (const auto& [name, f] : families_) {
    out << "# HELP " << name << " " << f.help << "\n# TYPE " << name << " " << type_name(f.type)
        << "\n";
    for (const auto& [labels, s] : f.series) {
      if (f.type != Type::kHistogram) {
        out << name << label_text(labels) << " " << number(s.value) << "\n";
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t b = 0; b <= f.buckets.size(); ++b) {
        cumulative += s.counts[b];
        const double le = b < f.buckets.size() ? f.buckets[b] : INFINITY;
        out << name << "_bucket" << label_text(labels, "le=\"" + number(le) + "\"") << " "
            << cumulative << "\n";
      }
      out << name << "_sum" << label_text(labels) << " " << number(s.value) << "\n";
      out << name << "_count" << label_text(labels) << " " << s.count << "\n";
    }
  }
  return out.str();
}

}  // namespace lol::serve
