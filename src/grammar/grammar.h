// Structured output, part 1: the grammar IR and its front ends (issue 6, serving.md §4).
//
// Every front end (regex, JSON Schema, GBNF-style EBNF) produces the same IR: a list of rules, each a
// byte-level regular expression over bytes and references to other rules. compile() turns every rule into
// a DFA whose edges are bytes or rule references; the matcher (matcher.h) runs a pushdown automaton over
// those DFAs. All errors are deepinfer::Error with a message that names the construct (keyword, rule,
// position) that is wrong or unsupported.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::grammar {

// A node of a rule body. Bytes: one byte out of a set of ranges; Seq/Alt: children; Repeat: child
// repeated min..max times (max < 0 = unbounded); Ref: another rule; Empty: the empty string.
struct Expr {
  enum class Kind : uint8_t { Empty, Bytes, Seq, Alt, Repeat, Ref };
  Kind kind = Kind::Empty;
  std::vector<std::pair<uint8_t, uint8_t>> ranges;  // Bytes
  std::vector<Expr> kids;                           // Seq, Alt, Repeat (one kid)
  int32_t min = 0, max = 0;                         // Repeat
  int32_t rule = -1;                                // Ref

  static Expr empty() { return {}; }
  static Expr byte_range(uint8_t lo, uint8_t hi);
  static Expr bytes(std::vector<std::pair<uint8_t, uint8_t>> r);
  static Expr literal(std::string_view s);
  static Expr seq(std::vector<Expr> kids);
  static Expr alt(std::vector<Expr> kids);
  static Expr repeat(Expr kid, int32_t min, int32_t max);
  static Expr ref(int32_t rule);
  static Expr opt(Expr kid) { return repeat(std::move(kid), 0, 1); }
  static Expr star(Expr kid) { return repeat(std::move(kid), 0, -1); }
  static Expr plus(Expr kid) { return repeat(std::move(kid), 1, -1); }
};

// Code-point set as sorted, disjoint, inclusive ranges (surrogates D800-DFFF never included).
using CharSet = std::vector<std::pair<uint32_t, uint32_t>>;
CharSet charset_normalize(CharSet s);        // sort, merge, drop surrogates, clamp to 0x10FFFF
CharSet charset_complement(const CharSet& s);
// The UTF-8 encodings of a code-point set as a byte-level expression.
Expr utf8_expr(const CharSet& s);

// One byte-level DFA state. next[b] = target state (global id) or -1; refs = (rule, return state) pairs.
struct DfaState {
  int32_t next[256];
  std::vector<std::pair<int32_t, int32_t>> refs;
  int32_t rule = -1;
  bool final = false;
  bool has_bytes = false;
};

struct Rule {
  std::string name;
  Expr body;
};

// A grammar: rules[root] is the start rule. After compile(), states/rule_start are filled.
struct Grammar {
  std::vector<Rule> rules;
  int32_t root = 0;

  // Compiled form (filled by compile()).
  std::vector<DfaState> states;
  std::vector<int32_t> rule_start;
  // For each rule, the return states of all call sites (deduplicated); a rule with exactly one and that is
  // not the root has a unique context, which the mask cache uses to classify more tokens up front.
  std::vector<std::vector<int32_t>> callers;

  int32_t add_rule(std::string name, Expr body = {});
  int32_t find_rule(std::string_view name) const;  // -1 if absent
  bool compiled() const { return !states.empty(); }
  std::string describe() const;  // rules in EBNF-like text (debugging, error messages)
};

struct Limits {
  size_t max_dfa_states_per_rule = 20000;
  size_t max_nfa_states_per_rule = 400000;
  size_t max_repeat = 2000;  // largest explicit bound in {m,n}, minItems, maxLength...
};

// Builds the DFAs; rejects undefined rules, left recursion, and grammars over the size limits.
void compile(Grammar& g, const Limits& limits = {});

// ---- Front ends (each returns a compiled grammar) ----

// ECMAScript-like regex (the dialect of JSON Schema `pattern`), matched against the whole output.
// Supported: literals, escapes (\n \t \r \f \v \0 \xHH \uHHHH \u{H..} \d \D \w \W \s \S, escaped
// metacharacters), ., [...] / [^...] with ranges, groups (...) (?:...) (?<name>...), | ? * + {m} {m,}
// {m,n} (lazy suffix ? accepted, same language), ^ at the start and $ at the end. Unsupported
// constructs (backreferences, lookaround, \b, flags, anchors in the middle) raise an Error naming them.
Grammar compile_regex(std::string_view pattern, const Limits& limits = {});

// Regex -> expression over code points, lowered to bytes. json_string_body = true lowers each character
// as it must appear inside a JSON string literal (", \ and controls become their escapes).
Expr regex_to_expr(std::string_view pattern, bool json_string_body, const Limits& limits = {},
                   bool* anchored_start = nullptr, bool* anchored_end = nullptr);

// GBNF-style EBNF: `name ::= expr` rules (a rule may continue on following lines), `root` is the start
// rule. Expressions: "literal" (escapes \n \t \r \\ \" \xHH \uHHHH), [class] / [^class], ., (...),
// a | b, postfix ? * + {m} {m,} {m,n}, rule names ([A-Za-z0-9_-]+), # comments.
Grammar compile_ebnf(std::string_view text, std::string_view root_rule = "root", const Limits& limits = {});

struct JsonSchemaOptions {
  // false: compact output, "," and ":" separators, no whitespace. true: [ \n\t]* allowed around tokens.
  bool any_whitespace = false;
  // true: a missing additionalProperties means false (what xgrammar strict_mode and DeepInfer do);
  // false: it means "any value", as JSON Schema itself says.
  bool strict = true;
  Limits limits{};
};
Grammar compile_json_schema(std::string_view schema_json, const JsonSchemaOptions& opts = {});

}  // namespace deepinfer::grammar
