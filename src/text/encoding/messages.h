// Anthropic Messages request -> Conversation (serving.md §1.5): `system`, content blocks text / tool_use /
// tool_result / thinking, `thinking.type`, `output_config.effort`, `tool_choice`, `stop_sequences`.
#pragma once

#include "text/encoding/chat_completions.h"

namespace deepinfer {

ConvertedRequest convert_messages(const OrderedJson& body, const ConversionOptions& options = {});

}  // namespace deepinfer
