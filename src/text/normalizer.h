#pragma once
// Normalization of text before a tokenizer splits it: the `normalizer` of a Hugging Face
// tokenizer.json when it is made of the four Unicode normal forms (Qwen2's byte-level BPE
// normalizes to NFC; built on utf8proc, docs/dependencies.md), the Prepend and Replace of
// sentencepiece-style tokenizers (Llama-2's "Prepend ▁, Replace ' ' by ▁"; converted
// sentencepiece models' "Precompiled character map, Strip the right end, Replace / {2,}/ by
// ▁"), Lowercase, StripAccents, BERT's normalizer (BertNormalizer) and sentencepiece's NMT rules
// for control characters and spaces (Nmt), alone or in a Sequence.
// Anything else a tokenizer.json may name there is refused by from_json with an error naming it.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/charsmap.h"
#include "text/regex_split.h"
#include "util/json.h"

namespace lol {

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// "NFC", "NFD", "NFKC", "NFKD": the names tokenizer.json uses.
const char* normal_form_name(NormalForm form);
// `text` (valid UTF-8, not checked) in normal form `form`.
std::string normalize(std::string_view text, NormalForm form);
// The same by utf8proc on the whole text, without normalize()'s quick path for NFC and NFKC:
// the slow reference the tests and the fuzzer hold normalize() to.
std::string normalize_whole(std::string_view text, NormalForm form);

// A sequence of steps applied in order; empty: text is left as it is.
class Normalizer {
 public:
  struct Step {
    enum Kind {
      kForm,
      kPrepend,
      kReplace,
      kReplaceRegex,
      kStrip,
      kLowercase,
      kPrecompiled,
      kStripAccents,
      kBert,
      kNmt
    } kind = kForm;
    NormalForm form = NormalForm::kNfc;  // kForm
    // kPrepend: what goes in front; kReplace: what is replaced; kReplaceRegex: the pattern;
    // kPrecompiled: the character map's base64
    std::string text;
    std::string by;                    // kReplace, kReplaceRegex: what replaces each match
    bool left = false, right = false;  // kStrip: the White_Space stripped at either end
    // kBert: what BertNormalizer does, in this order: drops control characters and makes
    // whitespace a space (clean_text), puts spaces around CJK ideographs (handle_chinese_chars),
    // decomposes (NFD) and drops nonspacing marks (strip_accents; null in the file means the
    // same as lowercase), lowercases.
    bool clean_text = false, chinese_chars = false, strip_accents = false, lowercase = false;
    std::shared_ptr<const RegexSplitter> regex;  // kReplaceRegex: `text` compiled
    std::shared_ptr<const Charsmap> charsmap;    // kPrecompiled: `text` read
    bool operator==(const Step& o) const {
      return kind == o.kind && form == o.form && text == o.text && by == o.by && left == o.left &&
             right == o.right && clean_text == o.clean_text && chinese_chars == o.chinese_chars &&
             strip_accents == o.strip_accents && lowercase == o.lowercase;
    }
  };
  Normalizer() = default;
  explicit Normalizer(std::vector<NormalForm> forms);
  // A tokenizer.json `normalizer` value: null, {"type": "NFC"} (or NFD, NFKC, NFKD),
  // {"type": "Prepend", "prepend": S}, {"type": "Replace", "pattern": {"String": S} or
  // {"Regex": R}, "content": T}, {"type": "Strip", "strip_left": B, "strip_right": B},
  // {"type": "Lowercase"}, {"type": "StripAccents"}, {"type": "Nmt"},
  // {"type": "BertNormalizer", "clean_text": B,
  // "handle_chinese_chars": B, "strip_accents": B or null (or left out), "lowercase": B},
  // {"type": "Precompiled", "precompiled_charsmap": BASE64}, or {"type": "Sequence",
  // "normalizers": [...]} of those. Anything else throws naming `where`.
  static Normalizer from_json(const json& j, const std::string& where);
  // A command-line value: "none" or one form, in either case ("nfc", "NFKC"); else throws.
  static Normalizer named(const std::string& name);
  json to_json() const;  // null when there is nothing to apply

  bool identity() const { return steps_.empty(); }
  const std::vector<Step>& steps() const { return steps_; }
  // As HF does: Prepend leaves empty text empty; Replace replaces every occurrence (match),
  // left to right; Strip takes Unicode White_Space off the chosen ends; Lowercase maps each
  // character to its full lowercase (utf8proc's Unicode 15 tables); StripAccents drops marks
  // (Mn, Mc, Me); BertNormalizer as described at Step::clean_text; Nmt drops ASCII and C1
  // controls but tab, newlines and form feed, which with U+1680, U+200B-U+200F, U+2028/9,
  // U+2581, U+FEFF and U+FFFD become spaces. Character classes are
  // utf8proc's (Unicode 15), where HF's tables are older: docs/text.md lists what differs.
  std::string apply(std::string_view text) const;  // text: valid UTF-8

 private:
  std::vector<Step> steps_;
};

}  // namespace lol
