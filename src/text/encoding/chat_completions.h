// Chat Completions request -> Conversation (serving.md §1.5), with the DeepSeek API's 400 rules.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "text/encoding/conversation.h"

namespace deepinfer {

// An HTTP error answer for a bad request; message() is DeepSeek's wording where it has one.
class RequestError : public Error {
 public:
  RequestError(int status, std::string message) : Error(message), status_(status), message_(std::move(message)) {}
  int status() const { return status_; }
  const std::string& message() const { return message_; }
  // The OpenAI-style error body: {"error": {"message", "type", "param", "code"}}.
  std::string body() const;

 private:
  int status_;
  std::string message_;
};

struct ConversionOptions {
  bool default_thinking_mode = true;
  // serving.md §1.5 multi-turn rule: reject (HTTP 400) or fill "" when a tool-call turn lacks reasoning_content.
  bool reject_missing_reasoning = false;
  // Extra accepted model names (recipe `with_model_alias`); checked before the built-in names.
  std::vector<std::pair<std::string, ModelVersion>> model_aliases;
  // DeepSeek's /anthropic endpoint naming (serving.md §1.5): claude-opus* -> V4-Pro, other claude* -> V4.1-Flash.
  // Off by default, as in recipe 0.2.0, whose table holds only the two API names.
  bool anthropic_model_names = false;
  // The Responses `apply_patch` custom tool is declared to the model as a function with this description and
  // schema. Its instruction text is third-party prose that we do not carry in the source; a deployment that
  // serves apply_patch supplies it (tools/encoding/gen_encoding_golden.py takes it from the recipe for tests).
  // The recipe words it differently per model version. Unset: a request declaring apply_patch gets a 400.
  std::optional<ToolDefinition> apply_patch_tool_v4;
  std::optional<ToolDefinition> apply_patch_tool_v41;
};

struct ConvertedRequest {
  Conversation conversation;
  ModelVersion version = ModelVersion::DeepseekV41;
  std::vector<std::string> stop;
  std::optional<long long> max_tokens;
  bool stream = false;
};

// Accepted model names (recipe 0.2.0 defaults).
ModelVersion model_version_from_name(const std::string& model);

ConvertedRequest convert_chat_completions(const OrderedJson& body, const ConversionOptions& options = {});

}  // namespace deepinfer
