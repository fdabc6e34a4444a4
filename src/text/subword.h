#pragma once
// Subword tokenizers (docs/text.md): BPE in two kinds, sentencepiece's Unigram, BERT's WordPiece
// and WordLevel.
// Byte-level BPE is GPT-2's scheme, where the 256 byte values are the base tokens, so every UTF-8
// text (indeed every byte string) encodes and decodes exactly, with no unknown token; it is what
// `lol tokenizer train` makes. Sentencepiece-style BPE (Llama-2, Mistral) has text tokens whose
// base symbols are characters; a character that is not a token becomes the <0xNN> tokens of its
// bytes (byte fallback) or the unknown token. Either way added tokens (<|endoftext|>) are
// matched first, then the text between them is normalized (the tokenizer.json's normalizer, if
// any) and split into pre-tokens (regular expressions, or Metaspace), and each pre-token's
// symbols are merged by the ranked merge list. A Unigram model (converted sentencepiece models)
// has text tokens with scores instead of merges, and takes each pre-token's segmentation of
// highest score. A WordPiece model (BERT) takes the longest tokens from each pre-token's start;
// a WordLevel model maps each whole pre-token to its token, or to the unknown token.
// Stored as a Hugging Face tokenizer.json, so tokenizers trained here load in the HF libraries
// and BPE tokenizers from there (GPT-2, Llama-2, Llama-3, Mistral, Qwen2 style) load here.
#include <bitset>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/normalizer.h"
#include "text/regex_split.h"
#include "text/sentencepiece.h"
#include "text/tokenizer.h"
#include "util/json.h"

namespace lol {

// The key of a pair of ids in merge tables: left << 32 | right.
inline uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

class SubwordTokenizer : public Tokenizer {
 public:
  struct AddedToken {
    int64_t id;
    std::string content;
    bool special;
    // Matched in the normalized text (HF's `normalized`, as the normalizer writes the
    // content); otherwise in the text as given, before normalization.
    bool normalized = false;
    // The whitespace on its left / right goes with it (HF's `lstrip` / `rstrip`); it matches
    // only where no word character (`\w`) touches it on either side (`single_word`).
    bool lstrip = false, rstrip = false, single_word = false;
  };
  // How a pre-token becomes ids: ranked merges (BPE), the segmentation of highest score
  // (Unigram), longest tokens from the start (WordPiece), or the whole pre-token (WordLevel).
  enum class Kind { kBpe, kUnigram, kWordPiece, kWordLevel };
  // The pieces of the model; `merges[r]` is the pair of ids merged at rank r (lower ranks
  // first).
  struct Model {
    Kind kind = Kind::kBpe;
    // By id: bytes (byte-level) or text (sentencepiece-style); empty for an id that only an
    // added token uses.
    std::vector<std::string> tokens;
    std::vector<std::pair<int32_t, int32_t>> merges;
    std::vector<AddedToken> added;
    Normalizer normalizer;
    bool ignore_merges = false;  // a pre-token that is a whole token is not merged (Llama-3)
    bool byte_level = false;     // set by a ByteLevel pre-tokenizer (add_pre_tokenizer)
    // Byte-level: the pre-tokenizer as split passes in tokenizer.json's order. Each pass cuts
    // every piece at its pattern's matches and keeps what `behavior` says (a Split; Digits,
    // Punctuation, Whitespace and BertPreTokenizer are splits by character classes). The
    // ByteLevel step puts a space in front of each piece that lacks one (add_prefix_space,
    // before pass `prefix_before`) and, with use_regex, adds a pass of GPT-2's pattern; passes
    // after that step see a piece as its byte-level characters, one per byte, as HF's do.
    // `pre_tokenizers`: the entries read, with their fields, as to_json writes them back.
    struct SplitPass {
      std::string pattern;
      SplitBehavior behavior = SplitBehavior::kIsolated;
      bool invert = false;
      bool on_byte_chars = false;
    };
    std::vector<SplitPass> splits;
    size_t prefix_before = 0;
    bool add_prefix_space = false;
    std::vector<json> pre_tokenizers;
    // Sentencepiece-style: the Metaspace pre-tokenizer if any (else each text between added
    // tokens is one pre-token), maybe after WhitespaceSplit (older T5 files), byte fallback, the
    // unknown token (consecutive unknown characters fused into one when fuse_unk), and the
    // decoder chain.
    std::optional<Metaspace> metaspace;
    bool whitespace_split = false;  // before Metaspace: words between Unicode whitespace
    bool byte_fallback = false;
    std::optional<int64_t> unk;
    bool fuse_unk = false;
    TokenDecoder decoder;
    // Unigram (sentencepiece's default model): the score (log probability) of each model
    // token, ids 0 .. scores.size() - 1. A pre-token is split into the tokens of highest total
    // score (Viterbi); a character no token starts with is the unknown token (runs fused, or
    // their <0xNN> tokens with byte fallback).
    std::vector<double> scores;
    // WordPiece (BERT): a pre-token is the longest token it starts with, then at each next
    // place the longest continuing token (`continuing_prefix` + text), as HF's WordPiece does;
    // one that no tokens cover, or longer than `max_word_chars` characters, is the unknown
    // token alone.
    std::string continuing_prefix = "##";
    int64_t max_word_chars = 100;
  };

