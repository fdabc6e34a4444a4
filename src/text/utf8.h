#pragma once
// UTF-8 for tokenizers: checks of text going in and of text coming out one token at a time,
// reading and writing characters, and the few character classes tokenizers need.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lol {

// Whether `text` is valid UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF).
bool valid_utf8(std::string_view text);
// The length of the longest prefix of `text` that ends on a character boundary, given that
// `text` is valid UTF-8 apart from a possibly cut last character.
size_t complete_utf8_prefix(std::string_view text);

// The length of the character a lead byte starts (1-4); valid UTF-8 assumed.
inline size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}
// The code point of the character starting at byte `at` of valid UTF-8 `text`.
uint32_t code_point_at(std::string_view text, size_t at);
// Appends the UTF-8 of code point `cp` (a scalar value: at most U+10FFFF, not a surrogate).
void append_utf8(uint32_t cp, std::string* out);
// Where the character ending just before byte `at` starts (`at` > 0, on a boundary).
size_t previous_character(std::string_view text, size_t at);
// Unicode's White_Space property (what `\s` means in HF's Rust regexes).
bool white_space(uint32_t cp);
// What `\w` means in HF's Rust regexes: Alphabetic, marks, decimal digits, connector
// punctuation and the joiners (general categories from utf8proc).
bool word_character(uint32_t cp);

}  // namespace lol
