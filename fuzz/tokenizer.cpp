// tokenizer.json files and text through the BPE tokenizers (docs/text.md). The first byte
// picks what the rest is: a tokenizer.json (loaded, then made to encode a fixed multilingual
// text), or text encoded by a small fixed tokenizer (and normalized: NFC and NFKC as utf8proc
// gives them). A loaded tokenizer or an encoded text is accepted or refused with one
// lol::Error; accepted ones keep the properties below.

#include <algorithm>

#include "fuzz_target.h"
#include "text/bpe_train.h"
#include "text/normalizer.h"
#include "text/subword.h"
#include "text/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lol;
  if (size == 0) return 0;
  static const auto fixed = [] {
    BpeTrainOptions o;
    o.vocab_size = 320;
    o.min_frequency = 1;
    return train_bpe({"the router picks the block; Der Router wählt; маршрутизатор; 東京 東京",
                      "numbers 12345 and 3.14, the the the <|endoftext|> end"},
                     o);
  }();
  const std::string rest = fuzz::text_of(data + 1, size - 1);
  auto round_trip = [](const SubwordTokenizer& t, const std::string& text) {
    const auto ids = t.encode(text);
    for (auto id : ids) fuzz::expect(id >= 0 && id < t.vocab_size(), "ids are in the vocabulary");
    // Byte-level: the text in the tokenizer's normal form, if it has one. Sentencepiece-style
    // tokenizers may lose characters to the unknown token and spaces to their decoder, and
    // added tokens with lstrip / rstrip the whitespace beside them.
    const auto decoded = t.decode(ids);
    const auto& added = t.model().added;
    const bool strips =
        std::any_of(added.begin(), added.end(), [](const auto& a) { return a.lstrip || a.rstrip; });
    // Nor pre-tokenizers that drop what they match (Whitespace, BertPreTokenizer, Removed).
    const auto& splits = t.model().splits;
    const bool drops = std::any_of(splits.begin(), splits.end(), [](const auto& s) {
      return s.behavior == SplitBehavior::kRemoved;
    });
    if (t.model().byte_level && !t.model().add_prefix_space && !strips && !drops)
      fuzz::expect(decoded == t.model().normalizer.apply(text),
                   "decode(encode(text)) == normalized text");
  };
  fuzz::guarded([&] {
    if (data[0] % 2 == 0) {
      const json j = json::parse(rest, nullptr, false);
      if (j.is_discarded()) return;
      const auto t = SubwordTokenizer::from_json(j, "fuzz.json");
      round_trip(*t, "Grüße, мир! 東京 12345 <|endoftext|> x\n\n  y");
      // What it writes loads again to the same tokenizer.
      const auto again = SubwordTokenizer::from_json(t->to_json(), "again.json");
      fuzz::expect(again->to_json() == t->to_json(), "save and load keep the tokenizer");
    } else {
      if (!valid_utf8(rest)) {
        bool refused = false;
        try {
          fixed->encode(rest);
        } catch (const Error&) {
          refused = true;
        }
        fuzz::expect(refused, "text that is not UTF-8 is refused");
        return;
      }
      round_trip(*fixed, rest);
      // The NFC / NFKC quick path equals utf8proc on the whole text.
      for (const auto form : {NormalForm::kNfc, NormalForm::kNfkc})
        fuzz::expect(normalize(rest, form) == normalize_whole(rest, form),
                     "the normalizer's quick path agrees with utf8proc");
    }
  });
  return 0;
}
