#include "text/subword.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <deque>
#include <fstream>
#include <queue>
#include <sstream>
#include <string_view>
#include <tuple>

#include "text/hf_json.h"
#include "text/utf8.h"
#include "util/error.h"
#include "util/files.h"

namespace lol {

using Kind = SubwordTokenizer::Kind;

namespace {

// GPT-2's byte-to-character table: printable bytes stand for themselves, the other 68 map to
// U+0100 upwards in byte order, so that every token of a tokenizer.json is visible text.
struct ByteLevelTable {
  uint32_t to_char[256];
  std::unordered_map<uint32_t, uint8_t> to_byte;
  ByteLevelTable() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      to_char[b] = printable ? b : next++;
      to_byte[to_char[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteLevelTable& byte_level() {
  static const ByteLevelTable table;
  return table;
}

// The bytes a tokenizer.json token stands for; false when the text is not valid UTF-8 or a
// character is not in the table.
bool from_visible(std::string_view text, std::string* bytes) {
  bytes->clear();
  if (!valid_utf8(text)) return false;
  const auto& table = byte_level().to_byte;
  for (size_t i = 0; i < text.size(); i += utf8_length(static_cast<unsigned char>(text[i]))) {
    const auto it = table.find(code_point_at(text, i));
    if (it == table.end()) return false;
    bytes->push_back(static_cast<char>(it->second));
  }
  return true;
}

const json& field(const json& j, const char* key, const std::string& where) {
  LOL_CHECK(j.is_object() && j.contains(key), where, " has no \"", key, "\"");
  return j[key];
}

// Character classes as HF's pre-tokenizers test them: Rust's char::is_whitespace (White_Space),
// punctuation (ASCII punctuation or a Unicode P* category), and the \w and \s of HF's regex
// engine (Oniguruma, as Unicode's TR18 defines them: Alphabetic, marks, decimal digits,
// connector punctuation and the joiners; White_Space), which PCRE2's own \w and \s are not
// (HF's Whitespace keeps "a\u200db" and "aⅫb" whole and parts "a²b").
constexpr char kSpaceClass[] = R"([\t-\r\x{85}\p{Z}])";
constexpr char kPunctuationClass[] =
    R"([\p{P}\x{21}-\x{2F}\x{3A}-\x{40}\x{5B}-\x{60}\x{7B}-\x{7E}])";
constexpr char kWhitespaceWords[] =
    R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]+)"
    R"(|[^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}\t-\r\x{85}\p{Z}]+)";

// A literal as a PCRE2 pattern (a Split's {"String": ...}).
std::string regex_literal(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (std::strchr("\\^$.|?*+()[]{}", c) && c != '\0') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string byte_level_text(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) append_utf8(byte_level().to_char[b], &out);
  return out;
}

void add_pre_tokenizer(const json& p, const std::string& where, SubwordTokenizer::Model* model) {
  using Pass = SubwordTokenizer::Model::SplitPass;
  const auto type = string_field(p, "type", where);
  auto pass = [&](std::string pattern, SplitBehavior behavior, bool invert = false) {
    model->splits.push_back(Pass{std::move(pattern), behavior, invert, model->byte_level});
  };
  json entry = {{"type", type}};
  if (type == "ByteLevel") {
    LOL_CHECK(!model->byte_level, where, ": a second ByteLevel pre-tokenizer");
    model->add_prefix_space = bool_field(p, "add_prefix_space", where);
    model->prefix_before = model->splits.size();
    const bool use_regex = bool_field(p, "use_regex", where, true);
    if (use_regex) pass(kGpt2Pattern, SplitBehavior::kIsolated);
    model->byte_level = true;  // the passes after this see byte-level characters
    entry["add_prefix_space"] = model->add_prefix_space;
    entry["trim_offsets"] = bool_field(p, "trim_offsets", where, true);
    entry["use_regex"] = use_regex;
  } else if (type == "Metaspace") {
    LOL_CHECK(!model->metaspace, where, ": a second Metaspace pre-tokenizer");
    model->metaspace = Metaspace::from_json(p, where);
    LOL_CHECK(!model->whitespace_split || model->metaspace->prepend != PrependScheme::kFirst, where,
              ": prepend_scheme \"first\" after WhitespaceSplit is not supported");
    return;  // written back from the model's fields
  } else if (type == "WhitespaceSplit") {
    LOL_CHECK(!model->metaspace && !model->whitespace_split && model->splits.empty(), where,
              ": WhitespaceSplit is supported once, first (before a Metaspace)");
    model->whitespace_split = true;
    return;
  } else if (type == "Split") {
    const auto& pattern = field(p, "pattern", where);
    const bool invert = bool_field(p, "invert", where);
    const auto behavior =
        parse_split_behavior(string_field(p, "behavior", where, "Isolated"), where);
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      pass(pattern["Regex"].get<std::string>(), behavior, invert);
      entry["pattern"] = {{"Regex", pattern["Regex"]}};
    } else if (pattern.contains("String") && pattern["String"].is_string()) {
      pass(regex_literal(pattern["String"].get<std::string>()), behavior, invert);
      entry["pattern"] = {{"String", pattern["String"]}};
    } else {
      fail(where, ".pattern needs \"Regex\" or \"String\"");
    }
    entry["behavior"] = split_behavior_name(behavior);
    entry["invert"] = invert;
  } else if (type == "Digits") {
    const bool individual = bool_field(p, "individual_digits", where);
    pass(R"(\p{N})", individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
    entry["individual_digits"] = individual;
  } else if (type == "Punctuation") {
    const auto behavior =
        parse_split_behavior(string_field(p, "behavior", where, "Isolated"), where);
    pass(kPunctuationClass, behavior);
    entry["behavior"] = split_behavior_name(behavior);
  } else if (type == "CharDelimiterSplit") {  // apart at one character, which goes
    const auto delimiter = string_field(p, "delimiter", where);
    LOL_CHECK(valid_utf8(delimiter) && !delimiter.empty() &&
                  utf8_length(static_cast<unsigned char>(delimiter[0])) == delimiter.size(),
              where, ".delimiter must be one character");
    pass(regex_literal(delimiter), SplitBehavior::kRemoved);
    entry["delimiter"] = delimiter;
  } else if (type == "Whitespace") {  // words and runs of other non-space characters
    pass(kWhitespaceWords, SplitBehavior::kRemoved, /*invert=*/true);
  } else if (type == "BertPreTokenizer") {  // apart at whitespace, then each punctuation mark
    pass(kSpaceClass, SplitBehavior::kRemoved);
    pass(kPunctuationClass, SplitBehavior::kIsolated);
  } else {
    fail(where, ": pre-tokenizer type \"", type,
         "\" is not supported (ByteLevel, Split, Digits, Punctuation, Whitespace, "
         "BertPreTokenizer, CharDelimiterSplit, Metaspace, WhitespaceSplit, Sequence)");
  }
  model->pre_tokenizers.push_back(std::move(entry));
}

namespace {

// How many ids the vocabulary and the added tokens may use: ids number them densely (a few
// holes are allowed), so a larger id is an error rather than a huge allocation.
int64_t id_limit_of(const json& j, size_t vocab_size) {
  const bool listed = j.contains("added_tokens") && j["added_tokens"].is_array();
  return static_cast<int64_t>(vocab_size + (listed ? j["added_tokens"].size() : 0));
}

void read_unigram(const json& model, const std::string& name, SubwordTokenizer::Model* m) {
  const auto& vocab = model["vocab"];
  LOL_CHECK(vocab.is_array() && !vocab.empty(), name,
            ": a Unigram model.vocab must be a non-empty list of [token, score]");
  for (size_t i = 0; i < vocab.size(); ++i) {
    const auto& e = vocab[i];
    LOL_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_number() &&
                  !e[0].get<std::string>().empty(),
              name, ": model.vocab[", i, "] is not [\"token\", score]");
    m->tokens.push_back(e[0].get<std::string>());
    m->scores.push_back(e[1].get<double>());
  }
  if (model.contains("unk_id") && !model["unk_id"].is_null()) {
    const auto& unk = model["unk_id"];
    LOL_CHECK(unk.is_number_integer() && unk.get<int64_t>() >= 0 &&
                  unk.get<int64_t>() < static_cast<int64_t>(vocab.size()),
              name, ": model.unk_id is not an id in [0, ", vocab.size(), ")");
    m->unk = unk.get<int64_t>();
  }
  m->fuse_unk = true;  // HF's Unigram always fuses unknown characters
}

// model.vocab as {token: id} into m->tokens (byte-level text mapped to bytes); returns the ids
// by token as the model stores them.
std::unordered_map<std::string, int32_t> read_vocab(const json& model, const std::string& name,
                                                    const json& j, SubwordTokenizer::Model* m) {
  const auto& vocab = model["vocab"];
  LOL_CHECK(vocab.is_object(), name, ": model.vocab must map tokens to ids");
  const auto id_limit = id_limit_of(j, vocab.size());
  std::string bytes;
  for (const auto& [token, id] : vocab.items()) {
    LOL_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < id_limit,
              name, ": model.vocab[\"", token, "\"] is not an id in [0, ", id_limit,
              ") (the vocabulary and added tokens have ", id_limit, " entries)");
    const auto i = id.get<int64_t>();
    if (!m->byte_level) {
      bytes = token;
      LOL_CHECK(!bytes.empty(), name, ": model.vocab has an empty token");
    } else {
      LOL_CHECK(from_visible(token, &bytes) && !bytes.empty(), name, ": model.vocab token \"",
                token, "\" is not byte-level text");
    }
    if (i >= static_cast<int64_t>(m->tokens.size())) m->tokens.resize(i + 1);
    LOL_CHECK(m->tokens[i].empty(), name, ": id ", i, " appears twice in model.vocab");
    m->tokens[i] = bytes;
  }
  std::unordered_map<std::string, int32_t> ids;
  for (size_t i = 0; i < m->tokens.size(); ++i)
    if (!m->tokens[i].empty()) ids.emplace(m->tokens[i], static_cast<int32_t>(i));
  return ids;
}

void read_bpe(const json& model, const std::string& name, const json& j,
              SubwordTokenizer::Model* m) {
  const auto ids = read_vocab(model, name, j, m);
  const auto& merges = field(model, "merges", name + ": model");
  LOL_CHECK(merges.is_array(), name, ": model.merges must be a list");
  std::string left_bytes, right_bytes;
  for (size_t r = 0; r < merges.size(); ++r) {
    std::string left, right;
    const auto& e = merges[r];
    if (e.is_string()) {
      const auto s = e.get<std::string>();
      const auto space = s.find(' ');
      LOL_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos, name,
                ": model.merges[", r, "] \"", s, "\" is not two tokens separated by a space");
      left = s.substr(0, space), right = s.substr(space + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      left = e[0].get<std::string>(), right = e[1].get<std::string>();
    } else {
      fail(name, ": model.merges[", r, "] is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const bool ok = m->byte_level
                        ? from_visible(left, &left_bytes) && from_visible(right, &right_bytes)
                        : (left_bytes = left, right_bytes = right, true);
    const auto a = ids.find(left_bytes), b = ids.find(right_bytes);
    LOL_CHECK(ok && a != ids.end() && b != ids.end(), name, ": model.merges[", r,
              "] names a token that is not in model.vocab");
    m->merges.emplace_back(a->second, b->second);
  }
  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    LOL_CHECK(model["unk_token"].is_string(), name, ": model.unk_token must be a string");
    const auto unk = model["unk_token"].get<std::string>();
    const auto it = m->byte_level ? ids.end() : ids.find(unk);
    LOL_CHECK(m->byte_level || it != ids.end(), name, ": model.unk_token \"", unk,
              "\" is not in model.vocab");
    // A byte-level BPE never needs it (every byte is a token); its name is not kept.
    if (!m->byte_level) m->unk = it->second;
  }
}

// model.unk_token, which must name a token of the vocabulary (HF fails on the first word that
// needs it when it does not; refused here on load). `fallback`: HF's default when it is absent.
void read_unk_token(const json& model, const std::string& where,
                    const std::unordered_map<std::string, int32_t>& ids,
                    const std::optional<std::string>& fallback, SubwordTokenizer::Model* m) {
  const auto unk = fallback ? string_field(model, "unk_token", where, *fallback)
                            : string_field(model, "unk_token", where);
  const auto it = ids.find(unk);
  LOL_CHECK(it != ids.end(), where, ".unk_token \"", unk, "\" is not in model.vocab");
  m->unk = it->second;
}

void read_wordpiece(const json& model, const std::string& name, const json& j,
                    SubwordTokenizer::Model* m) {
  const auto where = name + ": model";
  const auto ids = read_vocab(model, name, j, m);
  m->continuing_prefix = string_field(model, "continuing_subword_prefix", where, "##");
  const auto& max =
      model.contains("max_input_chars_per_word") ? model["max_input_chars_per_word"] : json(100);
  LOL_CHECK(max.is_number_integer() && max.get<int64_t>() >= 0, where,
            ".max_input_chars_per_word must be a count >= 0");
  m->max_word_chars = max.get<int64_t>();
  read_unk_token(model, where, ids, "[UNK]", m);
}

// WordLevel: {token: id} and the unknown token, which HF requires.
void read_wordlevel(const json& model, const std::string& name, const json& j,
                    SubwordTokenizer::Model* m) {
  read_unk_token(model, name + ": model", read_vocab(model, name, j, m), std::nullopt, m);
}

// The added tokens (ids checked against the vocabulary's size: see id_limit_of).
void read_added_tokens(const json& j, const std::string& name, SubwordTokenizer::Model* m) {
  if (!j.contains("added_tokens") || j["added_tokens"].is_null()) return;
  const auto& added = j["added_tokens"];
  LOL_CHECK(added.is_array(), name, ": added_tokens must be a list");
  const auto id_limit =
      id_limit_of(j, m->kind == Kind::kUnigram ? m->scores.size() : j["model"]["vocab"].size());
  for (size_t i = 0; i < added.size(); ++i) {
    const auto& t = added[i];
    const auto where = name + ": added_tokens[" + std::to_string(i) + "]";
    const auto& id = field(t, "id", where);
    const auto& content = field(t, "content", where);
    LOL_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < id_limit &&
                  content.is_string() && !content.get<std::string>().empty(),
              where, " needs an integer id in [0, ", id_limit, ") and a non-empty content");
    const auto i_id = id.get<int64_t>();
    if (i_id >= static_cast<int64_t>(m->tokens.size())) m->tokens.resize(i_id + 1);
    // HF's default: special tokens match the text as given, others the normalized text.
    const bool special = bool_field(t, "special", where);
    m->added.push_back({i_id, content.get<std::string>(), special,
                        bool_field(t, "normalized", where, !special),
                        bool_field(t, "lstrip", where), bool_field(t, "rstrip", where),
                        bool_field(t, "single_word", where)});
    // An added token that is also in the vocabulary keeps its text there.
  }
}

std::optional<int64_t> named_token(const std::vector<SubwordTokenizer::AddedToken>& added,
                                   std::initializer_list<const char*> names) {
  for (const char* name : names)
    for (const auto& t : added)
      if (t.content == name) return t.id;
  return std::nullopt;
}

}  // namespace

SubwordTokenizer::SubwordTokenizer(Model model, std::string name)
    : model_(std::move(model)), name_(std::move(name)) {
  static std::atomic<uint64_t> instances{0};
  instance_ = ++instances;
  const auto n = static_cast<int32_t>(model_.tokens.size());
  const bool bytes = model_.byte_level;
  auto shown = [&](const std::string& token) { return bytes ? byte_level_text(token) : token; };
  for (int32_t id = 0; id < n; ++id) {
    const auto& token = model_.tokens[id];
    if (token.empty()) continue;
    LOL_CHECK(by_bytes_.emplace(token, id).second, name_, ": tokens ", by_bytes_[token], " and ",
              id, " are the same ", bytes ? "bytes" : "text", " '", shown(token), "'");
  }
  LOL_CHECK(!model_.metaspace || model_.splits.empty(), name_,
            ": Split, Digits, Punctuation, Whitespace and BertPreTokenizer pre-tokenizers are "
            "not supported with Metaspace");
  const bool whole_words = model_.kind == Kind::kWordPiece || model_.kind == Kind::kWordLevel;
  LOL_CHECK(!whole_words || (!bytes && model_.merges.empty() && model_.unk), name_,
            ": a WordPiece or WordLevel model has text tokens, no merges and an unknown token");
  LOL_CHECK(!bytes || (!model_.metaspace && !model_.whitespace_split && !model_.byte_fallback &&
                       !model_.unk),
            name_,
            ": a byte-level BPE has no Metaspace, WhitespaceSplit, byte fallback or unknown token");
  LOL_CHECK(
      !model_.unk || (*model_.unk >= 0 && *model_.unk < n && !model_.tokens[*model_.unk].empty()),
      name_, ": the unknown token's id is not in the vocabulary");
  for (int b = 0; b < 256; ++b) {
    static const char* hex = "0123456789ABCDEF";
    const auto it = by_bytes_.find(bytes ? std::string(1, static_cast<char>(b))
                                         : std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
    LOL_CHECK(!bytes || it != by_bytes_.end(), name_, ": byte ", b, " ('",
              byte_level_text(std::string(1, b)),
              "') has no token; a byte-level BPE needs all 256");
    byte_id_[b] = it != by_bytes_.end() && (bytes || model_.byte_fallback) ? it->second : -1;
  }
  if (model_.kind == Kind::kUnigram) {
    LOL_CHECK(!bytes && model_.merges.empty() && !model_.scores.empty() &&
                  model_.scores.size() <= model_.tokens.size(),
              name_, ": a Unigram model has text tokens with scores and no merges");
    double lowest = model_.scores[0];
    trie_token_.assign(1, -1);
    for (int32_t id = 0; id < static_cast<int32_t>(model_.scores.size()); ++id) {
      const auto& token = model_.tokens[id];
      LOL_CHECK(!token.empty() && std::isfinite(model_.scores[id]), name_, ": Unigram token ", id,
                " needs text and a finite score");
      lowest = std::min(lowest, model_.scores[id]);
      int32_t node = 0;
      for (unsigned char b : token) {
        const auto [it, added] = trie_next_.emplace(static_cast<uint64_t>(node) << 8 | b,
                                                    static_cast<int32_t>(trie_token_.size()));
        if (added) trie_token_.push_back(-1);
        node = it->second;
      }
      trie_token_[node] = id;
    }
    unk_score_ = lowest - 10.0;
  }
  merge_of_.reserve(model_.merges.size());
  for (size_t r = 0; r < model_.merges.size(); ++r) {
    const auto [a, b] = model_.merges[r];
    LOL_CHECK(a >= 0 && a < n && b >= 0 && b < n && !model_.tokens[a].empty() &&
                  !model_.tokens[b].empty(),
              name_, ": merge ", r, " names a token outside the vocabulary");
    const auto it = by_bytes_.find(model_.tokens[a] + model_.tokens[b]);
    LOL_CHECK(it != by_bytes_.end(), name_, ": merge ", r, " ('", shown(model_.tokens[a]), "' + '",
              shown(model_.tokens[b]), "') makes a token that is not in the vocabulary");
    merge_of_.emplace(pair_key(a, b), std::make_pair(static_cast<int32_t>(r), it->second));
  }
  for (const auto& t : model_.added) {
    LOL_CHECK(t.id >= 0 && t.id < n && !t.content.empty(), name_, ": added token '", t.content,
              "' has id ", t.id, " outside the vocabulary [0, ", n, ")");
    LOL_CHECK(model_.tokens[t.id].empty() || model_.tokens[t.id] == t.content, name_,
              ": added token '", t.content, "' reuses id ", t.id);
  }
  // Normalized added tokens match the normalized content (with Llama-2's Prepend normalizer,
  // "hi" matches "▁hi"). Longest first, so that of two added tokens starting at one place the
  // longer wins.
  for (const auto& t : model_.added) {
    auto pattern = t.normalized ? model_.normalizer.apply(t.content) : t.content;
    added_text_.emplace(t.id, pattern);
    if (pattern.empty()) continue;
    added_first_[t.normalized].set(static_cast<unsigned char>(pattern[0]));
    added_match_[t.normalized].emplace_back(std::move(pattern), &t);
  }
  for (auto& list : added_match_)
    std::stable_sort(list.begin(), list.end(),
                     [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
  for (const auto& p : model_.splits)
    splitters_.push_back(std::make_unique<RegexSplitter>(p.pattern));
  first_byte_pass_ = model_.splits.size();
  for (size_t k = model_.splits.size(); k-- > 0;)
    if (model_.splits[k].on_byte_chars) first_byte_pass_ = k;
  if (!bytes)
    for (int first = 0; first < 2; ++first) {
      decoded_[first].resize(n);
      for (int32_t id = 0; id < n; ++id)
        if (const auto* text = token_text(id))
          decoded_[first][id] = model_.decoder.apply(*text, first);
    }
  // Without a pre-tokenizer (Llama-2) or with an unsplit Metaspace, a whole text is one
  // pre-token: slow to merge and never seen twice. Where no token has "▁" after another
  // character, no merge can join a character to a "▁" run after it, so cutting the text before
  // each such run leaves every merge, and so the result, as it was: the pieces are words that
  // repeat (and are cached). Not with ignore_merges (a whole pre-token that is a token stays
  // one), nor when "▁" is not itself a token (an unknown run would end at the cut).
  // (Not for Unigram: its segmentation's ties depend on the scores summed from the start.)
  if (!bytes && !model_.ignore_merges && model_.kind == Kind::kBpe) {
    const std::string c = model_.metaspace ? model_.metaspace->replacement : "\u2581";
    bool cut = by_bytes_.count(c) > 0;
    for (const auto& token : model_.tokens) {
      size_t lead = 0;
      while (token.compare(lead, c.size(), c) == 0) lead += c.size();
      if (cut && token.find(c, lead) != std::string::npos) cut = false;
    }
    if (cut) word_cut_ = c;
  }
  // BERT's files have no end-of-text token; its separator ends a document there.
  eos_ = named_token(model_.added, {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "[SEP]"});
  bos_ =
      named_token(model_.added, {"<|begin_of_text|>", "<|startoftext|>", "<s>", "<bos>", "[CLS]"});
  pad_ = named_token(model_.added, {"<|pad|>", "<pad>", "[PAD]"});
}

void SubwordTokenizer::symbols(std::string_view pre_token, std::vector<int32_t>* sym) const {
  sym->clear();
  if (model_.byte_level) {
    for (unsigned char b : pre_token) sym->push_back(byte_id_[b]);
    return;
  }
  // Each character is its token, else the <0xNN> tokens of its bytes, else the unknown token.
  // As HF's BPE does, an unknown character is held back (and joined by the next with fuse_unk)
  // until a character that is a token comes or the pre-token ends, so byte fallback tokens of
  // the characters between go before it.
  bool unk_held = false;
  std::string ch;
  for (size_t i = 0; i < pre_token.size();) {
    const size_t len = utf8_length(static_cast<unsigned char>(pre_token[i]));
    ch.assign(pre_token.substr(i, len));
    i += len;
    const auto it = by_bytes_.find(ch);
    if (it != by_bytes_.end()) {
      if (unk_held) sym->push_back(static_cast<int32_t>(*model_.unk)), unk_held = false;
      sym->push_back(it->second);
      continue;
    }
    if (model_.byte_fallback &&
        std::all_of(ch.begin(), ch.end(), [&](char b) { return byte_id_[uint8_t(b)] >= 0; })) {
      for (unsigned char b : ch) sym->push_back(byte_id_[b]);
      continue;
    }
    if (!model_.unk) continue;  // no unknown token: HF drops the character
    if (unk_held && !model_.fuse_unk) sym->push_back(static_cast<int32_t>(*model_.unk));
    unk_held = true;
  }
  if (unk_held) sym->push_back(static_cast<int32_t>(*model_.unk));
}

void SubwordTokenizer::encode_word(std::string_view pre_token, std::vector<int64_t>* ids) const {
  if (pre_token.empty()) return;
  switch (model_.kind) {
    case Kind::kBpe:
      break;
    case Kind::kUnigram:
      return viterbi(pre_token, ids);
    case Kind::kWordPiece:
      return word_pieces(pre_token, ids);
    case Kind::kWordLevel: {
      const auto it = by_bytes_.find(std::string(pre_token));
      ids->push_back(it != by_bytes_.end() ? it->second : *model_.unk);
      return;
    }
  }
  if (model_.ignore_merges) {
    const auto it = by_bytes_.find(std::string(pre_token));
    if (it != by_bytes_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> sym;
  symbols(pre_token, &sym);
  if (sym.empty()) return;
  // Repeatedly merge the lowest-ranked adjacent pair, the leftmost among equals (as the HF
  // implementation's priority queue does). Short pieces (nearly all) scan an array of pair
  // ranks; long ones (a line of '=', a page of CJK) take a heap, which is O(n log n).
  if (sym.size() > 48) return merge_long(sym, ids);
  // `ranks[i]` belongs to the pair (sym[i], sym[i+1]).
  auto rank_of = [&](size_t i) {
    const auto it = merge_of_.find(pair_key(sym[i], sym[i + 1]));
    return it == merge_of_.end() ? INT_MAX : it->second.first;
  };
  std::vector<int32_t> ranks(sym.size() - 1);
  for (size_t i = 0; i + 1 < sym.size(); ++i) ranks[i] = rank_of(i);
  while (!ranks.empty()) {
    const auto best = std::min_element(ranks.begin(), ranks.end()) - ranks.begin();
    if (ranks[best] == INT_MAX) break;
    sym[best] = merge_of_.at(pair_key(sym[best], sym[best + 1])).second;
    sym.erase(sym.begin() + best + 1);
    ranks.erase(ranks.begin() + best);
    if (best > 0) ranks[best - 1] = rank_of(best - 1);
    if (static_cast<size_t>(best) < ranks.size()) ranks[best] = rank_of(best);
  }
  ids->insert(ids->end(), sym.begin(), sym.end());
}

void SubwordTokenizer::merge_long(const std::vector<int32_t>& symbols,
                                  std::vector<int64_t>* ids) const {
  const auto n = static_cast<int32_t>(symbols.size());
  struct Symbol {
    int32_t id, prev, next;  // prev/next: neighbours in the list, -1 at the ends
  };
  std::vector<Symbol> sym(n);
  for (int32_t i = 0; i < n; ++i) sym[i] = {symbols[i], i - 1, i + 1 < n ? i + 1 : -1};
  // (rank, left position, left id, right id); smallest rank, then leftmost, on top.
  using Candidate = std::tuple<int32_t, int32_t, int32_t, int32_t>;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto offer = [&](int32_t left) {
    if (left < 0 || sym[left].next < 0) return;
    const auto right = sym[left].next;
    const auto it = merge_of_.find(pair_key(sym[left].id, sym[right].id));
    if (it != merge_of_.end()) queue.emplace(it->second.first, left, sym[left].id, sym[right].id);
  };
  for (int32_t i = 0; i + 1 < n; ++i) offer(i);
  while (!queue.empty()) {
    const auto [rank, left, a, b] = queue.top();
    queue.pop();
    // Stale when either side has changed since it was offered.
    if (sym[left].id != a || sym[left].next < 0 || sym[sym[left].next].id != b) continue;
    const auto right = sym[left].next;
    sym[left].id = merge_of_.at(pair_key(a, b)).second;
    sym[left].next = sym[right].next;
    if (sym[right].next >= 0) sym[sym[right].next].prev = left;
    sym[right].id = -1;  // gone
    offer(sym[left].prev);
    offer(left);
  }
  for (int32_t i = 0; i >= 0 && i < n; i = sym[i].next) ids->push_back(sym[i].id);
}

void SubwordTokenizer::viterbi(std::string_view text, std::vector<int64_t>* ids) const {
  // As HF's Unigram (sentencepiece's optimized Viterbi): best[e] is the best segmentation of
  // the first e bytes; each character start offers every token the trie finds there, and the
  // unknown token for the character when no token is that character alone. A candidate
  // replaces the one held only when its score is higher, so among equals the first offered
  // (the earliest start) stays.
  const size_t n = text.size();
  struct Node {
    double score = 0;
    int64_t start = -1;  // -1: not reached
    int32_t id = -1;
  };
  std::vector<Node> best(n + 1);
  auto offer = [&](size_t start, size_t end, int32_t id, double score) {
    const double total = score + best[start].score;
    auto& node = best[end];
    if (node.start < 0 || total > node.score) node = {total, static_cast<int64_t>(start), id};
  };
  for (size_t at = 0; at < n;) {
    const size_t len = utf8_length(static_cast<unsigned char>(text[at]));
    bool single = false;
    int32_t node = 0;
    for (size_t end = at; end < n;) {
      const auto it =
          trie_next_.find(static_cast<uint64_t>(node) << 8 | static_cast<unsigned char>(text[end]));
      if (it == trie_next_.end()) break;
      node = it->second;
      const int32_t id = trie_token_[node];
      if (++end, id < 0) continue;
      offer(at, end, id, model_.scores[id]);
      single = single || end - at == len;
    }
    if (!single) {
      LOL_CHECK(model_.unk, name_, ": '", text.substr(at, len),
                "' is not in the vocabulary and the tokenizer has no unknown token");
      offer(at, at + len, static_cast<int32_t>(*model_.unk), unk_score_);
    }
    at += len;
  }
  // Back from the end; runs of unknown characters are fused (HF always fuses for Unigram) and
  // stand for the token of their text if there is one, else their <0xNN> tokens (byte
  // fallback, when every byte has one), else the unknown token.
  std::vector<int64_t> reversed;
  for (size_t end = n; end > 0;) {
    size_t start = static_cast<size_t>(best[end].start);
    if (!model_.unk || best[end].id != *model_.unk) {
      reversed.push_back(best[end].id);
      end = start;
      continue;
    }
    while (start > 0 && best[start].id == *model_.unk)
      start = static_cast<size_t>(best[start].start);
    const auto run = text.substr(start, end - start);
    const auto it = by_bytes_.find(std::string(run));
    if (it != by_bytes_.end()) {
      reversed.push_back(it->second);
    } else if (model_.byte_fallback && std::all_of(run.begin(), run.end(), [&](char b) {
                 return byte_id_[uint8_t(b)] >= 0;
               })) {
      for (auto b = run.rbegin(); b != run.rend(); ++b) reversed.push_back(byte_id_[uint8_t(*b)]);
    } else {
      reversed.push_back(*model_.unk);
    }
    end = start;
  }
  ids->insert(ids->end(), reversed.rbegin(), reversed.rend());
}

void SubwordTokenizer::word_pieces(std::string_view word, std::vector<int64_t>* ids) const {
  const auto unknown = [&] { ids->push_back(*model_.unk); };
  std::vector<size_t> ends;  // the end of each character
  for (size_t at = 0; at < word.size();)
    ends.push_back(at += utf8_length(static_cast<unsigned char>(word[at])));
  if (static_cast<int64_t>(ends.size()) > model_.max_word_chars) return unknown();
  const size_t before = ids->size();
  std::string candidate;
  for (size_t start = 0, first = 0; start < word.size();) {  // first: index of start's character
    const std::string_view prefix = start > 0 ? model_.continuing_prefix : std::string_view();
    bool found = false;
    for (size_t k = ends.size(); k-- > first;) {  // longest first
      candidate.assign(prefix).append(word.substr(start, ends[k] - start));
      const auto it = by_bytes_.find(candidate);
      if (it == by_bytes_.end()) continue;
      ids->push_back(it->second);
      start = ends[k];
      first = k + 1;
      found = true;
      break;
    }
    if (!found) {
      ids->resize(before);
      return unknown();
    }
  }
}

std::vector<std::string> SubwordTokenizer::pre_tokenize(std::string_view text) const {
  PreTokens t;
  pre_tokenize(text, /*at_start=*/true, &t, splitters_.size());
  return {t.pieces.begin(), t.pieces.end()};
}

void SubwordTokenizer::pre_tokenize(std::string_view text, bool at_start, PreTokens* t,
                                    size_t passes) const {
  if (text.empty()) return;
  auto& pieces = t->pieces;
  auto& words = t->words;
  if (model_.whitespace_split) {
    for (size_t at = 0; at < text.size();) {
      size_t end = at;
      while (end < text.size() && !white_space(code_point_at(text, end)))
        end += utf8_length(static_cast<unsigned char>(text[end]));
      if (end > at) words.emplace_back(text.substr(at, end - at));
      at = end;
      while (at < text.size() && white_space(code_point_at(text, at)))
        at += utf8_length(static_cast<unsigned char>(text[at]));
    }
    for (auto& w : words) {  // (no reallocation: views into the words stay valid)
      if (!model_.metaspace) {
        pieces.push_back(w);
        continue;
      }
      w = model_.metaspace->apply(w, at_start);  // not "first" here (refused on load)
      model_.metaspace->split_pieces(w, &pieces);
    }
  } else if (model_.metaspace) {
    t->prefixed = model_.metaspace->apply(text, at_start);
    model_.metaspace->split_pieces(t->prefixed, &pieces);
  } else {
    pieces.push_back(text);
  }
  run_passes(0, passes, t);
}

void SubwordTokenizer::run_passes(size_t from, size_t to, PreTokens* t) const {
  auto& pieces = t->pieces;
  auto& spaced = t->spaced;
  std::vector<std::string_view> next;
  std::string chars;              // a piece as byte-level characters
  std::vector<uint32_t> byte_at;  // byte of the piece at each offset of `chars`
  std::vector<std::string_view> char_pieces;
  for (size_t k = from; k <= to; ++k) {
    if (k == model_.prefix_before && model_.add_prefix_space) {
      spaced.reserve(pieces.size());  // no reallocation: views into them stay valid
      for (auto& p : pieces)
        if (p.front() != ' ') p = spaced.emplace_back(" " + std::string(p));
    }
    if (k == to) break;
    const auto& pass = model_.splits[k];
    next.clear();
    for (auto p : pieces) {
      if (!pass.on_byte_chars) {
        splitters_[k]->split(p, pass.behavior, pass.invert, &next);
        continue;
      }
      // Split as byte-level characters (a UTF-8 character's bytes can fall apart), each
      // piece mapped back to the bytes its characters stand for.
      chars.clear();
      byte_at.clear();
      for (size_t b = 0; b < p.size(); ++b) {
        const size_t before = chars.size();
        append_utf8(byte_level().to_char[static_cast<unsigned char>(p[b])], &chars);
        byte_at.insert(byte_at.end(), chars.size() - before, static_cast<uint32_t>(b));
      }
      byte_at.push_back(static_cast<uint32_t>(p.size()));
      char_pieces.clear();
      splitters_[k]->split(chars, pass.behavior, pass.invert, &char_pieces);
      for (auto c : char_pieces) {
        const size_t begin = byte_at[c.data() - chars.data()];
        next.push_back(p.substr(begin, byte_at[c.data() + c.size() - chars.data()] - begin));
      }
    }
    pieces.swap(next);
  }
}

void SubwordTokenizer::encode_plain(std::string_view text, bool at_start,
                                    std::vector<int64_t>* ids) const {
  // The passes that work on byte-level characters (after ByteLevel's) cut each piece on its
  // own, so a piece's ids are cached as it stands before them: they run on a cache miss only.
  PreTokens pre;
  pre_tokenize(text, at_start, &pre, first_byte_pass_);
  if (!word_cut_.empty()) {  // see the constructor: no merge crosses these cuts
    std::vector<std::string_view> next;
    const auto& c = word_cut_;
    for (auto p : pre.pieces) {
      size_t begin = 0;
      for (size_t at = p.find(c, 1); at != std::string_view::npos; at = p.find(c, at + c.size())) {
        if (at >= c.size() && p.compare(at - c.size(), c.size(), c) == 0) continue;  // in a run
        if (at > begin) next.push_back(p.substr(begin, at - begin));
        begin = at;
      }
      next.push_back(p.substr(begin));
    }
    pre.pieces.swap(next);
  }
  // Text repeats its words: each thread keeps the merges of the pre-tokens it has seen with
  // this tokenizer (bounded; cleared when full or when another tokenizer is used).
  struct WordCache {
    uint64_t owner = 0;
    std::unordered_map<std::string, std::vector<int32_t>> ids;
  };
  thread_local WordCache cache;
  if (cache.owner != instance_ || cache.ids.size() > (1u << 18)) {
    cache.ids.clear();
    cache.owner = instance_;
  }
  std::string key;
  std::vector<int64_t> merged;
  PreTokens rest;  // a piece cut by the remaining passes
  auto encode = [&](std::string_view p, std::vector<int64_t>* out) {
    if (first_byte_pass_ == splitters_.size()) return encode_word(p, out);
    rest.pieces.assign(1, p);
    rest.spaced.clear();
    run_passes(first_byte_pass_, splitters_.size(), &rest);
    for (auto r : rest.pieces) encode_word(r, out);
  };
  for (auto p : pre.pieces) {
    if (p.size() > 256) {  // a whole text without a pre-tokenizer (Llama-2) is not a word
      encode(p, ids);
      continue;
    }
    key.assign(p.data(), p.size());
    auto it = cache.ids.find(key);
    if (it == cache.ids.end()) {
      merged.clear();
      encode(p, &merged);
      it = cache.ids.emplace(key, std::vector<int32_t>(merged.begin(), merged.end())).first;
    }
    ids->insert(ids->end(), it->second.begin(), it->second.end());
  }
}

void SubwordTokenizer::split_added(std::string_view text, bool normalized,
                                   std::vector<int64_t>* ids,
                                   const std::function<void(std::string_view)>& plain) const {
  const auto& first = added_first_[normalized];
  size_t done = 0;  // start of the text not yet handed on
  if (first.any()) {
    for (size_t at = 0; at < text.size();) {
      const std::pair<std::string, const AddedToken*>* hit = nullptr;
      if (first[static_cast<unsigned char>(text[at])])
        for (const auto& m : added_match_[normalized])  // longest first
          if (text.compare(at, m.first.size(), m.first) == 0) {
            hit = &m;
            break;
          }
      if (!hit) {
        ++at;
        continue;
      }
      const auto& t = *hit->second;
      const size_t end = at + hit->first.size();
      size_t start = at, stop = end;
      if (t.single_word &&
          ((at > 0 && word_character(code_point_at(text, previous_character(text, at)))) ||
           (end < text.size() && word_character(code_point_at(text, end))))) {
        at = end;  // the search goes on after it, as HF's does
        continue;
      }
      while (t.lstrip && start > done) {
        const auto prev = previous_character(text, start);
        if (!white_space(code_point_at(text, prev))) break;
        start = prev;
      }
      while (t.rstrip && stop < text.size() && white_space(code_point_at(text, stop)))
        stop += utf8_length(static_cast<unsigned char>(text[stop]));
      if (start > done) plain(text.substr(done, start - done));
      ids->push_back(t.id);
      done = std::max(done, stop);
      at = end;
    }
  }
  plain(text.substr(done));
}

std::vector<int64_t> SubwordTokenizer::encode(const std::string& text) const {
  LOL_CHECK(valid_utf8(text), "text is not valid UTF-8 (", name_, " encodes UTF-8 text)");
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3 + 1);
  // As the HF tokenizers do: added tokens that match the text as given split it first; each
  // piece between them is normalized, split by the added tokens that match normalized text,
  // and the rest pre-tokenized and merged.
  // A piece is at the start of the input when it begins the text and its normalized form.
  split_added(text, /*normalized=*/false, &ids, [&](std::string_view piece) {
    if (piece.empty()) return;
    const bool first = piece.data() == text.data();
    std::string normal;
    std::string_view view = piece;
    if (!model_.normalizer.identity()) view = normal = model_.normalizer.apply(piece);
    split_added(view, true, &ids, [&](std::string_view p) {
      encode_plain(p, first && p.data() == view.data(), &ids);
    });
  });
  return ids;
}

const std::string* SubwordTokenizer::token_text(int64_t id) const {
  // An added token is what it matches (HF keeps a normalized one's content normalized: with
  // Llama-2's normalizer "hi" is "▁hi"), before the vocabulary's token of its id.
  const auto added = added_text_.find(id);
  return added != added_text_.end()  ? &added->second
         : model_.tokens[id].empty() ? nullptr
                                     : &model_.tokens[id];
}

std::string SubwordTokenizer::piece(int64_t id, bool first) const {
  LOL_CHECK(id >= 0 && id < vocab_size(), "token id ", id, " is outside the ", name_,
            " vocabulary [0, ", vocab_size(), ")");
  const std::string* text = token_text(id);
  LOL_CHECK(text, "token id ", id, " is unused in ", name_);
  // Byte-level tokens are their bytes; text tokens (and, as in HF, added tokens among them)
  // went through the decoder chain in the constructor.
  return model_.byte_level ? *text : decoded_[first][id];
}

json SubwordTokenizer::describe() const {
  const auto j = to_json();
  json added = json::array();
  for (const auto& t : j["added_tokens"]) added.push_back(t);
  auto id_or_null = [](const std::optional<int64_t>& id) { return id ? json(*id) : json(nullptr); };
  const bool wordpiece = model_.kind == Kind::kWordPiece;
  return {{"kind", model_.kind == Kind::kUnigram     ? "Unigram"
                   : model_.kind == Kind::kWordPiece ? "WordPiece"
                   : model_.kind == Kind::kWordLevel ? "WordLevel"
                   : model_.byte_level               ? "byte-level BPE"
                                                     : "sentencepiece-style BPE"},
          {"vocab_size", vocab_size()},
          {"model_tokens", j["model"]["vocab"].size()},
          {"merges", model_.kind == Kind::kBpe ? json(model_.merges.size()) : json(nullptr)},
          {"added_tokens", added},
          {"normalizer", j["normalizer"]},
          {"pre_tokenizer", j["pre_tokenizer"]},
          {"decoder", j["decoder"]},
          {"byte_fallback", model_.byte_fallback},
          {"unknown_token", model_.unk ? json(model_.tokens[*model_.unk]) : json(nullptr)},
          {"fuse_unk", model_.fuse_unk},
          {"ignore_merges", model_.ignore_merges},
          {"cut_before", word_cut_.empty() ? json(nullptr) : json(word_cut_)},
          {"continuing_prefix", wordpiece ? json(model_.continuing_prefix) : json(nullptr)},
          {"max_word_chars", wordpiece ? json(model_.max_word_chars) : json(nullptr)},
          {"bos", id_or_null(bos_)},
          {"eos", id_or_null(eos_)},
          {"pad", id_or_null(pad_)}};
}

json SubwordTokenizer::to_json() const {
  json added = json::array();
  auto by_id = model_.added;
  std::sort(by_id.begin(), by_id.end(), [](const auto& x, const auto& y) { return x.id < y.id; });
  for (const auto& t : by_id)
    added.push_back({{"id", t.id},
                     {"content", t.content},
                     {"single_word", t.single_word},
                     {"lstrip", t.lstrip},
                     {"rstrip", t.rstrip},
                     {"normalized", t.normalized},
                     {"special", t.special}});
  json pre_tokenizer, decoder;
  if (model_.byte_level) {
    const auto& pre = model_.pre_tokenizers;
    pre_tokenizer = pre.size() == 1 ? pre[0] : json{{"type", "Sequence"}, {"pretokenizers", pre}};
    decoder = {{"type", "ByteLevel"},
               {"add_prefix_space", true},
               {"trim_offsets", true},
               {"use_regex", true}};
  } else {
    // WhitespaceSplit comes first and Metaspace last (add_pre_tokenizer); splits have no
    // Metaspace (the constructor).
    json steps = json::array();
    if (model_.whitespace_split) steps.push_back({{"type", "WhitespaceSplit"}});
    for (const auto& p : model_.pre_tokenizers) steps.push_back(p);
    if (model_.metaspace) steps.push_back(model_.metaspace->to_json());
    if (steps.size() == 1) pre_tokenizer = steps[0];
    if (steps.size() > 1) pre_tokenizer = {{"type", "Sequence"}, {"pretokenizers", steps}};
    decoder = model_.decoder.to_json();
  }
  json model;
  if (model_.kind == Kind::kUnigram) {
    json scored = json::array();
    for (size_t id = 0; id < model_.scores.size(); ++id)
      scored.push_back(json::array({model_.tokens[id], model_.scores[id]}));
    model = {{"type", "Unigram"},
             {"unk_id", model_.unk ? json(*model_.unk) : json(nullptr)},
             {"vocab", scored},
             {"byte_fallback", model_.byte_fallback}};
  } else if (model_.kind != Kind::kBpe) {
    json vocab = json::object();
    for (size_t id = 0; id < model_.tokens.size(); ++id)
      if (!model_.tokens[id].empty()) vocab[model_.tokens[id]] = id;
    model = {{"type", model_.kind == Kind::kWordPiece ? "WordPiece" : "WordLevel"},
             {"unk_token", model_.tokens[*model_.unk]},
             {"vocab", vocab}};
    if (model_.kind == Kind::kWordPiece) {
      model["continuing_subword_prefix"] = model_.continuing_prefix;
      model["max_input_chars_per_word"] = model_.max_word_chars;
    }
  } else {
    json vocab = json::object();
    std::vector<std::string> visible(model_.tokens.size());
    std::vector<bool> is_added(model_.tokens.size(), false);
    for (const auto& t : model_.added) is_added[t.id] = true;
    bool spaced = false;  // a token with a space: merges are written as pairs, not "a b"
    for (size_t id = 0; id < model_.tokens.size(); ++id) {
      // Text tokens an added token also names stay in the vocabulary (Llama-2's <unk>).
      if (model_.tokens[id].empty() || (is_added[id] && model_.byte_level)) continue;
      visible[id] = model_.byte_level ? byte_level_text(model_.tokens[id]) : model_.tokens[id];
      spaced = spaced || visible[id].find(' ') != std::string::npos;
      vocab[visible[id]] = id;
    }
    json merges = json::array();
    for (const auto& [a, b] : model_.merges)
      merges.push_back(spaced ? json::array({visible[a], visible[b]})
                              : json(visible[a] + " " + visible[b]));
    model = {{"type", "BPE"},
             {"dropout", nullptr},
             {"unk_token", model_.unk ? json(model_.tokens[*model_.unk]) : json(nullptr)},
             {"continuing_subword_prefix", nullptr},
             {"end_of_word_suffix", nullptr},
             {"fuse_unk", model_.fuse_unk},
             {"byte_fallback", model_.byte_fallback},
             {"ignore_merges", model_.ignore_merges},
             {"vocab", vocab},
             {"merges", merges}};
  }
  return json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", model_.normalizer.to_json()},
              {"pre_tokenizer", pre_tokenizer},
              {"post_processor", nullptr},
              {"decoder", decoder},
              {"model", model}};
}

void SubwordTokenizer::save(const std::string& path) const {
  write_file_atomic(path, to_json().dump() + "\n");
}

std::unique_ptr<SubwordTokenizer> SubwordTokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOL_CHECK(in.good(), "cannot read tokenizer ", path);
  std::stringstream text;
  text << in.rdbuf();
  const json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  LOL_CHECK(!j.is_discarded(), path, " is not JSON");
  return from_json(j, path);
}

std::unique_ptr<SubwordTokenizer> SubwordTokenizer::from_json(const json& j,
                                                              const std::string& name) {
  LOL_CHECK(j.is_object(), name, " is not a tokenizer.json object");
  Model m;
  const auto& model = field(j, "model", name);
  LOL_CHECK(model.is_object(), name, ": model is not an object");
  const auto type = string_field(model, "type", name + ": model", "BPE");
  const std::pair<const char*, Kind> kinds[] = {{"BPE", Kind::kBpe},
                                                {"Unigram", Kind::kUnigram},
                                                {"WordPiece", Kind::kWordPiece},
                                                {"WordLevel", Kind::kWordLevel}};
  const auto kind = std::find_if(std::begin(kinds), std::end(kinds),
                                 [&](const auto& k) { return type == k.first; });
  LOL_CHECK(kind != std::end(kinds), name, ": model type \"", type,
            "\" is not supported (BPE, Unigram, WordPiece, WordLevel)");
  m.kind = kind->second;
  if (type == "BPE")
    for (const char* unsupported : {"continuing_subword_prefix", "end_of_word_suffix", "dropout"})
      LOL_CHECK(
          !model.contains(unsupported) || model[unsupported].is_null() ||
              (model[unsupported].is_string() && model[unsupported].get<std::string>().empty()),
          name, ": model.", unsupported, " is not supported");
  m.ignore_merges = bool_field(model, "ignore_merges", name + ": model");
  if (j.contains("normalizer"))
    m.normalizer = Normalizer::from_json(j["normalizer"], name + ": normalizer");

  // A ByteLevel pre-tokenizer makes a byte-level BPE; without one the tokens are text
  // (sentencepiece-style), read with the decoder that turns them back into text.
  if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null())
    for_each_component(j["pre_tokenizer"], name + ": pre_tokenizer", "pretokenizers",
                       [&](const json& c, const std::string&, const std::string& at) {
                         add_pre_tokenizer(c, at, &m);
                       });
  const bool byte_level_seen = m.byte_level;
  LOL_CHECK(!byte_level_seen || m.kind == Kind::kBpe, name, ": a ", type,
            " model with a ByteLevel pre-tokenizer is not supported");
  LOL_CHECK(!byte_level_seen || !m.metaspace, name,
            ": pre_tokenizer has both ByteLevel and Metaspace");
  m.byte_fallback = bool_field(model, "byte_fallback", name + ": model");
  LOL_CHECK(!byte_level_seen || !m.byte_fallback, name,
            ": model.byte_fallback with a ByteLevel pre-tokenizer (bytes need no fallback)");
  m.fuse_unk = bool_field(model, "fuse_unk", name + ": model");
  if (!byte_level_seen && j.contains("decoder"))
    m.decoder = TokenDecoder::from_json(j["decoder"], name + ": decoder");

  field(model, "vocab", name + ": model");
  switch (m.kind) {
    case Kind::kBpe:
      read_bpe(model, name, j, &m);
      break;
    case Kind::kUnigram:
      read_unigram(model, name, &m);
      break;
    case Kind::kWordPiece:
      read_wordpiece(model, name, j, &m);
      break;
    case Kind::kWordLevel:
      read_wordlevel(model, name, j, &m);
      break;
  }
  read_added_tokens(j, name, &m);
  return std::make_unique<SubwordTokenizer>(std::move(m), name);
}

}  // namespace lol
