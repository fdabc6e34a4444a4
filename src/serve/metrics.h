#pragma once
// Prometheus metrics of the server (text exposition format 0.0.4): counters, gauges and
// histograms with labels, safe to update from any thread.
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace lol::serve {

class Metrics {
 public:
  using Labels = std::map<std::string, std::string>;
  enum class Type { kCounter, kGauge, kHistogram };
  // Declares a metric; histograms take their upper bucket bounds (ascending; +Inf is implied).
  void declare(const std::string& name, Type type, const std::string& help,
               std::vector<double> buckets = {});
  void add(const std::string& name, double value = 1, const Labels& labels = {});  // counter
  void set(const std::string& name, double value, const Labels& labels = {});      // gauge
  void observe(const std::string& name, double value, const Labels& labels = {});  // histogram
  // The current value of a counter or gauge (0 when never touched): tests and the bench read it.
  double value(const std::string& name, const Labels& labels = {}) const;
  std::string render() const;

 private:
  struct Series {
    double value = 0;              // counter, gauge; histogram: sum
    std::vector<uint64_t> counts;  // histogram: per bucket (not cumulative), then +Inf
    uint64_t count = 0;
  };
  struct Family {
    Type type = Type::kCounter;
    std::string help;
    std::vector<double> buckets;
    std::map<Labels, Series> series;
  };
  Family& family(const std::string& name, Type expected);
  mutable std::mutex mutex_;
  std::map<std::string, Family> families_;
};

}  // namespace lol::serve
