#include "text/encoding/messages.h"

#include <algorithm>

#include "text/encoding/protocol_common.h"
#include "text/encoding/python_json.h"

namespace deepinfer {
namespace {

using protocol::bad_request;
using protocol::field;
using protocol::require_string;

std::string block_type(const OrderedJson& block, const std::string& where) {
  return protocol::require_member_string(block, "type", where);
}

// A content block's required string member `key` (text, thinking, id, ...).
std::string block_text(const OrderedJson& block, const char* key, const std::string& where) {
  return protocol::require_member_string(block, key, where);
}

// `system` and tool_result content: a string or text blocks joined by a blank line (serving.md §1.2 joining).
std::string text_blocks(const OrderedJson* content, const std::string& where) {
  if (!content) return {};
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) bad_request("invalid request body: " + where + " should be a string or a list");
  std::string out;
  for (size_t i = 0; i < content->size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const std::string t = block_type((*content)[i], w);
    if (t != "text") bad_request("invalid request body: " + w + ".type: unsupported block type `" + t + "` here");
    if (i > 0) out += "\n\n";
    out += block_text((*content)[i], "text", w);
  }
  return out;
}

void unmatched_tool_use(const std::string& where, const std::vector<std::string>& ids) {
  std::string list;
  for (const auto& id : ids) list += (list.empty() ? "" : ", ") + id;
  bad_request(where + "`tool_use` ids were found without `tool_result` blocks immediately after: " + list +
              ". Each `tool_use` block must have a corresponding `tool_result` block in the next message.");
}

// An assistant message: thinking blocks -> reasoning, text blocks -> content (each joined by a blank line),
// tool_use blocks -> calls, which must be the last blocks of the message.
Message assistant_turn(const OrderedJson& content, size_t index) {
  const std::string where = "messages[" + std::to_string(index) + "].content";
  Message a = assistant_message("");
  if (content.is_string()) {
    a.content = content.get<std::string>();
    return a;
  }
  std::vector<std::string> call_ids;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const std::string t = block_type(content[i], w);
    if (t != "tool_use" && !call_ids.empty())
      unmatched_tool_use("messages." + std::to_string(index) + "." + std::to_string(i) + ": ", call_ids);
    if (t == "text") {
      // Text blocks join with a blank line once some text is there; thinking blocks always join (recipe 0.2.0).
      if (!a.content.empty()) a.content += "\n\n";
      a.content += block_text(content[i], "text", w);
    } else if (t == "thinking") {
      const std::string text = block_text(content[i], "thinking", w);
      if (a.reasoning_content) *a.reasoning_content += "\n\n" + text;
      else a.reasoning_content = text;
    } else if (t == "tool_use") {
      ToolCall tc;
      tc.id = block_text(content[i], "id", w);
      tc.name = block_text(content[i], "name", w);
      const OrderedJson* input = field(content[i], "input");
      // Arguments are the input object as JSON text in the Python layout the recipe produces.
      tc.arguments = python_style_json(input ? *input : OrderedJson::object());
      call_ids.push_back(tc.id);
      a.tool_calls.push_back(std::move(tc));
    } else {
      bad_request("invalid request body: " + w + ".type: unsupported block type `" + t + "`");
    }
  }
  return a;
}

// A user message: leading tool_result blocks answer the previous assistant's tool_use blocks (each becomes a tool
// message, serving.md §1.2), every text block becomes a user message of its own.
void user_turn(const OrderedJson& content, size_t index, std::vector<std::string>& awaited,
               std::vector<Message>& out) {
  const std::string where = "messages[" + std::to_string(index) + "].content";
  if (content.is_string()) {
    if (!awaited.empty()) unmatched_tool_use("messages." + std::to_string(index) + ": ", awaited);
    out.push_back(user_message(content.get<std::string>()));
    return;
  }
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const std::string t = block_type(content[i], w);
    // Any other block while results are still owed names this message; results missing at the end of an
    // all-results message name the assistant message instead (see convert_messages).
    if (t != "tool_result" && !awaited.empty()) unmatched_tool_use("messages." + std::to_string(index) + ": ", awaited);
    if (t == "text") {
      out.push_back(user_message(block_text(content[i], "text", w)));
    } else if (t == "tool_result") {
      const std::string id = block_text(content[i], "tool_use_id", w);
      auto it = std::find(awaited.begin(), awaited.end(), id);
      if (it != awaited.end()) awaited.erase(it);
      out.push_back(tool_message(text_blocks(field(content[i], "content"), w + ".content"), id));
    } else {
      bad_request("invalid request body: " + w + ".type: unsupported block type `" + t + "`");
    }
  }
}

