#include "text/encoding/chat_completions.h"

#include <algorithm>
#include <cctype>

#include "text/encoding/protocol_common.h"

namespace deepinfer {
namespace {

using protocol::bad_request;
using protocol::field;
using protocol::require_string;

// Text content is a string or a list of text parts; parts are joined by a blank line (same as adjacent user
// messages, serving.md §1.2).
std::string text_content(const OrderedJson* content, const std::string& where) {
  if (!content) return {};
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) bad_request("invalid request body: " + where + " should be a string or a list");
  std::string out;
  bool first = true;
  for (size_t i = 0; i < content->size(); ++i) {
    const auto& part = (*content)[i];
    const std::string part_where = where + "[" + std::to_string(i) + "]";
    if (!part.is_object()) bad_request("invalid request body: " + part_where + " must be an object");
    const OrderedJson* type = field(part, "type");
    if (!type || *type != "text") bad_request("invalid request body: " + part_where + ".type must be \"text\"");
    const OrderedJson* text = field(part, "text");
    if (!text) bad_request("invalid request body: " + part_where + ".text is missing");
    if (!first) out += "\n\n";
    first = false;
    out += require_string(*text, part_where + ".text");
  }
  return out;
}

std::vector<ToolCall> parse_tool_calls(const OrderedJson& calls, const std::string& where) {
  if (!calls.is_array()) bad_request("invalid request body: " + where + " must be a list");
  std::vector<ToolCall> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const auto& call = calls[i];
    const OrderedJson* fn = call.is_object() ? field(call, "function") : nullptr;
    if (!fn || !fn->is_object()) bad_request("invalid request body: " + w + ".function is missing");
    const OrderedJson* name = field(*fn, "name");
    const OrderedJson* args = field(*fn, "arguments");
    if (!name) bad_request("invalid request body: " + w + ".function.name is missing");
    ToolCall tc;
    const OrderedJson* id = field(call, "id");
    tc.id = id ? require_string(*id, w + ".id") : "";
    tc.name = require_string(*name, w + ".function.name");
    tc.arguments = args ? require_string(*args, w + ".function.arguments") : "{}";
    out.push_back(std::move(tc));
  }
  return out;
}

Message parse_message(const OrderedJson& m, size_t index) {
  const std::string where = "messages[" + std::to_string(index) + "]";
  const std::string r = protocol::require_member_string(m, "role", where);
  const OrderedJson* content = field(m, "content");
  if (r == "system") return system_message(text_content(content, where + ".content"));
  if (r == "user") return user_message(text_content(content, where + ".content"));
  if (r == "tool") {
    const OrderedJson* id = field(m, "tool_call_id");
    return tool_message(text_content(content, where + ".content"),
                        id ? std::optional<std::string>(require_string(*id, where + ".tool_call_id")) : std::nullopt);
  }
  if (r == "assistant") {
    Message a = assistant_message(text_content(content, where + ".content"));
    if (const OrderedJson* rc = field(m, "reasoning_content"))
      a.reasoning_content = require_string(*rc, where + ".reasoning_content");
    if (const OrderedJson* calls = field(m, "tool_calls")) a.tool_calls = parse_tool_calls(*calls, where + ".tool_calls");
    if (const OrderedJson* prefix = field(m, "prefix")) a.prefix = prefix->is_boolean() && prefix->get<bool>();
    return a;
  }
  bad_request("invalid request body: " + where + ".role: unknown variant `" + r + "`");
}

std::vector<ToolDefinition> parse_tools(const OrderedJson& tools) {
  if (!tools.is_array()) bad_request("invalid request body: tools must be a list");
  std::vector<ToolDefinition> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string w = "tools[" + std::to_string(i) + "]";
    const OrderedJson* fn = tools[i].is_object() ? field(tools[i], "function") : nullptr;
    if (!fn || !fn->is_object()) bad_request("invalid request body: " + w + ".function is missing");
    const OrderedJson* name = field(*fn, "name");
    if (!name) bad_request("invalid request body: " + w + ".function.name is missing");
    ToolDefinition def;
    def.name = require_string(*name, w + ".function.name");
    if (const OrderedJson* d = field(*fn, "description")) def.description = require_string(*d, w + ".function.description");
    // A function without a schema is declared with an empty one (rendered as {}).
    const OrderedJson* p = field(*fn, "parameters");
    def.parameters = p ? *p : OrderedJson::object();
    out.push_back(std::move(def));
  }
  return out;
}

}  // namespace

