#include "text/hf_json.h"

namespace lol {

std::string string_field(const json& j, const char* key, const std::string& where) {
  LOL_CHECK(j.is_object() && j.contains(key) && j[key].is_string(), where, " needs a string \"",
            key, "\"");
  return j[key].get<std::string>();
}

std::string string_field(const json& j, const char* key, const std::string& where,
                         const std::string& fallback) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  LOL_CHECK(j[key].is_string(), where, ".", key, " must be a string");
  return j[key].get<std::string>();
}

bool bool_field(const json& j, const char* key, const std::string& where, bool fallback) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  LOL_CHECK(j[key].is_boolean(), where, ".", key, " must be true or false");
  return j[key].get<bool>();
}

void for_each_component(
    const json& j, const std::string& where, const char* list,
    const std::function<void(const json&, const std::string&, const std::string&)>& each) {
  LOL_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), where,
            " needs a \"type\"");
  const auto type = j["type"].get<std::string>();
  if (type != "Sequence") return each(j, type, where);
  LOL_CHECK(j.contains(list) && j[list].is_array(), where, ".", list, " must be a list");
  const auto& items = j[list];
  for (size_t i = 0; i < items.size(); ++i)
    for_each_component(items[i], where + "." + list + "[" + std::to_string(i) + "]", list, each);
}

}  // namespace lol
