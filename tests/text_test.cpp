// Text: the pre-tokenizer split, UTF-8 checks, Unicode normal forms, byte-level BPE (training,
// the merge loop against a slow textbook BPE, exact round trips, normalizers and added tokens,
// tokenizer.json save/load and its errors), sentencepiece-style BPE against the encodings HF's
// tokenizers gives.
#include <gtest/gtest.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "text/bpe_train.h"
#include "text/charsmap.h"
#include "text/normalizer.h"
#include "text/regex_split.h"
#include "text/subword.h"
#include "text/utf8.h"
#include "util/error.h"

namespace lol {
namespace {

std::vector<std::string> split(const std::string& pattern, const std::string& text) {
  RegexSplitter s(pattern);
  std::vector<std::string_view> pieces;
  s.split(text, &pieces);
  return {pieces.begin(), pieces.end()};
}

TEST(RegexSplit, Gpt2PatternSplitsWordsNumbersPunctuationAndSpaces) {
  EXPECT_EQ(split(kGpt2Pattern, "Hello world's  12ab!?\n"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", " 12", "ab", "!?", "\n"}));
  // \p{L} covers every script, with the leading space kept on the word.
  EXPECT_EQ(split(kGpt2Pattern, "Привет мир 東京"),
            (std::vector<std::string>{"Привет", " мир", " 東京"}));
}

TEST(RegexSplit, Cl100kPatternGroupsDigitsByThreeAndKeepsNewlinesApart) {
  EXPECT_EQ(split(kCl100kPattern, "x=12345;\n\n  Don't"),
            (std::vector<std::string>{"x", "=", "123", "45", ";\n\n", " ", " Don", "'t"}));
}

TEST(RegexSplit, PiecesAlwaysConcatenateToTheText) {
  std::mt19937 rng(7);
  const std::vector<std::string> atoms = {"a", "Z",  " ", "  ", "\n", "\t",   "7", "é",
                                          "Ж", "東", "!", "'s", "😀",  "\r\n", "ß", "ά"};
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    for (int i = rng() % 40; i > 0; --i) text += atoms[rng() % atoms.size()];
    for (const char* pattern : {kGpt2Pattern, kCl100kPattern, "x"}) {
      std::string joined;
      for (const auto& p : split(pattern, text)) {
        EXPECT_FALSE(p.empty());
        joined += p;
      }
      EXPECT_EQ(joined, text);
    }
  }
}

// The example of HF's SplitDelimiterBehavior documentation, and what HF's tokenizers 0.23
// (tests/node, `preTokenizeString`) give for it inverted.
TEST(RegexSplit, BehaviorsKeepWhatHfKeeps) {
  using V = std::vector<std::string>;
  auto cut = [](SplitBehavior b, bool invert) {
    std::vector<std::string_view> pieces;
    RegexSplitter("-").split("the-final--countdown", b, invert, &pieces);
    return V(pieces.begin(), pieces.end());
  };
  EXPECT_EQ(cut(SplitBehavior::kRemoved, false), (V{"the", "final", "countdown"}));
  EXPECT_EQ(cut(SplitBehavior::kIsolated, false), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(cut(SplitBehavior::kMergedWithPrevious, false),
            (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(cut(SplitBehavior::kMergedWithNext, false), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(cut(SplitBehavior::kContiguous, false), (V{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(cut(SplitBehavior::kRemoved, true), (V{"-", "-", "-"}));
  EXPECT_EQ(cut(SplitBehavior::kIsolated, true), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(cut(SplitBehavior::kMergedWithPrevious, true), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(cut(SplitBehavior::kMergedWithNext, true), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(cut(SplitBehavior::kContiguous, true), (V{"the", "-", "final", "--", "countdown"}));
  for (auto b :
       {SplitBehavior::kRemoved, SplitBehavior::kIsolated, SplitBehavior::kMergedWithPrevious,
        SplitBehavior::kMergedWithNext, SplitBehavior::kContiguous})
    EXPECT_EQ(parse_split_behavior(split_behavior_name(b), "test"), b);
}

TEST(RegexSplit, BadPatternIsOneClearError) {
  try {
    RegexSplitter s("(unclosed");
    FAIL() << "compiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not compile"), std::string::npos) << e.what();
  }
}

TEST(Utf8, ValidityAndCompletePrefix) {
  EXPECT_TRUE(valid_utf8("plain ascii"));
  EXPECT_TRUE(valid_utf8("Grüße 東京 😀"));
  EXPECT_FALSE(valid_utf8("\xC3"));              // cut
  EXPECT_FALSE(valid_utf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(valid_utf8("\xFF"));
  const std::string s = "a東😀";  // 1 + 3 + 4 bytes
  EXPECT_EQ(complete_utf8_prefix(s), s.size());
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    const size_t expect = cut < 1 ? 0 : cut < 4 ? 1 : cut < 8 ? 4 : 8;
    EXPECT_EQ(complete_utf8_prefix(s.substr(0, cut)), expect) << cut;
  }
}

// The UTF-8 of a code point as utf8proc writes it: the reference for append_utf8.
std::string utf8_of(uint32_t cp) {
  utf8proc_uint8_t buf[4];
  const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  return std::string(reinterpret_cast<char*>(buf), n);
}

TEST(Utf8, AppendWritesEveryScalarValueAsUtf8procAndReadsBack) {
  int64_t checked = 0;
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s = "x";
    append_utf8(cp, &s);
    ASSERT_EQ(s.substr(1), utf8_of(cp)) << std::hex << cp;
    ASSERT_TRUE(valid_utf8(s)) << std::hex << cp;
    ASSERT_EQ(code_point_at(s, 1), cp);
    ASSERT_EQ(previous_character(s, s.size()), 1u);
    ++checked;
  }
  EXPECT_EQ(checked, 0x110000 - 0x800);
}

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> docs = {
      "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs.",
      "Der schnelle braune Fuchs springt über den faulen Hund. Über den Hund!",
      "Быстрая коричневая лиса прыгает через ленивую собаку. Лиса бежит, собака спит.",
      "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
      "敏捷的棕色狐狸跳过了懒狗。狐狸跑了，狗睡了。狐狸和狗。",
      "素早い茶色の狐がのろまな犬を飛び越える。狐と犬。",
      "Numbers: 1234567 and 3.14159, dates 2026-12-01.\n\n  indented line\n",
      "the the the the then there these those thesis theses <|endoftext|> after special",
  };
  return docs;
}

std::unique_ptr<SubwordTokenizer> small_bpe(int64_t vocab = 400) {
  BpeTrainOptions o;
  o.vocab_size = vocab;
  o.min_frequency = 1;
  return train_bpe(corpus(), o);
}

// A byte-level BPE of the 256 bytes and one merge: C2 + B2, the bytes of "²" (U+00B2), which
// as byte-level characters are "Â" and "²", a numeric character itself.
json bytes_and_one_merge(const json& pre_tokenizer) {
  auto j = small_bpe()->to_json();
  json vocab = json::object();
  for (const auto& [token, id] : j["model"]["vocab"].items())
    if (id.get<int64_t>() < 256) vocab[token] = id;
  vocab["\u00c2\u00b2"] = 256;
  j["model"]["vocab"] = vocab;
  j["model"]["merges"] = json::array({"\u00c2 \u00b2"});
  j["added_tokens"] = json::array();
  j["pre_tokenizer"] = pre_tokenizer;
  return j;
}

// Each pre-tokenizer sees what the steps before it made, as in HF (tests/node gives the same
// pieces): after ByteLevel, Digits sees byte-level characters and parts the two bytes of "²";
// before it, "²" is one numeric character and stays whole. ByteLevel puts its prefix space in
// front of every piece the steps before it made, not once per text.
TEST(Bpe, PreTokenizersSeeWhatTheStepsBeforeThemMade) {
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", false}};
  const json digits = {{"type", "Digits"}, {"individual_digits", false}};
  auto sequence = [](json a, json b) {
    return json{{"type", "Sequence"}, {"pretokenizers", json::array({a, b})}};
  };
  auto encode = [](const json& pre, const std::string& text) {
    return SubwordTokenizer::from_json(bytes_and_one_merge(pre), "t.json")->encode(text);
  };
  using Ids = std::vector<int64_t>;
  EXPECT_EQ(encode(byte_level, "a\u00b2"), (Ids{'a', 256}));
  EXPECT_EQ(encode(sequence(digits, byte_level), "a\u00b2"), (Ids{'a', 256}));
  EXPECT_EQ(encode(sequence(byte_level, digits), "a\u00b2"), (Ids{'a', 0xC2, 0xB2}));
  auto prefixed = byte_level;
  prefixed["add_prefix_space"] = true;
  const json dash = {{"type", "Split"},
                     {"pattern", {{"String", "-"}}},
                     {"behavior", "Isolated"},
                     {"invert", false}};
  EXPECT_EQ(encode(prefixed, "a-b"), (Ids{' ', 'a', '-', 'b'}));
  EXPECT_EQ(encode(sequence(dash, prefixed), "a-b"), (Ids{' ', 'a', ' ', '-', ' ', 'b'}));
  // A String pattern is a literal, regular expression characters included.
  auto dots = dash;
  dots["pattern"]["String"] = ".*";
  dots["behavior"] = "Removed";
  EXPECT_EQ(encode(sequence(dots, byte_level), "a.*b.c"), (Ids{'a', 'b', '.', 'c'}));
  // Written back as read, and read back to the same encodings.
  const auto pre = sequence(byte_level, digits);
  const auto t = SubwordTokenizer::from_json(bytes_and_one_merge(pre), "t.json");
  EXPECT_EQ(t->to_json()["pre_tokenizer"], pre);
  const auto again = SubwordTokenizer::from_json(t->to_json(), "again.json");
  EXPECT_EQ(again->encode("x\u00b2 12\u00b2"), t->encode("x\u00b2 12\u00b2"));
}

// Pre-tokens as HF's tokenizers 0.23 gives them (`preTokenizeString` in tests/node; ByteLevel's
// characters written here as the bytes they stand for).
TEST(Bpe, PreTokenizersCutTextAsHfDoes) {
  using V = std::vector<std::string>;
  auto pieces = [](const json& pre, const std::string& text) {
    return SubwordTokenizer::from_json(bytes_and_one_merge(pre), "t.json")->pre_tokenize(text);
  };
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", false}};
  auto seq = [](const json& first, const json& second) {
    return json{{"type", "Sequence"}, {"pretokenizers", json::array({first, second})}};
  };
  auto then = [&](const json& first) { return seq(first, byte_level); };
  const json whitespace = {{"type", "Whitespace"}};
  // Words as Oniguruma's \w has them (Alphabetic, marks, decimal digits, connector
  // punctuation, the joiners), the rest between spaces in runs; White_Space dropped.
  EXPECT_EQ(pieces(then(whitespace), "Hey  friend! how's it? \u00e9_1 a\u0301b"),
            (V{"Hey", "friend", "!", "how", "'", "s", "it", "?", "\u00e9_1", "a\u0301b"}));
  for (const char* whole :
       {"a\u216bb", "a\u200db", "a\u200cb", "a\u203fb", "a\u0663b", "a\u24b6b", "a\u3007b"})
    EXPECT_EQ(pieces(then(whitespace), whole), V{whole}) << whole;
  for (const char* other : {"\u00b2", "\U0001f600", "\u00ad", "\u2070"})
    EXPECT_EQ(pieces(then(whitespace), std::string("a") + other + "b"), (V{"a", other, "b"}))
        << other;
  EXPECT_EQ(pieces(then(whitespace), "a b\u00a0c\u2028d\u0085e\u200bf\u3000h\x1ci"),
            (V{"a", "b", "c", "d", "e", "\u200b", "f", "h", "\x1c", "i"}));
  // Punctuation: ASCII's (symbols such as $ + < = > ^ ` | ~ among them) and Unicode's P*.
  EXPECT_EQ(pieces(then({{"type", "Punctuation"}}), "a+b=c!!? d$ \u00abx\u00bb _^`|~\u20ac"),
            (V{"a",      "+", "b",      "=", "c", "!", "!", "?", " d", "$",     " ",
               "\u00ab", "x", "\u00bb", " ", "_", "^", "`", "|", "~",  "\u20ac"}));
  EXPECT_EQ(pieces(then({{"type", "Punctuation"}, {"behavior", "Contiguous"}}), "c!!? d$ "),
            (V{"c", "!!?", " d", "$", " "}));
  // Digits before ByteLevel see characters; after it, byte-level characters: "²" (C2 B2) and
  // "ಲ" (E0 B2 B2) lose their numeric-looking bytes to pieces of their own.
  const json digit_runs = {{"type", "Digits"}, {"individual_digits", false}};
  EXPECT_EQ(pieces(then(digit_runs), "a\u00b2b \u0cb2 12"), (V{"a", "\u00b2", "b \u0cb2 ", "12"}));
  EXPECT_EQ(pieces(seq(byte_level, digit_runs), "a\u00b2b \u0cb2 12"),
            (V{"a\xc2", "\xb2", "b \xe0", "\xb2\xb2", " ", "12"}));
  EXPECT_EQ(pieces(then({{"type", "Digits"}, {"individual_digits", true}}), "x12"),
            (V{"x", "1", "2"}));
  // CharDelimiterSplit: apart at one character, which goes (HF's Removed example).
  EXPECT_EQ(
      pieces(then({{"type", "CharDelimiterSplit"}, {"delimiter", "-"}}), "the-final--countdown"),
      (V{"the", "final", "countdown"}));
  // BertPreTokenizer: apart at whitespace, then each punctuation mark alone.
  EXPECT_EQ(pieces(then({{"type", "BertPreTokenizer"}}), "Hey  friend!! how's\u00a0it?"),
            (V{"Hey", "friend", "!", "!", "how", "'", "s", "it", "?"}));
}

TEST(Bpe, TrainsTheRequestedVocabularyWithBytesFirstAndSpecialsLast) {
  const auto t = small_bpe();
  EXPECT_EQ(t->vocab_size(), 400);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(t->piece(b, false), std::string(1, char(b)));
  EXPECT_EQ(t->eos(), 398);
  EXPECT_EQ(t->pad(), 399);
  EXPECT_EQ(t->piece(398, false), "<|endoftext|>");
  EXPECT_EQ(t->model().merges.size(), 400u - 256 - 2);
  // Merges learnt from the text shorten it: " the" is one token.
  EXPECT_EQ(t->encode(" the").size(), 1u);
}

TEST(Bpe, TrainingIsDeterministic) {
  EXPECT_EQ(small_bpe()->to_json().dump(), small_bpe()->to_json().dump());
}

TEST(Bpe, EveryUtf8TextRoundTripsExactly) {
  const auto t = small_bpe();
  for (const auto& d : corpus()) EXPECT_EQ(t->decode(t->encode(d)), d);
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> cp(1, 0x10FFFF);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    for (int i = rng() % 30; i > 0; --i) {
      uint32_t c = cp(rng);
      if (c >= 0xD800 && c <= 0xDFFF) c = 'x';
      if (rng() % 2) c = "aeiou ntsr\n."[rng() % 12];
      append_utf8(c, &text);
    }
    ASSERT_TRUE(valid_utf8(text));
    EXPECT_EQ(t->decode(t->encode(text)), text);
  }
}

TEST(Bpe, AddedTokensAreMatchedBeforeSplitting) {
  const auto t = small_bpe();
  const auto ids = t->encode("a<|endoftext|>b");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], 'a');
  EXPECT_EQ(ids[1], *t->eos());
  EXPECT_EQ(ids[2], 'b');
}

TEST(Bpe, InvalidUtf8IsOneClearError) {
  const auto t = small_bpe();
  EXPECT_THROW(t->encode("ok \xFF not"), Error);
}

// The textbook algorithm (Sennrich et al.; GPT-2's encoder.py): find the lowest-ranked pair of
// adjacent pieces and merge every occurrence of it, left to right, until no pair has a rank.
std::vector<std::string> textbook_bpe(
    const std::string& word, const std::map<std::pair<std::string, std::string>, int>& rank) {
  std::vector<std::string> parts;
  for (char c : word) parts.emplace_back(1, c);
  while (parts.size() > 1) {
    int best = INT_MAX;
    std::pair<std::string, std::string> pair;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const auto it = rank.find({parts[i], parts[i + 1]});
      if (it != rank.end() && it->second < best) best = it->second, pair = it->first;
    }
    if (best == INT_MAX) break;
    std::vector<std::string> next;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i + 1 < parts.size() && parts[i] == pair.first && parts[i + 1] == pair.second) {
        next.push_back(parts[i] + parts[i + 1]);
        ++i;
      } else {
        next.push_back(parts[i]);
      }
    }
    parts.swap(next);
  }
  return parts;
}

TEST(Bpe, MergeLoopsAgreeWithTheTextbookAlgorithm) {
  const auto t = small_bpe(600);
  std::map<std::pair<std::string, std::string>, int> rank;
  const auto& m = t->model();
  for (size_t r = 0; r < m.merges.size(); ++r)
    rank[{m.tokens[m.merges[r].first], m.tokens[m.merges[r].second]}] = static_cast<int>(r);
  std::mt19937 rng(11);
  std::vector<std::string> words;
  for (const auto& d : corpus()) {
    std::vector<std::string_view> pieces;
    RegexSplitter(kCl100kPattern).split(d, &pieces);
    words.insert(words.end(), pieces.begin(), pieces.end());
  }
  for (int i = 0; i < 500; ++i) {  // recombinations of corpus words, so that merges apply
    std::string w = words[rng() % words.size()];
    w += words[rng() % words.size()].substr(0, rng() % 5);
    words.push_back(w);
  }
  words.push_back("aaaaaaa");
  words.push_back("thethethe");
  // Pieces longer than 48 bytes take the heap path: it must agree too.
  words.push_back(std::string(101, 'a'));
  words.push_back(std::string(64, '='));
  for (int i = 0; i < 100; ++i) {
    std::string w;
    while (w.size() < 49 + static_cast<size_t>(i)) w += words[rng() % words.size()];
    words.push_back(w);
  }
  for (const auto& w : words) {
    std::vector<int64_t> ids;
    t->encode_word(w, &ids);
    std::vector<std::string> got;
    for (auto id : ids) got.push_back(t->piece(id, false));
    EXPECT_EQ(got, textbook_bpe(w, rank)) << w;
  }
}

TEST(Bpe, SavedTokenizerJsonLoadsToTheSameEncodings) {
  const auto t = small_bpe();
  const auto loaded = SubwordTokenizer::from_json(json::parse(t->to_json().dump()), "saved");
  EXPECT_EQ(loaded->vocab_size(), t->vocab_size());
  EXPECT_EQ(loaded->eos(), t->eos());
  for (const auto& d : corpus()) EXPECT_EQ(loaded->encode(d), t->encode(d));
  EXPECT_EQ(loaded->to_json(), t->to_json());
}

TEST(Bpe, Gpt2StyleTokenizerJsonLoads) {
  // The layout GPT-2's tokenizer.json has: ByteLevel pre-tokenizer with its own regex and a
  // prefix space, merges as "a b" strings, <|endoftext|> in the vocabulary and added.
  auto j = small_bpe()->to_json();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  j["model"]["vocab"]["<|endoftext|>"] = 398;
  const auto t = SubwordTokenizer::from_json(j, "gpt2-style");
  EXPECT_EQ(t->eos(), 398);
  const auto ids = t->encode("the fox");
  EXPECT_EQ(t->decode(ids), " the fox");  // the prefix space is part of the encoding
  // Merges given as pairs of strings mean the same.
  auto pairs = j;
  for (auto& m : pairs["model"]["merges"]) {
    const auto s = m.get<std::string>();
    m = json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  EXPECT_EQ(SubwordTokenizer::from_json(pairs, "pairs")->encode("the fox"), ids);
}

// The examples of Unicode's UAX #15 (figures 3-6 and its table of the four forms), a
// canonical reordering, Hangul, and ASCII and NUL passing through.
TEST(Normalizer, UnicodeNormalFormsOfTheStandardsExamples) {
  const auto nfc = NormalForm::kNfc, nfd = NormalForm::kNfd, nfkc = NormalForm::kNfkc,
             nfkd = NormalForm::kNfkd;
  EXPECT_EQ(normalize("e\u0301", nfc), "\u00e9");
  EXPECT_EQ(normalize("\u00e9", nfd), "e\u0301");
  EXPECT_EQ(normalize("\u212b", nfc), "\u00c5");  // singleton: ANGSTROM SIGN
  EXPECT_EQ(normalize("\u2126", nfd), "\u03a9");  // OHM SIGN
  // Marks reordered by combining class (dot below, 220, before circumflex, 230), then composed.
  EXPECT_EQ(normalize("a\u0302\u0323", nfc), "\u1ead");
  EXPECT_EQ(normalize("\u1ead", nfd), "a\u0323\u0302");
  EXPECT_EQ(normalize("\u1100\u1161\u11a8", nfc), "\uac01");  // Hangul L V T
  EXPECT_EQ(normalize("\uac01", nfd), "\u1100\u1161\u11a8");
  // Compatibility forms change only under NFKC / NFKD.
  EXPECT_EQ(normalize("\ufb01", nfc), "\ufb01");
  EXPECT_EQ(normalize("\ufb01", nfkc), "fi");
  EXPECT_EQ(normalize("\u2460\uff21", nfkc), "1A");
  // UAX #15's table: U+1E9B U+0323 in each form.
  EXPECT_EQ(normalize("\u1e9b\u0323", nfc), "\u1e9b\u0323");
  EXPECT_EQ(normalize("\u1e9b\u0323", nfd), "\u017f\u0323\u0307");
  EXPECT_EQ(normalize("\u1e9b\u0323", nfkc), "\u1e69");
  EXPECT_EQ(normalize("\u1e9b\u0323", nfkd), "s\u0323\u0307");
  const std::string with_nul("a\0e\u0301", 5);
  EXPECT_EQ(normalize(with_nul, nfc), std::string("a\0\u00e9", 4));
  EXPECT_EQ(normalize("plain ascii\n", nfkd), "plain ascii\n");
}

// The quick path of NFC and NFKC (pieces of characters that are their own normal form are
// copied, inert characters cut the text) against utf8proc on the whole text: every character
// of the first three planes alone and next to characters that compose or reorder with their
// neighbours, and random text from a pool of such characters.
TEST(Normalizer, QuickPathAgreesWithUtf8procOnRandomText) {
  // Neighbours: a starter that many marks compose with, a combining mark (reorders, composes),
  // Hangul L and LV (compose with V and T jamo), a Kannada vowel sign (composes as second).
  const std::vector<std::string> around = {"e",      "\u0301", "\u0323", "\u1100", "\uAC00",
                                           "\u0CC6", "\u11A8", "\u1161", " "};
  for (const auto form : {NormalForm::kNfc, NormalForm::kNfkc}) {
    int checked = 0;
    for (uint32_t cp = 0; cp < 0x30000; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      const auto c = utf8_of(cp);
      ASSERT_EQ(normalize("x" + c, form), normalize_whole("x" + c, form)) << std::hex << cp;
      if (cp % 7 == 0 || (cp >= 0x300 && cp < 0x3400) || (cp >= 0xAC00 && cp < 0xAC40) ||
          (cp >= 0xF900 && cp < 0x10000) || (cp >= 0x1D100 && cp < 0x1D200)) {
        for (const auto& a : around) {
          ASSERT_EQ(normalize(a + c + "z", form), normalize_whole(a + c + "z", form))
              << std::hex << cp << " after " << a;
          ASSERT_EQ(normalize("x" + c + a, form), normalize_whole("x" + c + a, form))
              << std::hex << cp << " before " << a;
        }
      }
      ++checked;
    }
    EXPECT_GT(checked, 190000);
  }
  std::vector<std::string> pool = {
      "a",          "e",          "u",          "A",      "=",      "<",      " ",      "1",
      ".",          "\u00e9",     "\u00fc",     "\u01d6", "\u1e9b", "\u212b", "\u2126", "\u0301",
      "\u0304",     "\u0308",     "\u0323",     "\u0338", "\u0344", "\u0f73", "\u1100", "\u1161",
      "\u11a8",     "\uac00",     "\uac01",     "\u0cc6", "\u0cc2", "\u0cd5", "\u0cca", "\u0bc6",
      "\u0bbe",     "\u0915",     "\u093c",     "\u0958", "\ufb1d", "\ufb01", "\u2460", "\uff21",
      "\u3392",     "\u00bd",     "\u03ac",     "\u1f71", "\u6771", "\u3099", "\u304b", "\u304c",
      "\U0001F980", "\U0001D15E", "\U0002F800", "\u00a0", "\u2028", "\u0439", "\u0438", "\u0306"};
  std::mt19937 rng(5);
  for (int n = 0; n < 20000; ++n) {
    std::string text;
    for (int k = std::uniform_int_distribution<int>(1, 12)(rng); k > 0; --k)
      text += pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
    for (const auto form : {NormalForm::kNfc, NormalForm::kNfkc})
      ASSERT_EQ(normalize(text, form), normalize_whole(text, form)) << text;
  }
}

TEST(Normalizer, TokenizerJsonFormsAndSequencesRoundTrip) {
  EXPECT_TRUE(Normalizer::from_json(nullptr, "n").identity());
  EXPECT_TRUE(Normalizer::from_json(nullptr, "n").to_json().is_null());
  const auto nfc = Normalizer::from_json({{"type", "NFC"}}, "n");
  ASSERT_EQ(nfc.steps(), Normalizer({NormalForm::kNfc}).steps());
  EXPECT_EQ(nfc.to_json(), json({{"type", "NFC"}}));
  const json seq = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFKD"}}, {{"type", "NFC"}}}}};
  const auto both = Normalizer::from_json(seq, "n");
  EXPECT_EQ(both.to_json(), seq);
  // In order: compatibility decomposition, then canonical composition.
  EXPECT_EQ(both.apply("\ufb01\u1e9b\u0323"), "fi\u1e69");
  // Lowercase, as HF's (Rust's char::to_lowercase, one character at a time): full mappings
  // (U+0130 becomes two characters), no final-sigma rule, titlecase digraphs to lowercase.
  const json lower = {{"type", "Sequence"},
                      {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}};
  const auto lowercase = Normalizer::from_json(lower, "n");
  EXPECT_EQ(lowercase.to_json(), lower);
  EXPECT_EQ(lowercase.apply(
                "A\u0300BC \u0130STANBUL \u03a3\u0391\u03a3 \u01c4\u01c5 \u1e9e \u0410\u0042"),
            "\u00e0bc i\u0307stanbul \u03c3\u03b1\u03c3 \u01c6\u01c6 \u00df \u0430b");
}

// HF's outputs (tokenizers 0.23, `normalize_str`) for StripAccents, as its own tests use it
// (after NFKD, with Lowercase), for BertNormalizer with each of its steps, and for Nmt.
TEST(Normalizer, StripAccentsBertAndNmtAsHfDoes) {
  auto apply = [](const json& j, const std::string& text) {
    return Normalizer::from_json(j, "n").apply(text);
  };
  const json nfkd_strip = {
      {"type", "Sequence"},
      {"normalizers", {{{"type", "NFKD"}}, {{"type", "StripAccents"}}, {{"type", "Lowercase"}}}}};
  EXPECT_EQ(apply(nfkd_strip, "Me llamó"), "me llamo");
  EXPECT_EQ(apply(nfkd_strip, "Cụ thể, bạn sẽ tham gia một nhóm…"),
            "cu the, ban se tham gia mot nhom...");
  EXPECT_EQ(apply(nfkd_strip, "ำน\u0e49ำ3ลำ"), "านา3ลา");  // U+0E33 = U+0E4D (Mn) + U+0E32
  // Every mark goes: nonspacing, enclosing (U+20DD) and spacing (U+0903, Mc).
  EXPECT_EQ(apply({{"type", "StripAccents"}}, "e\u0304\u0304\u0304o a\u20dd b\u0903c"), "eo a bc");
  EXPECT_EQ(Normalizer::from_json(nfkd_strip, "n").to_json(), nfkd_strip);

  auto bert = [](bool clean, bool chinese, const json& strip, bool lower) {
    return json{{"type", "BertNormalizer"},
                {"clean_text", clean},
                {"handle_chinese_chars", chinese},
                {"strip_accents", strip},
                {"lowercase", lower}};
  };
  // strip_accents null follows lowercase (BERT's uncased models strip, cased ones do not).
  EXPECT_EQ(apply(bert(true, true, nullptr, true), "Héllò hôw are ü?"), "hello how are u?");
  EXPECT_EQ(apply(bert(true, true, nullptr, false), "Héllò 한국 我爱ab"), "Héllò 한국  我  爱 ab");
  // Stripping leaves the text decomposed: Hangul syllables become their jamo.
  EXPECT_EQ(apply(bert(true, true, true, false), "Héllò 한국 我爱ab"),
            "Hello \u1112\u1161\u11ab\u1100\u116e\u11a8  我  爱 ab");
  // clean_text: NUL, U+FFFD and Cc / Cf / Co characters go (tab, newline and return do not; a
  // vertical tab and NEL are controls, so they go too), White_Space becomes a space.
  const std::string nul(1, '\0');
  EXPECT_EQ(apply(bert(true, false, false, false),
                  nul + "a\u200bb\tc\u3000d\u0085e\ufffdf\x0bg\u00a0h\ue000i\nj\r"),
            "ab c defg hi j ");
  // handle_chinese_chars alone: spaces around the CJK ideographs, in every block BERT names.
  EXPECT_EQ(apply(bert(false, true, false, false), nul + "a\u200bb\t我\u3000\U00020000"),
            nul + "a\u200bb\t 我 \u3000 \U00020000 ");
  // Nmt: ASCII and two C1 controls go (not NEL), listed spaces become one (not U+00A0, U+3000).
  EXPECT_EQ(apply({{"type", "Nmt"}},
                  "a\u0001b\tc\nd\x0b"
                  "e\x0c"
                  "f\rg\x1fh\x7fi\u0085j\u008fk\u009fl\u1680m\u200bn"
                  "\u200fo\u2028p\u2581q\ufeffr\ufffds\u00a0t\u3000u"),
            "ab c de f ghi\u0085jkl m n o p q r s\u00a0t\u3000u");
  const auto written = Normalizer::from_json(bert(true, false, nullptr, true), "n").to_json();
  EXPECT_EQ(written, bert(true, false, true, true));  // null written as what it means
  // HF requires the three flags; a missing one is one clear error, as there.
  json partial = bert(true, true, nullptr, true);
  partial.erase("lowercase");
  try {
    Normalizer::from_json(partial, "n");
    ADD_FAILURE() << "loaded without lowercase";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n.lowercase must be true or false"), std::string::npos)
        << e.what();
  }
}

std::unique_ptr<SubwordTokenizer> with_normalizer(json j, const json& normalizer) {
  j["normalizer"] = normalizer;
  return SubwordTokenizer::from_json(j, "nfc");
}

TEST(Bpe, NfcTokenizerEncodesCanonicallyEquivalentTextAlike) {
  const auto plain = small_bpe();
  const auto t = with_normalizer(plain->to_json(), {{"type", "NFC"}});
  const std::string composed = "Caf\u00e9 \u00fcber \u1ead \uac01",
                    decomposed = "Cafe\u0301 u\u0308ber a\u0302\u0323 \u1100\u1161\u11a8";
  EXPECT_NE(plain->encode(composed), plain->encode(decomposed));
  EXPECT_EQ(t->encode(decomposed), plain->encode(composed));
  EXPECT_EQ(t->decode(t->encode(decomposed)), composed);
  // The special token is matched in the text as given; the text around it is normalized.
  auto expected = plain->encode("\u00e9");
  const auto e_acute = expected;
  expected.push_back(*t->eos());
  expected.insert(expected.end(), e_acute.begin(), e_acute.end());
  EXPECT_EQ(t->encode("e\u0301<|endoftext|>e\u0301"), expected);
  // Saved and loaded, it keeps its normalizer.
  const auto again = SubwordTokenizer::from_json(json::parse(t->to_json().dump()), "again");
  EXPECT_EQ(again->to_json(), t->to_json());
  EXPECT_EQ(again->encode(decomposed), plain->encode(composed));
}

TEST(Bpe, Qwen2StyleTokenizerJsonLoads) {
  // Qwen2's layout: an NFC normalizer, a Split on its own pattern (single digits, (?i:) for
  // contractions, a lookahead) before a ByteLevel without its regex, a ByteLevel
  // post-processor (offsets only), chat markers as special added tokens.
  auto j = small_bpe()->to_json();
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern",
                            {{"Regex",
                              "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                              "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", false},
                           {"use_regex", false}}}}};
  j["post_processor"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}};
  const int64_t start = static_cast<int64_t>(j["model"]["vocab"].size() + j["added_tokens"].size());
  for (const auto& [content, id] :
       {std::pair<std::string, int64_t>{"<|im_start|>", start}, {"<|im_end|>", start + 1}})
    j["added_tokens"].push_back(
        {{"id", id}, {"content", content}, {"special", true}, {"normalized", false}});
  const auto t = SubwordTokenizer::from_json(j, "qwen2-style");
  const auto ids = t->encode("<|im_start|>Cafe\u0301 42<|im_end|>");
  ASSERT_GE(ids.size(), 5u);
  EXPECT_EQ(ids.front(), start);
  EXPECT_EQ(ids.back(), start + 1);
  // Digits are pieces of their own, so "42" stays two byte tokens after " " (its own piece).
  EXPECT_EQ(std::vector<int64_t>(ids.end() - 3, ids.end() - 1), (std::vector<int64_t>{'4', '2'}));
  EXPECT_EQ(t->decode(ids), "<|im_start|>Caf\u00e9 42<|im_end|>");
}

TEST(Bpe, TrainingWithANormalizerLearnsFromTheNormalizedText) {
  // Every document of the corpus spelled decomposed (NFD): trained with NFC, the tokenizer has
  // the merges of the composed corpus and keeps its normalizer.
  std::vector<std::string> decomposed;
  for (const auto& d : corpus()) decomposed.push_back(normalize(d, NormalForm::kNfd));
  ASSERT_NE(decomposed[1], corpus()[1]);  // German umlauts
  BpeTrainOptions o;
  o.vocab_size = 400;
  o.min_frequency = 1;
  const auto composed = train_bpe(corpus(), o);
  o.normalizer = Normalizer({NormalForm::kNfc});
  const auto t = train_bpe(decomposed, o);
  EXPECT_EQ(t->model().merges, composed->model().merges);
  EXPECT_EQ(t->to_json()["normalizer"], json({{"type", "NFC"}}));
  for (size_t i = 0; i < decomposed.size(); ++i)
    EXPECT_EQ(t->encode(decomposed[i]), composed->encode(corpus()[i])) << i;
  EXPECT_EQ(Normalizer::named("nfkc").steps(), Normalizer({NormalForm::kNfkc}).steps());
  EXPECT_TRUE(Normalizer::named("none").identity());
  EXPECT_THROW(Normalizer::named("nfx"), Error);
}

// HF's order: added tokens with normalized = false split the text as given; those with
// normalized = true are matched in the normalized pieces.
TEST(Bpe, AddedTokensMatchTheGivenOrTheNormalizedTextByTheirFlag) {
  auto j = small_bpe()->to_json();
  const int64_t id = static_cast<int64_t>(j["model"]["vocab"].size() + j["added_tokens"].size());
  auto add = [&](const std::string& content, bool normalized) {
    auto k = j;
    k["added_tokens"].push_back(
        {{"id", id}, {"content", content}, {"special", false}, {"normalized", normalized}});
    return with_normalizer(k, {{"type", "NFC"}});
  };
  const std::string text = "xA\u030ay";  // NFC: "x\u00c5y"
  const auto none = add("zzz", true)->encode(text);
  // Composed A-ring, matched after normalization.
  EXPECT_EQ(add("\u00c5", true)->encode(text), (std::vector<int64_t>{'x', id, 'y'}));
  EXPECT_EQ(add("\u00c5", false)->encode(text), none);  // the raw text has no U+00C5
  // Decomposed A + ring: matched before normalization, or after it as its own normal form
  // (HF matches normalized added tokens by their normalized content).
  EXPECT_EQ(add("A\u030a", false)->encode(text), (std::vector<int64_t>{'x', id, 'y'}));
  EXPECT_EQ(add("A\u030a", true)->encode(text), (std::vector<int64_t>{'x', id, 'y'}));
  EXPECT_EQ(add("A\u030a", true)->encode("x\u00c5y"), (std::vector<int64_t>{'x', id, 'y'}));
  EXPECT_EQ(add("A\u030a", false)->encode("x\u00c5y"), add("zzz", true)->encode("x\u00c5y"));
  // Without the flag, a non-special added token matches the normalized text (HF's default).
  auto k = j;
  k["added_tokens"].push_back({{"id", id}, {"content", "\u00c5"}, {"special", false}});
  EXPECT_EQ(with_normalizer(k, {{"type", "NFC"}})->encode(text),
            (std::vector<int64_t>{'x', id, 'y'}));
}

// lstrip, rstrip and single_word as HF applies them (tests/text_test.sh compares them with HF on
// documents too): the whitespace (Unicode's White_Space) beside the token goes with it, and a
// single-word token next to a word character (Unicode's \w) is not matched, nor is anything
// else that starts inside it.
TEST(Bpe, AddedTokensStripWhitespaceAndMatchSingleWordsAsHfDoes) {
  const auto base = small_bpe();
  auto j = base->to_json();
  int64_t next = static_cast<int64_t>(j["model"]["vocab"].size() + j["added_tokens"].size());
  auto add = [&](const std::string& content, const char* flag) {
    j["added_tokens"].push_back({{"id", next}, {"content", content}, {"special", false}});
    if (flag) j["added_tokens"].back()[flag] = true;
    return next++;
  };
  const auto mask = add("<mask>", "lstrip"), asst = add("<|assistant|>", "rstrip"),
             word = add("word", "single_word"), ord = add("ord", nullptr);
  const auto t = SubwordTokenizer::from_json(j, "flags");
  using Ids = std::vector<int64_t>;
  auto cat = [&](std::initializer_list<Ids> parts) {
    Ids out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  auto plain = [&](const std::string& text) { return base->encode(text); };
  EXPECT_EQ(t->encode("a  <mask> b"), cat({plain("a"), {mask}, plain(" b")}));
  EXPECT_EQ(t->encode("<mask> <mask>"), (Ids{mask, mask}));
  // U+00A0 is White_Space (absorbed); U+3000 after a token without rstrip stays.
  EXPECT_EQ(t->encode("a\u00a0<mask>\u3000x"), cat({plain("a"), {mask}, plain("\u3000x")}));
  EXPECT_EQ(t->encode("<|assistant|>  \n\u2028hello"), cat({{asst}, plain("hello")}));
  EXPECT_EQ(t->encode("word (word). word"),
            cat({{word}, plain(" ("), {word}, plain("). "), {word}}));
  // Inside words (also next to '_', a combining mark, a circled letter) it is not a token,
  // and "ord" starting inside the dropped match is not looked for.
  for (const char* text : {"sword", "words", "word_", "word\u0301", "\u24b6word", "word\u200dx"})
    EXPECT_EQ(t->encode(text), plain(text)) << text;
  EXPECT_EQ(t->encode("x ord"), cat({plain("x "), {ord}}));
  // The flags are written back.
  const auto again = SubwordTokenizer::from_json(t->to_json(), "again");
  EXPECT_EQ(again->to_json(), t->to_json());
  EXPECT_EQ(again->encode("a  <mask> b sword"), t->encode("a  <mask> b sword"));
}

// A small sentencepiece-style tokenizer.json (Llama-2's vocabulary layout: <unk> <s> </s>, the
// 256 <0xNN> byte tokens, then text tokens) in one of the layouts below. The expected encodings
// and decodings in the tests that use it are what HF's tokenizers 0.23 (npm) gives for the same
// files; tests/text_test.sh compares the two on the fixture texts.
json sentencepiece_json(const std::string& layout) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) vocab[std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">"] = 3 + b;
  int next = 259;
  for (const char* t : {"▁", "a", "b", "c", "h", "i", "▁a", "▁h", "▁hi", "ab", "▁ab", "é", "▁▁"})
    vocab[t] = next++;
  json merges = {"▁ ▁", "▁ a", "▁ h", "▁h i", "a b", "▁a b"};
  json added = json::array();
  for (int id = 0; id < 3; ++id)
    added.push_back({{"id", id},
                     {"content", std::vector<std::string>{"<unk>", "<s>", "</s>"}[id]},
                     {"normalized", false},
                     {"special", true}});
  const json llama_decoder = {
      {"type", "Sequence"},
      {"decoders",
       {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
        {{"type", "ByteFallback"}},
        {{"type", "Fuse"}},
        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  json j = {{"added_tokens", added},
            {"normalizer", nullptr},
            {"pre_tokenizer", nullptr},
            {"decoder", llama_decoder},
            {"model",
             {{"type", "BPE"},
              {"unk_token", "<unk>"},
              {"fuse_unk", true},
              {"byte_fallback", true},
              {"vocab", vocab},
              {"merges", merges}}}};
  if (layout == "llama2") {  // Prepend "▁", Replace " " by "▁", one pre-token per text
    j["normalizer"] = {{"type", "Sequence"},
                       {"normalizers",
                        {{{"type", "Prepend"}, {"prepend", "▁"}},
                         {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}};
  } else {  // "first", "always": a Metaspace pre-tokenizer and decoder of that scheme
    json meta = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", layout}};
    if (layout == "always") meta["split"] = false;  // "first" keeps the default, true
    j["pre_tokenizer"] = meta;
    j["decoder"] = meta;
  }
  return j;
}

std::vector<std::string> token_texts(const SubwordTokenizer& t, const std::string& text) {
  std::vector<std::string> out;
  for (const auto id : t.encode(text)) out.push_back(t.model().tokens.at(id));
  return out;
}

TEST(Bpe, SentencepieceStyleTokenizersEncodeAndDecodeAsHfDoes) {
  struct Case {
    const char* layout;
    std::string text;
    std::vector<std::string> tokens;
    std::string decoded;
  };
  const std::string u = "\u2581", crab = "\U0001F980";
  const std::vector<Case> cases = {
      // Llama-2: each text between added tokens gets its own "▁" (the Prepend normalizer),
      // spaces are "▁"; a character outside the vocabulary falls back to its bytes; the
      // decoder turns "▁" back into spaces and strips the first.
      {"llama2", "hi ab", {u + "hi", u + "ab"}, "hi ab"},
      {"llama2", " hi  ab ", {u + u, "h", "i", u + u, "ab", u}, " hi  ab "},
      {"llama2", "</s>hi</s> ab", {"</s>", u + "hi", "</s>", u + u, "ab"}, "</s> hi</s>  ab"},
      {"llama2", "xy\u00e9 ab", {u, "<0x78>", "<0x79>", "\u00e9", u + "ab"}, "xy\u00e9 ab"},
      {"llama2", crab, {u, "<0xF0>", "<0x9F>", "<0xA6>", "<0x80>"}, crab},
      {"llama2", "  hi a", {u + u, u + "hi", u + "a"}, "  hi a"},
      // Metaspace prepending only at the start of the input (not after an added token),
      // splitting before each "▁"; its decoder knows no byte fallback and drops every "▁" of
      // the first token.
      {"first", " hi  ab ", {u + "hi", u, u + "ab", u}, "hi  ab "},
      {"first", "</s>hi</s> ab", {"</s>", "h", "i", "</s>", u + "ab"}, "</s>hi</s> ab"},
      {"first",
       "xy\u00e9 ab",
       {u, "<0x78>", "<0x79>", "\u00e9", u + "ab"},
       "<0x78><0x79>\u00e9 ab"},
      {"first", "  hi a", {u, u + "hi", u + "a"}, " hi a"},
      {"first", "a  \u00e9\u00e9", {u + "a", u, u, "\u00e9", "\u00e9"}, "a  \u00e9\u00e9"},
      // Metaspace always prepending, not splitting.
      {"always", " hi  ab ", {u + "hi", u + u, "ab", u}, "hi  ab "},
      {"always", "</s>hi</s> ab", {"</s>", u + "hi", "</s>", u + "ab"}, "</s> hi</s> ab"},
      {"always", "  hi a", {u + u, "h", "i", u + "a"}, "hi a"},
      {"always", "a  \u00e9\u00e9", {u + "a", u + u, "\u00e9", "\u00e9"}, "a  \u00e9\u00e9"},
  };
  std::map<std::string, std::unique_ptr<SubwordTokenizer>> tokenizers;
  for (const auto* layout : {"llama2", "first", "always"})
    tokenizers[layout] = SubwordTokenizer::from_json(sentencepiece_json(layout), layout);
  for (const auto& c : cases) {
    const auto& t = *tokenizers.at(c.layout);
    EXPECT_EQ(token_texts(t, c.text), c.tokens) << c.layout << ": '" << c.text << "'";
    EXPECT_EQ(t.decode(t.encode(c.text)), c.decoded) << c.layout << ": '" << c.text << "'";
  }
  const auto& llama = *tokenizers.at("llama2");
  EXPECT_FALSE(llama.model().byte_level);
  EXPECT_EQ(llama.eos(), 2);
  EXPECT_EQ(llama.bos(), 1);
  // A continuation's pieces keep their leading space; only a text's first loses it.
  EXPECT_EQ(llama.piece(llama.encode("hi")[0], true), "hi");
  EXPECT_EQ(llama.piece(llama.encode("hi")[0], false), " hi");
}

TEST(Bpe, SentencepieceUnknownCharactersAreFusedOrNotAndHeldBackAsHfHoldsThem) {
  using V = std::vector<std::string>;
  auto j = sentencepiece_json("always");
  j["model"]["byte_fallback"] = false;
  EXPECT_EQ(token_texts(*SubwordTokenizer::from_json(j, "fused"), "xyé ab"),
            (V{"▁", "<unk>", "é", "▁ab"}));
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(token_texts(*SubwordTokenizer::from_json(j, "unfused"), "xyé ab"),
            (V{"▁", "<unk>", "<unk>", "é", "▁ab"}));
  // With byte fallback but no <0xF0> token, U+1F980 is unknown; HF keeps an unknown run back
  // until a character that is a token, so the bytes of the 'x' after it come first.
  j = sentencepiece_json("always");
  j["model"]["vocab"].erase("<0xF0>");
  EXPECT_EQ(token_texts(*SubwordTokenizer::from_json(j, "no-f0"), "🦀x🦀🦀é ab"),
            (V{"▁", "<0x78>", "<unk>", "é", "▁ab"}));
}

// Without a pre-tokenizer a whole text is one pre-token; the tokenizer cuts it before each
// run of "▁" when no token has "▁" after another character (no merge can cross such a cut).
// A vocabulary with one such token (never reachable by a merge, so encodings cannot change) is
// merged whole: both must agree on random text full of spaces, "▁" runs and unknown characters.
TEST(Bpe, SentencepieceWordCutsLeaveEncodingsAsTheWholeTextGives) {
  std::mt19937 rng(11);
  const std::vector<std::string> atoms = {"a",      "b",          "h", "i",  " ",  "  ", "\u2581",
                                          "\u00e9", "\U0001F980", "x", "\n", "ab", "hi", "</s>"};
  for (const auto* layout : {"llama2", "first", "always"}) {
    for (const bool fallback : {true, false}) {
      auto j = sentencepiece_json(layout);
      j["model"]["byte_fallback"] = fallback;
      j["model"]["fuse_unk"] = !fallback;
      const auto cut = SubwordTokenizer::from_json(j, "cut");
      j["model"]["vocab"]["h\u2581i"] = j["model"]["vocab"].size();
      const auto whole = SubwordTokenizer::from_json(j, "whole");
      for (int n = 0; n < 300; ++n) {
        std::string text;
        for (int k = std::uniform_int_distribution<int>(1, 30)(rng); k > 0; --k)
          text += atoms[std::uniform_int_distribution<size_t>(0, atoms.size() - 1)(rng)];
        ASSERT_EQ(cut->encode(text), whole->encode(text)) << layout << ": '" << text << "'";
      }
    }
  }
  // A token with "▁" after a character that a merge reaches: no cuts, or "h i" would be cut
  // into "▁h" and "▁i" and the first merge ("h ▁") lost.
  auto j = sentencepiece_json("llama2");
  j["model"]["vocab"]["h\u2581"] = j["model"]["vocab"].size();
  j["model"]["merges"].insert(j["model"]["merges"].begin(), "h \u2581");
  EXPECT_EQ(token_texts(*SubwordTokenizer::from_json(j, "h_"), "h i"),
            (std::vector<std::string>{"\u2581", "h\u2581", "i"}));
}

TEST(Bpe, SentencepieceStyleTokenizerJsonRoundTrips) {
  for (const auto* layout : {"llama2", "first", "always"}) {
    const auto t = SubwordTokenizer::from_json(sentencepiece_json(layout), layout);
    const auto again = SubwordTokenizer::from_json(json::parse(t->to_json().dump()), layout);
    EXPECT_EQ(again->to_json(), t->to_json()) << layout;
    for (const char* text : {" hi  ab ", "</s>hi</s> ab", "xyé ab🦀", "  hi a"}) {
      EXPECT_EQ(again->encode(text), t->encode(text)) << layout << ": " << text;
      EXPECT_EQ(again->decode(t->encode(text)), t->decode(t->encode(text))) << layout;
    }
  }
  // The normalizer and decoder steps are written back as read.
  const auto llama = sentencepiece_json("llama2");
  const auto written = SubwordTokenizer::from_json(llama, "llama2")->to_json();
  EXPECT_EQ(written["normalizer"], llama["normalizer"]);
  EXPECT_EQ(written["decoder"], llama["decoder"]);
  EXPECT_EQ(written["model"]["unk_token"], "<unk>");
  EXPECT_EQ(written["model"]["vocab"]["<unk>"], 0);
}

TEST(Bpe, NormalizedAddedTokensMatchTheirNormalizedContent) {
  // With Llama-2's Prepend normalizer a normalized added token "hi" is matched as "▁hi": after
  // a space, not inside "ahi".
  auto j = sentencepiece_json("llama2");
  const int64_t id = static_cast<int64_t>(j["model"]["vocab"].size());
  j["added_tokens"].push_back(
      {{"id", id}, {"content", "hi"}, {"special", false}, {"normalized", true}});
  const auto t = SubwordTokenizer::from_json(j, "llama2+hi");
  const auto plain = SubwordTokenizer::from_json(sentencepiece_json("llama2"), "llama2");
  EXPECT_EQ(t->encode("a hi"), (std::vector<int64_t>{plain->encode("a")[0], id}));
  EXPECT_EQ(t->encode("ahi"), plain->encode("ahi"));
  EXPECT_EQ(t->encode("hi"), (std::vector<int64_t>{id}));
  // And it decodes as what it matched, "▁hi" (as HF's decode does).
  EXPECT_EQ(t->decode(t->encode("a hi")), "a hi");
  EXPECT_EQ(t->piece(id, false), " hi");
}

// Unigram (converted sentencepiece models). The example of HF's own documentation, and a
// layout as HF's converter writes it (Strip the right end, Replace / {2,}/ by "▁", Metaspace
// always prepending), with byte fallback and without: ids and decodings that HF's tokenizers
// 0.23 gave for these files.
json unigram_json(bool byte_fallback) {
  json vocab = json::array(
      {json::array({"<unk>", 0.0}), json::array({"<s>", 0.0}), json::array({"</s>", 0.0})});
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b)
    vocab.push_back(json::array({std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">", 0.0}));
  const std::vector<std::pair<const char*, double>> pieces = {
      {"▁", -2.0},   {"▁the", -3.1}, {"the", -4.2}, {"▁a", -3.5}, {"a", -4.0},
      {"b", -4.5},   {"c", -4.6},    {"▁b", -5.0},  {"ab", -5.5}, {"bc", -5.25},
      {"abc", -7.0}, {"▁ab", -6.0},  {"t", -5.1},   {"h", -5.2},  {"e", -5.3},
      {"é", -6.5},   {"x", -7.7},    {"xy", -30.0}, {"y", -8.0},  {".", -4.4},
      {"▁▁", -9.0},  {"s", -4.9},    {"▁s", -5.9},  {"he", -6.1}, {"▁th", -6.2}};
  for (const auto& [p, score] : pieces) vocab.push_back(json::array({p, score}));
  json added = json::array();
  for (int id = 0; id < 3; ++id)
    added.push_back(
        {{"id", id}, {"content", vocab[id][0]}, {"special", true}, {"normalized", false}});
  const json meta = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  json j = {
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}},
          {{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", "▁"}}}}}},
      {"pre_tokenizer", meta},
      {"decoder", meta},
      {"model",
       {{"type", "Unigram"}, {"unk_id", 0}, {"vocab", vocab}, {"byte_fallback", byte_fallback}}}};
  if (byte_fallback)
    j["decoder"] = {{"type", "Sequence"},
                    {"decoders",
                     {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  return j;
}

TEST(Unigram, EncodesAndDecodesAsHfDoes) {
  using Ids = std::vector<int64_t>;
  // HF's documented example: "abcd" (10) beats "abc" + "d" (5); unknown "xx" is one <unk>.
  const json docs = json::parse(R"({"model": {"type": "Unigram", "unk_id": 0, "vocab": [
      ["<unk>", 0], ["a", 0], ["b", 0], ["c", 0], ["d", 0], ["cd", 1], ["ab", 2], ["abc", 5],
      ["abcd", 10]]}})");
  const auto example = SubwordTokenizer::from_json(docs, "example");
  EXPECT_EQ(example->encode("abcdacdxx"), (Ids{8, 1, 5, 0}));
  EXPECT_EQ(example->encode("xaxbx"), (Ids{0, 1, 0, 2, 0}));
  EXPECT_EQ(example->encode("dcba"), (Ids{4, 3, 2, 1}));
  EXPECT_TRUE(example->encode("").empty());
  struct Case {
    std::string text;
    Ids ids;
    std::string decoded;
  };
  const std::vector<Case> with_bytes = {
      {"the abc", {260, 262, 268}, "the abc"},
      // Strip takes the end's spaces, each run of spaces becomes one "▁"; "z" falls back to its
      // byte; "xy" (-30) loses to "x" + "y" (-15.7).
      {"  thé  xyz  bc  ", {283, 274, 259, 275, 277, 125, 259, 268}, "thé xyz bc"},
      {"ab😀c xy", {270, 243, 162, 155, 131, 265, 259, 275, 277}, "ab😀c xy"},
      {"</s>the<s> s.s", {2, 260, 1, 281, 278, 280}, "</s> the<s> s.s"},
      {"x", {259, 275}, "x"},
      {"the  the   ", {260, 260}, "the the"},
      {"zzé", {259, 125, 125, 274}, "zzé"},
  };
  const std::vector<Case> without = {
      {"the abc", {260, 262, 268}, "the abc"},
      {"  thé  xyz  bc  ", {283, 274, 259, 275, 277, 0, 259, 268}, "thé xy<unk> bc"},
      {"ab😀c xy", {270, 0, 265, 259, 275, 277}, "ab<unk>c xy"},
      {"</s>the<s> s.s", {2, 260, 1, 281, 278, 280}, "</s> the<s> s.s"},
      {"zzé", {259, 0, 274}, "<unk>é"},  // "zz" fused into one <unk>
  };
  for (const bool bytes : {true, false}) {
    const auto t = SubwordTokenizer::from_json(unigram_json(bytes), "unigram");
    for (const auto& c : bytes ? with_bytes : without) {
      EXPECT_EQ(t->encode(c.text), c.ids) << bytes << ": '" << c.text << "'";
      EXPECT_EQ(t->decode(c.ids), c.decoded) << bytes << ": '" << c.text << "'";
    }
    // Saved and loaded again: the same model, the same encodings.
    const auto again = SubwordTokenizer::from_json(t->to_json(), "again");
    EXPECT_EQ(again->to_json(), t->to_json());
    EXPECT_EQ(again->encode("  thé  xyz  bc  "), t->encode("  thé  xyz  bc  "));
    EXPECT_EQ(t->describe()["kind"], "Unigram");
  }
  // The older layout of T5's files: words split at Unicode whitespace (tab, U+3000, newline)
  // before Metaspace puts "▁" in front of each.
  auto j = unigram_json(true);
  const json split_first = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "WhitespaceSplit"}},
        {{"type", "Metaspace"}, {"replacement", "▁"}, {"add_prefix_space", true}}}}};
  j["pre_tokenizer"] = split_first;
  const auto t5 = SubwordTokenizer::from_json(j, "t5");
  const Ids words = {260, 262, 268, 259, 275, 260, 281};
  EXPECT_EQ(t5->encode("the\tabc  x\u3000the\n s"), words);
  EXPECT_EQ(t5->decode(words), "the abc x the s");
  EXPECT_EQ(t5->encode("  ab"), (Ids{270}));
  EXPECT_EQ(SubwordTokenizer::from_json(t5->to_json(), "again")->encode("the\tabc"),
            (Ids{260, 262, 268}));
}