std::string RequestError::body() const {
  OrderedJson error = {{"message", message_}, {"type", "invalid_request_error"}, {"param", nullptr},
                       {"code", "invalid_request_error"}};
  return OrderedJson{{"error", error}}.dump();
}

ModelVersion model_version_from_name(const std::string& model) {
  if (model == "DeepSeek-V4-Pro") return ModelVersion::DeepseekV4;
  if (model == "DeepSeek-V4.1-Flash") return ModelVersion::DeepseekV41;
  bad_request("The supported API model names are DeepSeek-V4-Pro, DeepSeek-V4.1-Flash, but you passed " + model + ".");
}

ConvertedRequest convert_chat_completions(const OrderedJson& body, const ConversionOptions& options) {
  ConvertedRequest out = protocol::begin_conversion(body, options);
  Conversation& c = out.conversation;
  if (const OrderedJson* thinking = field(body, "thinking")) {
    const OrderedJson* type = thinking->is_object() ? field(*thinking, "type") : nullptr;
    if (!type) bad_request("invalid request body: thinking.type is missing");
    const std::string t = require_string(*type, "thinking.type");
    if (t != "enabled" && t != "disabled") bad_request("invalid request body: thinking.type: unknown variant `" + t + "`");
    c.thinking_mode = t == "enabled";
  }
  if (const OrderedJson* effort = field(body, "reasoning_effort")) {
    c.reasoning_effort = protocol::parse_effort(require_string(*effort, "reasoning_effort"), "reasoning_effort");
    if (!c.reasoning_effort) c.thinking_mode = false;  // serving.md §1.5: effort "none" turns thinking off
    // An explicit `thinking` wins over effort "none".
    if (field(body, "thinking")) c.thinking_mode = field(body, "thinking")->value("type", "") == "enabled";
  }
  if (!c.thinking_mode) c.reasoning_effort.reset();

  const OrderedJson* messages = field(body, "messages");
  if (!messages || !messages->is_array()) bad_request("invalid request body: messages must be a list");
  for (size_t i = 0; i < messages->size(); ++i) {
    Message m = parse_message((*messages)[i], i);
    // Empty system messages carry nothing and are dropped, so they do not split a user turn.
    if (m.role == Role::System && m.content.empty()) continue;
    c.messages.push_back(std::move(m));
  }

  if (const OrderedJson* tools = field(body, "tools")) c.tools = parse_tools(*tools);
  protocol::enforce_reasoning_pass_back(c, options, "The `reasoning_content` in the thinking mode must be passed back to the API.");
  if (const OrderedJson* choice = field(body, "tool_choice")) {
    const std::string tc = choice->is_string() ? choice->get<std::string>() : "function";
    if (tc == "none") c.tool_choice = ToolChoice::None;
    else if (tc == "auto") c.tool_choice = ToolChoice::Auto;
    else if (tc == "required") c.tool_choice = ToolChoice::Required;
    else bad_request("invalid request body: tool_choice: unsupported value");
    if (c.thinking_mode && c.tool_choice == ToolChoice::Required)
      bad_request("Thinking mode does not support this tool_choice");
  }
  if (const OrderedJson* format = field(body, "response_format")) {
    const OrderedJson* type = format->is_object() ? field(*format, "type") : nullptr;
    const std::string t = type ? require_string(*type, "response_format.type") : "";
    if (t == "json_object") c.response_format = ResponseFormat::JsonObject;
    else if (t != "text") bad_request("invalid request body: response_format.type: unsupported value `" + t + "`");
  }

  const bool prefix = !c.messages.empty() && c.messages.back().role == Role::Assistant && c.messages.back().prefix;
  if (prefix && c.response_format == ResponseFormat::JsonObject)
    bad_request("response_format json_object should not be used with prefix");
  if (prefix && !c.tools.empty()) bad_request("Function call should not be used with prefix");
  if (c.response_format == ResponseFormat::JsonObject && !protocol::mentions_json(c.messages))
    bad_request("Prompt must contain the word 'json' in some form to use 'response_format' of type 'json_object'.");

  if (const OrderedJson* stop = field(body, "stop")) {
    if (stop->is_string()) out.stop.push_back(stop->get<std::string>());
    else if (stop->is_array())
      for (const auto& s : *stop) out.stop.push_back(require_string(s, "stop[]"));
    else bad_request("invalid request body: stop must be a string or a list");
  }
  protocol::finish_conversion(body, "max_tokens", out);
  return out;
}

}  // namespace deepinfer