  SubwordTokenizer(Model model, std::string name);
  // A tokenizer.json (HF format). Everything this implementation does not do (other models,
  // normalizers other than Unicode normal forms, pre-tokenizers) is one error naming the field.
  static std::unique_ptr<SubwordTokenizer> load(const std::string& path);
  static std::unique_ptr<SubwordTokenizer> from_json(const json& j, const std::string& name);
  json to_json() const;
  void save(const std::string& path) const;  // atomic

  std::string name() const override { return name_; }
  int64_t vocab_size() const override { return static_cast<int64_t>(model_.tokens.size()); }
  std::vector<int64_t> encode(const std::string& text) const override;
  std::string piece(int64_t id, bool first) const override;
  std::optional<int64_t> eos() const override { return eos_; }
  std::optional<int64_t> bos() const override { return bos_; }
  std::optional<int64_t> pad() const override { return pad_; }

  const Model& model() const { return model_; }
  // What was read and how it will encode (`lol tokenizer info`): kind, sizes, normalizer,
  // pre-tokenizer, decoder, unknown token, special tokens, whether texts are cut into words,
  // WordPiece's continuing prefix and word limit.
  json describe() const;
  // The pre-tokens of a plain text (normalized, no added tokens; at the start of the input),
  // as their bytes: the pieces the model merges one by one (HF's pre_tokenize_str, ByteLevel's
  // characters mapped back to bytes).
  std::vector<std::string> pre_tokenize(std::string_view text) const;
  // The ids of one pre-token: after the merges, or Unigram's best segmentation (no added
  // tokens, no splitting).
  void encode_word(std::string_view pre_token, std::vector<int64_t>* ids) const;

 private:
  // Added tokens of one kind (normalized or not) in `text`, leftmost and then longest first
  // (HF's leftmost-longest search, which goes on after a match it then drops for
  // single_word): each is appended to ids and the text between them goes to `plain`.
  void split_added(std::string_view text, bool normalized, std::vector<int64_t>* ids,
                   const std::function<void(std::string_view)>& plain) const;
  // Pre-tokens as views into the text or into the strings that hold what was added to it
  // (Metaspace's prefix, WhitespaceSplit's words, ByteLevel's prefix spaces).
  struct PreTokens {
    std::vector<std::string_view> pieces;
    std::string prefixed;
    std::vector<std::string> words, spaced;
  };
  // The initial cut (WhitespaceSplit, Metaspace) and the split passes before `passes`.
  void pre_tokenize(std::string_view text, bool at_start, PreTokens* out, size_t passes) const;
  // Split passes [from, to) (with ByteLevel's prefix space where it stands) on out->pieces.
  void run_passes(size_t from, size_t to, PreTokens* out) const;
  // `at_start`: the text begins the input (Metaspace's "first" prepend scheme).
  void encode_plain(std::string_view text, bool at_start, std::vector<int64_t>* ids) const;
  // The base symbols of a pre-token: its bytes, or its characters (byte fallback, unknown).
  void symbols(std::string_view pre_token, std::vector<int32_t>* sym) const;
  void merge_long(const std::vector<int32_t>& symbols, std::vector<int64_t>* ids) const;
  void viterbi(std::string_view pre_token, std::vector<int64_t>* ids) const;      // Unigram
  void word_pieces(std::string_view pre_token, std::vector<int64_t>* ids) const;  // WordPiece
  const std::string* token_text(int64_t id) const;  // null for an unused id

  Model model_;
  std::string name_;
  std::vector<std::unique_ptr<RegexSplitter>> splitters_;
  size_t first_byte_pass_ = 0;  // the first pass on byte-level characters, or splits.size()
  std::unordered_map<std::string, int32_t> by_bytes_;  // model pieces (not added tokens)
  // (left << 32 | right) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merge_of_;
  // Unigram: a byte trie of the model tokens (child of node n by byte b at n << 8 | b; the
  // token a node ends, or -1), and the score of an unknown character (HF: lowest - 10).
  std::unordered_map<uint64_t, int32_t> trie_next_;
  std::vector<int32_t> trie_token_;
  double unk_score_ = 0;
  int32_t byte_id_[256];  // byte-level: each byte's token; else its <0xNN> token or -1
  // [normalized]: what each added token of the kind matches, longest first, and the first bytes
  // of those.
  std::vector<std::pair<std::string, const AddedToken*>> added_match_[2];
  std::bitset<256> added_first_[2];
  std::unordered_map<int64_t, std::string> added_text_;  // id -> what it matches
  std::string word_cut_;  // sentencepiece-style: pre-tokens are cut before runs of this
  std::vector<std::string> decoded_[2];  // sentencepiece-style: each id's piece, [first]
  std::optional<int64_t> eos_, bos_, pad_;
  uint64_t instance_ = 0;  // tells the per-thread word caches apart
};

// Bytes as GPT-2's byte-level characters, one per byte, as a tokenizer.json spells byte-level
// tokens (printable bytes stand for themselves, the others are U+0100 upwards: " " is "Ġ").
std::string byte_level_text(std::string_view bytes);

// Adds one entry of a tokenizer.json pre_tokenizer (not a Sequence: its entries one by one) to
// `model`, after those added before. Throws naming `where` and what is not supported.
void add_pre_tokenizer(const json& entry, const std::string& where, SubwordTokenizer::Model* model);

}  // namespace lol
