// Pieces shared by the three protocol converters (Chat Completions, Responses, Anthropic Messages):
// body field access with errors naming the field, the effort mapping, model-name resolution and the
// reasoning pass-back rule (serving.md §1.5).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "text/encoding/chat_completions.h"

namespace deepinfer::protocol {

[[noreturn]] void bad_request(const std::string& message);

// The member `name`, or nullptr when it is absent or JSON null (clients send null for "not set").
const OrderedJson* field(const OrderedJson& object, const char* name);

// `value` as a string; otherwise a 400 naming `where`.
std::string require_string(const OrderedJson& value, const std::string& where);

// The string member `name` of `object` (a message's role, a content block's type); `object` must be an object and
// the member present, otherwise a 400 naming `where` or `where`.`name`.
std::string require_member_string(const OrderedJson& object, const char* name, const std::string& where);

// serving.md §1.5 effort mapping: minimal/low -> Low, medium/high -> High, xhigh -> XHigh, max/ultra -> Max.
// "none" (thinking off) is returned as std::nullopt. Any other value is a 400 naming `where`.
std::optional<ReasoningEffort> parse_effort(const std::string& value, const std::string& where);

// Accepted model names: the two API names (recipe 0.2.0 default table), the deployment's aliases and, when
// enabled, DeepSeek's /anthropic mapping (claude-opus* -> V4-Pro, other claude* -> V4.1-Flash).
ModelVersion resolve_model(const std::string& model, const ConversionOptions& options);

// A tool's `name` (required, checked) and optional `description`; the caller fills in the parameter schema.
ToolDefinition named_tool(const OrderedJson& tool, const std::string& where);

// The opening every protocol shares: the body must be an object with a `model` naming a known version; the
// conversation starts in the deployment's default thinking mode.
ConvertedRequest begin_conversion(const OrderedJson& body, const ConversionOptions& options);

// The closing every protocol shares: the output token limit, an integer under the protocol's own name
// (`max_tokens`, or `max_output_tokens` in Responses), and the `stream` flag (anything but true is false).
void finish_conversion(const OrderedJson& body, const char* max_tokens_name, ConvertedRequest& out);

// serving.md §1.5 multi-turn rule. In thinking mode an assistant turn in a tool context must carry its reasoning:
// the turn in progress (after the last user message) is rejected with `missing_reasoning_message` when
// options.reject_missing_reasoning is set, earlier ones (and all under FillEmpty) get "". Outside thinking mode
// history reasoning is never rendered and is dropped.
void enforce_reasoning_pass_back(Conversation& c, const ConversionOptions& options,
                                 const std::string& missing_reasoning_message);

// True when some message mentions "json" in any letter case (DeepSeek's json_object precondition).
bool mentions_json(const std::vector<Message>& messages);

// Tool names follow the OpenAI pattern ^[a-zA-Z0-9_-]+$; `where` names the field in the 400 text.
void check_tool_name(const std::string& name, const std::string& where);

// Tool names must be unique across the declared tools.
void check_unique_tool_names(const std::vector<ToolDefinition>& tools);

// A named tool choice keeps only that tool and forces a call; thinking mode cannot force one
// (DeepSeek's 400 "Thinking mode does not support this tool_choice").
void apply_named_tool_choice(Conversation& c, const std::string& name);

}  // namespace deepinfer::protocol
