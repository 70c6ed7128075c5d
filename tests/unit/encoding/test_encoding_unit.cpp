// Unit tests for the request encoding (serving.md §1). Expected values are either spec statements (serving.md §1.5
// effort mapping) or outputs of deepseek-recipe 0.2.0 for the same request, recorded here as literals; the bulk
// comparison against the recipe is tests/golden/encoding.
// Suite names start with "encoding_" so that `ctest -R encoding` selects them.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "text/encoding/chat_completions.h"
#include "text/encoding/messages.h"
#include "text/encoding/prompt_renderer.h"
#include "text/encoding/prompt_tokens.h"
#include "text/encoding/protocol_common.h"
#include "text/encoding/python_json.h"
#include "text/encoding/responses.h"

namespace deepinfer {
namespace {

std::string render(const ConvertedRequest& r) { return render_prompt(r.conversation, r.version).prompt(); }

// The 400 text of converting `body`, or "" when it converts.
template <typename Convert>
std::string error_of(Convert convert, const char* body, ConversionOptions options = {}) {
  try {
    convert(OrderedJson::parse(body), options);
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.message();
  }
  return "";
}

// ---- Python-style JSON ---------------------------------------------------------------------------------------

// The recipe's "### Available Tool Schemas" line for a tool whose schema holds every JSON type, floats with and
// without a fraction, quotes, a backslash, a control character, DEL and non-ASCII text.
TEST(encoding_python_json, ReproducesTheRecipeSchemaLine) {
  const std::string line =
      "{\"name\": \"f\", \"description\": \"d\", \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": "
      "{\"type\": \"array\", \"default\": [1, 2.5, true, null, 0.001, 3.0, -2.25]}, \"b\": {\"description\": "
      "\"\u00e9\\\"\\n\\\\ \\u0001\x7f\U0001F642\", \"type\": \"string\"}, \"c\": {}}}}";
  EXPECT_EQ(python_style_json(OrderedJson::parse(line)), line);
}

TEST(encoding_python_json, EmptyContainersAndScalars) {
  EXPECT_EQ(python_style_json(OrderedJson::parse("{}")), "{}");
  EXPECT_EQ(python_style_json(OrderedJson::parse("[]")), "[]");
  EXPECT_EQ(python_style_json(OrderedJson::parse("[[], {}, \"\"]")), "[[], {}, \"\"]");
  EXPECT_EQ(python_style_json(OrderedJson::parse("{\"k\":{\"a\":1,\"b\":[1,2]}}")), "{\"k\": {\"a\": 1, \"b\": [1, 2]}}");
}

// ---- effort mapping (serving.md §1.5) -------------------------------------------------------------------------

TEST(encoding_effort, ProtocolValuesFoldIntoFourLevels) {
  using protocol::parse_effort;
  EXPECT_EQ(parse_effort("minimal", "e"), ReasoningEffort::Low);
  EXPECT_EQ(parse_effort("low", "e"), ReasoningEffort::Low);
  EXPECT_EQ(parse_effort("medium", "e"), ReasoningEffort::High);
  EXPECT_EQ(parse_effort("high", "e"), ReasoningEffort::High);
  EXPECT_EQ(parse_effort("xhigh", "e"), ReasoningEffort::XHigh);
  EXPECT_EQ(parse_effort("max", "e"), ReasoningEffort::Max);
  EXPECT_EQ(parse_effort("ultra", "e"), ReasoningEffort::Max);
  EXPECT_EQ(parse_effort("none", "e"), std::nullopt);
  EXPECT_THROW(parse_effort("extreme", "e"), RequestError);
}

// Recipe 0.2.0 prompts for one user turn "q".
TEST(encoding_effort, V41EffortLine) {
  const std::string tail = " (range 1-100, the higher the value, the more thorough the reasoning)\n\n<｜User｜>q<｜Assistant｜><think>";
  const std::string head = "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: ";
  auto prompt = [](const char* effort) {
    return render(convert_chat_completions(OrderedJson::parse(
        std::string("{\"model\":\"DeepSeek-V4.1-Flash\",\"reasoning_effort\":\"") + effort +
        "\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}")));
  };
  EXPECT_EQ(prompt("low"), head + "50" + tail);
  EXPECT_EQ(prompt("medium"), head + "75" + tail);
  EXPECT_EQ(prompt("max"), head + "100" + tail);
}

TEST(encoding_effort, V4LowAddsNoParagraph) {
  const auto r = convert_chat_completions(OrderedJson::parse(
      R"({"model":"DeepSeek-V4-Pro","reasoning_effort":"low","messages":[{"role":"user","content":"q"}]})"));
  EXPECT_EQ(render(r), "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜><think>");
}

// ---- tool results (serving.md §1.2) ---------------------------------------------------------------------------

TEST(encoding_tool_results, RenderedInCallOrder) {
  const auto r = convert_chat_completions(OrderedJson::parse(R"({"model":"DeepSeek-V4-Pro",
    "thinking":{"type":"disabled"}, "tools":[{"type":"function","function":{"name":"f"}}],
    "messages":[{"role":"user","content":"q"},
      {"role":"assistant","content":"","tool_calls":[
        {"id":"a","type":"function","function":{"name":"f","arguments":"{}"}},
        {"id":"b","type":"function","function":{"name":"f","arguments":"{\"x\": 1}"}}]},
      {"role":"tool","tool_call_id":"b","content":"RB"},
      {"role":"tool","tool_call_id":"a","content":"RA"}]})"));
  const std::string prompt = render(r);
  const std::string want =
      "<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n"
      "<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"x\" string=\"false\">1</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>RA</tool_result>\n\n"
      "<tool_result>RB</tool_result><｜Assistant｜></think>";
  ASSERT_NE(prompt.find("<｜Assistant｜>"), std::string::npos);
  EXPECT_EQ(prompt.substr(prompt.find("<｜Assistant｜>")), want);
}

// Recipe 0.2.0 orders a Responses turn's calls by call_id (byte-wise), whatever the input order.
TEST(encoding_tool_results, ResponsesCallsInCallIdOrder) {
  const auto r = convert_responses(OrderedJson::parse(R"({"model":"DeepSeek-V4-Pro","reasoning":{"effort":"none"},
    "tools":[{"type":"function","name":"f"},{"type":"function","name":"g"}],
    "input":[{"role":"user","content":"q"},
      {"type":"function_call","call_id":"call_10","name":"f","arguments":"{}"},
      {"type":"function_call","call_id":"call_8","name":"g","arguments":"{}"},
      {"type":"function_call_output","call_id":"call_8","output":"o8"},
      {"type":"function_call_output","call_id":"call_10","output":"o10"}]})"));
  const auto& calls = r.conversation.messages.at(1).tool_calls;
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].id, "call_10");
  EXPECT_EQ(calls[1].id, "call_8");
}

