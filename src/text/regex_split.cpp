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
  LOL_CHECK(impl_->code != nullptr, "regular expression '", pattern, "' does not compile at ",
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

// Calls `match(begin, end)` for each match of `code` in `text`, left to right; an empty match
// is reported and the search steps over the character it stands at. The search stops at the
// end of the text, or with `at_end` after trying an empty match there.
template <typename F>
void for_each_match(pcre2_code* code, const std::string& pattern, std::string_view text,
                    bool at_end, F&& match) {
  thread_local MatchResources r;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  for (size_t at = 0; at < text.size() + (at_end ? 1 : 0);) {
    const int rc =
        pcre2_match(code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, r.data, r.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    LOL_CHECK(rc >= 0, "regular expression '", pattern, "' failed: ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(r.data);
    const size_t begin = ov[0], end = ov[1];
    match(begin, end);
    if (end > begin) {
      at = end;
      continue;
    }
    if (begin >= text.size()) break;
    at = begin + 1;
    while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
  }
}

}  // namespace

std::string RegexSplitter::replace(std::string_view text, std::string_view by) const {
  std::string out;
  size_t done = 0;
  for_each_match(impl_->code, pattern_, text, /*at_end=*/true, [&](size_t begin, size_t end) {
    out.append(text.substr(done, begin - done)).append(by);
    done = end;
  });
  return out.append(text.substr(done));
}

SplitBehavior parse_split_behavior(const std::string& name, const std::string& where) {
  for (auto b :
       {SplitBehavior::kRemoved, SplitBehavior::kIsolated, SplitBehavior::kMergedWithPrevious,
        SplitBehavior::kMergedWithNext, SplitBehavior::kContiguous})
    if (name == split_behavior_name(b)) return b;
  fail(where, ": behavior \"", name,
       "\" is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

const char* split_behavior_name(SplitBehavior behavior) {
  switch (behavior) {
    case SplitBehavior::kRemoved:
      return "Removed";
    case SplitBehavior::kIsolated:
      return "Isolated";
    case SplitBehavior::kMergedWithPrevious:
      return "MergedWithPrevious";
    case SplitBehavior::kMergedWithNext:
      return "MergedWithNext";
    case SplitBehavior::kContiguous:
      return "Contiguous";
  }
  return "?";
}

void RegexSplitter::split(std::string_view text, SplitBehavior behavior, bool invert,
                          std::vector<std::string_view>* pieces) const {
  if (behavior == SplitBehavior::kIsolated) return split(text, pieces);  // the common case
  // The text as consecutive regions, each a match or a stretch between matches.
  struct Region {
    size_t begin, end;
    bool match;
  };
  thread_local std::vector<Region> regions;
  regions.clear();
  size_t gap = 0;
  for_each_match(impl_->code, pattern_, text, /*at_end=*/false, [&](size_t begin, size_t end) {
    if (end == begin) return;  // an empty match splits nothing
    if (begin > gap) regions.push_back({gap, begin, invert});
    regions.push_back({begin, end, !invert});
    gap = end;
  });
  if (gap < text.size()) regions.push_back({gap, text.size(), invert});
  auto emit = [&](size_t begin, size_t end) { pieces->push_back(text.substr(begin, end - begin)); };
  const size_t n = regions.size();
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& r : regions)
        if (!r.match) emit(r.begin, r.end);
      break;
    case SplitBehavior::kMergedWithPrevious:  // a match after a stretch ends that stretch
      for (size_t i = 0; i < n; ++i) {
        const size_t begin = regions[i].begin;
        if (!regions[i].match && i + 1 < n && regions[i + 1].match) ++i;
        emit(begin, regions[i].end);
      }
      break;
    case SplitBehavior::kMergedWithNext:  // a match before a stretch starts that stretch
      for (size_t i = 0; i < n; ++i) {
        const size_t begin = regions[i].begin;
        if (regions[i].match && i + 1 < n && !regions[i + 1].match) ++i;
        emit(begin, regions[i].end);
      }
      break;
    case SplitBehavior::kContiguous:  // neighbours of one kind are one piece
      for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && regions[j].match == regions[i].match) ++j;
        emit(regions[i].begin, regions[j - 1].end);
        i = j;
      }
      break;
    case SplitBehavior::kIsolated:
      break;
  }
}

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>* pieces) const {
  size_t gap = 0;  // start of the text not yet in a piece
  for_each_match(impl_->code, pattern_, text, /*at_end=*/false, [&](size_t begin, size_t end) {
    if (end == begin) return;  // an empty match splits nothing
    if (begin > gap) pieces->push_back(text.substr(gap, begin - gap));
    pieces->push_back(text.substr(begin, end - begin));
    gap = end;
  });
  if (gap < text.size()) pieces->push_back(text.substr(gap));
}

}  // namespace lol
