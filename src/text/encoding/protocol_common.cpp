#include "text/encoding/protocol_common.h"

#include <algorithm>
#include <cctype>

namespace deepinfer::protocol {

void bad_request(const std::string& message) { throw RequestError(400, message); }

const OrderedJson* field(const OrderedJson& object, const char* name) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string require_string(const OrderedJson& value, const std::string& where) {
  if (!value.is_string()) bad_request("invalid request body: " + where + " must be a string");
  return value.get<std::string>();
}

std::string require_member_string(const OrderedJson& object, const char* name, const std::string& where) {
  if (!object.is_object()) bad_request("invalid request body: " + where + " must be an object");
  const OrderedJson* member = field(object, name);
  if (!member) bad_request("invalid request body: " + where + "." + name + " is missing");
  return require_string(*member, where + "." + name);
}

std::optional<ReasoningEffort> parse_effort(const std::string& e, const std::string& where) {
  if (e == "none") return std::nullopt;
  if (e == "minimal" || e == "low") return ReasoningEffort::Low;
  if (e == "medium" || e == "high") return ReasoningEffort::High;
  if (e == "xhigh") return ReasoningEffort::XHigh;
  if (e == "max" || e == "ultra") return ReasoningEffort::Max;
  bad_request("invalid request body: " + where + ": unknown variant `" + e +
              "`, expected one of `none`, `minimal`, `low`, `medium`, `high`, `xhigh`, `ultra`, `max`");
}

ModelVersion resolve_model(const std::string& model, const ConversionOptions& options) {
  for (const auto& [name, version] : options.model_aliases)
    if (name == model) return version;
  if (options.anthropic_model_names && model.rfind("claude", 0) == 0)
    return model.rfind("claude-opus", 0) == 0 ? ModelVersion::DeepseekV4 : ModelVersion::DeepseekV41;
  return model_version_from_name(model);
}

ToolDefinition named_tool(const OrderedJson& tool, const std::string& where) {
  const OrderedJson* name = field(tool, "name");
  if (!name) bad_request("invalid request body: " + where + ".name is missing");
  ToolDefinition def;
  def.name = require_string(*name, where + ".name");
  check_tool_name(def.name, where + ".name");
  if (const OrderedJson* d = field(tool, "description")) def.description = require_string(*d, where + ".description");
  return def;
}

ConvertedRequest begin_conversion(const OrderedJson& body, const ConversionOptions& options) {
  if (!body.is_object()) bad_request("invalid request body: expected a JSON object");
  ConvertedRequest out;
  const OrderedJson* model = field(body, "model");
  if (!model) bad_request("invalid request body: missing field `model`");
  out.version = resolve_model(require_string(*model, "model"), options);
  out.conversation.thinking_mode = options.default_thinking_mode;
  return out;
}

void finish_conversion(const OrderedJson& body, const char* max_tokens_name, ConvertedRequest& out) {
  if (const OrderedJson* max_tokens = field(body, max_tokens_name)) {
    if (!max_tokens->is_number_integer())
      bad_request("invalid request body: " + std::string(max_tokens_name) + " must be an integer");
    out.max_tokens = max_tokens->get<long long>();
  }
  if (const OrderedJson* stream = field(body, "stream")) out.stream = stream->is_boolean() && stream->get<bool>();
}

void enforce_reasoning_pass_back(Conversation& c, const ConversionOptions& options,
                                 const std::string& missing_reasoning_message) {
  if (!c.thinking_mode) {
    for (auto& m : c.messages) m.reasoning_content.reset();
    return;
  }
  size_t last_user = 0;
  for (size_t i = 0; i < c.messages.size(); ++i)
    if (c.messages[i].role == Role::User) last_user = i;
  for (size_t i = 0; i < c.messages.size(); ++i) {
    Message& m = c.messages[i];
    if (m.role != Role::Assistant || m.reasoning_content) continue;
    const bool continued_turn = m.prefix && i + 1 == c.messages.size();
    if (m.tool_calls.empty() && c.tools.empty()) {
      if (continued_turn) m.reasoning_content = "";  // a continued thinking turn always opens <think>
      continue;
    }
    if (i > last_user && options.reject_missing_reasoning) bad_request(missing_reasoning_message);
    m.reasoning_content = "";
  }
}

bool mentions_json(const std::vector<Message>& messages) {
  for (const auto& m : messages) {
    std::string lower = m.content;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
    if (lower.find("json") != std::string::npos) return true;
  }
  return false;
}

void check_tool_name(const std::string& name, const std::string& where) {
  const bool ok = !name.empty() && std::all_of(name.begin(), name.end(), [](unsigned char ch) {
    return std::isalnum(ch) || ch == '_' || ch == '-';
  });
  if (!ok)
    bad_request("Invalid '" + where +
                "': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.");
}

void check_unique_tool_names(const std::vector<ToolDefinition>& tools) {
  for (size_t i = 0; i < tools.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (tools[i].name == tools[j].name) bad_request("Tool names must be unique.");
}

void apply_named_tool_choice(Conversation& c, const std::string& name) {
  // Matched against the declared names as rendered: a namespaced function only by its joined spelling
  // ("fs__read" on V4, "fs::read" on V4.1); recipe 0.2.0 ignores a tool_choice `namespace` member.
  auto it = std::find_if(c.tools.begin(), c.tools.end(), [&](const ToolDefinition& t) { return t.name == name; });
  if (it == c.tools.end())
    bad_request("Invalid value for 'tool_call': no function named '" + name +
                "' was specified in the 'tools' parameter.");
  if (c.thinking_mode) bad_request("Thinking mode does not support this tool_choice");
  ToolDefinition chosen = *it;
  c.tools = {std::move(chosen)};
  c.tool_choice = ToolChoice::Required;
}

}  // namespace deepinfer::protocol
