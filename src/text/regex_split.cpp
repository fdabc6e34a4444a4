#include "text/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "util/error.h"

namespace lol {

const char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char kCl100kPattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct RegexSplitter::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(const std::string& pattern) : pattern_(pattern), impl_(new Impl) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  LOL_CHECK(impl_->code != nullptr, "pre-tokenizer pattern '", pattern, "' does not compile at ",
            offset, ": ", pcre2_message(error));
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplitter::~RegexSplitter() = default;

namespace {
// What a match needs besides the pattern, made once per thread: match data with room for the
// whole match (a pattern's groups are not read: pcre2_match then returns 0, still a match), and
// a JIT stack larger than the default 32 KiB, which long runs of one class (a page of CJK
// letters, a block of spaces) need. Making them per call cost ~10 us (the stack is a mapping),
// more than matching a word when a second pattern splits the first one's pieces.
struct MatchResources {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
  MatchResources() {
    LOL_CHECK(data && context && stack, "pre-tokenizer: out of memory for PCRE2's match state");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchResources() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
  MatchResources(const MatchResources&) = delete;
  MatchResources& operator=(const MatchResources&) = delete;
};
}  // namespace

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>* pieces) const {
  if (text.empty()) return;
  thread_local MatchResources r;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0, gap = 0;  // next search start; start of the text not yet in a piece
  while (at < text.size()) {
    const int rc =
        pcre2_match(impl_->code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, r.data, r.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    LOL_CHECK(rc >= 0, "pre-tokenizer pattern '", pattern_, "' failed: ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(r.data);
    size_t begin = ov[0], end = ov[1];
    if (end == begin) {  // an empty match splits nothing: step over one character
      at = begin + 1;
      while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
      continue;
    }
    if (begin > gap) pieces->push_back(text.substr(gap, begin - gap));
    pieces->push_back(text.substr(begin, end - begin));
    gap = at = end;
  }
  if (gap < text.size()) pieces->push_back(text.substr(gap));
}

}  // namespace lol
