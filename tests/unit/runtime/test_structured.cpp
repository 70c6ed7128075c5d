// Structured output in the engine (issue 6): per-request grammars in the sampler on the v4_tiny fixture with a
// synthetic byte-level tokenizer. Samples are checked here (JSON parse, std::regex, our output parser) and,
// when DEEPINFER_GRAMMAR_SAMPLES names a file, written there for the independent Python check
// (tests/golden/grammar/check_engine_samples.py: jsonschema + its own DSML parser).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <random>
#include <regex>

#include <unistd.h>

#include "common/byte_level_tokenizer.h"
#include "deepinfer/engine.h"
#include "grammar/structured.h"
#include "runtime/sampler.h"
#include "text/output_parser.h"
#include "text/pretokenize.h"
#include "text/tokenizer.h"
#include "text/tokenizer_bpe.h"

namespace deepinfer {
namespace {

using nlohmann::json;

const std::string kModel = std::string(DEEPINFER_SOURCE_DIR) + "/tests/golden/fixtures/v4_tiny";
constexpr int32_t kThinkEnd = 511;

// ids 0..255: bytes; 256..510: pairs of the letters a..p; 511: the added special token </think>.
std::string write_tokenizer() {
  json spec = testing::byte_level_tokenizer_spec(255);
  spec["added_tokens"] = json::array({json{{"id", kThinkEnd}, {"content", "</think>"}, {"special", true}}});
  // One file per process: ctest runs the tests of this binary in parallel processes.
  std::string path = std::string(DEEPINFER_BINARY_DIR) + "/structured_test_tokenizer." + std::to_string(getpid()) + ".json";
  if (!std::ifstream(path)) std::ofstream(path) << spec.dump();
  return path;
}

std::unique_ptr<Engine> make_engine(int max_num_seqs = 64) {
  EngineOptions o;
  o.model = kModel;
  o.tokenizer = write_tokenizer();
  o.max_num_seqs = max_num_seqs;
  return Engine::create(o);
}

// Samples for the Python check.
json& samples() {
  static json s = json::array();
  return s;
}
void flush_samples() {
  const char* path = std::getenv("DEEPINFER_GRAMMAR_SAMPLES");
  if (path) std::ofstream(path) << samples().dump(1);
}

// JSON text as RFC 8259's grammar accepts it, parsed by nlohmann with every number standing in as 0 (a discarded value
// when the text is not JSON). The RFC leaves the range of numbers to implementations, and nlohmann rejects a number
// beyond double's as an overflow, while a grammar may emit any digits the number grammar allows (a json_object sample
// of session 59 ended in 67915E8967). Each number outside strings must match the RFC's number grammar; nlohmann
// judges the rest.
json parse_json_syntax(const std::string& text) {
  static const std::regex number("-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?");
  auto in_number = [](char c) { return (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E'; };
  std::string masked;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      masked += c;
      if (c == '\\' && i + 1 < text.size()) masked += text[++i];
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
      masked += c;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t end = i;
      while (end < text.size() && in_number(text[end])) ++end;
      if (!std::regex_match(text.begin() + long(i), text.begin() + long(end), number)) return json::value_t::discarded;
      masked += '0';
      i = end - 1;
    } else {
      masked += c;
    }
  }
  return json::parse(masked, nullptr, false);
}

Request constrained(StructuredOutput so, uint64_t seed, int max_tokens = 200) {
  Request r;
  r.prompt_token_ids = {0, 40, 41, 42, 7};
  r.params.temperature = 1.0f;
  r.params.seed = seed;
  r.params.max_tokens = max_tokens;
  r.params.structured = std::move(so);
  return r;
}

const char* kSchemas[] = {
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 130}, "tag": {"enum": ["a", "b", 3, null]}},
        "required": ["name", "age"]})",
    R"({"type": "array", "items": {"type": "integer", "minimum": -50, "maximum": 50}, "minItems": 1, "maxItems": 4})",
    R"({"type": "object", "properties": {"id": {"type": "string", "format": "uuid"},
        "flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
        "kind": {"anyOf": [{"const": "x"}, {"type": "null"}]}}, "required": ["id", "flags", "kind"]})",
    R"({"$defs": {"p": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["x"]}}, "type": "object", "properties": {"a": {"$ref": "#/$defs/p"},
        "b": {"type": "array", "items": {"$ref": "#/$defs/p"}, "maxItems": 2}}, "required": ["a", "b"]})",
    R"({"type": "string", "pattern": "^[a-f]{2,4}-[0-9]{1,3}$"})",
};