// The slow, obviously correct Unigram: every segmentation of the text into vocabulary tokens
// (and unknown characters where no token is that character alone), scored by summing from the
// left as the Viterbi does, the one of highest score; among equal scores (the same tokens in
// another order) the one whose last token starts earliest, then the one before it, as the
// Viterbi keeps the first candidate offered at each position. Unknown runs fused.
std::vector<int64_t> best_segmentation(const std::string& text,
                                       const std::vector<std::pair<std::string, double>>& vocab) {
  const double unk_score =
      std::min_element(vocab.begin(), vocab.end(),
                       [](const auto& a, const auto& b) { return a.second < b.second; })
          ->second -
      10;
  double best = -1e300;
  std::vector<int64_t> best_ids, ids;
  std::vector<size_t> best_starts, starts;  // token starts, last first
  std::function<void(size_t, double)> walk = [&](size_t at, double score) {
    if (at == text.size()) {
      const std::vector<size_t> back(starts.rbegin(), starts.rend());
      if (score > best || (score == best && back < best_starts))
        best = score, best_ids = ids, best_starts = back;
      return;
    }
    bool single = false;
    auto take = [&](int64_t id, size_t length, double s) {
      ids.push_back(id), starts.push_back(at);
      walk(at + length, score + s);
      ids.pop_back(), starts.pop_back();
    };
    for (size_t id = 1; id < vocab.size(); ++id)
      if (text.compare(at, vocab[id].first.size(), vocab[id].first) == 0) {
        single = single || vocab[id].first.size() == 1;
        take(static_cast<int64_t>(id), vocab[id].first.size(), vocab[id].second);
      }
    if (!single) take(0, 1, unk_score);
  };
  walk(0, 0.0);
  std::vector<int64_t> fused;
  for (const auto id : best_ids)
    if (id != 0 || fused.empty() || fused.back() != 0) fused.push_back(id);
  return fused;
}

