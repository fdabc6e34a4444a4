#pragma once
// What sentencepiece-style tokenizer.json files (Llama-2, Mistral, Gemma's BPE) add to BPE
// over text tokens: the Metaspace pre-tokenizer, which writes spaces as "▁" and puts one in
// front of a text, and the decoder chain that turns such tokens back into text. The BPE itself
// (characters as base symbols, <0xNN> byte fallback, the unknown token) is in text/subword.h.
#include <string>
#include <string_view>
#include <vector>

#include "util/json.h"

namespace lol {

// When Metaspace puts the replacement in front of a text that does not start with one: always,
// only for the text at the very start of the input (not after an added token), or never.
enum class PrependScheme { kAlways, kFirst, kNever };

struct Metaspace {
  std::string replacement = "\u2581";
  PrependScheme prepend = PrependScheme::kAlways;
  bool split = true;  // cut before each replacement (HF's MergedWithNext)

  // A Metaspace pre-tokenizer or decoder of a tokenizer.json; the older spelling
  // "add_prefix_space": true|false means always|never. Throws naming `where`.
  static Metaspace from_json(const json& j, const std::string& where);
  json to_json() const;
  // `text` with its spaces replaced and, by the scheme, the replacement in front (`at_start`:
  // the text begins the input).
  std::string apply(std::string_view text, bool at_start) const;
  // The pre-tokens of apply's result: one, or one per replacement it starts with.
  void split_pieces(std::string_view text, std::vector<std::string_view>* out) const;
};

// A tokenizer.json `decoder` for text tokens: a Sequence of Replace (of a string), ByteFallback
// (<0xNN> tokens are that byte), Fuse, Strip, Metaspace and WordPiece (BERT's: a token after the
// first loses its continuing prefix "##" or gets a space in front, then `cleanup` takes the
// spaces before punctuation and English contractions out), applied to each token as HF does and
// then concatenated. After a Fuse the tokens are one text, so a Strip there may only take one
// character from its start (Llama-2's Strip of a leading space). Anything else throws naming it.
// Without a decoder (null) HF joins the tokens with spaces, and so does this.
class TokenDecoder {
 public:
  static TokenDecoder from_json(const json& j, const std::string& where);  // null: identity
  json to_json() const;                                                    // null when identity
  // The text of `token` where it stands in a decoded sequence (`first`: at its start). Bytes of
  // a run of <0xNN> tokens that is not UTF-8 stay as they are, where HF writes U+FFFD for each.
  std::string apply(std::string token, bool first) const;

 private:
  struct Step {
    enum Kind { kReplace, kByteFallback, kFuse, kStrip, kMetaspace, kWordPiece } kind;
    // kReplace: text -> by; kStrip: the character stripped (text); kWordPiece: the prefix
    std::string text, by;
    int64_t start = 0, stop = 0;  // kStrip: how many to strip from the start and the end
    Metaspace metaspace;          // kMetaspace
    bool fused = false;           // kStrip: after a Fuse, so applied to the whole text
    bool cleanup = false;         // kWordPiece
  };
  void read(const json& j, const std::string& type, const std::string& where, bool* fused);
  std::vector<Step> steps_;
};

}  // namespace lol
