#pragma once
// Splitting text into pre-tokens by a regular expression, as the `Split` pre-tokenizer of a
// Hugging Face tokenizer.json does with behaviour "Isolated": every match is a piece and so is
// every stretch of text between matches; and replacing its matches (the Replace normalizer). PCRE2
// in UTF mode with Unicode properties (\p{L}, \s as Unicode whitespace) and JIT; the pattern text
// is the one tokenizer.json stores.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lol {

// The pattern of GPT-2's byte-level pre-tokenizer (tokenizer.json `ByteLevel` with use_regex).
extern const char kGpt2Pattern[];
// The pattern of cl100k/Llama-3-style tokenizers: letters with one leading non-letter, digits
// in groups of at most three, punctuation runs, newlines apart. The default of `lol tokenizer
// train`, since it keeps scripts without spaces (CJK) and numbers from making huge pieces.
extern const char kCl100kPattern[];

// What a split keeps of a piece (HF's SplitDelimiterBehavior): the text is cut into matches
// and the stretches between them; Removed drops the matches, Isolated keeps each as a piece,
// MergedWithPrevious / MergedWithNext join a match to the stretch before / after it (unless
// that is a match too), Contiguous joins neighbours of the same kind (a run of matches). With
// `invert` matches and stretches swap roles first.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
// "Removed", "Isolated", ... as tokenizer.json spells them; throws naming `where` otherwise.
SplitBehavior parse_split_behavior(const std::string& name, const std::string& where);
const char* split_behavior_name(SplitBehavior behavior);

class RegexSplitter {
 public:
  // Throws lol::Error naming the pattern and PCRE2's message when it does not compile.
  explicit RegexSplitter(const std::string& pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  const std::string& pattern() const { return pattern_; }
  // Appends the pieces of `text` (valid UTF-8) to `pieces`; they concatenate to `text`.
  // Thread-safe.
  void split(std::string_view text, std::vector<std::string_view>* pieces) const;
  // The same with a behavior (split() is kIsolated, not inverted): the pieces appended are in
  // order and concatenate to `text` less what kRemoved drops; none is empty.
  void split(std::string_view text, SplitBehavior behavior, bool invert,
             std::vector<std::string_view>* pieces) const;
  // `text` (valid UTF-8) with every match replaced by `by`, left to right, as HF's Replace
  // normalizer does with a Regex pattern (an empty match inserts `by` where it stands).
  std::string replace(std::string_view text, std::string_view by) const;

 private:
  std::string pattern_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lol
