#include "data/mixture.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "util/error.h"
#include "util/parse.h"

namespace lol {

bool is_mixture(const std::string& spec) {
  return spec.rfind(kMixturePrefix, 0) == 0;
}

namespace {

// A weight, or -1 (which every weight check refuses) when `text` is not a number.
double weight_of(const std::string& text) {
  return parse_finite(text).value_or(-1);
}

// A count of tokens: a number with an optional k, M or G suffix; -1 when it is not one.
double tokens_of(std::string text) {
  double scale = 1;
  if (!text.empty()) {
    const char last = text.back();
    if (last == 'k' || last == 'K') scale = 1e3;
    if (last == 'M') scale = 1e6;
    if (last == 'G') scale = 1e9;
    if (scale != 1) text.pop_back();
  }
  const auto value = parse_finite(text);
  return value && std::isfinite(*value * scale) ? *value * scale : -1;
}

// The weights' sum must be positive at every point of the run: between two neighbouring
// breakpoints every weight is linear and >= 0, so the sum is zero somewhere inside only if it is
// zero at the middle; at a breakpoint the weights after it count.
void check_weights(const std::vector<WeightSchedule>& weights, const std::string& where) {
  LOL_CHECK(!weights.empty(), where, ": a mixture needs parts");
  std::set<double> breaks{0.0};
  for (const auto& w : weights) {
    for (const auto& [tokens, weight] : w.points()) {
      LOL_CHECK(std::isfinite(tokens) && tokens >= 0 && std::isfinite(weight) && weight >= 0, where,
                ": a mixture's weights must be finite and >= 0");
      breaks.insert(tokens);
    }
  }
  std::vector<double> at(breaks.begin(), breaks.end());
  const size_t n = at.size();
  for (size_t i = 0; i + 1 < n; ++i) at.push_back((at[i] + at[i + 1]) / 2);
  for (double tokens : at) {
    double sum = 0;
    for (const auto& w : weights) sum += w.at(tokens);
    LOL_CHECK(sum > 0, where, ": the weights are all zero at ", tokens,
              " tokens (some part must have a weight everywhere)");
  }
}

}  // namespace

WeightSchedule::WeightSchedule(double constant) : points_{{0.0, constant}} {}

WeightSchedule WeightSchedule::parse(const std::string& text) {
  WeightSchedule schedule;
  schedule.points_.clear();
  std::vector<std::string> pieces;
  for (size_t from = 0;;) {
    const auto dots = text.find("..", from);
    pieces.push_back(text.substr(from, dots == std::string::npos ? dots : dots - from));
    if (dots == std::string::npos) break;
    from = dots + 2;
  }
  double weight = weight_of(pieces[0]);
  if (pieces.size() == 1) {
    LOL_CHECK(weight > 0, "it is not a positive number (or a schedule W0..W1@TOKENS)");
    schedule.points_.emplace_back(0.0, weight);
    return schedule;
  }
  LOL_CHECK(weight >= 0, "its start '", pieces[0], "' is not a weight (a number >= 0)");
  schedule.points_.emplace_back(0.0, weight);
  for (size_t i = 1; i < pieces.size(); ++i) {
    const auto& piece = pieces[i];
    const auto at = piece.find('@');
    LOL_CHECK(at != std::string::npos, "'", piece, "' is not WEIGHT@TOKENS");
    weight = weight_of(piece.substr(0, at));
    const double tokens = tokens_of(piece.substr(at + 1));
    LOL_CHECK(weight >= 0, "'", piece.substr(0, at), "' in '", piece,
              "' is not a weight (a number >= 0)");
    LOL_CHECK(tokens > 0, "'", piece.substr(at + 1), "' in '", piece,
              "' is not a count of tokens > 0 (k, M and G suffixes allowed)");
    LOL_CHECK(tokens >= schedule.points_.back().first, "'", piece,
              "' goes back in tokens (points must come in order)");
    schedule.points_.emplace_back(tokens, weight);
  }
  bool some = false;
  for (const auto& point : schedule.points_) some = some || point.second > 0;
  LOL_CHECK(some, "it is zero throughout");
  return schedule;
}

double WeightSchedule::at(double tokens) const {
  for (size_t i = 1; i < points_.size(); ++i) {
    const auto& [t1, w1] = points_[i];
    if (tokens < t1) {
      const auto& [t0, w0] = points_[i - 1];
      return w0 + (w1 - w0) * ((tokens - t0) / (t1 - t0));  // no overflow for finite weights
    }
  }
  return points_.back().second;
}

std::vector<MixturePart> parse_mixture(const std::string& spec) {
  LOL_CHECK(is_mixture(spec), "data spec '", spec, "' is not a mixture (mix:...)");
  std::vector<MixturePart> parts;
  std::set<std::string> seen;
  std::istringstream list(spec.substr(std::string(kMixturePrefix).size()));
  for (std::string item; std::getline(list, item, ',');) {
    MixturePart part;
    part.spec = item;
    const auto star = item.find('*');
    if (star != std::string::npos) {
      const std::string weight = item.substr(0, star);
      try {
        part.weight = WeightSchedule::parse(weight);
      } catch (const Error& e) {
        fail("data spec '", spec, "': weight '", weight, "' of part '", item, "': ", e.what());
      }
      part.spec = item.substr(star + 1);
    }
    LOL_CHECK(!part.spec.empty(), "data spec '", spec, "': part ", parts.size() + 1,
              " names no data (parts are [WEIGHT*]SPEC separated by commas)");
    LOL_CHECK(!is_mixture(part.spec), "data spec '", spec, "': a mixture cannot hold a mixture");
    LOL_CHECK(seen.insert(part.spec).second, "data spec '", spec, "': '", part.spec,
              "' is given twice (weight it instead)");
    parts.push_back(part);
  }
  LOL_CHECK(!parts.empty() && spec.back() != ',', "data spec '", spec,
            "': a mixture needs parts, [WEIGHT*]SPEC separated by commas");
  std::vector<WeightSchedule> weights;
  for (const auto& part : parts) weights.push_back(part.weight);
  check_weights(weights, "data spec '" + spec + "'");
  return parts;
}

MixtureSource::MixtureSource(std::vector<WeightSchedule> weights,
                             std::vector<std::unique_ptr<DocumentSource>> parts)
    : weights_(std::move(weights)),
      parts_(std::move(parts)),
      taken_(parts_.size(), 0),
      owed_(parts_.size(), 0.0) {
  LOL_CHECK(!parts_.empty() && weights_.size() == parts_.size(),
            "a mixture needs one weight per part");
  check_weights(weights_, "mixture");
  for (const auto& w : weights_) scheduled_ = scheduled_ || !w.constant();
}

std::vector<double> mixture_shares(const std::vector<WeightSchedule>& weights, double tokens) {
  // Scaled by the largest first, so that no sum of finite weights overflows.
  std::vector<double> shares;
  double largest = 0, total = 0;
  for (const auto& w : weights)
    shares.push_back(w.at(tokens)), largest = std::max(largest, shares.back());
  for (auto& s : shares) s /= largest, total += s;
  for (auto& s : shares) s /= total;
  return shares;
}

std::vector<double> MixtureSource::shares() const {
  return mixture_shares(weights_, static_cast<double>(tokens_));
}

size_t MixtureSource::next_part() const {
  return next_part(shares());
}

size_t MixtureSource::next_part(const std::vector<double>& share) const {
  // The part furthest behind what it is owed, counting the next document.
  int64_t dealt = 0;
  for (int64_t t : taken_) dealt += t;
  size_t best = 0;
  double best_deficit = 0;
  for (size_t k = 0; k < parts_.size(); ++k) {
    const double owed =
        scheduled_ ? owed_[k] + share[k] : share[k] * static_cast<double>(dealt + 1);
    const double deficit = owed - static_cast<double>(taken_[k]);
    if (k == 0 || deficit > best_deficit) best = k, best_deficit = deficit;
  }
  return best;
}

Document MixtureSource::next() {
  const auto share = shares();
  const size_t k = next_part(share);
  if (scheduled_)
    for (size_t j = 0; j < parts_.size(); ++j) owed_[j] += share[j];
  ++taken_[k];
  auto document = parts_[k]->next();
  tokens_ += static_cast<int64_t>(document.tokens.size());
  return document;
}

json MixtureSource::position() const {
  json parts = json::array();
  for (const auto& p : parts_) parts.push_back(p->position());
  json position{{"taken", taken_}, {"parts", parts}};
  if (scheduled_) position["tokens"] = tokens_, position["owed"] = owed_;
  return position;
}

void MixtureSource::seek(const json& position) {
  LOL_CHECK(
      position.is_object() && position.contains("taken") && position.contains("parts") &&
          position["taken"].is_array() && position["parts"].is_array() &&
          position["taken"].size() == parts_.size() && position["parts"].size() == parts_.size(),
      "data position of a mixture of ", parts_.size(), " parts needs \"taken\" and \"parts\" ",
      "with one entry per part, got ", json_text(position));
  std::vector<int64_t> taken;
  for (const auto& t : position["taken"]) {
    LOL_CHECK(t.is_number_integer() && t.get<int64_t>() >= 0,
              "data position of a mixture: \"taken\" needs integers >= 0, got ",
              json_text(position));
    taken.push_back(t.get<int64_t>());
  }
  int64_t tokens = 0;
  std::vector<double> owed(parts_.size(), 0.0);
  if (scheduled_) {
    LOL_CHECK(position.contains("tokens") && position["tokens"].is_number_integer() &&
                  position["tokens"].get<int64_t>() >= 0 && position.contains("owed") &&
                  position["owed"].is_array() && position["owed"].size() == parts_.size(),
              "data position of a scheduled mixture needs \"tokens\" (an integer >= 0) and "
              "\"owed\" (one number per part), got ",
              json_text(position));
    tokens = position["tokens"].get<int64_t>();
    for (size_t k = 0; k < parts_.size(); ++k) {
      const auto& o = position["owed"][k];
      LOL_CHECK(o.is_number() && std::isfinite(o.get<double>()) && o.get<double>() >= 0,
                "data position of a mixture: \"owed\" needs numbers >= 0, got ",
                json_text(position));
      owed[k] = o.get<double>();
    }
  }
  for (size_t k = 0; k < parts_.size(); ++k) parts_[k]->seek(position["parts"][k]);
  taken_ = taken, tokens_ = tokens, owed_ = owed;
}

int64_t MixtureSource::vocab_size() const {
  int64_t size = 0;
  for (const auto& p : parts_) size = std::max(size, p->vocab_size());
  return size;
}

std::string MixtureSource::describe() const {
  // The shares at the start, and with a schedule "..", the shares after its last point.
  double end = 0;
  for (const auto& w : weights_) end = std::max(end, w.points().back().first);
  auto share = [&](size_t k, double tokens) {
    return std::round(mixture_shares(weights_, tokens)[k] * 1000) / 10;
  };
  std::ostringstream out;
  out << "mixture of";
  for (size_t k = 0; k < parts_.size(); ++k) {
    out << (k ? ", " : " ") << share(k, 0);
    if (scheduled_) out << ".." << share(k, end);
    out << "% " << parts_[k]->describe();
  }
  if (scheduled_) out << " (shares at the start..after " << end << " tokens)";
  return out.str();
}

}  // namespace lol