TEST(Unigram, ViterbiFindsTheSegmentationOfHighestScore) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> score(-12.0, -0.5);
  int compared = 0;
  for (int trial = 0; trial < 40; ++trial) {
    // Tokens of one to four letters over "abcde" ("e" is never a token alone, so it is
    // unknown unless a longer token covers it); scores continuous, so segmentations tie only
    // when they hold the same tokens.
    std::vector<std::pair<std::string, double>> vocab = {{"<unk>", 0.0}};
    std::set<std::string> seen;
    for (const char* c : {"a", "b", "c", "d"}) vocab.emplace_back(c, score(rng)), seen.insert(c);
    while (vocab.size() < 24) {
      std::string token(1 + rng() % 4, 'a');
      for (auto& ch : token) ch = "abcde"[rng() % 5];
      if (token.size() > 1 && seen.insert(token).second) vocab.emplace_back(token, score(rng));
    }
    json list = json::array();
    for (const auto& [t, sc] : vocab) list.push_back(json::array({t, sc}));
    const auto tokenizer = SubwordTokenizer::from_json(
        {{"model", {{"type", "Unigram"}, {"unk_id", 0}, {"vocab", list}}}}, "random");
    for (int k = 0; k < 25; ++k) {
      std::string text(1 + rng() % 12, 'a');
      for (auto& ch : text) ch = "abcde"[rng() % 5];
      ASSERT_EQ(tokenizer->encode(text), best_segmentation(text, vocab)) << text;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 1000);
}

