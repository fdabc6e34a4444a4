#include "text/normalizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <optional>

#include "util/error.h"

namespace lol {

namespace {
// The form named `name` exactly as tokenizer.json spells it ("NFC"), if any.
std::optional<NormalForm> form_named(const std::string& name) {
  for (const auto form : {NormalForm::kNfc, NormalForm::kNfd, NormalForm::kNfkc, NormalForm::kNfkd})
    if (name == normal_form_name(form)) return form;
  return std::nullopt;
}

std::string string_field(const json& j, const char* key, const std::string& where) {
  LOL_CHECK(j.contains(key) && j[key].is_string(), where, " needs a string \"", key, "\"");
  return j[key].get<std::string>();
}

void read(const json& j, const std::string& where, std::vector<Normalizer::Step>* steps) {
  LOL_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), where,
            " needs a \"type\"");
  const auto type = j["type"].get<std::string>();
  if (type == "Sequence") {
    LOL_CHECK(j.contains("normalizers") && j["normalizers"].is_array(), where,
              ".normalizers must be a list");
    const auto& list = j["normalizers"];
    for (size_t i = 0; i < list.size(); ++i)
      read(list[i], where + ".normalizers[" + std::to_string(i) + "]", steps);
    return;
  }
  Normalizer::Step step;
  if (type == "Prepend") {
    step.kind = Normalizer::Step::kPrepend;
    step.text = string_field(j, "prepend", where);
  } else if (type == "Replace") {
    step.kind = Normalizer::Step::kReplace;
    LOL_CHECK(j.contains("pattern") && j["pattern"].is_object(), where,
              " needs a \"pattern\" object");
    LOL_CHECK(!j["pattern"].contains("Regex"), where,
              ": a Replace by regular expression is not supported (only {\"String\": ...})");
    step.text = string_field(j["pattern"], "String", where + ".pattern");
    LOL_CHECK(!step.text.empty(), where, ": Replace of an empty string");
    step.by = string_field(j, "content", where);
  } else if (const auto form = form_named(type)) {
    step.form = *form;
  } else {
    fail(where, ": normalizer type \"", type,
         "\" is not supported (NFC, NFD, NFKC, NFKD, Prepend, Replace of a string, or a Sequence "
         "of them)");
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

std::string normalize(std::string_view text, NormalForm form) {
  // ASCII is its own normal form in all four: most text skips utf8proc entirely.
  if (std::all_of(text.begin(), text.end(), [](char c) { return (c & 0x80) == 0; }))
    return std::string(text);
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

Normalizer::Normalizer(std::vector<NormalForm> forms) {
  for (const auto form : forms) steps_.push_back({Step::kForm, form, {}, {}});
}

Normalizer Normalizer::from_json(const json& j, const std::string& where) {
  Normalizer n;
  if (!j.is_null()) read(j, where, &n.steps_);
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
    }
  }
  return out;
}

}  // namespace lol
