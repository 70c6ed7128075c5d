// GBNF-style EBNF front end -> grammar IR.
#include <map>

#include "core/error.h"
#include "grammar/grammar.h"
#include "text/unicode.h"

namespace deepinfer::grammar {
namespace {

class EbnfParser {
 public:
  EbnfParser(std::string_view t, const Limits& lim) : t_(t), lim_(lim) {}

  Grammar parse(std::string_view root_name) {
    skip_ws(true);
    while (pos_ < t_.size()) {
      size_t at = pos_;
      std::string name = ident();
      if (name.empty()) fail("expected a rule name", at);
      skip_ws(false);
      if (t_.substr(pos_, 3) != "::=") fail("expected '::=' after rule name '" + name + "'", pos_);
      pos_ += 3;
      int32_t id = rule_id(name);
      if (defined_[id]) fail("rule '" + name + "' is defined twice", at);
      defined_[id] = true;
      g_.rules[id].body = alternation(0);
      skip_ws(true);
    }
    for (size_t i = 0; i < g_.rules.size(); ++i)
      if (!defined_[i]) throw Error("EBNF: rule '" + g_.rules[i].name + "' is used but never defined");
    int32_t root = g_.find_rule(root_name);
    if (root < 0) throw Error("EBNF: no root rule '" + std::string(root_name) + "'");
    g_.root = root;
    compile(g_, lim_);
    return std::move(g_);
  }

 private:
  [[noreturn]] void fail(const std::string& what, size_t at) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < t_.size(); ++i) {
      if (t_[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
    throw Error("EBNF: " + what + " at line " + std::to_string(line) + " column " + std::to_string(col));
  }

  // Skips blanks and comments; newlines only when allowed (a newline followed by `name ::=` ends a rule).
  void skip_ws(bool newlines) {
    while (pos_ < t_.size()) {
      char c = t_[pos_];
      if (c == ' ' || c == '\t' || c == '\r') ++pos_;
      else if (c == '#') { while (pos_ < t_.size() && t_[pos_] != '\n') ++pos_; }
      else if (c == '\n' && newlines) ++pos_;
      else break;
    }
  }

  // Inside an expression a newline continues the rule unless the next line starts a new rule.
  void skip_ws_in_expr() {
    while (true) {
      skip_ws(false);
      if (pos_ >= t_.size() || t_[pos_] != '\n') return;
      size_t save = pos_;
      skip_ws(true);
      if (pos_ >= t_.size()) return;
      size_t p2 = pos_;
      std::string id = ident();
      skip_ws(false);
      if (!id.empty() && t_.substr(pos_, 3) == "::=") {
        pos_ = save;  // the newline ends this rule
        return;
      }
      pos_ = p2;
    }
  }

  static bool id_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
  }
  std::string ident() {
    size_t s = pos_;
    while (pos_ < t_.size() && id_char(t_[pos_]) && !(t_[pos_] == '.' && pos_ == s)) ++pos_;
    return std::string(t_.substr(s, pos_ - s));
  }

  int32_t rule_id(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    int32_t id = g_.add_rule(name);
    ids_[name] = id;
    defined_.push_back(false);
    return id;
  }

  bool at_expr_end() {
    if (pos_ >= t_.size()) return true;
    char c = t_[pos_];
    return c == '|' || c == ')' || c == '\n';
  }

  Expr alternation(int depth) {
    if (depth > 200) fail("expression nested too deeply", pos_);
    std::vector<Expr> alts;
    alts.push_back(sequence(depth));
    while (pos_ < t_.size() && t_[pos_] == '|') {
      ++pos_;
      alts.push_back(sequence(depth));
    }
    return Expr::alt(std::move(alts));
  }

  Expr sequence(int depth) {
    std::vector<Expr> items;
    skip_ws_in_expr();
    while (!at_expr_end()) {
      items.push_back(postfix(primary(depth)));
      skip_ws_in_expr();
    }
    return Expr::seq(std::move(items));
  }

  int read_int() {
    size_t s = pos_;
    long v = 0;
    while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') {
      v = v * 10 + (t_[pos_] - '0');
      if (v > 1000000) fail("repetition count too large", s);
      ++pos_;
    }
    return pos_ == s ? -1 : int(v);
  }