TEST(Unigram, BrokenModelsAndUnknownTextWithoutAnUnknownTokenAreOneClearError) {
  auto expect_error = [](const json& j, const std::string& needle, const std::string& text = "") {
    try {
      const auto t = SubwordTokenizer::from_json(j, "u.json");
      t->encode(text);
      ADD_FAILURE() << "no error; expected one with " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto j = unigram_json(true);
  j["model"]["vocab"][5] = json::array({"a", "high"});
  expect_error(j, "model.vocab[5] is not [\"token\", score]");
  j = unigram_json(true);
  j["model"]["vocab"] = json::object();
  expect_error(j, "a Unigram model.vocab must be a non-empty list");
  j = unigram_json(true);
  j["model"]["unk_id"] = 10000;
  expect_error(j, "model.unk_id is not an id in [0, 284)");
  j = unigram_json(true);
  j["model"]["vocab"][283] = json::array({"▁the", -1.0});
  expect_error(j, "are the same text '▁the'");
  j = unigram_json(true);
  j["pre_tokenizer"] = {{"type", "ByteLevel"}};
  expect_error(j, "a Unigram model with a ByteLevel pre-tokenizer is not supported");
  j = unigram_json(true);
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {j["pre_tokenizer"], {{"type", "WhitespaceSplit"}}}}};
  expect_error(j, "WhitespaceSplit is supported once, first (before a Metaspace)");
  j = unigram_json(true);
  j["pre_tokenizer"]["prepend_scheme"] = "first";
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {{{"type", "WhitespaceSplit"}}, j["pre_tokenizer"]}}};
  expect_error(j, "prepend_scheme \"first\" after WhitespaceSplit is not supported");
  j = unigram_json(false);
  j["model"]["unk_id"] = nullptr;
  expect_error(j, "'z' is not in the vocabulary and the tokenizer has no unknown token", "the z");
}

