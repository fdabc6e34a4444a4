#include "text/normalizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <optional>

#include "text/hf_json.h"
#include "text/utf8.h"
#include "util/error.h"

namespace lol {

namespace {

// What the NFC / NFKC quick path needs to know of a character, from utf8proc's data read the
// way its composition loop reads it (comb_index < 0x8000: can start a composition; >= 0x8000:
// can end one; 0xFFFF: neither; Hangul composes by arithmetic, not through the tables).
enum Quick : uint8_t {
  kStable = 1,        // NFC: a run of such characters is its own NFC
  kStableCompat = 2,  // NFKC: the same
  kInert = 4,  // no normalization changes it, moves a mark across it or joins it to a neighbour
};

bool ends_composition(const utf8proc_property_t* p) {
  return p->comb_index != UINT16_MAX && p->comb_index >= 0x8000;
}

// Whether the decomposition of `cp` (canonical, or compatibility with `compat`) composes back
// to `cp` alone and starts with a starter that cannot join the character before it.
bool recomposes(uint32_t cp, bool compat) {
  utf8proc_int32_t parts[32];
  int boundclass = 0;
  const int options = UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0);
  const auto n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), parts, 32,
                                         static_cast<utf8proc_option_t>(options), &boundclass);
  if (n < 1 || n > 32) return false;
  const auto* head = utf8proc_get_property(parts[0]);
  if (head->combining_class != 0 || ends_composition(head)) return false;
  const auto m = utf8proc_normalize_utf32(
      parts, n, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  return m == 1 && parts[0] == static_cast<utf8proc_int32_t>(cp);
}

uint8_t quick_bits(uint32_t cp) {
  const auto* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
  const bool syllable = cp >= 0xAC00 && cp <= 0xD7A3;
  const bool jamo = (cp >= 0x1100 && cp <= 0x11FF) || (cp >= 0xA960 && cp <= 0xA97F) ||
                    (cp >= 0xD7B0 && cp <= 0xD7FF);
  if (p->combining_class != 0 || ends_composition(p) || jamo) return 0;
  if (syllable) return kStable | kStableCompat;  // composes back (a T jamo after it is not stable)
  if (p->decomp_seqindex == UINT16_MAX)
    return kStable | kStableCompat | (p->comb_index == UINT16_MAX ? kInert : 0);
  uint8_t bits = 0;
  if (p->decomp_type == 0 && recomposes(cp, false)) bits |= kStable;  // canonical only
  if (recomposes(cp, true)) bits |= kStableCompat;
  return bits;
}

// quick_bits of the Basic Multilingual Plane, made once; others are looked up as they come.
uint8_t quick(uint32_t cp) {
  static const auto table = [] {
    std::vector<uint8_t> t(0x10000);
    for (uint32_t c = 0; c < 0x10000; ++c) t[c] = c >= 0xD800 && c <= 0xDFFF ? 0 : quick_bits(c);
    return t;
  }();
  return cp < 0x10000 ? table[cp] : quick_bits(cp);
}

