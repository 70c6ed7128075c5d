#include "text/encoding/conversation.h"

namespace deepinfer {

Message system_message(std::string content) {
  Message m;
  m.role = Role::System;
  m.content = std::move(content);
  return m;
}

Message user_message(std::string content) {
  Message m;
  m.role = Role::User;
  m.content = std::move(content);
  return m;
}

Message assistant_message(std::string content, std::optional<std::string> reasoning, std::vector<ToolCall> calls,
                          bool prefix) {
  Message m;
  m.role = Role::Assistant;
  m.content = std::move(content);
  m.reasoning_content = std::move(reasoning);
  m.tool_calls = std::move(calls);
  m.prefix = prefix;
  return m;
}

Message tool_message(std::string content, std::optional<std::string> tool_call_id) {
  Message m;
  m.role = Role::Tool;
  m.content = std::move(content);
  m.tool_call_id = std::move(tool_call_id);
  return m;
}

}  // namespace deepinfer
