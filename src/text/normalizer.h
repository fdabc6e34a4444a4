#pragma once
// Unicode normalization of text before a tokenizer splits it: the `normalizer` of a Hugging
// Face tokenizer.json when it is one of the four Unicode normal forms or a Sequence of them
// (Qwen2's byte-level BPE normalizes to NFC). Built on utf8proc (docs/dependencies.md);
// anything else a tokenizer.json may name there (Lowercase, Replace, Prepend, sentencepiece's
// Precompiled) is refused by from_json with an error naming it.
#include <string>
#include <string_view>
#include <vector>

#include "util/json.h"

namespace lol {

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// "NFC", "NFD", "NFKC", "NFKD": the names tokenizer.json uses.
const char* normal_form_name(NormalForm form);
// `text` (valid UTF-8, not checked) in normal form `form`.
std::string normalize(std::string_view text, NormalForm form);

// A sequence of normal forms applied in order; empty: text is left as it is.
class Normalizer {
 public:
  Normalizer() = default;
  explicit Normalizer(std::vector<NormalForm> forms) : forms_(std::move(forms)) {}
  // A tokenizer.json `normalizer` value: null, {"type": "NFC"} (or NFD, NFKC, NFKD), or
  // {"type": "Sequence", "normalizers": [...]} of those. Anything else throws naming `where`.
  static Normalizer from_json(const json& j, const std::string& where);
  // A command-line value: "none" or one form, in either case ("nfc", "NFKC"); else throws.
  static Normalizer named(const std::string& name);
  json to_json() const;  // null when there is nothing to apply

  bool identity() const { return forms_.empty(); }
  const std::vector<NormalForm>& forms() const { return forms_; }
  std::string apply(std::string_view text) const;  // text: valid UTF-8

 private:
  std::vector<NormalForm> forms_;
};

}  // namespace lol
