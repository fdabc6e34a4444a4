#include "text/utf8.h"

#include <utf8proc.h>

namespace lol {

bool valid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    unsigned cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

size_t complete_utf8_prefix(std::string_view text) {
  // Walk back over at most three continuation bytes to the last lead byte and see whether its
  // character is whole.
  size_t n = text.size(), back = 0;
  while (back < 4 && back < n && (static_cast<unsigned char>(text[n - 1 - back]) & 0xC0) == 0x80)
    ++back;
  if (back == n) return n;  // no lead byte at all: nothing to hold back for
  const auto lead = static_cast<unsigned char>(text[n - 1 - back]);
  const size_t need = lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : 4;
  return back + 1 >= need ? n : n - 1 - back;
}

uint32_t code_point_at(std::string_view text, size_t at) {
  const auto lead = static_cast<unsigned char>(text[at]);
  const size_t len = utf8_length(lead);
  uint32_t cp = len == 1 ? lead : lead & (0x7F >> len);
  for (size_t k = 1; k < len; ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(text[at + k]) & 0x3F);
  return cp;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
    return;
  }
  static constexpr unsigned char kLead[] = {0, 0xC0, 0xE0, 0xF0};  // by continuation bytes
  const int tail = cp < 0x800 ? 1 : cp < 0x10000 ? 2 : 3;
  out->push_back(static_cast<char>(kLead[tail] | (cp >> (6 * tail))));
  for (int k = tail - 1; k >= 0; --k)
    out->push_back(static_cast<char>(0x80 | ((cp >> (6 * k)) & 0x3F)));
}

size_t previous_character(std::string_view text, size_t at) {
  do --at;
  while (at > 0 && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80);
  return at;
}

bool white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool word_character(uint32_t cp) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      // Join_Control, and the letters of Other_Alphabetic that are symbols (circled, squared
      // and negative squared Latin letters).
      return cp == 0x200C || cp == 0x200D || (cp >= 0x24B6 && cp <= 0x24E9) ||
             (cp >= 0x1F130 && cp <= 0x1F149) || (cp >= 0x1F150 && cp <= 0x1F169) ||
             (cp >= 0x1F170 && cp <= 0x1F189);
  }
}

}  // namespace lol