// The oracle itself: numbers beyond double's range pass as syntax; malformed numbers, strings and structure do not.
TEST(JsonSyntaxOracle, AcceptsTheGrammarsNumbersAndRejectsMalformedJson) {
  EXPECT_TRUE(parse_json_syntax(R"({"a":67915E8967, "b": [-0.5e-3, 1e+999]})").is_object());
  EXPECT_TRUE(parse_json_syntax(R"({"x\"1": "e-5"})").is_object());  // digits inside strings stay text
  for (const char* bad : {R"({"a":01})", R"({"a":1.})", R"({"a":-})", R"({"a":1e})", R"({"a":1} x)", R"({"a":"x)",
                          R"({a:1})", R"([1,])"})
    EXPECT_TRUE(parse_json_syntax(bad).is_discarded()) << bad;
}

TEST(StructuredEngine, JsonSchemaSamplesAndBatchInvariance) {
  auto engine = make_engine();
  std::vector<Request> reqs;
  std::vector<int> which;
  for (int i = 0; i < 30; ++i) {
    StructuredOutput so;
    so.json_schema = kSchemas[i % 5];
    reqs.push_back(constrained(so, 1000 + uint64_t(i), 300));
    which.push_back(i % 5);
  }
  auto batched = engine->generate(reqs);
  int complete = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const RequestOutput& o = batched[i];
    ASSERT_TRUE(o.finish_reason == FinishReason::Finished || o.finish_reason == FinishReason::Length)
        << i << ": " << finish_reason_name(o.finish_reason) << " " << o.message;
    // Alone (fresh engine state, one request): bitwise the same tokens.
    RequestOutput alone = engine->submit(reqs[i]).collect();
    EXPECT_EQ(alone.token_ids, o.token_ids) << "request " << i;
    if (o.finish_reason != FinishReason::Finished) continue;
    ++complete;
    EXPECT_EQ(o.token_ids.back(), 1);  // EOS only once the grammar is complete
    EXPECT_FALSE(parse_json_syntax(o.text).is_discarded()) << o.text;
    samples().push_back({{"kind", "json"}, {"schema", json::parse(kSchemas[which[i]])}, {"text", o.text}});
  }
  EXPECT_GE(complete, 20);
  flush_samples();
}

TEST(StructuredEngine, RegexEbnfAndJsonObject) {
  auto engine = make_engine();
  const std::string re = "(ab|cd)[0-9]{1,3}(-[xyz]+)?";
  const std::regex oracle(re);
  const std::regex ebnf_oracle("(\\((a|b)*\\))+");
  int finished = 0;
  for (int i = 0; i < 12; ++i) {
    StructuredOutput so;
    so.regex = re;
    RequestOutput o = engine->submit(constrained(so, uint64_t(i), 60)).collect();
    if (o.finish_reason == FinishReason::Finished) {
      ++finished;
      EXPECT_TRUE(std::regex_match(o.text, oracle)) << o.text;
    }
    StructuredOutput eb;
    eb.ebnf = "root ::= item+\nitem ::= \"(\" [ab]* \")\"\n";
    o = engine->submit(constrained(eb, uint64_t(i), 60)).collect();
    if (o.finish_reason == FinishReason::Finished) {
      ++finished;
      EXPECT_TRUE(std::regex_match(o.text, ebnf_oracle)) << o.text;
    }
    StructuredOutput jo;
    jo.json_object = true;
    o = engine->submit(constrained(jo, uint64_t(i), 400)).collect();
    if (o.finish_reason == FinishReason::Finished) {
      ++finished;
      EXPECT_TRUE(parse_json_syntax(o.text).is_object()) << o.text;
    }
  }
  EXPECT_GE(finished, 12);
}