TEST(Charsmap, Base64DecodesRfc4648AndRefusesTheRest) {
  std::string out;
  const std::vector<std::pair<std::string, std::string>> ok = {
      {"", ""},
      {"Zg==", "f"},
      {"Zm8=", "fo"},
      {"Zm9v", "foo"},
      {"Zm9vYg==", "foob"},
      {"Zm9vYmE=", "fooba"},
      {"Zm9vYmFy", "foobar"},
      {"/+8A", std::string("\xff\xef\x00", 3)}};
  for (const auto& [text, bytes] : ok) {
    ASSERT_TRUE(base64_decode(text, &out)) << text;
    EXPECT_EQ(out, bytes) << text;
  }
  for (const char* bad : {"Zm9", "Zm=v", "Z===", "Zm9v!A==", "Zg==Zg==", "Zm9v\n"})
    EXPECT_FALSE(base64_decode(bad, &out)) << bad;
}

// A map made by hand: a double array with the keys "a" -> "b" and "c" -> "" (Darts-clone
// units: root offset 1; a key byte's node at 1 ^ byte with a value below it at node ^ 1; 512
// units, so that HF's reader, which does not check bounds, can read it too: it gives the
// results below).
std::string charsmap_base64(uint32_t second_value = 2) {
  std::vector<uint32_t> units(512, 0);
  units[0] = 1u << 10;
  units[1 ^ 'a'] = 1u << 10 | 1u << 8 | 'a';
  units[1 ^ 'a' ^ 1] = 1u << 31 | 0;
  units[1 ^ 'c'] = 1u << 10 | 1u << 8 | 'c';
  units[1 ^ 'c' ^ 1] = 1u << 31 | second_value;
  std::string blob;
  auto put = [&](uint32_t v) {
    for (int k = 0; k < 4; ++k) blob.push_back(static_cast<char>(v >> (8 * k) & 0xFF));
  };
  put(static_cast<uint32_t>(units.size() * 4));
  for (const auto u : units) put(u);
  blob += std::string("b\0\0", 3);
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string text;
  for (size_t i = 0; i < blob.size(); i += 3) {
    uint32_t n = 0;
    for (size_t k = 0; k < 3; ++k)
      n = n << 8 | (i + k < blob.size() ? static_cast<uint8_t>(blob[i + k]) : 0);
    for (size_t k = 0; k < 4; ++k)
      text += k <= (blob.size() - i) && k < 4 ? alphabet[n >> (18 - 6 * k) & 63] : '=';
  }
  return text;
}

