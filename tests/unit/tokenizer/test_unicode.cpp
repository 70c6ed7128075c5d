// Hand-checked cases for the Unicode helpers. Expected values come from the Unicode Standard (category of
// named characters, §3.9 Tables 3-7/3-8/3-11 for UTF-8), not from our own output.
#include <gtest/gtest.h>

#include <string>

#include "text/unicode.h"

namespace deepinfer {
namespace {

TEST(CharClass, MajorCategoriesOfKnownCharacters) {
  EXPECT_EQ(char_class(U'a'), CharClass::Letter);
  EXPECT_EQ(char_class(U'\u00E9'), CharClass::Letter);   // é, Ll
  EXPECT_EQ(char_class(U'\u4E2D'), CharClass::Letter);   // 中, Lo
  EXPECT_EQ(char_class(U'\u30FC'), CharClass::Letter);   // ー katakana prolonged sound mark, Lm
  EXPECT_EQ(char_class(U'\u0301'), CharClass::Mark);     // combining acute, Mn
  EXPECT_EQ(char_class(U'\u0903'), CharClass::Mark);     // devanagari visarga, Mc
  EXPECT_EQ(char_class(U'7'), CharClass::Number);        // Nd
  EXPECT_EQ(char_class(U'\u2167'), CharClass::Number);   // Ⅷ, Nl
  EXPECT_EQ(char_class(U'\u00BD'), CharClass::Number);   // ½, No
  EXPECT_EQ(char_class(U'!'), CharClass::Punct);
  EXPECT_EQ(char_class(U'\u30FB'), CharClass::Punct);    // ・ katakana middle dot, Po
  EXPECT_EQ(char_class(U'+'), CharClass::Symbol);        // Sm
  EXPECT_EQ(char_class(U'$'), CharClass::Symbol);        // Sc
  EXPECT_EQ(char_class(U'^'), CharClass::Symbol);        // Sk
  EXPECT_EQ(char_class(U'\U0001F600'), CharClass::Symbol);  // 😀, So
  EXPECT_EQ(char_class(U'\uFF5C'), CharClass::Symbol);   // ｜ fullwidth vertical line, Sm
  EXPECT_EQ(char_class(U'\u0378'), CharClass::Other);    // unassigned
  EXPECT_EQ(char_class(U'\u200B'), CharClass::Other);    // zero width space, Cf (not White_Space)
  EXPECT_EQ(char_class(0x110000), CharClass::Other);
}

TEST(CharClass, WhiteSpaceIsTheUnicodeProperty) {
  for (char32_t cp : {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x200A, 0x2028, 0x2029,
                      0x202F, 0x205F, 0x3000})
    EXPECT_EQ(char_class(cp), CharClass::Space) << std::hex << static_cast<uint32_t>(cp);
  // Python's str.isspace() accepts these, Unicode White_Space (and Oniguruma's \s) does not.
  for (char32_t cp : {0x1C, 0x1D, 0x1E, 0x1F}) EXPECT_EQ(char_class(cp), CharClass::Other) << std::hex << static_cast<uint32_t>(cp);
  EXPECT_EQ(char_class(0x180E), CharClass::Other);  // left White_Space in Unicode 6.3
}

TEST(CharClass, FollowsUnicode16) {
  EXPECT_STREQ(unicode_version(), "16.0.0");
  EXPECT_EQ(char_class(0x11F04), CharClass::Letter);  // Kawi, added in 15.0
  EXPECT_EQ(char_class(0x2EBF0), CharClass::Letter);  // CJK Extension I, added in 15.1
  EXPECT_EQ(char_class(0x10D50), CharClass::Letter);  // Garay, added in 16.0
  EXPECT_EQ(char_class(0x1CC00), CharClass::Symbol);  // Symbols for Legacy Computing Supplement, 16.0
  EXPECT_EQ(char_class(0x323B0), CharClass::Other);   // CJK Extension J, added in 17.0
}

TEST(Utf8, DecodesWellFormedAndRejectsIllFormed) {
  EXPECT_EQ(uint32_t{decode_utf8("\xC3\xA9", 0).cp}, 0xE9u);
  EXPECT_EQ(decode_utf8("\xC3\xA9", 0).len, 2u);
  EXPECT_EQ(uint32_t{decode_utf8("\xF0\x9F\x98\x80", 0).cp}, 0x1F600u);
  for (const char* bad : {"\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xF5\x80", "\x80", "\xE4\xB8"}) {
    const Utf8Char c = decode_utf8(bad, 0);
    EXPECT_EQ(uint32_t{c.cp}, uint32_t{kInvalidCodePoint}) << bad;
    EXPECT_EQ(c.len, 1u);
  }
}

std::string lossy(std::string_view s) {
  std::string out;
  append_utf8_lossy(s, out);
  return out;
}

TEST(Utf8, LossyReplacementFollowsMaximalSubparts) {
  const std::string r = "\xEF\xBF\xBD";
  // The Unicode Standard §3.9, Table 3-8: each byte of these is its own maximal subpart.
  EXPECT_EQ(lossy("\xC0\xAF\xE0\x80\xBF\xF0\x81\x82\x41"), r + r + r + r + r + r + r + r + "A");
  EXPECT_EQ(lossy("\xED\xA0\x80\xED\xBF\xBF\xED\xAF\x41"), r + r + r + r + r + r + r + r + "A");
  EXPECT_EQ(lossy("\xF4\x91\x92\x93\xFF\x41\x80\xBF\x42"), r + r + r + r + r + "A" + r + r + "B");
  // Table 3-11: truncated sequences collapse to one U+FFFD each.
  EXPECT_EQ(lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"), "a" + r + r + r + "b" + r + "c" + r + r + "d");
  EXPECT_EQ(lossy("h\xC3\xA9!"), "h\xC3\xA9!");
}

TEST(Utf8, IncompleteTail) {
  EXPECT_EQ(utf8_incomplete_tail(""), 0u);
  EXPECT_EQ(utf8_incomplete_tail("abc"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a\xC3"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE4\xB8"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98\x80"), 0u);  // complete
  EXPECT_EQ(utf8_incomplete_tail("\xE0\x80"), 0u);          // already ill-formed: nothing to wait for
  EXPECT_EQ(utf8_incomplete_tail("\x80\x80"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xC0"), 0u);              // C0 can never start a character
}

}  // namespace
}  // namespace deepinfer