std::string utf8proc_normal(std::string_view text, NormalForm form) {
  int options = UTF8PROC_STABLE;
  options |=
      form == NormalForm::kNfc || form == NormalForm::kNfkc ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE;
  if (form == NormalForm::kNfkc || form == NormalForm::kNfkd) options |= UTF8PROC_COMPAT;
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                              static_cast<utf8proc_ssize_t>(text.size()), &out,
                              static_cast<utf8proc_option_t>(options));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  LOL_CHECK(n >= 0, "Unicode normalization (", normal_form_name(form),
            ") failed: ", utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

// The form named `name` exactly as tokenizer.json spells it ("NFC"), if any.
std::optional<NormalForm> form_named(const std::string& name) {
  for (const auto form : {NormalForm::kNfc, NormalForm::kNfd, NormalForm::kNfkc, NormalForm::kNfkd})
    if (name == normal_form_name(form)) return form;
  return std::nullopt;
}

void read(const json& j, const std::string& type, const std::string& where,
          std::vector<Normalizer::Step>* steps) {
  Normalizer::Step step;
  if (type == "Prepend") {
    step.kind = Normalizer::Step::kPrepend;
    step.text = string_field(j, "prepend", where);
  } else if (type == "Replace") {
    LOL_CHECK(j.contains("pattern") && j["pattern"].is_object(), where,
              " needs a \"pattern\" object");
    if (j["pattern"].contains("Regex")) {
      step.kind = Normalizer::Step::kReplaceRegex;
      step.text = string_field(j["pattern"], "Regex", where + ".pattern");
      try {
        step.regex = std::make_shared<const RegexSplitter>(step.text);
      } catch (const Error& e) {
        fail(where, ": ", e.what());
      }
    } else {
      step.kind = Normalizer::Step::kReplace;
      step.text = string_field(j["pattern"], "String", where + ".pattern");
      LOL_CHECK(!step.text.empty(), where, ": Replace of an empty string");
    }
    step.by = string_field(j, "content", where);
  } else if (type == "Precompiled") {
    step.kind = Normalizer::Step::kPrecompiled;
    step.text = string_field(j, "precompiled_charsmap", where);
    step.charsmap = std::make_shared<const Charsmap>(step.text, where);
  } else if (type == "Lowercase") {
    step.kind = Normalizer::Step::kLowercase;
  } else if (type == "StripAccents") {
    step.kind = Normalizer::Step::kStripAccents;
  } else if (type == "Nmt") {
    step.kind = Normalizer::Step::kNmt;
  } else if (type == "BertNormalizer") {
    step.kind = Normalizer::Step::kBert;
    for (const char* key : {"clean_text", "handle_chinese_chars", "lowercase"})  // as HF
      LOL_CHECK(j.contains(key) && j[key].is_boolean(), where, ".", key, " must be true or false");
    step.clean_text = j["clean_text"].get<bool>();
    step.chinese_chars = j["handle_chinese_chars"].get<bool>();
    step.lowercase = j["lowercase"].get<bool>();
    step.strip_accents = bool_field(j, "strip_accents", where, step.lowercase);
  } else if (type == "Strip") {
    step.kind = Normalizer::Step::kStrip;
    step.left = bool_field(j, "strip_left", where, true);
    step.right = bool_field(j, "strip_right", where, true);
  } else if (const auto form = form_named(type)) {
    step.form = *form;
  } else {
    fail(where, ": normalizer type \"", type,
         "\" is not supported (NFC, NFD, NFKC, NFKD, Prepend, Replace, Strip, Lowercase, "
         "StripAccents, BertNormalizer, Nmt, Precompiled, or a Sequence of them)");
  }
  steps->push_back(std::move(step));
}

std::string replace_all(std::string_view text, const std::string& what, const std::string& by) {
  std::string out;
  size_t done = 0;
  for (size_t at = text.find(what); at != std::string_view::npos; at = text.find(what, done)) {
    out.append(text.substr(done, at - done)).append(by);
    done = at + what.size();
  }
  return out.append(text.substr(done));
}

// Each character by its full lowercase mapping, as Rust's char::to_lowercase (what HF's
// Lowercase applies, character by character: no final-sigma rule). The full mapping differs
// from utf8proc's simple one only for U+0130 (İ -> i + U+0307 COMBINING DOT ABOVE).
std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t at = 0; at < text.size();) {
    const auto lead = static_cast<unsigned char>(text[at]);
    if (lead < 0x80) {
      out.push_back(static_cast<char>(lead >= 'A' && lead <= 'Z' ? lead + ('a' - 'A') : lead));
      ++at;
      continue;
    }
    const uint32_t cp = code_point_at(text, at);
    at += utf8_length(lead);
    if (cp == 0x130) {
      out.append("i\xCC\x87");
      continue;
    }
    append_utf8(static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))), &out);
  }
  return out;
}

// `text` with each character (its code point and its bytes) replaced by what `write` appends.
template <typename Write>
std::string map_characters(std::string_view text, Write write) {
  std::string out;
  out.reserve(text.size());
  for (size_t at = 0; at < text.size();) {
    const size_t len = utf8_length(static_cast<unsigned char>(text[at]));
    write(code_point_at(text, at), text.substr(at, len), &out);
    at += len;
  }
  return out;
}

