#include "text/sentencepiece.h"

#include "text/hf_json.h"
#include "text/utf8.h"
#include "util/error.h"

namespace lol {
namespace {

// One character (as UTF-8): the Metaspace replacement and Strip's content are chars in HF.
std::string one_character(const json& j, const char* key, const std::string& where,
                          const std::string& fallback) {
  const auto s = string_field(j, key, where, fallback);
  LOL_CHECK(!s.empty() && s.size() == utf8_length(static_cast<unsigned char>(s[0])), where, ".",
            key, " must be one character, not \"", s, "\"");
  return s;
}

int64_t count_field(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return 0;
  LOL_CHECK(j[key].is_number_integer() && j[key].get<int64_t>() >= 0, where, ".", key,
            " must be a count >= 0");
  return j[key].get<int64_t>();
}

// What the WordPiece decoder's cleanup replaces, in HF's order (each token on its own).
const std::pair<std::string, std::string> kWordPieceCleanup[] = {
    {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
    {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
    {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};

// In one pass (replacing in place would move the rest of a long text at every occurrence).
void replace_all(std::string* text, const std::string& what, const std::string& by) {
  size_t at = text->find(what);
  if (at == std::string::npos) return;
  std::string out;
  out.reserve(text->size() + text->size() / 4);
  size_t done = 0;
  for (; at != std::string::npos; at = text->find(what, done)) {
    out.append(*text, done, at - done).append(by);
    done = at + what.size();
  }
  out.append(*text, done, std::string::npos);
  text->swap(out);
}

bool hex_digit(char c, int* value) {
  if (c >= '0' && c <= '9') return *value = c - '0', true;
  if (c >= 'A' && c <= 'F') return *value = c - 'A' + 10, true;
  if (c >= 'a' && c <= 'f') return *value = c - 'a' + 10, true;
  return false;
}

const char* scheme_name(PrependScheme s) {
  return s == PrependScheme::kAlways ? "always" : s == PrependScheme::kFirst ? "first" : "never";
}

}  // namespace

Metaspace Metaspace::from_json(const json& j, const std::string& where) {
  Metaspace m;
  m.replacement = one_character(j, "replacement", where, m.replacement);
  if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
    const auto s = string_field(j, "prepend_scheme", where, "");
    if (s == "always") {
      m.prepend = PrependScheme::kAlways;
    } else if (s == "first") {
      m.prepend = PrependScheme::kFirst;
    } else if (s == "never") {
      m.prepend = PrependScheme::kNever;
    } else {
      fail(where, ".prepend_scheme \"", s, "\" is not always, first or never");
    }
  } else {
    m.prepend = bool_field(j, "add_prefix_space", where, m.prepend != PrependScheme::kNever)
                    ? PrependScheme::kAlways
                    : PrependScheme::kNever;
  }
  m.split = bool_field(j, "split", where, m.split);
  return m;
}

json Metaspace::to_json() const {
  return {{"type", "Metaspace"},
          {"replacement", replacement},
          {"prepend_scheme", scheme_name(prepend)},
          {"split", split}};
}

std::string Metaspace::apply(std::string_view text, bool at_start) const {
  std::string out(text);
  replace_all(&out, " ", replacement);
  const bool starts = out.compare(0, replacement.size(), replacement) == 0;
  if (!starts &&
      (prepend == PrependScheme::kAlways || (prepend == PrependScheme::kFirst && at_start)))
    out.insert(0, replacement);
  return out;
}

void Metaspace::split_pieces(std::string_view text, std::vector<std::string_view>* out) const {
  if (!split) {
    if (!text.empty()) out->push_back(text);
    return;
  }
  size_t begin = 0;
  for (size_t at = text.find(replacement, 1); at != std::string_view::npos;
       at = text.find(replacement, at + replacement.size())) {
    if (at > begin) out->push_back(text.substr(begin, at - begin));
    begin = at;
  }
  if (begin < text.size()) out->push_back(text.substr(begin));
}

TokenDecoder TokenDecoder::from_json(const json& j, const std::string& where) {
  TokenDecoder d;
  bool fused = false;
  if (!j.is_null())
    for_each_component(j, where, "decoders",
                       [&](const json& c, const std::string& type, const std::string& at) {
                         d.read(c, type, at, &fused);
                       });
  return d;
}

void TokenDecoder::read(const json& j, const std::string& type, const std::string& where,
                        bool* fused) {
  Step s{};
  LOL_CHECK(!*fused || type == "Strip" || type == "Fuse", where, ": a ", type,
            " decoder after a Fuse is not supported (only a Strip)");
  if (type == "Fuse") {
    // The tokens concatenate anyway; what a Fuse changes is what a Strip after it applies to.
    s.kind = Step::kFuse;
    *fused = true;
  } else if (type == "Replace") {
    s.kind = Step::kReplace;
    LOL_CHECK(j.contains("pattern") && j["pattern"].is_object() && j["pattern"].contains("String"),
              where, ": only a Replace of a string ({\"String\": ...}) is supported");
    s.text = string_field(j["pattern"], "String", where + ".pattern", "");
    LOL_CHECK(!s.text.empty(), where, ": Replace of an empty string");
    s.by = string_field(j, "content", where, "");
  } else if (type == "ByteFallback") {
    s.kind = Step::kByteFallback;
  } else if (type == "Strip") {
    s.kind = Step::kStrip;
    s.text = one_character(j, "content", where, " ");
    s.start = count_field(j, "start", where);
    s.stop = count_field(j, "stop", where);
    s.fused = *fused;
    LOL_CHECK(!s.fused || (s.start <= 1 && s.stop == 0), where,
              ": after a Fuse only a Strip of at most one character from the start is supported");
  } else if (type == "Metaspace") {
    s.kind = Step::kMetaspace;
    s.metaspace = Metaspace::from_json(j, where);
  } else if (type == "WordPiece") {
    s.kind = Step::kWordPiece;
    s.text = string_field(j, "prefix", where, "##");
    s.cleanup = bool_field(j, "cleanup", where, true);
  } else {
    fail(where, ": decoder type \"", type,
         "\" is not supported for text tokens (Replace, ByteFallback, Fuse, Strip, Metaspace, "
         "WordPiece, Sequence)");
  }
  steps_.push_back(std::move(s));
}

json TokenDecoder::to_json() const {
  if (steps_.empty()) return nullptr;
  json list = json::array();
  for (const auto& s : steps_) {
    switch (s.kind) {
      case Step::kReplace:
        list.push_back({{"type", "Replace"}, {"pattern", {{"String", s.text}}}, {"content", s.by}});
        break;
      case Step::kByteFallback:
        list.push_back({{"type", "ByteFallback"}});
        break;
      case Step::kStrip:
        list.push_back(
            {{"type", "Strip"}, {"content", s.text}, {"start", s.start}, {"stop", s.stop}});
        break;
      case Step::kMetaspace:
        list.push_back(s.metaspace.to_json());
        break;
      case Step::kFuse:
        list.push_back({{"type", "Fuse"}});
        break;
      case Step::kWordPiece:
        list.push_back({{"type", "WordPiece"}, {"prefix", s.text}, {"cleanup", s.cleanup}});
        break;
    }
  }
  return list.size() == 1 ? list[0] : json{{"type", "Sequence"}, {"decoders", list}};
}

std::string TokenDecoder::apply(std::string token, bool first) const {
  if (steps_.empty()) return first ? token : " " + token;
  for (const auto& s : steps_) {
    switch (s.kind) {
      case Step::kReplace:
        replace_all(&token, s.text, s.by);
        break;
      case Step::kByteFallback: {
        int hi, lo;
        if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>' &&
            hex_digit(token[3], &hi) && hex_digit(token[4], &lo))
          token = std::string(1, static_cast<char>(hi * 16 + lo));
        break;
      }
      case Step::kStrip: {
        if (s.fused && !first) break;
        int64_t n = 0;
        while (n < s.start && token.compare(n * s.text.size(), s.text.size(), s.text) == 0) ++n;
        token.erase(0, n * s.text.size());
        int64_t m = 0;
        while (m < s.stop && token.size() >= (m + 1) * s.text.size() &&
               token.compare(token.size() - (m + 1) * s.text.size(), s.text.size(), s.text) == 0)
          ++m;
        token.resize(token.size() - m * s.text.size());
        break;
      }
      case Step::kMetaspace: {
        // In the first token every replacement goes (HF drops them there rather than only the
        // one its pre-tokenizer added), unless nothing was ever prepended.
        const bool drop = first && s.metaspace.prepend != PrependScheme::kNever;
        replace_all(&token, s.metaspace.replacement, drop ? "" : " ");
        break;
      }
      case Step::kWordPiece:
        if (!first) {
          if (token.compare(0, s.text.size(), s.text) == 0)  // (an empty prefix: always)
            token.erase(0, s.text.size());
          else
            token.insert(0, " ");
        }
        if (s.cleanup)
          for (const auto& [dirty, clean] : kWordPieceCleanup) replace_all(&token, dirty, clean);
        break;
      case Step::kFuse:
        break;
    }
  }
  return token;
}

}  // namespace lol
