#pragma once
// UTF-8 checks for text going into a tokenizer and text coming out of one token at a time.
#include <cstddef>
#include <string_view>

namespace lol {

// Whether `text` is valid UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF).
bool valid_utf8(std::string_view text);
// The length of the longest prefix of `text` that ends on a character boundary, given that
// `text` is valid UTF-8 apart from a possibly cut last character.
size_t complete_utf8_prefix(std::string_view text);

}  // namespace lol
