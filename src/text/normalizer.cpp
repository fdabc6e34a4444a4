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

void read(const json& j, const std::string& where, std::vector<NormalForm>* forms) {
  LOL_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), where,
            " needs a \"type\"");
  const auto type = j["type"].get<std::string>();
  if (type == "Sequence") {
    LOL_CHECK(j.contains("normalizers") && j["normalizers"].is_array(), where,
              ".normalizers must be a list");
    const auto& list = j["normalizers"];
    for (size_t i = 0; i < list.size(); ++i)
      read(list[i], where + ".normalizers[" + std::to_string(i) + "]", forms);
    return;
  }
  const auto form = form_named(type);
  if (!form)
    fail(where, ": normalizer type \"", type,
         "\" is not supported (Unicode normal forms only: NFC, NFD, NFKC, NFKD, or a Sequence of "
         "them)");
  forms->push_back(*form);
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

Normalizer Normalizer::from_json(const json& j, const std::string& where) {
  std::vector<NormalForm> forms;
  if (!j.is_null()) read(j, where, &forms);
  return Normalizer(std::move(forms));
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
  if (forms_.empty()) return nullptr;
  auto one = [](NormalForm f) { return json{{"type", normal_form_name(f)}}; };
  if (forms_.size() == 1) return one(forms_[0]);
  json list = json::array();
  for (const auto f : forms_) list.push_back(one(f));
  return json{{"type", "Sequence"}, {"normalizers", list}};
}

std::string Normalizer::apply(std::string_view text) const {
  std::string out(text);
  for (const auto form : forms_) out = normalize(out, form);
  return out;
}

}  // namespace lol