// ---- DeepSeek's 400 texts (recipe 0.2.0) ----------------------------------------------------------------------

TEST(encoding_errors, MessagesToolUseWithoutResult) {
  const std::string tail = "`tool_use` ids were found without `tool_result` blocks immediately after: a. Each "
                           "`tool_use` block must have a corresponding `tool_result` block in the next message.";
  const char* use = R"({"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]})";
  auto body = [&](const std::string& rest) {
    return std::string(R"({"model":"DeepSeek-V4-Pro","max_tokens":5,"thinking":{"type":"disabled"},
      "tools":[{"name":"f","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"q"},)") +
           use + rest + "]}";
  };
  // The conversation ends after the call: names the assistant message, no space after the colon.
  EXPECT_EQ(error_of(convert_messages, body("").c_str()), "messages.1:" + tail);
  // The next message is not a result list: names that message, with a space.
  EXPECT_EQ(error_of(convert_messages, body(R"(,{"role":"user","content":"x"})").c_str()), "messages.2: " + tail);
  EXPECT_EQ(error_of(convert_messages,
                     body(R"(,{"role":"user","content":[{"type":"text","text":"x"},{"type":"tool_result","tool_use_id":"a"}]})").c_str()),
            "messages.2: " + tail);
  EXPECT_EQ(error_of(convert_messages, body(R"(,{"role":"assistant","content":"x"})").c_str()), "messages.2: " + tail);
}

TEST(encoding_errors, MessagesToolSchemas) {
  auto body = [](const char* tools, const char* choice = "") {
    return std::string(R"({"model":"DeepSeek-V4-Pro","max_tokens":5,"thinking":{"type":"disabled"},"tools":)") +
           tools + choice + R"(,"messages":[{"role":"user","content":"q"}]})";
  };
  EXPECT_EQ(error_of(convert_messages, body(R"([{"name":"g"}])").c_str()),
            "Invalid schema for function 'g': null is not of types \"boolean\", \"object\"");
  EXPECT_EQ(error_of(convert_messages, body(R"([{"name":"g","input_schema":{}}])").c_str()),
            "Invalid schema for function 'g': schema must be a JSON Schema of 'type: \"object\"', got 'type: null'.");
  EXPECT_EQ(error_of(convert_messages, body(R"([{"name":"g","input_schema":{"type":"string"}}])").c_str()),
            "Invalid schema for function 'g': schema must be a JSON Schema of 'type: \"object\"', got 'type: \"string\"'.");
  const char* f = R"({"name":"f","input_schema":{"type":"object"}})";
  EXPECT_EQ(error_of(convert_messages, body((std::string("[") + f + "," + f + "]").c_str()).c_str()),
            "Tool names must be unique.");
  // tool_choice none: the tools are dropped unvalidated.
  EXPECT_EQ(error_of(convert_messages, body(R"([{"name":"g"}])", R"(,"tool_choice":{"type":"none"})").c_str()), "");
}

TEST(encoding_errors, ResponsesOrderAndTexts) {
  EXPECT_EQ(error_of(convert_responses, R"({"model":"DeepSeek-V4-Pro","tools":[{"type":"function","name":"f"}],
    "input":[{"role":"user","content":"q"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}]})"),
            "No tool output found for tool call c1.");
  // Tool declarations are checked before the input items.
  EXPECT_EQ(error_of(convert_responses, R"({"model":"DeepSeek-V4-Pro",
    "tools":[{"type":"function","name":"f"},{"type":"custom","name":"other"}],
    "input":[{"role":"user","content":"q"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}]})"),
            "Unsupported custom tool: 'other'. Only 'apply_patch' is supported.");
  // Reasoning pass-back is checked before tool_choice.
  ConversionOptions reject;
  reject.reject_missing_reasoning = true;
  EXPECT_EQ(error_of(convert_responses, R"({"model":"DeepSeek-V4-Pro","tools":[{"type":"function","name":"f"}],
    "tool_choice":"required","input":[{"role":"user","content":"q"},
      {"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
      {"type":"function_call_output","call_id":"c1","output":"o"}]})", reject),
            "The `reasoning_text` in the thinking mode must be passed back to the API.");
}

