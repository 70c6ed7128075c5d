// Regex front end: an ECMAScript-like pattern (JSON Schema `pattern`) -> byte-level Expr.
// Recursive descent over code points; every character class is a CharSet lowered to UTF-8 (or, inside a
// JSON string, to the JSON spelling of each character).
#include <cstdio>

#include "core/error.h"
#include "grammar/grammar.h"
#include "text/unicode.h"

namespace deepinfer::grammar {
namespace {

class RegexParser {
 public:
  RegexParser(std::string_view p, bool json, const Limits& lim) : json_(json), lim_(lim) {
    // Decode UTF-8 into code points (invalid bytes are an error: patterns come from JSON text).
    size_t i = 0;
    while (i < p.size()) {
      Utf8Char ch = decode_utf8(p, i);
      if (ch.cp == kInvalidCodePoint) fail("invalid UTF-8 in pattern", i);
      cps_.push_back(ch.cp);
      i += ch.len;
    }
  }

  Expr parse(bool* anch_start, bool* anch_end) {
    bool as = false, ae = false;
    if (pos_ < cps_.size() && cps_[pos_] == '^') { as = true; ++pos_; }
    Expr e = alternation(0);
    if (pos_ < cps_.size() && cps_[pos_] == '$') { ae = true; ++pos_; }
    if (pos_ < cps_.size()) {
      if (cps_[pos_] == ')') fail("unbalanced ')'", pos_);
      if (cps_[pos_] == '$' || cps_[pos_] == '^') fail("anchor '^'/'$' in the middle of a pattern is not supported", pos_);
      fail("unexpected character", pos_);
    }
    if (anch_start) *anch_start = as;
    if (anch_end) *anch_end = ae;
    return e;
  }

 private:
  [[noreturn]] void fail(const std::string& what, size_t at) const {
    throw Error("regex: " + what + " at position " + std::to_string(at));
  }
  bool eof() const { return pos_ >= cps_.size(); }
  uint32_t peek() const { return cps_[pos_]; }

  Expr alternation(int depth) {
    if (depth > 500) fail("groups nested too deeply", pos_);
    std::vector<Expr> alts;
    alts.push_back(sequence(depth));
    while (!eof() && peek() == '|') {
      ++pos_;
      alts.push_back(sequence(depth));
    }
    return Expr::alt(std::move(alts));
  }

  Expr sequence(int depth) {
    std::vector<Expr> items;
    while (!eof() && peek() != '|' && peek() != ')') {
      if (peek() == '$') {
        // '$' is fine only at the very end (or before ')' / '|' that ends the pattern: not supported).
        if (pos_ + 1 == cps_.size()) break;
        fail("anchor '$' in the middle of a pattern is not supported", pos_);
      }
      if (peek() == '^') fail("anchor '^' in the middle of a pattern is not supported", pos_);
      size_t at = pos_;
      Expr atom_e = atom(depth);
      items.push_back(quantified(std::move(atom_e), at));
    }
    return Expr::seq(std::move(items));
  }

  int read_int() {
    size_t start = pos_;
    long v = 0;
    while (!eof() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > 1000000) fail("repetition count too large", start);
      ++pos_;
    }
    if (pos_ == start) return -1;
    return int(v);
  }

  Expr quantified(Expr e, size_t at) {
    while (!eof()) {
      uint32_t c = peek();
      int mn, mx;
      if (c == '*') { mn = 0; mx = -1; ++pos_; }
      else if (c == '+') { mn = 1; mx = -1; ++pos_; }
      else if (c == '?') { mn = 0; mx = 1; ++pos_; }
      else if (c == '{') {
        size_t save = pos_;
        ++pos_;
        mn = read_int();
        if (mn < 0) { pos_ = save; fail("'{' without a repetition count (escape it as \\{)", save); }
        mx = mn;
        if (!eof() && peek() == ',') {
          ++pos_;
          mx = read_int();  // -1 = unbounded
        }
        if (eof() || peek() != '}') fail("unterminated repetition {m,n}", save);
        ++pos_;
        if (mx >= 0 && mx < mn) fail("repetition {m,n} with n < m", save);
        if (size_t(mn) > lim_.max_repeat || (mx >= 0 && size_t(mx) > lim_.max_repeat))
          fail("repetition bound exceeds the limit " + std::to_string(lim_.max_repeat), save);
      } else {
        break;
      }
      if (!eof() && peek() == '?') ++pos_;  // lazy: same language
      if (!eof() && (peek() == '*' || peek() == '+' || peek() == '?'))
        fail("nested quantifier (possessive quantifiers are not supported)", pos_);
      e = Expr::repeat(std::move(e), mn, mx);
      (void)at;
    }
    return e;
  }

