// Text: the pre-tokenizer split, UTF-8 checks, byte-level BPE (training, the merge loop
// against a slow textbook BPE, exact round trips, tokenizer.json save/load and its errors).
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "text/bpe.h"
#include "text/regex_split.h"
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

std::unique_ptr<BpeTokenizer> small_bpe(int64_t vocab = 400) {
  BpeTrainOptions o;
  o.vocab_size = vocab;
  o.min_frequency = 1;
  return train_bpe(corpus(), o);
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
      if (c < 0x80) {
        text += char(c);
      } else if (c < 0x800) {
        text += char(0xC0 | (c >> 6)), text += char(0x80 | (c & 0x3F));
      } else if (c < 0x10000) {
        text += char(0xE0 | (c >> 12)), text += char(0x80 | ((c >> 6) & 0x3F));
        text += char(0x80 | (c & 0x3F));
      } else {
        text += char(0xF0 | (c >> 18)), text += char(0x80 | ((c >> 12) & 0x3F));
        text += char(0x80 | ((c >> 6) & 0x3F)), text += char(0x80 | (c & 0x3F));
      }
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
    t->merge(w, &ids);
    std::vector<std::string> got;
    for (auto id : ids) got.push_back(t->piece(id, false));
    EXPECT_EQ(got, textbook_bpe(w, rank)) << w;
  }
}

TEST(Bpe, SavedTokenizerJsonLoadsToTheSameEncodings) {
  const auto t = small_bpe();
  const auto loaded = BpeTokenizer::from_json(json::parse(t->to_json().dump()), "saved");
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
  const auto t = BpeTokenizer::from_json(j, "gpt2-style");
  EXPECT_EQ(t->eos(), 398);
  const auto ids = t->encode("the fox");
  EXPECT_EQ(t->decode(ids), " the fox");  // the prefix space is part of the encoding
  // Merges given as pairs of strings mean the same.
  auto pairs = j;
  for (auto& m : pairs["model"]["merges"]) {
    const auto s = m.get<std::string>();
    m = json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  EXPECT_EQ(BpeTokenizer::from_json(pairs, "pairs")->encode("the fox"), ids);
}

TEST(Bpe, UnsupportedOrBrokenTokenizerJsonIsOneClearError) {
  const auto good = small_bpe()->to_json();
  auto expect_error = [&](json j, const std::string& needle) {
    try {
      BpeTokenizer::from_json(j, "t.json");
      ADD_FAILURE() << "loaded; expected an error with " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto j = good;
  j["model"]["type"] = "Unigram";
  expect_error(j, "model type \"Unigram\"");
  j = good;
  j["normalizer"] = {{"type", "NFC"}};
  expect_error(j, "normalizer \"NFC\"");
  j = good;
  j["model"]["merges"].push_back("zz qq");
  expect_error(j, "model.merges[");
  const int a_id = good["model"]["vocab"]["A"].get<int>();
  j = good;
  j["model"]["vocab"].erase("A");
  j["model"]["vocab"]["\u00c4\u00c4\u00c4\u00c4"] = a_id;  // bytes C4 C4 C4 C4 instead of 'A'
  expect_error(j, "byte 65");
  j = good;
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error(j, "pre-tokenizer type \"Whitespace\"");
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
}

}  // namespace
}  // namespace lol