utf8proc_category_t category(uint32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

bool mark(uint32_t cp) {
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

// Sentencepiece's NMT rules as HF's Nmt normalizer has them: controls go, other spaces become
// one. (A fixed list of code points: no Unicode version enters.)
void nmt_character(uint32_t cp, std::string_view c, std::string* out) {
  if ((cp >= 0x01 && cp <= 0x08) || cp == 0x0B || (cp >= 0x0E && cp <= 0x1F) || cp == 0x7F ||
      cp == 0x8F || cp == 0x9F)
    return;
  const bool space = cp == 0x09 || cp == 0x0A || cp == 0x0C || cp == 0x0D || cp == 0x1680 ||
                     (cp >= 0x200B && cp <= 0x200F) || cp == 0x2028 || cp == 0x2029 ||
                     cp == 0x2581 || cp == 0xFEFF || cp == 0xFFFD;
  out->append(space ? std::string_view(" ") : c);
}

// The CJK ideograph blocks BERT puts spaces around (its `is_chinese_char`).
bool cjk_ideograph(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// BertNormalizer, step by step as HF's: clean_text drops NUL, U+FFFD and the "other"
// characters (Cc, Cf, Co, Cs; not unassigned ones, which HF keeps) but tab, newline and
// return, and makes every White_Space character left a space; handle_chinese_chars puts a space
// on both sides of each CJK ideograph; strip_accents decomposes (NFD, left decomposed: Hangul
// syllables become jamo, as in BERT) and drops nonspacing marks (Mn); lowercase as Lowercase.
std::string bert(std::string_view text, const Normalizer::Step& s) {
  std::string out(text);
  if (s.clean_text)
    out = map_characters(out, [](uint32_t cp, std::string_view c, std::string* o) {
      const auto k = category(cp);
      const bool control = cp != '\t' && cp != '\n' && cp != '\r' &&
                           (k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF ||
                            k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CS);
      if (cp == 0 || cp == 0xFFFD || control) return;
      o->append(white_space(cp) ? std::string_view(" ") : c);
    });
  if (s.chinese_chars)
    out = map_characters(out, [](uint32_t cp, std::string_view c, std::string* o) {
      const bool cjk = cjk_ideograph(cp);
      if (cjk) o->push_back(' ');
      o->append(c);
      if (cjk) o->push_back(' ');
    });
  if (s.strip_accents)
    out = map_characters(normalize(out, NormalForm::kNfd),
                         [](uint32_t cp, std::string_view c, std::string* o) {
                           if (category(cp) != UTF8PROC_CATEGORY_MN) o->append(c);
                         });
  if (s.lowercase) out = lowercase(out);
  return out;
}

std::string strip(std::string_view text, bool left, bool right) {
  size_t begin = 0, end = text.size();
  while (left && begin < end && white_space(code_point_at(text, begin)))
    begin += utf8_length(static_cast<unsigned char>(text[begin]));
  while (right && end > begin && white_space(code_point_at(text, previous_character(text, end))))
    end = previous_character(text, end);
  return std::string(text.substr(begin, end - begin));
}
}  // namespace

const char* normal_form_name(NormalForm form) {
  switch (form) {
    case NormalForm::kNfc:
      return "NFC";
    case NormalForm::kNfd:
      return "NFD";
    case NormalForm::kNfkc:
      return "NFKC";
    case NormalForm::kNfkd:
      return "NFKD";
  }
  return "?";
}

std::string normalize_whole(std::string_view text, NormalForm form) {
  return utf8proc_normal(text, form);
}

std::string normalize(std::string_view text, NormalForm form) {
  // ASCII is its own normal form in all four: most text skips utf8proc entirely.
  if (std::all_of(text.begin(), text.end(), [](char c) { return (c & 0x80) == 0; }))
    return std::string(text);
  if (form == NormalForm::kNfd || form == NormalForm::kNfkd) return utf8proc_normal(text, form);
  // NFC and NFKC: inert characters (spaces, most punctuation, CJK ideographs, ...) cut the text
  // into pieces whose normal forms concatenate to the text's; a piece of stable characters is
  // its own normal form (Unicode's quick check, conservatively), the others go to utf8proc.
  // Normalizer.QuickPathAgreesWithUtf8procOnRandomText holds it to utf8proc on the whole text.
  const uint8_t stable = form == NormalForm::kNfc ? kStable : kStableCompat;
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  size_t piece = 0;
  bool clean = true;
  auto flush = [&](size_t end) {
    const auto p = text.substr(piece, end - piece);
    if (clean)
      out.append(p);
    else
      out.append(utf8proc_normal(p, form));
  };
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const size_t len = utf8_length(lead);
    const uint8_t bits = quick(lead < 0x80 ? lead : code_point_at(text, i));
    if (bits & kInert) {
      flush(i);
      out.append(text.substr(i, len));
      piece = i + len;
      clean = true;
    } else if (!(bits & stable)) {
      clean = false;
    }
    i += len;
  }
  flush(text.size());
  return out;
}

Normalizer::Normalizer(std::vector<NormalForm> forms) {
  for (const auto form : forms) {
    Step step;
    step.form = form;
    steps_.push_back(step);
  }
}

Normalizer Normalizer::from_json(const json& j, const std::string& where) {
  Normalizer n;
  if (!j.is_null())
    for_each_component(j, where, "normalizers",
                       [&](const json& c, const std::string& type, const std::string& at) {
                         read(c, type, at, &n.steps_);
                       });
  return n;
}

Normalizer Normalizer::named(const std::string& name) {
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (upper == "NONE") return {};
  const auto form = form_named(upper);
  LOL_CHECK(form.has_value(), "normalizer '", name, "' is not one of none, nfc, nfd, nfkc, nfkd");
  return Normalizer({*form});
}

json Normalizer::to_json() const {
  if (steps_.empty()) return nullptr;
  auto one = [](const Step& s) {
    switch (s.kind) {
      case Step::kPrepend:
        return json{{"type", "Prepend"}, {"prepend", s.text}};
      case Step::kReplace:
        return json{{"type", "Replace"}, {"pattern", {{"String", s.text}}}, {"content", s.by}};
      case Step::kReplaceRegex:
        return json{{"type", "Replace"}, {"pattern", {{"Regex", s.text}}}, {"content", s.by}};
      case Step::kStrip:
        return json{{"type", "Strip"}, {"strip_left", s.left}, {"strip_right", s.right}};
      case Step::kLowercase:
        return json{{"type", "Lowercase"}};
      case Step::kStripAccents:
        return json{{"type", "StripAccents"}};
      case Step::kNmt:
        return json{{"type", "Nmt"}};
      case Step::kBert:
        return json{{"type", "BertNormalizer"},
                    {"clean_text", s.clean_text},
                    {"handle_chinese_chars", s.chinese_chars},
                    {"strip_accents", s.strip_accents},
                    {"lowercase", s.lowercase}};
      case Step::kPrecompiled:
        return json{{"type", "Precompiled"}, {"precompiled_charsmap", s.text}};
      case Step::kForm:
        break;
    }
    return json{{"type", normal_form_name(s.form)}};
  };
  if (steps_.size() == 1) return one(steps_[0]);
  json list = json::array();
  for (const auto& s : steps_) list.push_back(one(s));
  return json{{"type", "Sequence"}, {"normalizers", list}};
}

std::string Normalizer::apply(std::string_view text) const {
  std::string out(text);
  for (const auto& s : steps_) {
    switch (s.kind) {
      case Step::kForm:
        out = normalize(out, s.form);
        break;
      case Step::kPrepend:
        if (!out.empty()) out.insert(0, s.text);
        break;
      case Step::kReplace:
        out = replace_all(out, s.text, s.by);
        break;
      case Step::kReplaceRegex:
        out = s.regex->replace(out, s.by);
        break;
      case Step::kStrip:
        out = strip(out, s.left, s.right);
        break;
      case Step::kLowercase:
        out = lowercase(out);
        break;
      case Step::kStripAccents:  // every mark goes
        out = map_characters(out, [](uint32_t cp, std::string_view c, std::string* o) {
          if (!mark(cp)) o->append(c);
        });
        break;
      case Step::kNmt:
        out = map_characters(out, nmt_character);
        break;
      case Step::kBert:
        out = bert(out, s);
        break;
      case Step::kPrecompiled:
        out = s.charsmap->apply(out);
        break;
    }
  }
  return out;
}

}  // namespace lol