TEST(StructuredEngine, BadGrammarsAreRejectedBeforeAnyState) {
  auto engine = make_engine();
  struct Bad {
    StructuredOutput so;
    std::string expect;
  };
  std::vector<Bad> bad;
  auto add = [&](auto set, std::string expect) {
    StructuredOutput so;
    set(so);
    bad.push_back({so, std::move(expect)});
  };
  add([](auto& s) { s.json_schema = "{not json"; }, "structured.json_schema");
  add([](auto& s) { s.json_schema = R"({"type": "string", "not": {"const": "a"}})"; }, "not");
  add([](auto& s) { s.json_schema = R"({"type": "integer", "multipleOf": 3})"; }, "multipleOf");
  add([](auto& s) { s.regex = "(a"; }, "structured.regex");
  add([](auto& s) { s.regex = "(a)\\1"; }, "structured.regex");
  add([](auto& s) { s.ebnf = "root ::= missing"; }, "structured.ebnf");
  add([](auto& s) { s.ebnf = "root ::= root \"a\""; }, "structured.ebnf");
  add([](auto& s) {
    s.regex = "a";
    s.json_object = true;
  }, "exactly one");
  add([](auto& s) { s.tools = "[]"; }, "structured.tools");
  add([](auto& s) { s.tools = R"([{"type": "function", "function": {"parameters": {}}}])"; }, "name");
  add([](auto& s) {
    s.tools = R"([{"function": {"name": "f", "parameters": {"type": "object", "properties": {"q": {"type": "string", "format": "email"}}}}}])";
  }, "properties.q");
  add([](auto& s) {
    s.tools = R"([{"function": {"name": "f", "parameters": {"type": "object", "properties": {"q": {"type": "integer", "multipleOf": 2}}}}}])";
  }, "multipleOf");
  add([](auto& s) {
    s.tools = R"([{"function": {"name": "f", "parameters": {"type": "object", "required": ["zz"]}}}])";
  }, "zz");
  add([](auto& s) {
    s.tools = R"([{"function": {"name": "f"}}])";
    s.dsml_version = "v5";
  }, "dsml_version");
  add([](auto& s) {
    s.tools = R"([{"function": {"name": "f"}}])";
    s.tool_choice = "sometimes";
  }, "tool_choice");
  const uint64_t before = engine->stats().rejected;
  for (size_t i = 0; i < bad.size(); ++i) {
    RequestStream st = engine->submit(constrained(bad[i].so, 1));
    EXPECT_EQ(st.handle().slot, UINT32_MAX) << i;  // no slot, no state
    RequestOutput o = st.collect();
    EXPECT_EQ(o.finish_reason, FinishReason::Rejected) << i;
    EXPECT_TRUE(o.token_ids.empty());
    EXPECT_NE(o.message.find(bad[i].expect), std::string::npos) << i << ": " << o.message;
    EXPECT_EQ(o.message.rfind("params.structured", 0), 0u) << o.message;
  }
  EXPECT_EQ(engine->stats().rejected - before, bad.size());
  EXPECT_EQ(engine->stats().state_bytes_in_use, 0u);

  // Without a tokenizer a grammar cannot be applied.
  EngineOptions o;
  o.model = kModel;
  auto bare = Engine::create(o);
  StructuredOutput so;
  so.regex = "a";
  RequestOutput out = bare->submit(constrained(so, 1)).collect();
  EXPECT_EQ(out.finish_reason, FinishReason::Rejected);
  EXPECT_NE(out.message.find("tokenizer"), std::string::npos) << out.message;
}

TEST(StructuredEngine, ThinkingModeStartsAfterThinkEnd) {
  auto engine = make_engine();
  const std::regex oracle("[0-9]{2}x");
  int entered = 0, free_bytes = 0;
  for (int i = 0; i < 16; ++i) {
    StructuredOutput so;
    so.regex = "[0-9]{2}x";
    so.after_think = true;
    Request r = constrained(so, 77 + uint64_t(i), 900);
    r.params.temperature = 1.5f;
    RequestOutput o = engine->submit(r).collect();
    auto at = std::find(o.token_ids.begin(), o.token_ids.end(), kThinkEnd);
    for (auto it = o.token_ids.begin(); it != at; ++it) free_bytes += (*it < '0' || *it > '9') ? 1 : 0;
    if (at == o.token_ids.end()) {
      EXPECT_NE(o.finish_reason, FinishReason::Error) << o.message;
      continue;
    }
    ++entered;
    EXPECT_EQ(o.finish_reason, FinishReason::Finished);
    std::vector<int32_t> answer(at + 1, o.token_ids.end());
    ASSERT_FALSE(answer.empty());
    EXPECT_EQ(answer.back(), 1);
    answer.pop_back();
    EXPECT_TRUE(std::regex_match(engine->decode(answer), oracle)) << engine->decode(answer);
  }
  EXPECT_GE(entered, 3);
  EXPECT_GT(free_bytes, 100);  // before </think> the output is not constrained
}

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "strict": true, "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 5}, "days": {"type": "integer", "minimum": 1, "maximum": 14},
                   "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city", "days"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "search", "strict": true, "parameters": {"type": "object",
    "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 4},
                   "filters": {"type": "object", "properties": {"year": {"type": "integer", "minimum": 1990, "maximum": 2030},
                                                                 "exact": {"type": "boolean"}}, "required": ["year"]},
                   "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 2}},
    "required": ["query"]}}},
  {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}
])";

