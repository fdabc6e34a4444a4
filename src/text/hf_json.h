#pragma once
// Reading the components of a Hugging Face tokenizer.json (normalizer, pre_tokenizer,
// decoder): each is {"type": T, ...}, or {"type": "Sequence", LIST: [...]} of them.
#include <functional>
#include <string>

#include "util/json.h"

namespace lol {

// A string field of a component: required (an error naming `where` when absent or not a
// string), or optional with a fallback (absent or null gives it; any other non-string is an
// error).
std::string string_field(const json& j, const char* key, const std::string& where);
std::string string_field(const json& j, const char* key, const std::string& where,
                         const std::string& fallback);
// An optional boolean field: `fallback` when absent or null, an error naming `where` when it is
// anything but true or false.
bool bool_field(const json& j, const char* key, const std::string& where, bool fallback = false);

// Calls `each(component, type, where)` for `j`, or for each component of a Sequence in order
// (nested Sequences flattened; `where` then names the element, "where.LIST[i]"). A component
// without a string "type", or a Sequence without its LIST, throws naming `where`.
void for_each_component(
    const json& j, const std::string& where, const char* list,
    const std::function<void(const json&, const std::string&, const std::string&)>& each);

}  // namespace lol
