#include "data/mixture.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

#include "util/error.h"

namespace lol {

bool is_mixture(const std::string& spec) {
  return spec.rfind(kMixturePrefix, 0) == 0;
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
      char* end = nullptr;
      part.weight = weight.empty() ? 0 : std::strtod(weight.c_str(), &end);
      LOL_CHECK(!weight.empty() && end == weight.c_str() + weight.size() &&
                    std::isfinite(part.weight) && part.weight > 0,
                "data spec '", spec, "': weight '", weight, "' of part '", item,
                "' is not a positive number");
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
  return parts;
}

MixtureSource::MixtureSource(std::vector<double> weights,
                             std::vector<std::unique_ptr<DocumentSource>> parts)
    : parts_(std::move(parts)), taken_(parts_.size(), 0) {
  LOL_CHECK(!parts_.empty() && weights.size() == parts_.size(),
            "a mixture needs one weight per part");
  double total = 0;
  for (double w : weights) {
    LOL_CHECK(std::isfinite(w) && w > 0, "mixture weights must be positive, got ", w);
    total += w;
  }
  for (double w : weights) shares_.push_back(w / total);
}

size_t MixtureSource::next_part() const {
  // The part furthest behind its share of the documents dealt so far, counting the next one.
  int64_t dealt = 0;
  for (int64_t t : taken_) dealt += t;
  size_t best = 0;
  double best_deficit = 0;
  for (size_t k = 0; k < parts_.size(); ++k) {
    const double deficit =
        shares_[k] * static_cast<double>(dealt + 1) - static_cast<double>(taken_[k]);
    if (k == 0 || deficit > best_deficit) best = k, best_deficit = deficit;
  }
  return best;
}

Document MixtureSource::next() {
  const size_t k = next_part();
  ++taken_[k];
  return parts_[k]->next();
}

json MixtureSource::position() const {
  json parts = json::array();
  for (const auto& p : parts_) parts.push_back(p->position());
  return json{{"taken", taken_}, {"parts", parts}};
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
  for (size_t k = 0; k < parts_.size(); ++k) parts_[k]->seek(position["parts"][k]);
  taken_ = taken;
}

int64_t MixtureSource::vocab_size() const {
  int64_t size = 0;
  for (const auto& p : parts_) size = std::max(size, p->vocab_size());
  return size;
}

std::string MixtureSource::describe() const {
  std::ostringstream out;
  out << "mixture of";
  for (size_t k = 0; k < parts_.size(); ++k)
    out << (k ? ", " : " ") << std::round(shares_[k] * 1000) / 10 << "% " << parts_[k]->describe();
  return out.str();
}

}  // namespace lol
