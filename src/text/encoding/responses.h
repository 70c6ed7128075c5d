// OpenAI Responses request -> Conversation (serving.md §1.5): `input` string or items (message, reasoning,
// function_call, function_call_output, custom_tool_call[_output] for apply_patch), `instructions`,
// `reasoning.effort` ("none" disables thinking), function tools, namespace tools and the apply_patch custom tool.
// Stateless: `previous_response_id` / `store` are not served.
#pragma once

#include "text/encoding/chat_completions.h"

namespace deepinfer {

// Function name given to a tool of a namespace: "<namespace>::<tool>" on V4.1, "<namespace>__<tool>" on V4
// (recipe 0.2.0 naming; the Responses output splits it back into namespace and name).
std::string namespaced_tool_name(ModelVersion version, const std::string& namespace_name, const std::string& tool_name);

ConvertedRequest convert_responses(const OrderedJson& body, const ConversionOptions& options = {});

}  // namespace deepinfer
