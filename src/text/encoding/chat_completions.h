// Chat Completions request -> Conversation (serving.md §1.5), with the DeepSeek API's 400 rules.
#pragma once

#include <optional>
#include <string>
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
