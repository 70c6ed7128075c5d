// Conversation model shared by the protocol converters and the V4 / V4.1 prompt renderers.
// serving.md §1.1: protocol request -> Conversation -> rendered prompt; §1.2 lists the roles.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deepinfer {

// Insertion-ordered JSON: tool schemas are rendered in the client's key order (serving.md §1.3).
using OrderedJson = nlohmann::ordered_json;

enum class Role { System, User, Assistant, Tool, LatestReminder };

enum class ModelVersion { DeepseekV4, DeepseekV41 };

// Effort levels the renderers distinguish (protocol values are folded into these, serving.md §1.5).
enum class ReasoningEffort { Low, High, XHigh, Max };

enum class ToolChoice { Auto, None, Required };

enum class ResponseFormat { Text, JsonObject };

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON object text as the client sent it; not validated here
};

struct ToolDefinition {
  std::string name;
  std::optional<std::string> description;
  OrderedJson parameters;  // null when the client gave none
};

struct Message {
  Role role = Role::User;
  std::string content;
  std::optional<std::string> reasoning_content;  // assistant only
  std::vector<ToolCall> tool_calls;              // assistant only
  std::optional<std::string> tool_call_id;       // tool only
  bool prefix = false;                           // assistant only: continue this turn
};

struct Conversation {
  std::vector<Message> messages;
  bool thinking_mode = true;
  std::vector<ToolDefinition> tools;
  ToolChoice tool_choice = ToolChoice::Auto;
  std::optional<ReasoningEffort> reasoning_effort;
  ResponseFormat response_format = ResponseFormat::Text;
};

Message system_message(std::string content);
Message user_message(std::string content);
Message assistant_message(std::string content, std::optional<std::string> reasoning = std::nullopt,
                          std::vector<ToolCall> calls = {}, bool prefix = false);
Message tool_message(std::string content, std::optional<std::string> tool_call_id);

}  // namespace deepinfer