  Expr atom(int depth) {
    uint32_t c = peek();
    size_t at = pos_;
    switch (c) {
      case '(': {
        ++pos_;
        if (!eof() && peek() == '?') {
          ++pos_;
          if (eof()) fail("unterminated group", at);
          uint32_t k = peek();
          if (k == ':') {
            ++pos_;
          } else if (k == '<' && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != '=' && cps_[pos_ + 1] != '!') {
            while (!eof() && peek() != '>') ++pos_;
            if (eof()) fail("unterminated group name", at);
            ++pos_;
          } else if (k == '=' || k == '!' || k == '<') {
            fail("lookaround assertions are not supported (not regular over a token stream)", at);
          } else {
            fail("unsupported group modifier '(?" + std::string(1, char(k)) + "'", at);
          }
        }
        Expr e = alternation(depth + 1);
        if (eof() || peek() != ')') fail("missing ')'", at);
        ++pos_;
        return e;
      }
      case ')': fail("unbalanced ')'", at);
      case '*': case '+': case '?': fail("quantifier without anything to repeat", at);
      case '{': {
        // ECMAScript (non-unicode mode) treats a '{' that is not a quantifier as a literal.
        ++pos_;
        return chars({{c, c}});
      }
      case '[': return chars(cls());
      case '.': ++pos_; return chars(charset_complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
      case '\\': return chars(escape(false));
      default: ++pos_; return chars({{c, c}});
    }
  }

  CharSet escape(bool in_class) {
    size_t at = pos_;
    ++pos_;
    if (eof()) fail("pattern ends with '\\'", at);
    uint32_t c = peek();
    ++pos_;
    auto hex = [&](int n) {
      uint32_t v = 0;
      for (int i = 0; i < n; ++i) {
        if (eof()) fail("truncated hex escape", at);
        uint32_t d = peek();
        int x = (d >= '0' && d <= '9') ? int(d - '0') : (d >= 'a' && d <= 'f') ? int(d - 'a' + 10)
              : (d >= 'A' && d <= 'F') ? int(d - 'A' + 10) : -1;
        if (x < 0) fail("bad hex digit in escape", at);
        v = v * 16 + uint32_t(x);
        ++pos_;
      }
      return v;
    };
    switch (c) {
      case 'd': return {{'0', '9'}};
      case 'D': return charset_complement({{'0', '9'}});
      case 'w': return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
      case 'W': return charset_complement({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
      case 's': return space();
      case 'S': return charset_complement(space());
      case 'n': return {{'\n', '\n'}};
      case 't': return {{'\t', '\t'}};
      case 'r': return {{'\r', '\r'}};
      case 'f': return {{'\f', '\f'}};
      case 'v': return {{'\v', '\v'}};
      case '0': return {{0, 0}};
      case 'x': { uint32_t v = hex(2); return {{v, v}}; }
      case 'u': {
        if (!eof() && peek() == '{') {
          ++pos_;
          uint32_t v = 0;
          int n = 0;
          while (!eof() && peek() != '}') {
            v = v * 16 + hex(1);
            if (++n > 6 || v > 0x10FFFF) fail("code point out of range in \\u{...}", at);
          }
          if (eof() || n == 0) fail("unterminated \\u{...}", at);
          ++pos_;
          return {{v, v}};
        }
        uint32_t v = hex(4);
        if (v >= 0xD800 && v <= 0xDBFF && pos_ + 1 < cps_.size() && cps_[pos_] == '\\' && cps_[pos_ + 1] == 'u') {
          size_t save = pos_;
          pos_ += 2;
          uint32_t lo = hex(4);
          if (lo >= 0xDC00 && lo <= 0xDFFF) {
            uint32_t cp = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            return {{cp, cp}};
          }
          pos_ = save;
        }
        if (v >= 0xD800 && v <= 0xDFFF) fail("lone surrogate escape \\u" + std::to_string(v) + " is not supported", at);
        return {{v, v}};
      }
      case 'b':
        if (in_class) return {{8, 8}};
        fail("word boundary \\b is not supported", at);
      case 'B': fail("\\B (non-word boundary) is not supported", at);
      case 'p': case 'P': fail("Unicode property escapes \\p{...} are not supported", at);
      case 'c': fail("control escapes \\cX are not supported", at);
      case 'k': fail("named backreferences are not supported (not regular)", at);
      default:
        if (c >= '1' && c <= '9') fail("backreferences are not supported (not regular)", at);
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
          fail(std::string("unknown escape '\\") + char(c) + "'", at);
        return {{c, c}};  // escaped punctuation is itself
    }
  }

  static CharSet space() {
    return {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
            {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
  }

  CharSet cls() {
    size_t at = pos_;
    ++pos_;
    bool neg = false;
    if (!eof() && peek() == '^') { neg = true; ++pos_; }
    CharSet set;
    bool first = true;
    while (true) {
      if (eof()) fail("unterminated character class", at);
      uint32_t c = peek();
      if (c == ']' && !first) { ++pos_; break; }
      if (c == ']' && first) {  // ECMAScript: [] is the empty class, [^] is everything
        ++pos_;
        break;
      }
      first = false;
      CharSet lo_set;
      bool single = true;
      uint32_t lo = 0;
      if (c == '\\') {
        lo_set = escape(true);
        single = lo_set.size() == 1 && lo_set[0].first == lo_set[0].second;
        lo = lo_set[0].first;
      } else if (c == '[' && pos_ + 1 < cps_.size() && cps_[pos_ + 1] == ':') {
        fail("POSIX classes [:name:] are not supported", pos_);
      } else {
        ++pos_;
        lo = c;
        lo_set = {{c, c}};
      }
      if (single && pos_ + 1 < cps_.size() && peek() == '-' && cps_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi;
        if (peek() == '\\') {
          CharSet h = escape(true);
          if (h.size() != 1 || h[0].first != h[0].second) fail("class escape used as a range end", pos_);
          hi = h[0].first;
        } else {
          hi = peek();
          ++pos_;
        }
        if (hi < lo) fail("character range out of order", at);
        set.push_back({lo, hi});
      } else {
        set.insert(set.end(), lo_set.begin(), lo_set.end());
      }
    }
    set = charset_normalize(set);
    return neg ? charset_complement(set) : set;
  }

  // Lowers a set of characters to bytes (raw UTF-8, or as written inside a JSON string).
  Expr chars(const CharSet& in) {
    CharSet s = charset_normalize(in);
    if (!json_) return utf8_expr(s);
    CharSet plain;
    std::vector<Expr> alts;
    for (auto [lo, hi] : s) {
      for (uint32_t c = lo; c <= hi && c < 0x20; ++c) alts.push_back(Expr::literal(json_escape(c)));
      uint32_t a = std::max<uint32_t>(lo, 0x20);
      for (uint32_t c = a; c <= hi; ++c) {
        if (c == '"' || c == '\\') {
          alts.push_back(Expr::literal(json_escape(c)));
          continue;
        }
        // copy the run of ordinary characters in one piece
        uint32_t end = hi;
        if (c < '"' && end >= '"') end = '"' - 1;
        else if (c < '\\' && end >= '\\') end = '\\' - 1;
        plain.push_back({c, end});
        c = end;
        if (c == 0x10FFFF) break;
      }
    }
    if (!plain.empty()) alts.insert(alts.begin(), utf8_expr(plain));
    return Expr::alt(std::move(alts));
  }

  static std::string json_escape(uint32_t c) {
    switch (c) {
      case '"': return "\\\"";
      case '\\': return "\\\\";
      case '\b': return "\\b";
      case '\f': return "\\f";
      case '\n': return "\\n";
      case '\r': return "\\r";
      case '\t': return "\\t";
      default: {
        char buf[8];
        snprintf(buf, sizeof buf, "\\u%04x", c);
        return buf;
      }
    }
  }

  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
  bool json_;
  const Limits& lim_;
};

}  // namespace

Expr regex_to_expr(std::string_view pattern, bool json_string_body, const Limits& limits, bool* anchored_start,
                   bool* anchored_end) {
  RegexParser p(pattern, json_string_body, limits);
  return p.parse(anchored_start, anchored_end);
}

Grammar compile_regex(std::string_view pattern, const Limits& limits) {
  Grammar g;
  g.add_rule("root", regex_to_expr(pattern, false, limits));
  compile(g, limits);
  return g;
}

}  // namespace deepinfer::grammar
