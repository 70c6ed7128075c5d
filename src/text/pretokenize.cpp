#include "text/pretokenize.h"

#include <cstddef>
#include <cstdint>

#include "text/unicode.h"

namespace deepinfer {

const std::string_view kDeepseekSplitPatterns[3] = {
    "\\p{N}{1,3}",
    "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+",  // [一-龥぀-ゟ゠-ヿ]+
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};

namespace {

constexpr size_t kNoMatch = static_cast<size_t>(-1);

struct Char {
  char32_t cp;
  uint32_t len;
  CharClass cls;
};

inline Char char_at(std::string_view s, size_t pos) {
  const uint8_t b = static_cast<uint8_t>(s[pos]);
  if (b < 0x80) return {b, 1, char_class(b)};
  const Utf8Char c = decode_utf8(s, pos);
  return {c.cp, c.len, char_class(c.cp)};
}

inline bool is_ascii_letter(char32_t cp) { return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z'; }
inline bool is_newline(char32_t cp) { return cp == '\r' || cp == '\n'; }
inline bool is_letter_or_mark(CharClass c) { return c == CharClass::Letter || c == CharClass::Mark; }
inline bool is_punct_or_symbol(CharClass c) { return c == CharClass::Punct || c == CharClass::Symbol; }

// The 32 ASCII characters of the first alternative's bracket: exactly the ASCII punctuation.
inline bool is_ascii_punct(char32_t cp) {
  return (cp >= '!' && cp <= '/') || (cp >= ':' && cp <= '@') || (cp >= '[' && cp <= '`') ||
         (cp >= '{' && cp <= '~');
}

inline bool is_cjk_or_kana(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF);
}

// End of the run of characters satisfying pred that starts at pos.
template <class Pred>
size_t run_end(std::string_view s, size_t pos, Pred pred) {
  while (pos < s.size()) {
    const Char c = char_at(s, pos);
    if (!pred(c)) break;
    pos += c.len;
  }
  return pos;
}

// "Isolated" split: every match and every non-empty gap between matches becomes a piece.
// match(s, pos) returns the end of the match starting at pos, or kNoMatch.
template <class Match, class Emit>
void split_isolated(std::string_view s, Match match, Emit emit) {
  size_t gap_start = 0, pos = 0;
  while (pos < s.size()) {
    const size_t end = match(s, pos);
    if (end == kNoMatch) {
      pos += char_at(s, pos).len;
      continue;
    }
    if (gap_start < pos) emit(s.substr(gap_start, pos - gap_start));
    emit(s.substr(pos, end - pos));
    pos = gap_start = end;
  }
  if (gap_start < s.size()) emit(s.substr(gap_start));
}

// Step 1: \p{N}{1,3} (greedy, so a run of digits splits into threes from the left).
size_t match_numbers(std::string_view s, size_t pos) {
  size_t end = pos;
  for (int n = 0; n < 3 && end < s.size(); ++n) {
    const Char c = char_at(s, end);
    if (c.cls != CharClass::Number) break;
    end += c.len;
  }
  return end == pos ? kNoMatch : end;
}

// Step 2: runs of CJK unified ideographs U+4E00-9FA5 and kana U+3040-30FF.
size_t match_cjk(std::string_view s, size_t pos) {
  const size_t end = run_end(s, pos, [](const Char& c) { return is_cjk_or_kana(c.cp); });
  return end == pos ? kNoMatch : end;
}

// Step 3: the six alternatives, tried in order at pos; the first that matches wins (Oniguruma semantics).
size_t match_words(std::string_view s, size_t pos) {
  const Char c0 = char_at(s, pos);
  const size_t next = pos + c0.len;

  // [!"#...~][A-Za-z]+
  if (is_ascii_punct(c0.cp)) {
    size_t end = next;
    while (end < s.size() && is_ascii_letter(static_cast<uint8_t>(s[end]))) ++end;
    if (end > next) return end;
  }

  // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ : take the optional character if the letters follow it,
  // otherwise backtrack and require the letters to start at pos.
  auto letters_end = [&](size_t from) {
    return run_end(s, from, [](const Char& c) { return is_letter_or_mark(c.cls); });
  };
  if (!is_newline(c0.cp) && c0.cls != CharClass::Letter && !is_punct_or_symbol(c0.cls)) {
    const size_t end = letters_end(next);
    if (end > next) return end;
  }
  if (is_letter_or_mark(c0.cls)) return letters_end(next);

  // ' '?[\p{P}\p{S}]+[\r\n]* (without the space the rest cannot match at a space, so no backtrack case)
  {
    const size_t start = c0.cp == ' ' ? next : pos;
    const size_t end = run_end(s, start, [](const Char& c) { return is_punct_or_symbol(c.cls); });
    if (end > start) {
      size_t tail = end;
      while (tail < s.size() && (s[tail] == '\r' || s[tail] == '\n')) ++tail;
      return tail;
    }
  }

  if (c0.cls != CharClass::Space) return kNoMatch;
  // All three remaining alternatives start with the maximal whitespace run [pos, run).
  size_t run = pos, last_start = pos, last_newline_end = kNoMatch;
  int count = 0;
  while (run < s.size()) {
    const Char c = char_at(s, run);
    if (c.cls != CharClass::Space) break;
    last_start = run;
    run += c.len;
    ++count;
    if (is_newline(c.cp)) last_newline_end = run;
  }
  // \s*[\r\n]+ : \s* backtracks until a newline follows, so the match ends after the run's last newline.
  if (last_newline_end != kNoMatch) return last_newline_end;
  // \s+(?!\S) : at the end of the piece the whole run; otherwise give back the last whitespace character
  // so that the next one is whitespace (impossible for a run of one).
  if (run == s.size()) return run;
  if (count >= 2) return last_start;
  // \s+
  return run;
}

}  // namespace

void pretokenize(std::string_view text, std::vector<std::string_view>& pieces) {
  split_isolated(text, match_numbers, [&](std::string_view p1) {
    split_isolated(p1, match_cjk, [&](std::string_view p2) {
      split_isolated(p2, match_words, [&](std::string_view p3) { pieces.push_back(p3); });
    });
  });
}

}  // namespace deepinfer
