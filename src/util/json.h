#pragma once
// nlohmann::json as the project uses it, and its text for error messages.
#include <nlohmann/json.hpp>
#include <string>

#include "util/error.h"
#include "util/files.h"

namespace lol {

using nlohmann::json;

// The JSON text of a value for a message. Strings from outside may hold invalid UTF-8, which
// json::dump() would throw on; here such bytes show as U+FFFD.
inline std::string json_text(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Reads the JSON file at `path` and converts it with `convert` (a from_json); every error,
// from the JSON syntax to a rule `convert` checks, names the file.
template <typename Convert>
auto read_json_file(const std::string& path, Convert&& convert) -> decltype(convert(json())) {
  const json object = json::parse(read_text_file(path), nullptr, /*allow_exceptions=*/false);
  LOL_CHECK(!object.is_discarded(), path, ": not valid JSON");
  try {
    return convert(object);
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
}

}  // namespace lol