TEST(Charsmap, RulesReplaceGraphemeClustersAndCharactersAsHfDoes) {
  const Charsmap map(charsmap_base64(), "hand-made");
  EXPECT_EQ(map.apply("xay"), "xby");
  EXPECT_EQ(map.apply("cat"), "bt");  // "c" is deleted
  EXPECT_EQ(map.apply("aaaaaa"), "bbbbbb");
  // A cluster of fewer than 6 bytes whose first character has a rule is replaced whole (HF's
  // quirk: the combining marks go with it); a longer one character by character.
  EXPECT_EQ(map.apply("a\u0301\u0301z"), "bz");
  EXPECT_EQ(map.apply("a\u0301\u0301\u0301z"), "b\u0301\u0301\u0301z");
  EXPECT_EQ(map.apply("\u00e9a"), "\u00e9b");  // no rule: left as it is
  // Through the tokenizer.json normalizer: written back as it was read.
  const auto normalizer = Normalizer::from_json(
      {{"type", "Precompiled"}, {"precompiled_charsmap", charsmap_base64()}}, "n");
  EXPECT_EQ(normalizer.apply("abc"), "bb");
  EXPECT_EQ(normalizer.to_json()["precompiled_charsmap"], charsmap_base64());
  // A rule that points past the replacement strings is an error (on load for an ASCII key,
  // whose rule is looked up then; on use for others).
  try {
    const Charsmap broken(charsmap_base64(1000), "broken");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a rule points at byte 1000"), std::string::npos)
        << e.what();
  }
}

