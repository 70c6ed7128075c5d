// Hand-derived pre-tokenizer cases: each expectation follows from the regexes of model-spec.md §7 under
// leftmost, first-alternative-wins backtracking (the derivation is in the comment of each case).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "text/pretokenize.h"

namespace deepinfer {
namespace {

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string_view> views;
  pretokenize(text, views);
  return {views.begin(), views.end()};
}

using V = std::vector<std::string>;

TEST(Pretokenize, WordsTakeOneLeadingSpace) {
  EXPECT_EQ(pieces("Hello world"), (V{"Hello", " world"}));
  // "  b": \s+(?!\S) gives back the second space, which then leads "b".
  EXPECT_EQ(pieces("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(pieces("a\tb"), (V{"a", "\tb"}));  // any non-newline, non-L/P/S char may lead letters
}

TEST(Pretokenize, TrailingWhitespaceStaysWhole) {
  EXPECT_EQ(pieces("a   "), (V{"a", "   "}));  // (?!\S) holds at the end of the text
  EXPECT_EQ(pieces(" "), (V{" "}));
}

TEST(Pretokenize, NewlinesEndTheirWhitespaceRun) {
  // \s*[\r\n]+ ends after the run's last newline; the remaining "  " is then \s+(?!\S) minus one.
  EXPECT_EQ(pieces("x\n\n  y"), (V{"x", "\n\n", " ", " y"}));
  EXPECT_EQ(pieces("x \n \n\ty"), (V{"x", " \n \n", "\ty"}));
  EXPECT_EQ(pieces("\nhello"), (V{"\n", "hello"}));  // a newline never leads a word
}

TEST(Pretokenize, NumbersSplitInThrees) {
  EXPECT_EQ(pieces("1234567"), (V{"123", "456", "7"}));
  EXPECT_EQ(pieces("a12b"), (V{"a", "12", "b"}));
  EXPECT_EQ(pieces("x \xD9\xA1\xD9\xA2"), (V{"x", " ", "\xD9\xA1\xD9\xA2"}));  // Arabic-Indic digits are \p{N}
}

TEST(Pretokenize, CjkRunsAreIsolated) {
  EXPECT_EQ(pieces("\xE4\xBD\xA0\xE5\xA5\xBD" "abc"), (V{"\xE4\xBD\xA0\xE5\xA5\xBD", "abc"}));  // 你好abc
  // ア・イ: the kana range includes ・ (Po), which the third regex splits off as punctuation.
  EXPECT_EQ(pieces("\xE3\x82\xA2\xE3\x83\xBB\xE3\x82\xA4"), (V{"\xE3\x82\xA2", "\xE3\x83\xBB", "\xE3\x82\xA4"}));
}

TEST(Pretokenize, PunctuationRules) {
  EXPECT_EQ(pieces("don't"), (V{"don", "'t"}));          // [ASCII punct][A-Za-z]+
  EXPECT_EQ(pieces("a.b"), (V{"a", ".b"}));
  EXPECT_EQ(pieces("!!abc"), (V{"!!", "abc"}));           //  ?[\p{P}\p{S}]+ wins before letters
  EXPECT_EQ(pieces("x ...\n\ny"), (V{"x", " ...\n\n", "y"}));  // punctuation keeps its newlines
  EXPECT_EQ(pieces("<\xEF\xBD\x9CUser\xEF\xBD\x9C>"), (V{"<\xEF\xBD\x9C", "User", "\xEF\xBD\x9C>"}));  // <｜User｜>
}

TEST(Pretokenize, MarksAndOtherCharacters) {
  EXPECT_EQ(pieces("e\xCC\x81t"), (V{"e\xCC\x81t"}));  // combining acute joins the letter run
  EXPECT_EQ(pieces("\xCC\x81\xCC\x81"), (V{"\xCC\x81\xCC\x81"}));  // marks alone still form a run
  // An ill-formed byte is one character of class Other: it may lead a word but never joins one.
  EXPECT_EQ(pieces("ab\xFF" "cd"), (V{"ab", "\xFF" "cd"}));
  EXPECT_EQ(pieces("\xFF\xFE"), (V{"\xFF\xFE"}));  // no alternative matches: one gap piece
}

TEST(Pretokenize, PiecesCoverTheInput) {
  const std::string text = "Mixed \xF0\x9F\x98\x80 text\r\n\r\n\t12345 \xE4\xB8\xAD\xE6\x96\x87!? \xC0 end  ";
  std::string joined;
  for (const auto& p : pieces(text)) {
    EXPECT_FALSE(p.empty());
    joined += p;
  }
  EXPECT_EQ(joined, text);
}

}  // namespace
}  // namespace deepinfer
