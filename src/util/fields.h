#pragma once
// One list of fields per config struct drives JSON load/save, `--set key=value` overrides and
// help text, so a field is declared once. Each field knows its name, its help line and how to
// convert itself to and from JSON with a type check that names the field.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "util/enums.h"
#include "util/error.h"
#include "util/json.h"

namespace lol {

template <typename Config>
struct Field {
  std::string name;
  std::string help;
  std::function<json(const Config&)> get;
  std::function<void(Config&, const json&)> set;
};

namespace detail {
template <typename T>
T json_as(const std::string& name, const json& value) {
  if constexpr (std::is_enum_v<T>) {
    LOL_CHECK(value.is_string(), "config key '", name, "' must be one of ", enum_choices<T>(),
              "; got ", json_text(value));
    return parse_enum<T>(value.get<std::string>(), name);
  } else if constexpr (std::is_same_v<T, bool>) {
    LOL_CHECK(value.is_boolean(), "config key '", name, "' must be true or false, got ",
              json_text(value));
    return value.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    // Whole floats are accepted (1e3) up to 2^53, where doubles stop being exact integers;
    // converting one outside the target type would be undefined.
    using Limits = std::numeric_limits<T>;
    bool integral = value.is_number_integer();
    if (value.is_number_float()) {
      const double v = value.get<double>();
      integral = std::isfinite(v) && std::fabs(v) < 9007199254740992.0 && v == std::floor(v);
    }
    LOL_CHECK(integral, "config key '", name, "' must be an integer, got ", json_text(value));
    const bool in_range =
        value.is_number_float() ? value.get<double>() >= static_cast<double>(Limits::min()) &&
                                      value.get<double>() <= static_cast<double>(Limits::max())
        : value.is_number_unsigned()
            ? value.get<uint64_t>() <= static_cast<uint64_t>(Limits::max())
            : value.get<int64_t>() >= static_cast<int64_t>(Limits::min()) &&
                  (Limits::is_signed ? value.get<int64_t>() <= static_cast<int64_t>(Limits::max())
                                     : value.get<int64_t>() >= 0);
    LOL_CHECK(in_range, "config key '", name, "' is out of range, got ", json_text(value));
    if (value.is_number_float()) return static_cast<T>(value.get<double>());
    if (value.is_number_unsigned()) return static_cast<T>(value.get<uint64_t>());
    return static_cast<T>(value.get<int64_t>());
  } else if constexpr (std::is_floating_point_v<T>) {
    LOL_CHECK(value.is_number(), "config key '", name, "' must be a number, got ",
              json_text(value));
    return value.get<T>();
  } else {
    LOL_CHECK(value.is_string(), "config key '", name, "' must be a string, got ",
              json_text(value));
    return value.get<std::string>();
  }
}
template <typename T>
json to_json_value(const T& value) {
  if constexpr (std::is_enum_v<T>)
    return json(enum_name(value));
  else
    return json(value);
}
}  // namespace detail

// field("window", &ModelConfig::window, "tokens per routed window"). An enum field's help ends
// with its choices, from the enum's one table of names.
template <typename Config, typename T>
Field<Config> field(const std::string& name, T Config::*member, const std::string& help) {
  std::string text = help;
  if constexpr (std::is_enum_v<T>) text += ": " + enum_choices<T>(" | ");
  return Field<Config>{
      name, text, [member](const Config& c) { return detail::to_json_value(c.*member); },
      [member, name](Config& c, const json& v) { c.*member = detail::json_as<T>(name, v); }};
}

template <typename Config>
json fields_to_json(const std::vector<Field<Config>>& fields, const Config& config) {
  json out = json::object();
  for (const auto& f : fields) out[f.name] = f.get(config);
  return out;
}

template <typename Config>
const Field<Config>& find_field(const std::vector<Field<Config>>& fields, const std::string& name) {
  for (const auto& f : fields)
    if (f.name == name) return f;
  std::string known;
  for (const auto& f : fields) known += (known.empty() ? "" : ", ") + f.name;
  fail("unknown config key '", name, "' (known keys: ", known, ")");
}

// Applies every key of `object` on top of `config`; unknown keys are errors.
template <typename Config>
void fields_from_json(const std::vector<Field<Config>>& fields, const json& object,
                      Config& config) {
  LOL_CHECK(object.is_object(), "config must be a JSON object, got ", object.type_name());
  for (const auto& [key, value] : object.items()) find_field(fields, key).set(config, value);
}

// Applies one "key=value" override. The value is read as JSON when it parses (numbers,
// true/false), and as a plain string otherwise (family=dense).
template <typename Config>
void apply_override(const std::vector<Field<Config>>& fields, const std::string& assignment,
                    Config& config) {
  auto eq = assignment.find('=');
  LOL_CHECK(eq != std::string::npos && eq > 0, "override must look like key=value, got '",
            assignment, "'");
  const std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = text;
  find_field(fields, key).set(config, value);
}

}  // namespace lol