// BERT's layout: BertNormalizer (uncased), BertPreTokenizer, WordPiece with a word limit of 8
// characters, the WordPiece decoder with cleanup.
json wordpiece_json() {
  json vocab = json::object();
  int id = 0;
  for (const char* t :
       {"[UNK]", "[CLS]", "[SEP]", "ba", "##na", "un",    "##aff", "##able", "the", ",", "'",
        "s",     "##s",   "don",   "t",  "?",    "hello", "##ll",  "he",     "##o", "n", "##a"})
    vocab[t] = id++;
  json added = json::array();
  for (const char* special : {"[UNK]", "[CLS]", "[SEP]"})
    added.push_back({{"id", vocab[special]},
                     {"content", special},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer",
           {{"type", "BertNormalizer"},
            {"clean_text", true},
            {"handle_chinese_chars", true},
            {"strip_accents", nullptr},
            {"lowercase", true}}},
          {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
          {"model",
           {{"type", "WordPiece"},
            {"unk_token", "[UNK]"},
            {"continuing_subword_prefix", "##"},
            {"max_input_chars_per_word", 8},
            {"vocab", vocab}}}};
}

// HF's tokens and decodings (tokenizers 0.23) for this layout: the longest token at each place,
// a word no tokens cover or longer than 8 characters is [UNK] alone, and the decoder joins
// continuations and cleans the spaces before punctuation.
TEST(WordPiece, EncodesAndDecodesAsHfDoes) {
  using V = std::vector<std::string>;
  const auto t = SubwordTokenizer::from_json(wordpiece_json(), "bert");
  struct Case {
    std::string text;
    V tokens;
    std::string decoded;
  };
  for (const auto& c : std::vector<Case>{
           {"banana nanana", {"ba", "##na", "##na", "n", "##a", "##na", "##na"}, "banana nanana"},
           {"Unaffable, the BA's?",
            {"[UNK]", ",", "the", "ba", "'", "s", "?"},
            "[UNK], the ba ' s?"},
           {"HeLLo hello hellooo",
            {"hello", "hello", "hello", "##o", "##o"},
            "hello hello hellooo"},
           {"don't ba[SEP]na", {"don", "'", "t", "ba", "[SEP]", "n", "##a"}, "don ' t ba [SEP] na"},
           {"bananananana banananana", {"[UNK]", "[UNK]"}, "[UNK] [UNK]"},
           {"na n", {"n", "##a", "n"}, "na n"}}) {
    EXPECT_EQ(token_texts(*t, c.text), c.tokens) << c.text;
    EXPECT_EQ(t->decode(t->encode(c.text)), c.decoded) << c.text;
  }
  // "unaffable" has 9 characters; with a limit of 9 it is BERT's example.
  auto j = wordpiece_json();
  j["model"]["max_input_chars_per_word"] = 9;
  const auto nine = SubwordTokenizer::from_json(j, "bert9");
  EXPECT_EQ(nine->decode(nine->encode("unaffable")), "unaffable");
  EXPECT_EQ(nine->encode("unaffable").size(), 3u);
  // The decoder without cleanup on HF's own example: a first token keeps its "##".
  j = wordpiece_json();
  j["decoder"]["cleanup"] = false;
  j["model"]["vocab"] = {{"[UNK]", 0},   {"[CLS]", 1}, {"[SEP]", 2}, {"##uelo", 3},
                         {"Ara", 4},     {"##új", 5},  {"##o", 6},   {"No", 7},
                         {"##guera", 8}, {"'", 9},     {"s", 10},    {".", 11}};
  const auto raw = SubwordTokenizer::from_json(j, "raw");
  EXPECT_EQ(raw->decode({3, 4, 5, 6, 7, 8, 9, 10, 11}), "##uelo Araújo Noguera ' s .");
  EXPECT_EQ(raw->describe()["kind"], "WordPiece");
  // BERT's separator ends documents (corpus builds need an end-of-text token), [CLS] begins.
  EXPECT_EQ(t->eos(), 2);
  EXPECT_EQ(t->bos(), 1);
  // Written back as read (strip_accents null as what it means), and loads to the same tokenizer.
  const auto again = SubwordTokenizer::from_json(json::parse(t->to_json().dump()), "again");
  EXPECT_EQ(again->to_json(), t->to_json());
  EXPECT_EQ(t->to_json()["pre_tokenizer"], json({{"type", "BertPreTokenizer"}}));
  EXPECT_EQ(t->to_json()["model"]["max_input_chars_per_word"], 8);
  for (const char* text : {"banana, the BA's?", "hellooo don't"})
    EXPECT_EQ(again->encode(text), t->encode(text)) << text;
}

// Under Metaspace the pre-tokens carry the space mark, which WordPiece matches like any other
// character (HF 0.23.2's tokens and decodings, with each decoder a file may name).
TEST(WordPiece, MetaspacePreTokensEncodeAndDecodeAsHfDoes) {
  json vocab = json::object();
  int id = 0;
  for (const char* t :
       {"[UNK]", "\u2581hel", "##lo", "\u2581x", "##x", "hello", "\u2581", "##\u2581", "lo"})
    vocab[t] = id++;
  const json metaspace = {{"type", "Metaspace"},
                          {"replacement", "\u2581"},
                          {"prepend_scheme", "always"},
                          {"split", true}};
  auto j = wordpiece_json();
  j["added_tokens"] = json::array();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = metaspace;
  j["model"]["vocab"] = vocab;
  j["model"]["max_input_chars_per_word"] = 100;
  using V = std::vector<std::string>;
  const std::vector<std::pair<std::string, V>> tokens = {
      {"hello xx", {"\u2581hel", "##lo", "\u2581x", "##x"}},
      {"hello  lo", {"\u2581hel", "##lo", "\u2581", "\u2581", "##lo"}},
      {"x", {"\u2581x"}},
      {" hello", {"\u2581hel", "##lo"}}};
  // The decodings of those four texts under a Metaspace, a WordPiece and no decoder.
  const std::vector<std::pair<json, std::vector<std::string>>> decoders = {
      {metaspace, {"hel##lo x##x", "hel##lo  ##lo", "x", "hel##lo"}},
      {j["decoder"],
       {"\u2581hello \u2581xx", "\u2581hello \u2581 \u2581lo", "\u2581x", "\u2581hello"}},
      {nullptr,
       {"\u2581hel ##lo \u2581x ##x", "\u2581hel ##lo \u2581 \u2581 ##lo", "\u2581x",
        "\u2581hel ##lo"}}};
  for (const auto& [decoder, decoded] : decoders) {
    j["decoder"] = decoder;
    const auto t = SubwordTokenizer::from_json(j, "wordpiece-metaspace");
    for (size_t i = 0; i < tokens.size(); ++i) {
      EXPECT_EQ(token_texts(*t, tokens[i].first), tokens[i].second) << tokens[i].first;
      EXPECT_EQ(t->decode(t->encode(tokens[i].first)), decoded[i])
          << tokens[i].first << " with " << decoder.dump();
    }
  }
}

// Without a decoder HF joins the tokens with spaces, text BPE and WordPiece alike.
TEST(WordPiece, NoDecoderJoinsTokensWithSpacesAsHfDoes) {
  auto j = wordpiece_json();
  j["decoder"] = nullptr;
  const auto t = SubwordTokenizer::from_json(j, "bare");
  EXPECT_EQ(t->decode(t->encode("banana, hello")), "ba ##na ##na , hello");
  auto spm = sentencepiece_json("llama2");
  spm["decoder"] = nullptr;
  const auto s = SubwordTokenizer::from_json(spm, "bare-spm");
  EXPECT_EQ(s->decode(s->encode("hi ab")), "\u2581hi \u2581ab");
}

// A WordLevel layout: Lowercase, the Whitespace pre-tokenizer, no decoder, [SEP] added.
json wordlevel_json() {
  json vocab = json::object();
  int id = 0;
  for (const char* t : {"<unk>", "[SEP]", "hello", "world", "!", "!!", "it", "'", "s", "\u00fcber",
                        "\u2581hello", "\u2581x"})
    vocab[t] = id++;
  return {{"version", "1.0"},
          {"added_tokens",
           {{{"id", 1},
             {"content", "[SEP]"},
             {"single_word", false},
             {"lstrip", false},
             {"rstrip", false},
             {"normalized", false},
             {"special", true}}}},
          {"normalizer", {{"type", "Lowercase"}}},
          {"pre_tokenizer", {{"type", "Whitespace"}}},
          {"post_processor", nullptr},
          {"decoder", nullptr},
          {"model", {{"type", "WordLevel"}, {"vocab", vocab}, {"unk_token", "<unk>"}}}};
}

// HF's tokens and decodings (tokenizers 0.23) for WordLevel: each whole pre-token is its token
// or <unk>; without a decoder the tokens are joined with spaces; with Metaspace the pre-tokens
// carry the space mark and its decoder puts the spaces back.
TEST(WordLevel, EncodesAndDecodesAsHfDoes) {
  using V = std::vector<std::string>;
  struct Case {
    std::string text;
    V tokens;
    std::string decoded;
  };
  auto check = [](const SubwordTokenizer& t, const std::vector<Case>& cases) {
    for (const auto& c : cases) {
      EXPECT_EQ(token_texts(t, c.text), c.tokens) << c.text;
      EXPECT_EQ(t.decode(t.encode(c.text)), c.decoded) << c.text;
    }
  };
  const auto t = SubwordTokenizer::from_json(wordlevel_json(), "words");
  check(*t, {{"Hello world!!", {"hello", "world", "!!"}, "hello world !!"},
             {"it's  \u00dcber", {"it", "'", "s", "\u00fcber"}, "it ' s \u00fcber"},
             {"hello[SEP]world", {"hello", "[SEP]", "world"}, "hello [SEP] world"},
             {"", {}, ""},
             {"HELLO!!!", {"hello", "<unk>"}, "hello <unk>"},
             {"hello\tworld\n!", {"hello", "world", "!"}, "hello world !"}});
  EXPECT_EQ(t->describe()["kind"], "WordLevel");
  EXPECT_TRUE(t->describe()["merges"].is_null());
  EXPECT_EQ(t->eos(), 1);  // [SEP], as for BERT's files
  auto j = wordlevel_json();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = j["decoder"] = {{"type", "Metaspace"},
                                       {"replacement", "\u2581"},
                                       {"prepend_scheme", "always"},
                                       {"split", true}};
  const auto m = SubwordTokenizer::from_json(j, "metaspace");
  check(*m, {{"hello hello x", {"\u2581hello", "\u2581hello", "\u2581x"}, "hello hello x"},
             {"Hello x  x", {"<unk>", "\u2581x", "<unk>", "\u2581x"}, "<unk> x<unk> x"}});
  // Written back as read, and loads to the same tokenizer.
  for (const auto* w : {t.get(), m.get()}) {
    const auto again = SubwordTokenizer::from_json(json::parse(w->to_json().dump()), "again");
    EXPECT_EQ(again->to_json(), w->to_json());
    EXPECT_EQ(again->to_json()["model"], json({{"type", "WordLevel"},
                                               {"vocab", wordlevel_json()["model"]["vocab"]},
                                               {"unk_token", "<unk>"}}));
    for (const char* text : {"Hello world!!", "hello x  x[SEP]"})
      EXPECT_EQ(again->encode(text), w->encode(text)) << text;
  }
}

TEST(Bpe, UnsupportedOrBrokenTokenizerJsonIsOneClearError) {
  const auto good = small_bpe()->to_json();
  auto expect_error = [&](json j, const std::string& needle) {
    try {
      SubwordTokenizer::from_json(j, "t.json");
      ADD_FAILURE() << "loaded; expected an error with " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto j = good;
  j["model"]["type"] = "CharLevel";
  expect_error(j, "model type \"CharLevel\" is not supported (BPE, Unigram, WordPiece, WordLevel)");
  j = good;
  j["normalizer"] = {{"type", "ByteLevel"}};
  expect_error(j, "t.json: normalizer: normalizer type \"ByteLevel\" is not supported");
  j = good;
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", {{{"type", "NFC"}}, {{"type", "Precompiled"}}}}};
  expect_error(j, "normalizer.normalizers[1] needs a string \"precompiled_charsmap\"");
  j["normalizer"]["normalizers"][1]["precompiled_charsmap"] = "not base64!";
  expect_error(j, "normalizer.normalizers[1]: precompiled_charsmap is not base64");
  j["normalizer"]["normalizers"][1]["precompiled_charsmap"] = "QAAAAAAAAAA=";  // size 64, 8 bytes
  expect_error(j, "precompiled_charsmap's trie size 64 does not fit its 8 bytes");
  j = good;
  j["normalizer"] = {{"type", "Sequence"}};
  expect_error(j, "normalizers must be a list");
  j = good;
  j["model"]["merges"].push_back("zz qq");
  expect_error(j, "model.merges[");
  const int a_id = good["model"]["vocab"]["A"].get<int>();
  j = good;
  j["model"]["vocab"].erase("A");
  j["model"]["vocab"]["\u00c4\u00c4\u00c4\u00c4"] = a_id;  // bytes C4 C4 C4 C4 instead of 'A'
  expect_error(j, "byte 65");
  j = good;
  j["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
  expect_error(j, "pre-tokenizer type \"UnicodeScripts\" is not supported");
  j = good;
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  expect_error(j, "pretokenizers[0]: behavior \"Sideways\" is not one of Removed, Isolated");
  j = good;
  j["pre_tokenizer"]["pretokenizers"].push_back(j["pre_tokenizer"]["pretokenizers"][1]);
  expect_error(j, "pretokenizers[2]: a second ByteLevel pre-tokenizer");
  j = good;
  j["pre_tokenizer"]["pretokenizers"][0] = {{"type", "CharDelimiterSplit"}, {"delimiter", "ab"}};
  expect_error(j, "pretokenizers[0].delimiter must be one character");
  j = good;
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(x"}};
  expect_error(j, "regular expression '(x' does not compile");
  j = good;
  j["model"]["vocab"].erase("A");
  j["model"]["vocab"]["\xE4\xB8\x80"] = a_id;  // not in the byte-level alphabet
  expect_error(j, "not byte-level text");
  j = good;
  j["model"]["vocab"]["AAAA"] = 1 << 29;  // would make a vocabulary of half a billion ids
  expect_error(j, "is not an id in [0, 401)");
  j = good;
  j["model"].erase("vocab");
  expect_error(j, "no \"vocab\"");
  j = good;
  j["model"]["byte_fallback"] = true;
  expect_error(j, "byte_fallback with a ByteLevel pre-tokenizer");
  // Fields of the wrong JSON type (fuzzing found `"type": 0`, which threw nlohmann's
  // type_error instead of lol::Error).
  j = good;
  j["model"]["type"] = 0;
  expect_error(j, "t.json: model.type must be a string");
  j = good;
  j["model"] = 5;
  expect_error(j, "t.json: model is not an object");
  j = good;
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", 1}};
  expect_error(j, ".behavior must be a string");
  // A flag that is not true or false is refused, not read as false.
  j = good;
  j["model"]["ignore_merges"] = "yes";
  expect_error(j, "t.json: model.ignore_merges must be true or false");
  j = good;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"use_regex", "false"}};
  expect_error(j, "t.json: pre_tokenizer.use_regex must be true or false");
  // Sentencepiece-style files: what is not supported is named.
  const auto spm = sentencepiece_json("llama2");
  j = spm;
  j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " +("}};
  expect_error(j, "normalizer.normalizers[1]: regular expression ' +(' does not compile");
  j = spm;
  j["normalizer"]["normalizers"][1] = {{"type", "Strip"}, {"strip_left", "yes"}};
  expect_error(j, "normalizer.normalizers[1].strip_left must be true or false");
  j = spm;
  j["decoder"] = {{"type", "CTC"}};
  expect_error(j, "decoder: decoder type \"CTC\" is not supported");
  j = spm;
  j["decoder"]["decoders"][3]["start"] = 2;
  expect_error(j, "decoders[3]: after a Fuse only a Strip of at most one character");
  j = sentencepiece_json("first");
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {{{"type", "Digits"}}, j["pre_tokenizer"]}}};
  expect_error(j,
               "Split, Digits, Punctuation, Whitespace and BertPreTokenizer pre-tokenizers are "
               "not supported with Metaspace");
  j = spm;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {{{"type", "Digits"}}, {{"type", "WhitespaceSplit"}}}}};
  expect_error(j, "pretokenizers[1]: WhitespaceSplit is supported once, first");
  j = spm;
  j["model"]["unk_token"] = "<oov>";
  expect_error(j, "model.unk_token \"<oov>\" is not in model.vocab");
  // WordPiece: the unknown token must be there; the word limit is a count.
  j = wordpiece_json();
  j["model"]["unk_token"] = "<oov>";
  expect_error(j, "model.unk_token \"<oov>\" is not in model.vocab");
  j = wordpiece_json();
  j["model"]["max_input_chars_per_word"] = -1;
  expect_error(j, "model.max_input_chars_per_word must be a count >= 0");
  j = wordpiece_json();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}};
  expect_error(j, "a WordPiece model with a ByteLevel pre-tokenizer is not supported");
  // WordLevel: HF requires the unknown token and fails when it is not in the vocabulary.
  j = wordlevel_json();
  j["model"].erase("unk_token");
  expect_error(j, "t.json: model needs a string \"unk_token\"");
  j = wordlevel_json();
  j["model"]["unk_token"] = "[UNK]";
  expect_error(j, "model.unk_token \"[UNK]\" is not in model.vocab");
  j = wordlevel_json();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}};
  expect_error(j, "a WordLevel model with a ByteLevel pre-tokenizer is not supported");
  j = sentencepiece_json("first");
  j["pre_tokenizer"]["prepend_scheme"] = "sometimes";
  expect_error(j, "prepend_scheme \"sometimes\" is not always, first or never");
}

}  // namespace
}  // namespace lol