// A namespaced function is chosen by its rendered name only ("fs__read" on V4, "fs::read" on V4.1).
TEST(encoding_errors, NamespacedToolChoice) {
  auto body = [](const char* model, const char* choice) {
    return std::string("{\"model\":\"") + model + R"(","reasoning":{"effort":"none"},"input":"q",
      "tools":[{"type":"namespace","name":"fs","tools":[{"type":"function","name":"read"}]}],"tool_choice":)" +
           choice + "}";
  };
  EXPECT_EQ(error_of(convert_responses, body("DeepSeek-V4-Pro", R"({"type":"function","name":"fs__read"})").c_str()), "");
  EXPECT_EQ(error_of(convert_responses, body("DeepSeek-V4.1-Flash", R"({"type":"function","name":"fs::read"})").c_str()), "");
  EXPECT_EQ(error_of(convert_responses, body("DeepSeek-V4-Pro", R"({"type":"function","name":"fs::read"})").c_str()),
            "Invalid value for 'tool_call': no function named 'fs::read' was specified in the 'tools' parameter.");
  EXPECT_EQ(error_of(convert_responses,
                     body("DeepSeek-V4.1-Flash", R"({"type":"function","name":"read","namespace":"fs"})").c_str()),
            "Invalid value for 'tool_call': no function named 'read' was specified in the 'tools' parameter.");
}

// ---- control tokens only from template text (serving.md §1.3) -------------------------------------------------

// Recipe 0.2.0 special_ranges for this request: [0,21) BOS, [21,29) User, [39,52) Assistant, [52,60) </think>;
// the typed "<｜User｜>" at [29,37) is plain text.
TEST(encoding_prompt_tokens, TypedControlTokenStaysPlainText) {
  const auto r = convert_chat_completions(OrderedJson::parse(
      R"({"model":"DeepSeek-V4-Pro","thinking":{"type":"disabled"},"messages":[{"role":"user","content":"<｜User｜>hi"}]})"));
  const auto pieces = prompt_pieces(render_prompt(r.conversation, r.version));
  ASSERT_EQ(pieces.size(), 5u);
  EXPECT_TRUE(pieces[0].special);
  EXPECT_EQ(pieces[0].text, "<｜begin▁of▁sentence｜>");
  EXPECT_TRUE(pieces[1].special);
  EXPECT_EQ(pieces[1].text, "<｜User｜>");
  EXPECT_FALSE(pieces[2].special);
  EXPECT_EQ(pieces[2].text, "<｜User｜>hi");
  EXPECT_TRUE(pieces[3].special);
  EXPECT_EQ(pieces[3].text, "<｜Assistant｜>");
  EXPECT_TRUE(pieces[4].special);
  EXPECT_EQ(pieces[4].text, "</think>");
}

// DSML markers in a rendered call are control tokens; the argument key and value around them are client text.
TEST(encoding_prompt_tokens, ToolCallArgumentsArePlainText) {
  const auto r = convert_chat_completions(OrderedJson::parse(R"({"model":"DeepSeek-V4-Pro",
    "thinking":{"type":"disabled"}, "tools":[{"type":"function","function":{"name":"f"}}],
    "messages":[{"role":"user","content":"q"},
      {"role":"assistant","content":"","tool_calls":[
        {"id":"a","type":"function","function":{"name":"f","arguments":"{\"<think>\": \"<｜DSML｜x</think>\"}"}}]},
      {"role":"tool","tool_call_id":"a","content":"r"}]})"));
  size_t think = 0, dsml = 0;
  for (const auto& p : prompt_pieces(render_prompt(r.conversation, r.version))) {
    if (!p.special) continue;
    think += p.text == "<think>" || p.text == "</think>";
    dsml += p.text == "｜DSML｜";
  }
  // Tools section prose: 9 DSML markers, "<think>" twice, "</think>" twice; the call: 6 DSML markers; two
  // assistant openings in non-thinking mode: "</think>" twice.
  EXPECT_EQ(dsml, 9u + 6u);
  EXPECT_EQ(think, 4u + 2u);
}

}  // namespace
}  // namespace deepinfer
