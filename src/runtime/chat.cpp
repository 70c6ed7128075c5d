// The chat helpers of the public API: messages -> V4 / V4.1 prompt tokens, generated text -> reasoning and
// answer. Thin glue over src/text/encoding (prompt renderer) and src/text/output_parser.
#include <nlohmann/json.hpp>

#include "runtime/engine_core.h"
#include "text/encoding/prompt_renderer.h"
#include "text/encoding/prompt_tokens.h"
#include "text/output_parser.h"

namespace deepinfer {

std::vector<int32_t> Engine::encode_chat(const std::string& messages_json, bool thinking) const {
  const Tokenizer* tok = core_->tokenizer();
  DI_CHECK(tok, "encode_chat: the engine has no tokenizer (EngineOptions.tokenizer)");
  nlohmann::json messages;
  try {
    messages = nlohmann::json::parse(messages_json);
  } catch (const std::exception& e) {
    throw Error(std::string("messages: not JSON (") + e.what() + ")");
  }
  DI_CHECK(messages.is_array() && !messages.empty(), "messages: must be a non-empty array");
  Conversation conv;
  conv.thinking_mode = thinking;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    DI_CHECK(m.is_object() && m.contains("role") && m["role"].is_string(), where + ".role: missing");
    DI_CHECK(m.contains("content") && m["content"].is_string(), where + ".content: must be a string");
    const std::string role = m["role"], content = m["content"];
    if (role == "system") conv.messages.push_back(system_message(content));
    else if (role == "user") conv.messages.push_back(user_message(content));
    else if (role == "assistant") conv.messages.push_back(assistant_message(content));
    else throw Error(where + ".role: '" + role + "' is not system, user or assistant");
  }
  ModelVersion version =
      core_->model().config().family == ModelFamily::V41 ? ModelVersion::DeepseekV41 : ModelVersion::DeepseekV4;
  // encode_prompt applies the recipe's rule (serving.md §1.3): control tokens only from template text, client text
  // as plain BPE in maximal runs, so ids match deepseek-recipe where template and client text meet.
  return encode_prompt(render_prompt(conv, version), *tok);
}

Engine::ChatText Engine::parse_chat(const std::string& text, bool thinking) const {
  OutputParserOptions opts;
  opts.parse_tool_calls = false;
  opts.start = thinking ? OutputStart::ReasoningStart : OutputStart::Content;
  ParsedOutput parsed = parse_output(opts, {std::string_view(text)}, "stop");
  return {parsed.reasoning, parsed.content};
}

}  // namespace deepinfer
