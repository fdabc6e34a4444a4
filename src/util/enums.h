#pragma once
// Closed sets of choices (model family, core attention, optimizer, ...) as enums with one
// table of names each. Text is parsed into the enum once, where it enters (config JSON,
// `--set key=value`, flags); everything after that switches on the enum, so a forgotten case
// is a compiler warning (an error in the ci preset) instead of a string that matches nothing.
#include <string>
#include <utility>
#include <vector>

#include "util/error.h"

namespace lol {

// Specialised once per enum (next to its declaration), listing every value with its name in
// the order help texts show them.
template <typename E>
const std::vector<std::pair<E, const char*>>& enum_names();

template <typename E>
const char* enum_name(E value) {
  for (const auto& [v, name] : enum_names<E>())
    if (v == value) return name;
  fail("enum value ", static_cast<int>(value), " has no name");
}

// "a, b, c": the choices, for messages.
template <typename E>
std::string enum_choices(const char* separator = ", ") {
  std::string out;
  for (const auto& [v, name] : enum_names<E>())
    out += (out.empty() ? "" : separator) + std::string(name);
  return out;
}

template <typename E>
std::vector<E> enum_values() {
  std::vector<E> out;
  for (const auto& [v, name] : enum_names<E>()) out.push_back(v);
  return out;
}

// Throws "WHAT must be one of a, b, c; got 'x'".
template <typename E>
E parse_enum(const std::string& text, const std::string& what) {
  for (const auto& [v, name] : enum_names<E>())
    if (text == name) return v;
  fail(what, " must be one of ", enum_choices<E>(), "; got '", text, "'");
}

}  // namespace lol