void parse_tools(const OrderedJson& tools, Conversation& c) {
  if (!tools.is_array()) bad_request("invalid request body: tools must be a list");
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    const OrderedJson& tool = tools[i];
    if (!tool.is_object()) bad_request("invalid request body: " + where + " must be an object");
    if (const OrderedJson* type = field(tool, "type"); type && *type != "custom")
      bad_request(where + ": server tools are not supported");
    ToolDefinition def = protocol::named_tool(tool, where);
    // Validated later (validate_tools): DeepSeek checks schemas only after the messages and only when the tools are
    // in use (tool_choice other than none).
    const OrderedJson* schema = field(tool, "input_schema");
    def.parameters = schema ? *schema : OrderedJson();
    c.tools.push_back(std::move(def));
  }
}

// Per tool, in declaration order: its input_schema must be a JSON Schema object of type "object", and its name must
// not repeat an earlier one (recipe 0.2.0 texts and order).
void validate_tools(const std::vector<ToolDefinition>& tools) {
  for (size_t i = 0; i < tools.size(); ++i) {
    const OrderedJson& schema = tools[i].parameters;
    const std::string prefix = "Invalid schema for function '" + tools[i].name + "': ";
    if (!schema.is_object() && !schema.is_boolean())
      bad_request(prefix + schema.dump() + " is not of types \"boolean\", \"object\"");
    const OrderedJson type = schema.is_object() && schema.contains("type") ? schema["type"] : OrderedJson();
    if (schema.is_object() && schema.contains("type") && !type.is_string() && !type.is_array())
      bad_request(prefix + type.dump() + " is not valid under any of the schemas listed in the 'anyOf' keyword");
    if (type != "object")
      bad_request(prefix + "schema must be a JSON Schema of 'type: \"object\"', got 'type: " + type.dump() + "'.");
    for (size_t j = 0; j < i; ++j)
      if (tools[j].name == tools[i].name) bad_request("Tool names must be unique.");
  }
}

// Anthropic tool_choice: auto / any / none / {type: tool, name}. `any` has no DeepSeek equivalent that thinking mode
// accepts; recipe 0.2.0 treats it as auto in both modes.
void parse_tool_choice(const OrderedJson& choice, Conversation& c) {
  const OrderedJson* type = field(choice, "type");
  if (!type) bad_request("invalid request body: tool_choice.type is missing");
  const std::string t = require_string(*type, "tool_choice.type");
  if (t == "auto" || t == "any") c.tool_choice = ToolChoice::Auto;
  else if (t == "none") c.tool_choice = ToolChoice::None;
  else if (t == "tool") {
    const OrderedJson* name = field(choice, "name");
    if (!name) bad_request("invalid request body: tool_choice.name is missing");
    protocol::apply_named_tool_choice(c, require_string(*name, "tool_choice.name"));
  } else {
    bad_request("invalid request body: tool_choice.type: unknown variant `" + t + "`");
  }
}

}  // namespace

