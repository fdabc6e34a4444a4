#pragma once
// Numbers read from user input (flags, environment variables, data specs, files): the whole text
// must spell the number, with no spaces, no '+' and no partial reads, so a typo is refused
// rather than read as the number it starts with. std::from_chars, locale-independent.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>

namespace lol {

// A decimal integer spelling all of `text` that fits an int64_t.
inline std::optional<int64_t> parse_int(std::string_view text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// A finite decimal number spelling all of `text` (1, -2.5, 3e-4; not inf, nan or hex).
inline std::optional<double> parse_finite(std::string_view text) {
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(value)) return std::nullopt;
  return value;
}

}  // namespace lol
