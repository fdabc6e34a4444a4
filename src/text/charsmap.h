#pragma once
// Sentencepiece's precompiled character map: the `Precompiled` normalizer of a tokenizer.json
// converted from a sentencepiece model (T5, XLM-R, ALBERT; the `nmt_nfkc` rules: NFKC plus
// sentencepiece's own mappings of spaces and control characters). The map is a blob: a
// little-endian u32 size, a Darts-clone double-array trie of that many bytes whose keys are
// UTF-8 strings, and the replacement strings (NUL-terminated) the trie's values point into.
// It is applied as Hugging Face applies it (spm_precompiled): text is cut into extended
// grapheme clusters; a cluster of fewer than 6 bytes with a rule is replaced whole, else each
// character with a rule is. A rule matches when its key is a prefix of the cluster (the
// shortest such key wins), so a rule for a cluster's first character replaces all of it.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lol {

class Charsmap {
 public:
  // From the base64 text of a tokenizer.json's `precompiled_charsmap`; throws lol::Error naming
  // `where` if it is not base64 or not a charsmap. Not copyable: ascii_ points into
  // replacements_.
  Charsmap(const std::string& base64, const std::string& where);

  Charsmap(const Charsmap&) = delete;
  Charsmap& operator=(const Charsmap&) = delete;

  std::string apply(std::string_view text) const;  // text: valid UTF-8

 private:
  // The replacement of the shortest key that is a prefix of `chunk`, if any. Throws when the
  // rule points outside the replacement strings (a broken map: HF would panic).
  std::optional<std::string_view> rule(std::string_view chunk) const;

  std::vector<uint32_t> units_;  // the double array
  std::string replacements_;     // NUL-terminated strings the trie's values point into
  std::optional<std::string_view> ascii_[128];  // rule() of each ASCII character
};

// Standard base64 (RFC 4648, with padding); decode returns false on anything else.
bool base64_decode(std::string_view text, std::string* bytes);

}  // namespace lol