ConvertedRequest convert_messages(const OrderedJson& body, const ConversionOptions& options) {
  ConvertedRequest out = protocol::begin_conversion(body, options);
  Conversation& c = out.conversation;
  const OrderedJson* thinking = field(body, "thinking");
  if (thinking) {
    const OrderedJson* type = field(*thinking, "type");
    if (!type) bad_request("invalid request body: thinking.type is missing");
    const std::string t = require_string(*type, "thinking.type");
    if (t != "enabled" && t != "disabled" && t != "adaptive")
      bad_request("invalid request body: thinking.type: unknown variant `" + t +
                  "`, expected one of `adaptive`, `enabled`, `disabled`");
    c.thinking_mode = t != "disabled";
  }
  if (const OrderedJson* config = field(body, "output_config")) {
    if (const OrderedJson* effort = field(*config, "effort")) {
      c.reasoning_effort = protocol::parse_effort(require_string(*effort, "output_config.effort"), "output_config.effort");
      // Effort "none" turns thinking off unless `thinking` says otherwise (an explicit thinking.type wins).
      if (!c.reasoning_effort && !thinking) c.thinking_mode = false;
    }
  }
  if (!c.thinking_mode) c.reasoning_effort.reset();
  if (c.thinking_mode && !c.reasoning_effort) c.reasoning_effort = ReasoningEffort::High;

  if (const OrderedJson* tools = field(body, "tools")) parse_tools(*tools, c);

  if (const OrderedJson* system = field(body, "system")) {
    // Kept even when empty: V4.1 then still opens the prompt with <｜System｜> (recipe 0.2.0).
    c.messages.push_back(system_message(text_blocks(system, "system")));
  }
  const OrderedJson* messages = field(body, "messages");
  if (!messages || !messages->is_array()) bad_request("invalid request body: messages must be a list");
  if (messages->empty()) bad_request("messages: at least one message is required");
  std::vector<std::string> awaited;  // tool_use ids of the previous assistant message still without a result
  size_t awaiting_from = 0;
  for (size_t i = 0; i < messages->size(); ++i) {
    const OrderedJson& m = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    const std::string r = protocol::require_member_string(m, "role", where);
    const OrderedJson* content = field(m, "content");
    if (!content || !(content->is_string() || content->is_array()))
      bad_request("invalid request body: " + where + ".content should be a string or a list");
    if (content->is_array() && content->empty())
      bad_request("messages." + std::to_string(i) + ": all messages must have non-empty content");
    if (r == "user") {
      user_turn(*content, i, awaited, c.messages);
      if (!awaited.empty()) unmatched_tool_use("messages." + std::to_string(awaiting_from) + ":", awaited);
      continue;
    }
    if (!awaited.empty()) unmatched_tool_use("messages." + std::to_string(i) + ": ", awaited);
    if (r == "assistant") {
      Message a = assistant_turn(*content, i);
      for (const auto& call : a.tool_calls) awaited.push_back(call.id);
      awaiting_from = i;
      c.messages.push_back(std::move(a));
    } else if (r == "system") {
      // V4.1 keeps a system turn in place; V4 has none, so the text goes to the user as a reminder block.
      std::string text = text_blocks(content, where + ".content");
      if (out.version == ModelVersion::DeepseekV41) c.messages.push_back(system_message(std::move(text)));
      else if (!text.empty()) c.messages.push_back(user_message("<system-reminder>\n" + text + "\n</system-reminder>"));
    } else {
      bad_request("invalid request body: " + where + ".role: unknown variant `" + r + "`");
    }
  }
  if (!awaited.empty()) unmatched_tool_use("messages." + std::to_string(awaiting_from) + ":", awaited);

  // DeepSeek's order of 400 checks (recipe 0.2.0): tool names and server tools, messages, reasoning pass-back,
  // tool schemas and unique names (skipped for tool_choice none), then the tool choice.
  protocol::enforce_reasoning_pass_back(c, options,
                                        "The `content[].thinking` in the thinking mode must be passed back to the API.");
  const OrderedJson* choice = field(body, "tool_choice");
  const OrderedJson* choice_type = choice ? field(*choice, "type") : nullptr;
  if (!(choice_type && *choice_type == "none")) validate_tools(c.tools);
  if (choice) parse_tool_choice(*choice, c);
  if (c.tool_choice == ToolChoice::None) c.tools.clear();

  if (const OrderedJson* stop = field(body, "stop_sequences")) {
    if (!stop->is_array()) bad_request("invalid request body: stop_sequences must be a list");
    for (size_t i = 0; i < stop->size(); ++i) out.stop.push_back(require_string((*stop)[i], "stop_sequences[" + std::to_string(i) + "]"));
  }
  protocol::finish_conversion(body, "max_tokens", out);
  return out;
}

}  // namespace deepinfer