void dsml_samples(const std::string& version, const std::string& choice) {
  auto engine = make_engine();
  int parsed_calls = 0, with_calls = 0;
  for (int i = 0; i < 16; ++i) {
    StructuredOutput so;
    so.tools = kTools;
    so.dsml_version = version;
    so.tool_choice = choice;
    Request r = constrained(so, 500 + uint64_t(i), 900);
    RequestOutput o = engine->submit(r).collect();
    ASSERT_NE(o.finish_reason, FinishReason::Error) << o.message;
    ASSERT_NE(o.finish_reason, FinishReason::Rejected) << o.message;
    if (o.finish_reason != FinishReason::Finished) continue;
    OutputParserOptions po;
    po.starts_in_tool_calls = choice == "required";
    OutputParser parser(po);
    ParsedOutputBuilder b;
    b.add(parser.feed(o.text));
    b.add(parser.finish());
    ParsedOutput p = b.build(parser, "stop");
    EXPECT_EQ(parser.invalid_bytes(), 0u) << o.text;
    if (choice == "required") {
      EXPECT_GE(p.tool_calls.size(), 1u) << o.text;
    }
    if (!p.tool_calls.empty()) ++with_calls;
    json calls = json::array();
    for (const ParsedToolCall& c : p.tool_calls) {
      ++parsed_calls;
      json args = json::parse(c.arguments, nullptr, false);
      EXPECT_TRUE(args.is_object()) << c.arguments;
      calls.push_back({{"name", c.name}, {"arguments", args}});
    }
    samples().push_back({{"kind", "dsml"}, {"version", version}, {"tool_choice", choice},
                         {"tools", json::parse(kTools)}, {"text", o.text}, {"calls", calls}});
  }
  if (choice == "required") EXPECT_GE(parsed_calls, 8);
  else EXPECT_GE(with_calls + 0, 0);
  flush_samples();
}

TEST(StructuredEngine, DsmlToolCallsV4) { dsml_samples("v4", "required"); }
TEST(StructuredEngine, DsmlToolCallsV41) { dsml_samples("v4.1", "required"); }
TEST(StructuredEngine, DsmlToolCallsAutoV4) { dsml_samples("v4", "auto"); }

// tool_choice=auto without a strict tool: no grammar, the same tokens as an unconstrained request.
TEST(StructuredEngine, AutoWithoutStrictToolsIsUnconstrained) {
  auto engine = make_engine();
  StructuredOutput so;
  so.tools = R"([{"type": "function", "function": {"name": "ping", "parameters": {"type": "object"}}}])";
  so.tool_choice = "auto";
  RequestOutput a = engine->submit(constrained(so, 42, 40)).collect();
  RequestOutput b = engine->submit(constrained(StructuredOutput{}, 42, 40)).collect();
  EXPECT_EQ(a.finish_reason, b.finish_reason) << a.message;
  EXPECT_EQ(a.token_ids, b.token_ids);
}

// The grammar state alone: thinking phase, mask, rollback across </think>.
TEST(RequestGrammar, ThinkingPhaseAndRollback) {
  std::vector<std::string> toks(260);
  for (int b = 0; b < 256; ++b) toks[size_t(b)] = std::string(1, char(b));
  toks[256] = "ab";
  toks[257] = "";  // </think> (not text)
  toks[258] = "";  // EOS
  auto vocab = grammar::TokenizerInfo::from_bytes(toks, {258}, {257});
  auto cg = grammar::compile_for(grammar::compile_regex("a+b"), vocab);
  runtime::RequestGrammar g(cg, 257);
  EXPECT_FALSE(g.constrained());
  EXPECT_TRUE(g.accept('x'));
  EXPECT_TRUE(g.accept(257));
  EXPECT_TRUE(g.constrained());
  g.prepare();
  auto allowed = [&](int32_t id) { return (g.mask()[size_t(id) >> 5] >> (id & 31)) & 1u; };
  EXPECT_TRUE(allowed('a'));
  EXPECT_TRUE(allowed(256));
  EXPECT_FALSE(allowed('b'));
  EXPECT_FALSE(allowed(258));
  EXPECT_FALSE(g.accept('b'));
  EXPECT_TRUE(g.accept(256));
  g.prepare();
  EXPECT_TRUE(allowed(258));
  EXPECT_TRUE(g.accept(258));
  EXPECT_TRUE(g.terminated());
  g.rollback(3);  // EOS, "ab", </think>
  EXPECT_FALSE(g.constrained());
  EXPECT_FALSE(g.terminated());
  EXPECT_TRUE(g.accept(257));
  g.prepare();
  EXPECT_TRUE(allowed('a'));
  EXPECT_FALSE(allowed(258));

  // The sampler applies the mask before temperature / top-k: only allowed ids are ever drawn.
  std::vector<uint32_t> mask((260 + 31) / 32, 0u);
  mask[0] |= 1u << 7;
  mask[256 >> 5] |= 1u << (259 & 31);
  SamplingParams p;
  p.top_k = 1;  // the most likely token overall (id 3) is masked out
  for (uint64_t pos = 0; pos < 50; ++pos) {
    std::vector<float> logits(260, 0.0f);
    logits[3] = 10.0f;
    logits[259] = 0.5f;
    auto r = runtime::sample(logits, p, runtime::PenaltyState{}, 9, pos, mask.data(), 260);
    EXPECT_EQ(r.token, 259);
  }
}

}  // namespace
}  // namespace deepinfer
