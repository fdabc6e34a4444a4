#include "text/hf_json.h"

namespace lol {

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
