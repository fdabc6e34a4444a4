#include "text/utf8.h"

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

}  // namespace lol
