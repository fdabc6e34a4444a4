#include "text/charsmap.h"

#include <utf8proc.h>

#include <vector>

#include "text/utf8.h"
#include "util/error.h"

namespace lol {

bool base64_decode(std::string_view text, std::string* bytes) {
  static const auto table = [] {
    std::vector<int> t(256, -1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(alphabet[i])] = i;
    return t;
  }();
  if (text.size() % 4 != 0) return false;
  bytes->clear();
  bytes->reserve(text.size() / 4 * 3);
  for (size_t at = 0; at < text.size(); at += 4) {
    int v[4];
    int padding = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[at + k];
      // '=' only as the last one or two characters of the text.
      if (c == '=' && at + 4 == text.size() && k >= 2 && (k == 3 || text[at + 3] == '=')) {
        v[k] = 0, ++padding;
        continue;
      }
      v[k] = table[static_cast<unsigned char>(c)];
      if (v[k] < 0) return false;
    }
    const uint32_t n = v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3];
    bytes->push_back(static_cast<char>(n >> 16));
    if (padding < 2) bytes->push_back(static_cast<char>(n >> 8 & 0xFF));
    if (padding < 1) bytes->push_back(static_cast<char>(n & 0xFF));
  }
  return true;
}

Charsmap::Charsmap(const std::string& base64, const std::string& where) {
  std::string blob;
  LOL_CHECK(base64_decode(base64, &blob), where, ": precompiled_charsmap is not base64");
  LOL_CHECK(blob.size() >= 4, where, ": precompiled_charsmap is shorter than its size field");
  const auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(blob[i])); };
  const uint32_t size = byte(0) | byte(1) << 8 | byte(2) << 16 | byte(3) << 24;
  LOL_CHECK(size % 4 == 0 && size >= 4 && size <= blob.size() - 4, where,
            ": precompiled_charsmap's trie size ", size, " does not fit its ", blob.size(),
            " bytes");
  units_.resize(size / 4);
  for (size_t u = 0; u < units_.size(); ++u) {
    const size_t i = 4 + 4 * u;
    units_[u] = byte(i) | byte(i + 1) << 8 | byte(i + 2) << 16 | byte(i + 3) << 24;
  }
  replacements_ = blob.substr(4 + size);
  LOL_CHECK(valid_utf8(replacements_), where,
            ": precompiled_charsmap's replacement strings are not UTF-8");
  for (int c = 0; c < 128; ++c) {
    const char ch = static_cast<char>(c);
    ascii_[c] = rule(std::string_view(&ch, 1));
  }
}

std::optional<std::string_view> Charsmap::rule(std::string_view chunk) const {
  // Darts-clone units: a node's label (its byte, or bit 31 for a value), whether a value hangs
  // below it (bit 8), and the offset to its children; a value unit holds 31 bits of value.
  auto offset = [](uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); };
  size_t node = offset(units_[0]);
  for (const char ch : chunk) {
    const auto c = static_cast<uint8_t>(ch);
    if (c == 0) break;
    node ^= c;
    if (node >= units_.size()) return std::nullopt;
    const uint32_t unit = units_[node];
    if ((unit & (1u << 31 | 0xFF)) != c) return std::nullopt;
    node ^= offset(unit);
    if ((unit >> 8 & 1) == 0) continue;
    // The value: where the replacement starts; it runs to the next NUL.
    const size_t at = node < units_.size() ? units_[node] & 0x7FFFFFFFu : replacements_.size();
    LOL_CHECK(
        at < replacements_.size() && (static_cast<unsigned char>(replacements_[at]) & 0xC0) != 0x80,
        "precompiled_charsmap: a rule points at byte ", at, ", where no replacement string starts");
    const size_t nul = replacements_.find('\0', at);
    return std::string_view(replacements_).substr(at, nul == std::string::npos ? nul : nul - at);
  }
  return std::nullopt;
}

std::string Charsmap::apply(std::string_view text) const {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  // A grapheme cluster: replaced whole when short and a key is a prefix of it, else character
  // by character.
  auto flush = [&](size_t begin, size_t end) {
    if (end <= begin) return;
    const auto cluster = text.substr(begin, end - begin);
    if (const auto whole = cluster.size() < 6 ? rule(cluster) : std::nullopt) {
      out.append(*whole);
      return;
    }
    for (size_t i = 0; i < cluster.size();) {
      const auto ch = cluster.substr(i, utf8_length(static_cast<unsigned char>(cluster[i])));
      const auto r = rule(ch);
      out.append(r ? *r : ch);
      i += ch.size();
    }
  };
  auto ascii = [&](size_t i) { return static_cast<unsigned char>(text[i]) < 0x80; };
  utf8proc_int32_t state = 0;
  size_t begin = 0;  // where the cluster being collected starts
  uint32_t previous = 0;
  for (size_t i = 0; i < text.size();) {
    // Quick path: an ASCII character between ASCII characters (not in a CR LF) is a cluster of
    // its own (UAX #29 breaks there), so it takes its rule from a table. Its neighbour after it
    // is ASCII too, so a break follows it as well; utf8proc's state restarts from zero, which
    // is what it is after a break.
    const bool quick = ascii(i) && (i == 0 || ascii(i - 1)) &&
                       (i + 1 == text.size() || ascii(i + 1)) &&
                       !(text[i] == '\n' && i > 0 && text[i - 1] == '\r') &&
                       !(text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n');
    if (quick) {
      flush(begin, i);
      const auto& r = ascii_[static_cast<unsigned char>(text[i])];
      if (r)
        out.append(*r);
      else
        out.push_back(text[i]);
      previous = static_cast<unsigned char>(text[i]);
      state = 0;
      begin = ++i;
      continue;
    }
    const uint32_t cp = code_point_at(text, i);
    if (i > begin && utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(previous),
                                                      static_cast<utf8proc_int32_t>(cp), &state)) {
      flush(begin, i);
      begin = i;
    }
    previous = cp;
    i += utf8_length(static_cast<unsigned char>(text[i]));
  }
  flush(begin, text.size());
  return out;
}

}  // namespace lol
