#pragma once
// nlohmann::json as the project uses it, and its text for error messages.
#include <string>

#include <nlohmann/json.hpp>

namespace lol {

using nlohmann::json;

// The JSON text of a value for a message. Strings from outside may hold invalid UTF-8, which
// json::dump() would throw on; here such bytes show as U+FFFD.
inline std::string json_text(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace lol
