// Unicode helpers for the tokenizer: character classes for the pre-tokenizer regexes and UTF-8 handling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer {

// The classes the DeepSeek pre-tokenizer regexes distinguish (model-spec.md §7): general-category
// majors \p{L} \p{M} \p{N} \p{P} \p{S}, and \s (Unicode White_Space, which is disjoint from those five).
// Values match the generated table (tools/text/gen_unicode_tables.py).
enum class CharClass : uint8_t { Other = 0, Letter, Mark, Number, Punct, Symbol, Space };

// Class of a code point under the Unicode version HF tokenizers' Oniguruma uses (see unicode_version()).
// Code points above U+10FFFF are Other.
CharClass char_class(char32_t cp);
// "16.0.0": the Unicode version of the generated table.
const char* unicode_version();

// One decoded character. An ill-formed byte (not the start of a well-formed sequence, Unicode Table 3-7)
// decodes as a one-byte character with cp == kInvalidCodePoint.
inline constexpr char32_t kInvalidCodePoint = 0xFFFFFFFFu;
struct Utf8Char {
  char32_t cp;
  uint32_t len;
};
// Decodes the character starting at text[pos]; pos must be < text.size().
Utf8Char decode_utf8(std::string_view text, size_t pos);

// Appends bytes as valid UTF-8, each maximal ill-formed subpart replaced by U+FFFD (Unicode §3.9
// "substitution of maximal subparts", the policy of Rust String::from_utf8_lossy that HF decode uses).
void append_utf8_lossy(std::string_view bytes, std::string& out);

// Length (0-3) of a trailing sequence that is a proper prefix of some well-formed character, i.e. bytes
// that may still become a character when more bytes arrive.
size_t utf8_incomplete_tail(std::string_view bytes);

}  // namespace deepinfer