  Expr postfix(Expr e) {
    while (pos_ < t_.size()) {
      char c = t_[pos_];
      if (c == '*') { ++pos_; e = Expr::star(std::move(e)); }
      else if (c == '+') { ++pos_; e = Expr::plus(std::move(e)); }
      else if (c == '?') { ++pos_; e = Expr::opt(std::move(e)); }
      else if (c == '{') {
        size_t at = pos_++;
        skip_ws(false);
        int mn = read_int();
        if (mn < 0) fail("expected a number in {m,n}", at);
        skip_ws(false);
        int mx = mn;
        if (pos_ < t_.size() && t_[pos_] == ',') {
          ++pos_;
          skip_ws(false);
          mx = read_int();
          skip_ws(false);
        }
        if (pos_ >= t_.size() || t_[pos_] != '}') fail("unterminated {m,n}", at);
        ++pos_;
        if (mx >= 0 && mx < mn) fail("repetition {m,n} with n < m", at);
        if (size_t(mn) > lim_.max_repeat || (mx >= 0 && size_t(mx) > lim_.max_repeat))
          fail("repetition bound exceeds the limit " + std::to_string(lim_.max_repeat), at);
        e = Expr::repeat(std::move(e), mn, mx);
      } else {
        break;
      }
    }
    return e;
  }

  // One (possibly escaped) code point from a literal or class.
  uint32_t char_in(size_t at, char close) {
    if (pos_ >= t_.size()) fail(close == '"' ? "unterminated string literal" : "unterminated character class", at);
    unsigned char c = t_[pos_];
    if (c == '\n') fail(close == '"' ? "newline in string literal" : "newline in character class", pos_);
    if (c == '\\') {
      ++pos_;
      if (pos_ >= t_.size()) fail("dangling escape", at);
      char e = t_[pos_++];
      auto hex = [&](int n) {
        uint32_t v = 0;
        for (int i = 0; i < n; ++i) {
          if (pos_ >= t_.size()) fail("truncated hex escape", at);
          char d = t_[pos_++];
          int x = (d >= '0' && d <= '9') ? d - '0' : (d >= 'a' && d <= 'f') ? d - 'a' + 10
                : (d >= 'A' && d <= 'F') ? d - 'A' + 10 : -1;
          if (x < 0) fail("bad hex digit in escape", at);
          v = v * 16 + uint32_t(x);
        }
        return v;
      };
      switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case '\\': return '\\';
        case '"': return '"';
        case '[': return '[';
        case ']': return ']';
        case '-': return '-';
        case '^': return '^';
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        default: fail(std::string("unknown escape '\\") + e + "'", pos_ - 2);
      }
    }
    // A literal character: well-formed UTF-8 only (Unicode Table 3-7, shared with the tokenizer).
    Utf8Char ch = decode_utf8(t_, pos_);
    if (ch.cp == kInvalidCodePoint) fail("invalid UTF-8", pos_);
    uint32_t cp = ch.cp;
    pos_ += ch.len;
    return cp;
  }

  Expr primary(int depth) {
    size_t at = pos_;
    char c = t_[pos_];
    if (c == '"') {
      ++pos_;
      std::vector<Expr> parts;
      while (true) {
        if (pos_ >= t_.size()) fail("unterminated string literal", at);
        if (t_[pos_] == '"') { ++pos_; break; }
        uint32_t cp = char_in(at, '"');
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("invalid code point in literal", at);
        parts.push_back(utf8_expr({{cp, cp}}));
      }
      return Expr::seq(std::move(parts));
    }
    if (c == '[') {
      ++pos_;
      bool neg = false;
      if (pos_ < t_.size() && t_[pos_] == '^') { neg = true; ++pos_; }
      CharSet set;
      while (true) {
        if (pos_ >= t_.size()) fail("unterminated character class", at);
        if (t_[pos_] == ']') { ++pos_; break; }
        uint32_t lo = char_in(at, ']');
        uint32_t hi = lo;
        if (pos_ + 1 < t_.size() && t_[pos_] == '-' && t_[pos_ + 1] != ']') {
          ++pos_;
          hi = char_in(at, ']');
          if (hi < lo) fail("character range out of order", at);
        }
        set.push_back({lo, hi});
      }
      set = charset_normalize(set);
      return utf8_expr(neg ? charset_complement(set) : set);
    }
    if (c == '(') {
      ++pos_;
      Expr e = alternation(depth + 1);
      skip_ws_in_expr();
      if (pos_ >= t_.size() || t_[pos_] != ')') fail("missing ')'", at);
      ++pos_;
      return e;
    }
    if (c == '.') {
      ++pos_;
      return utf8_expr({{0, 0x10FFFF}});
    }
    std::string id = ident();
    if (id.empty()) fail(std::string("unexpected character '") + c + "'", at);
    return Expr::ref(rule_id(id));
  }

  std::string_view t_;
  size_t pos_ = 0;
  const Limits& lim_;
  Grammar g_;
  std::map<std::string, int32_t> ids_;
  std::vector<bool> defined_;
};

}  // namespace

Grammar compile_ebnf(std::string_view text, std::string_view root_rule, const Limits& limits) {
  EbnfParser p(text, limits);
  return p.parse(root_rule);
}

}  // namespace deepinfer::grammar
