// Structured-output engine unit tests: clear errors for bad grammars, masks against an independent oracle
// (std::regex full matches enumerated over a small alphabet), exact integer ranges, JSON Schema languages,
// rollback / jump-forward / termination, and a replay of the fuzz corpus.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>

#include "../../../fuzz/grammar/grammar_fuzz_entry.h"
#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace deepinfer::grammar {
namespace {

std::string error_of(const std::string& kind, const std::string& text) {
  try {
    if (kind == "regex") compile_regex(text);
    else if (kind == "ebnf") compile_ebnf(text);
    else compile_json_schema(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

struct Bad {
  const char* kind;
  const char* text;
  const char* expect;  // substring of the error message
};

TEST(GrammarErrors, BadGrammarsGiveClearErrors) {
  const Bad cases[] = {
      {"regex", "(a|b", "missing ')'"},
      {"regex", "a)", "unbalanced ')'"},
      {"regex", "(a)\\1", "backreferences are not supported"},
      {"regex", "a(?=b)", "lookaround"},
      {"regex", "a(?<!b)", "lookaround"},
      {"regex", "\\bword", "word boundary"},
      {"regex", "*a", "quantifier without anything to repeat"},
      {"regex", "a{3,1}", "n < m"},
      {"regex", "[z-a]", "out of order"},
      {"regex", "[abc", "unterminated character class"},
      {"regex", "a{99999}", "exceeds the limit"},
      {"regex", "ab\\", "ends with '\\'"},
      {"regex", "a^b", "anchor"},
      {"regex", "\\p{L}", "Unicode property"},
      {"regex", "(?i)abc", "unsupported group modifier"},
      {"regex", "a**", "nested quantifier"},
      {"ebnf", "root ::= foo", "'foo' is used but never defined"},
      {"ebnf", "root ::= root \"a\" | \"b\"", "left-recursive"},
      {"ebnf", "root ::= a\na ::= b \"x\"\nb ::= a? \"y\" | a", "left-recursive"},
      {"ebnf", "root ::= \"abc", "unterminated string literal"},
      {"ebnf", "root ::= [a-", "unterminated character class"},
      {"ebnf", "root = \"a\"", "expected '::='"},
      {"ebnf", "start ::= \"a\"", "no root rule 'root'"},
      {"ebnf", "root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
      {"ebnf", "root ::= (\"a\" | \"b\"", "missing ')'"},
      {"ebnf", "root ::= \"\\q\"", "unknown escape"},
      {"json", "{\"type\": \"object\", \"not\": {}}", "unsupported keyword 'not'"},
      {"json", "{\"type\": \"object\", \"patternProperties\": {\"a\": {}}}", "unsupported keyword 'patternProperties'"},
      {"json", "{\"if\": {}, \"then\": {}}", "unsupported keyword 'if'"},
      {"json", "{\"type\": \"array\", \"uniqueItems\": true}", "uniqueItems"},
      {"json", "{\"type\": \"number\", \"multipleOf\": 2}", "unsupported keyword 'multipleOf'"},
      {"json", "{\"type\": \"number\", \"maximum\": 3.5}", "'maximum' on type 'number'"},
      {"json", "{\"type\": \"string\", \"format\": \"hostname\"}", "unsupported string format 'hostname'"},
      {"json", "{\"$ref\": \"http://example.com/s.json\"}", "only local refs"},
      {"json", "{\"$ref\": \"#/$defs/missing\"}", "does not resolve"},
      {"json", "{\"type\": \"strin\"}", "unknown type 'strin'"},
      {"json", "{\"oneOf\": [{\"type\": \"integer\"}, {\"type\": \"number\"}]}", "mutually exclusive"},
      {"json", "{\"type\": \"integer\", \"minimum\": 10, \"maximum\": 3}", "minimum > maximum"},
      {"json", "{\"type\": \"array\", \"minItems\": 4, \"maxItems\": 2}", "'maxItems' < 'minItems'"},
      {"json", "{\"type\": \"string\", \"pattern\": \"(x)\\\\1\"}", "in 'pattern'"},
      {"json", "{\"allOf\": [{\"properties\": {\"a\": {\"type\": \"integer\"}}}, "
               "{\"properties\": {\"a\": {\"type\": \"string\"}}}]}", "property 'a' twice"},
      {"json", "{\"type\": \"object\", \"required\": [\"x\"], \"additionalProperties\": false}", "required property 'x'"},
      {"json", "false", "can never be satisfied"},
      {"json", "{\"type\": ", "not valid JSON"},
      {"json", "{\"type\": \"array\", \"items\": [{\"type\": \"integer\"}]}", "prefixItems"},
      {"json", "{\"enum\": [1, 2], \"type\": \"string\"}", "no 'enum'/'const' value matches"},
  };
  std::string many = "{\"type\":\"object\",\"properties\":{";
  for (int i = 0; i < 300; ++i) many += std::string(i ? "," : "") + "\"p" + std::to_string(i) + "\":{}";
  many += "}}";
  EXPECT_NE(error_of("json", many).find("too many optional properties"), std::string::npos);
  int n = 0;
  for (const Bad& b : cases) {
    std::string msg = error_of(b.kind, b.text);
    EXPECT_NE(msg.find(b.expect), std::string::npos) << b.kind << " " << b.text << "\n  got: '" << msg << "'";
    ++n;
  }
  EXPECT_GE(n, 20);
}

// Small vocabulary: every single character of the alphabet plus some multi-character tokens.
std::shared_ptr<const TokenizerInfo> small_vocab(const std::string& alphabet, std::vector<std::string>* out = nullptr) {
  std::vector<std::string> toks{""};  // id 0 = stop
  for (char c : alphabet) toks.push_back(std::string(1, c));
  for (char a : alphabet)
    for (char b : alphabet) toks.push_back(std::string{a, b});
  for (const char* s : {"abab", "abc", "cab", "ddd", "bcd", "aaa"}) toks.push_back(s);
  if (out) *out = toks;
  return TokenizerInfo::from_bytes(toks, {0});
}

// All strings over `alpha` up to length n.
void enumerate(const std::string& alpha, size_t n, std::string& cur, std::vector<std::string>& out) {
  out.push_back(cur);
  if (cur.size() == n) return;
  for (char c : alpha) {
    cur.push_back(c);
    enumerate(alpha, n, cur, out);
    cur.pop_back();
  }
}

TEST(GrammarMask, RegexMasksEqualStdRegexOracle) {
  const std::string alpha = "abcd";
  const size_t N = 9;
  std::vector<std::string> all;
  std::string cur;
  enumerate(alpha, N, cur, all);
  for (const char* pat : {"(ab|c)*d", "a{2,4}b?c*", "[a-c]+d[^d]?", "(a|ab)(c|bcd)(d*)", "(abc|ab|a)+", "d?(a(b(c)?)?)*"}) {
    // Oracle: prefixes of full matches (std::regex, ECMAScript) up to length N.
    std::regex re(pat);
    std::set<std::string> prefixes, full;
    for (const std::string& s : all)
      if (std::regex_match(s, re)) {
        full.insert(s);
        for (size_t i = 0; i <= s.size(); ++i) prefixes.insert(s.substr(0, i));
      }
    std::vector<std::string> toks;
    auto cg = compile_for(compile_regex(pat), small_vocab(alpha, &toks));
    std::mt19937 rng(7);
    std::vector<uint32_t> mask(cg->tokenizer().mask_words());
    int checked = 0;
    for (int walk = 0; walk < 20; ++walk) {
      GrammarMatcher m(cg);
      std::string text;
      while (true) {
        m.fill_mask(mask.data());
        std::vector<int32_t> allowed;
        for (size_t id = 0; id < toks.size(); ++id) {
          bool ours = (mask[id / 32] >> (id % 32)) & 1;
          bool want;
          if (id == 0) want = full.count(text) > 0;
          else {
            std::string t = text + toks[id];
            if (t.size() > N - 2) continue;  // oracle is exact only well inside the enumeration bound
            want = prefixes.count(t) > 0;
          }
          EXPECT_EQ(ours, want) << pat << " after '" << text << "' token '" << toks[id] << "'";
          ++checked;
          if (ours && id != 0) allowed.push_back(int32_t(id));
        }
        EXPECT_EQ(m.can_terminate(), full.count(text) > 0);
        if (allowed.empty() || text.size() >= N - 4) break;
        int32_t t = allowed[rng() % allowed.size()];
        ASSERT_TRUE(m.accept(t));
        text += toks[t];
      }
    }
    EXPECT_GT(checked, 100);
  }
}

bool matches(const std::shared_ptr<const CompiledGrammar>& cg, const std::string& s) {
  GrammarMatcher m(cg);
  return m.accept_bytes(s) && m.can_terminate();
}

TEST(GrammarJson, IntegerRangesAreExact) {
  auto info = TokenizerInfo::from_bytes({"", "x"}, {0});
  struct R {
    long lo, hi;
    bool has_lo, has_hi;
  };
  for (R r : {R{-123, 4567, true, true}, R{0, 0, true, true}, R{-50, -7, true, true}, R{99, 0, true, false},
              R{0, -3, false, true}, R{7, 7, true, true}, R{-1000, 1000, true, true}}) {
    std::string schema = "{\"type\":\"integer\"";
    if (r.has_lo) schema += ",\"minimum\":" + std::to_string(r.lo);
    if (r.has_hi) schema += ",\"maximum\":" + std::to_string(r.hi);
    schema += "}";
    auto cg = compile_for(compile_json_schema(schema), info);
    for (long v = -3000; v <= 6000; ++v) {
      bool want = (!r.has_lo || v >= r.lo) && (!r.has_hi || v <= r.hi);
      ASSERT_EQ(matches(cg, std::to_string(v)), want) << schema << " value " << v;
    }
    EXPECT_FALSE(matches(cg, "007"));
    EXPECT_FALSE(matches(cg, "1.0"));
    EXPECT_FALSE(matches(cg, "+5"));
  }
}

TEST(GrammarJson, SchemaLanguages) {
  auto info = TokenizerInfo::from_bytes({"", "x"}, {0});
  auto cg = compile_for(compile_json_schema(R"({"type":"object","properties":{"a":{"type":"integer"},
      "b":{"type":"string","maxLength":2},"c":{"enum":["x\"y",null]}},"required":["b"],"additionalProperties":false})"),
                        info);
  EXPECT_TRUE(matches(cg, R"({"b":""})"));
  EXPECT_TRUE(matches(cg, R"({"a":-12,"b":"\n\u00e9"})"));
  EXPECT_TRUE(matches(cg, R"({"a":0,"b":"é","c":"x\"y"})"));
  EXPECT_TRUE(matches(cg, R"({"b":"日本","c":null})"));
  EXPECT_FALSE(matches(cg, R"({"b":"abc"})"));        // maxLength
  EXPECT_FALSE(matches(cg, R"({"a":1})"));            // required b
  EXPECT_FALSE(matches(cg, R"({"b":"","a":1})"));     // schema order
  EXPECT_FALSE(matches(cg, R"({"b":"","d":1})"));     // no additional properties
  EXPECT_FALSE(matches(cg, "{\"b\":\"\x01\"}"));      // raw control character
  EXPECT_FALSE(matches(cg, "{\"b\":\"\xff\"}"));      // invalid UTF-8
  EXPECT_FALSE(matches(cg, R"({"b":"","c":"xy"})"));  // enum

  auto arr = compile_for(compile_json_schema(R"({"type":"array","prefixItems":[{"type":"boolean"}],
      "items":{"type":"null"},"minItems":2,"maxItems":3})"), info);
  EXPECT_FALSE(matches(arr, "[true]"));
  EXPECT_TRUE(matches(arr, "[true,null]"));
  EXPECT_TRUE(matches(arr, "[false,null,null]"));
  EXPECT_FALSE(matches(arr, "[false,null,null,null]"));
  EXPECT_FALSE(matches(arr, "[null,null]"));

  auto rec = compile_for(compile_json_schema(R"({"$defs":{"n":{"type":"object","properties":{"k":{"type":"array",
      "items":{"$ref":"#/$defs/n"}}},"additionalProperties":false}},"$ref":"#/$defs/n"})"), info);
  EXPECT_TRUE(matches(rec, R"({"k":[{},{"k":[{"k":[]}]}]})"));
  EXPECT_FALSE(matches(rec, R"({"k":[{"k":[1]}]})"));

  JsonSchemaOptions ws;
  ws.any_whitespace = true;
  auto spaced = compile_for(compile_json_schema(R"({"type":"object","properties":{"a":{"type":"array"}}})", ws), info);
  EXPECT_TRUE(matches(spaced, "{ \"a\" :\n[ 1 , {\"x\": [true]} ] }"));

  auto pat = compile_for(compile_json_schema(R"({"type":"string","pattern":"^a\"b$"})"), info);
  EXPECT_TRUE(matches(pat, R"("a\"b")"));
  EXPECT_FALSE(matches(pat, R"("a"b")"));
  auto date = compile_for(compile_json_schema(R"({"type":"string","format":"date"})"), info);
  EXPECT_TRUE(matches(date, R"("2024-02-28")"));
  EXPECT_FALSE(matches(date, R"("2024-02-30")"));
  EXPECT_FALSE(matches(date, R"("2024-13-01")"));
}

TEST(GrammarMatcher, RollbackForcedBytesAndTermination) {
  std::vector<std::string> toks{"", "{\"", "name", "\":\"", "x", "\"}", "\"", "}", "{", "n", "ame"};
  auto info = TokenizerInfo::from_bytes(toks, {0});
  auto cg = compile_for(compile_json_schema(R"({"type":"object","properties":{"name":{"type":"string"}},
      "required":["name"],"additionalProperties":false})"), info);
  GrammarMatcher m(cg);
  EXPECT_EQ(m.forced_bytes(), "{\"name\":\"");
  std::vector<uint32_t> m0(info->mask_words()), m1(info->mask_words());
  m.fill_mask(m0.data());
  EXPECT_TRUE((m0[0] >> 1) & 1);   // {"
  EXPECT_TRUE((m0[0] >> 8) & 1);   // {
  EXPECT_FALSE((m0[0] >> 2) & 1);  // name
  EXPECT_FALSE((m0[0] >> 0) & 1);  // stop
  for (int32_t t : {1, 2, 3, 4, 4}) ASSERT_TRUE(m.accept(t));
  m.fill_mask(m1.data());
  EXPECT_TRUE((m1[0] >> 5) & 1);  // "}
  EXPECT_TRUE((m1[0] >> 6) & 1);  // "
  ASSERT_TRUE(m.accept(5));
  EXPECT_TRUE(m.can_terminate());
  EXPECT_EQ(m.forced_bytes(), "");
  ASSERT_TRUE(m.accept(0));
  EXPECT_TRUE(m.is_terminated());
  m.fill_mask(m1.data());
  for (uint32_t w : m1) EXPECT_EQ(w, 0u);
  m.rollback(7);
  EXPECT_EQ(m.history_size(), 0u);
  EXPECT_FALSE(m.is_terminated());
  m.fill_mask(m1.data());
  EXPECT_EQ(m0, m1);
  EXPECT_THROW(m.rollback(1), Error);
}

TEST(GrammarMatcher, EbnfRecursionAndShortestCompletion) {
  auto info = TokenizerInfo::from_bytes({"", "(", ")", "1", "+", "((", "))", "1+"}, {0});
  auto cg = compile_for(compile_ebnf("root ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= [0-9]+ | \"(\" expr \")\"\n"),
                        info);
  GrammarMatcher m(cg);
  for (int32_t t : {5, 1, 3, 4}) ASSERT_TRUE(m.accept(t));  // "(((1+"
  EXPECT_FALSE(m.accept(2));
  EXPECT_FALSE(m.can_terminate());
  std::string c = m.shortest_completion();
  EXPECT_EQ(c, "0)))");
  ASSERT_TRUE(m.accept_bytes("7)"));
  ASSERT_TRUE(m.accept(6));
  EXPECT_TRUE(m.can_terminate());
  EXPECT_FALSE(m.accept(2));
}

TEST(GrammarFuzz, ReplayCorpus) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(DEEPINFER_SOURCE_DIR) / "fuzz" / "grammar" / "corpus";
  int n = 0;
  for (auto& e : fs::directory_iterator(dir)) {
    std::ifstream f(e.path(), std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    fuzz::run_one(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    ++n;
  }
  EXPECT_GE(n, 10);
  // a deterministic sweep of mutated seeds as well
  std::mt19937 rng(3);
  for (auto& e : fs::directory_iterator(dir)) {
    std::ifstream f(e.path(), std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (int k = 0; k < 40 && !data.empty(); ++k) {
      std::string d = data;
      if (d.size() < 2) continue;
      for (int j = 0; j < 3; ++j) d[1 + rng() % (d.size() - 1)] = char(rng());
      fuzz::run_one(reinterpret_cast<const uint8_t*>(d.data()), d.size());
    }
  }
}

}  // namespace
}  // namespace deepinfer::grammar
