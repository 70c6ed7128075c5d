#include "text/encoding/responses.h"

#include <algorithm>

#include "text/encoding/protocol_common.h"
#include "text/encoding/python_json.h"

namespace deepinfer {
namespace {

using protocol::bad_request;
using protocol::field;
using protocol::require_string;

// Text of a message / tool output: a string or a list of text parts joined by a blank line (as Chat Completions
// text parts and adjacent user messages, serving.md §1.2).
std::string parts_text(const OrderedJson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_request("invalid request body: " + where + " should be a string or a list");
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const OrderedJson* type = field(content[i], "type");
    const std::string t = type ? require_string(*type, w + ".type") : "";
    if (t != "input_text" && t != "output_text")
      bad_request("invalid request body: " + w + ".type: unknown variant `" + t +
                  "`, expected one of `input_text`, `output_text`, `input_image`, `input_file`");
    const OrderedJson* text = field(content[i], "text");
    if (!text) bad_request("invalid request body: " + w + ".text is missing");
    if (i > 0) out += "\n\n";
    out += require_string(*text, w + ".text");
  }
  return out;
}

// Builds the message list from `input` items. Consecutive assistant-side items (reasoning, assistant messages,
// function calls) form one assistant turn in the order reasoning -> text -> calls; a reasoning item after text or
// calls starts a new turn. The outputs of a turn's calls must follow it; any other item closes the turn, and a call
// left without output is DeepSeek's 400 "No tool output found for tool call ...".
class InputFolder {
 public:
  explicit InputFolder(ModelVersion version) : version_(version) {}

  void item(const OrderedJson& it, size_t index) {
    const std::string where = "input[" + std::to_string(index) + "]";
    if (!it.is_object()) bad_request("invalid request body: " + where + " must be an object");
    const OrderedJson* type = field(it, "type");
    const std::string t = type ? require_string(*type, where + ".type") : "message";
    if (t == "message") return message(it, where);
    if (t == "reasoning") return reasoning(it, where);
    if (t == "function_call" || t == "custom_tool_call") return call(it, where, t == "custom_tool_call");
    if (t == "function_call_output" || t == "custom_tool_call_output") return output(it, where);
    bad_request("invalid request body: " + where + ".type: unsupported input item type `" + t + "`");
  }

  std::vector<Message> finish() {
    close_turn();
    return std::move(messages_);
  }

 private:
  enum class Phase { None, Reasoning, Text, Calls, Outputs };

  void message(const OrderedJson& it, const std::string& where) {
    const std::string r = protocol::require_member_string(it, "role", where);
    const OrderedJson* content = field(it, "content");
    const std::string text = content ? parts_text(*content, where + ".content") : std::string();
    if (r == "assistant") {
      if (phase_ == Phase::Calls || phase_ == Phase::Outputs) close_turn();
      open_turn();
      had_text_ = true;
      // An empty message item keeps the turn open for more reasoning (recipe 0.2.0: it does not end the
      // reasoning phase).
      if (text.empty()) return;
      // Message items join with a blank line; an item whose text is empty adds nothing (recipe 0.2.0).
      std::string& c = turn_->content;
      if (!c.empty() && !text.empty()) c += "\n\n";
      c += text;
      phase_ = Phase::Text;
      return;
    }
    close_turn();
    // System messages stay system messages (V4.1 keeps them in place, V4 hoists them; serving.md §1.3). A developer
    // message is a system message on V4.1; V4 has no such role in its template and reads it as user text.
    if (r == "system" || (r == "developer" && version_ == ModelVersion::DeepseekV41)) messages_.push_back(system_message(text));
    else if (r == "developer") messages_.push_back(user_message(text));
    else if (r == "user") messages_.push_back(user_message(text));
    else bad_request("invalid request body: " + where + ".role: unknown variant `" + r + "`");
  }

  // Reasoning is carried back in `content[].reasoning_text` parts (summaries are not the model's reasoning and are
  // not rendered); parts and items of one turn join with a newline.
  void reasoning(const OrderedJson& it, const std::string& where) {
    const OrderedJson* content = field(it, "content");
    if (content && !content->is_array()) bad_request("invalid request body: " + where + ".content must be a list");
    std::string text;
    for (size_t i = 0; content && i < content->size(); ++i) {
      const OrderedJson* part = field((*content)[i], "text");
      if (!part) bad_request("invalid request body: " + where + ".content[" + std::to_string(i) + "].text is missing");
      if (i > 0) text += "\n";
      text += require_string(*part, where + ".content[" + std::to_string(i) + "].text");
    }
    // An item without reasoning text (no content, an empty list, or only empty parts) is ignored entirely: it does
    // not split the turn and does not count as passed-back reasoning (recipe 0.2.0).
    if (text.empty()) return;
    if (phase_ != Phase::None && phase_ != Phase::Reasoning) close_turn();
    open_turn();
    phase_ = Phase::Reasoning;
    std::string& r = turn_->reasoning_content ? *turn_->reasoning_content : turn_->reasoning_content.emplace();
    if (!r.empty()) r += "\n";
    r += text;
    had_reasoning_ = true;
  }

  void call(const OrderedJson& it, const std::string& where, bool custom) {
    if (phase_ == Phase::Outputs) close_turn();
    open_turn();
    phase_ = Phase::Calls;
    const OrderedJson* id = field(it, "call_id");
    const OrderedJson* name = field(it, "name");
    if (!id) bad_request("invalid request body: " + where + ".call_id is missing");
    if (!name) bad_request("invalid request body: " + where + ".name is missing");
    ToolCall tc;
    tc.id = require_string(*id, where + ".call_id");
    tc.name = require_string(*name, where + ".name");
    if (const OrderedJson* ns = field(it, "namespace"))
      tc.name = namespaced_tool_name(version_, require_string(*ns, where + ".namespace"), tc.name);
    if (custom) {
      // A custom (apply_patch) call carries free text; it is declared to the model as {"input": string}.
      const OrderedJson* input = field(it, "input");
      tc.arguments = OrderedJson{{"input", input ? require_string(*input, where + ".input") : ""}}.dump();
    } else {
      const OrderedJson* args = field(it, "arguments");
      tc.arguments = args ? require_string(*args, where + ".arguments") : "{}";
    }
    turn_->tool_calls.push_back(tc);
    unanswered_.push_back(tc.id);
  }

  void output(const OrderedJson& it, const std::string& where) {
    const OrderedJson* id = field(it, "call_id");
    if (!id) bad_request("invalid request body: " + where + ".call_id is missing");
    const std::string call_id = require_string(*id, where + ".call_id");
    auto pending = std::find(unanswered_.begin(), unanswered_.end(), call_id);
    if (phase_ != Phase::Calls && phase_ != Phase::Outputs) pending = unanswered_.end();
    if (pending == unanswered_.end()) bad_request("No tool call found for tool output with call_id " + call_id + ".");
    unanswered_.erase(pending);
    if (phase_ == Phase::Calls) {
      // Recipe 0.2.0 lists a turn's calls in call_id order (byte-wise), not in input order.
      std::stable_sort(turn_->tool_calls.begin(), turn_->tool_calls.end(),
                       [](const ToolCall& a, const ToolCall& b) { return a.id < b.id; });
      messages_.push_back(std::move(*turn_));
      turn_.reset();
    }
    phase_ = Phase::Outputs;
    const OrderedJson* out = field(it, "output");
    outputs_.push_back(tool_message(out ? parts_text(*out, where + ".output") : std::string(), call_id));
  }

  void open_turn() {
    if (turn_) return;
    turn_ = assistant_message("");
    had_text_ = had_reasoning_ = false;
  }

  void close_turn() {
    if (!unanswered_.empty()) bad_request("No tool output found for tool call " + unanswered_.front() + ".");
    // A turn that holds only reasoning summaries (no reasoning text, no message, no call) carries nothing.
    if (turn_ && (had_reasoning_ || had_text_ || !turn_->tool_calls.empty())) messages_.push_back(std::move(*turn_));
    turn_.reset();
    // serving.md §1.2: parallel results are rendered in call order; the renderer re-sorts them by tool_call_id.
    for (auto& m : outputs_) messages_.push_back(std::move(m));
    outputs_.clear();
    phase_ = Phase::None;
  }

  ModelVersion version_;
  std::vector<Message> messages_;
  std::optional<Message> turn_;
  std::vector<Message> outputs_;
  std::vector<std::string> unanswered_;
  Phase phase_ = Phase::None;
  bool had_text_ = false, had_reasoning_ = false;
};

ToolDefinition function_tool(const OrderedJson& tool, const std::string& where) {
  ToolDefinition def = protocol::named_tool(tool, where);
  const OrderedJson* p = field(tool, "parameters");
  def.parameters = p ? *p : OrderedJson::object();
  return def;
}

void parse_tools(const OrderedJson& tools, const ConversionOptions& options, ModelVersion version, Conversation& c) {
  if (!tools.is_array()) bad_request("invalid request body: tools must be a list");
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    const OrderedJson& tool = tools[i];
    const OrderedJson* type = field(tool, "type");
    const std::string t = type ? require_string(*type, where + ".type") : "";
    if (t == "function") {
      c.tools.push_back(function_tool(tool, where));
    } else if (t == "namespace") {
      // A namespace's functions are declared as "<ns>::<name>"; the namespace description is prepended to each
      // function's description.
      const OrderedJson* ns_name = field(tool, "name");
      if (!ns_name) bad_request("invalid request body: " + where + ".name is missing");
      const std::string ns = require_string(*ns_name, where + ".name");
      std::optional<std::string> ns_description;
      if (const OrderedJson* d = field(tool, "description")) ns_description = require_string(*d, where + ".description");
      const OrderedJson* members = field(tool, "tools");
      if (!members || !members->is_array()) bad_request("invalid request body: " + where + ".tools must be a list");
      for (size_t k = 0; k < members->size(); ++k) {
        ToolDefinition def = function_tool((*members)[k], where + ".tools[" + std::to_string(k) + "]");
        def.name = namespaced_tool_name(version, ns, def.name);
        // V4.1 puts a non-empty namespace description in front of each function's own (recipe 0.2.0).
        if (version == ModelVersion::DeepseekV41 && ns_description && !ns_description->empty())
          def.description = *ns_description + "\n" + def.description.value_or("");
        c.tools.push_back(std::move(def));
      }
    } else if (t == "custom") {
      const OrderedJson* name = field(tool, "name");
      const std::string n = name ? require_string(*name, where + ".name") : "";
      if (n != "apply_patch") bad_request("Unsupported custom tool: '" + n + "'. Only 'apply_patch' is supported.");
      const auto& configured = version == ModelVersion::DeepseekV4 ? options.apply_patch_tool_v4 : options.apply_patch_tool_v41;
      if (!configured) bad_request("Unsupported custom tool: 'apply_patch' is not configured on this server.");
      ToolDefinition def = *configured;
      def.name = "apply_patch";
      c.tools.push_back(std::move(def));
    } else if (t.rfind("web_search", 0) == 0) {
      // Server tools are not served; the recipe's default for Responses drops a web_search declaration.
      continue;
    } else {
      bad_request("invalid request body: " + where + ".type: unsupported tool type `" + t + "`");
    }
  }
}

void parse_tool_choice(const OrderedJson& choice, ModelVersion version, Conversation& c) {
  if (choice.is_string()) {
    const std::string tc = choice.get<std::string>();
    if (tc == "none") c.tool_choice = ToolChoice::None;
    else if (tc == "auto") c.tool_choice = ToolChoice::Auto;
    else if (tc == "required") c.tool_choice = ToolChoice::Required;
    else bad_request("invalid request body: tool_choice: expected one of `none`, `auto`, `required` or a tool choice object");
    if (c.tool_choice == ToolChoice::Required && c.thinking_mode)
      bad_request("Thinking mode does not support this tool_choice");
    return;
  }
  const OrderedJson* type = field(choice, "type");
  const std::string t = type ? require_string(*type, "tool_choice.type") : "";
  if (t != "function" && t != "custom")
    bad_request("invalid request body: tool_choice.type: unknown variant `" + t + "`");
  const OrderedJson* name = field(choice, "name");
  if (!name) bad_request("invalid request body: tool_choice.name is missing");
  protocol::apply_named_tool_choice(c, require_string(*name, "tool_choice.name"));
}

}  // namespace

std::string namespaced_tool_name(ModelVersion version, const std::string& namespace_name, const std::string& tool_name) {
  return namespace_name + (version == ModelVersion::DeepseekV4 ? "__" : "::") + tool_name;
}

ConvertedRequest convert_responses(const OrderedJson& body, const ConversionOptions& options) {
  ConvertedRequest out = protocol::begin_conversion(body, options);
  Conversation& c = out.conversation;
  if (const OrderedJson* reasoning = field(body, "reasoning")) {
    if (const OrderedJson* effort = field(*reasoning, "effort")) {
      c.reasoning_effort = protocol::parse_effort(require_string(*effort, "reasoning.effort"), "reasoning.effort");
      if (!c.reasoning_effort) c.thinking_mode = false;  // serving.md §1.5: effort "none" disables thinking
    }
  }
  if (!c.thinking_mode) c.reasoning_effort.reset();

  if (const OrderedJson* instructions = field(body, "instructions")) {
    const std::string text = require_string(*instructions, "instructions");
    if (!text.empty()) c.messages.push_back(system_message(text));
  }
  // DeepSeek's 400 checks run in this order (recipe 0.2.0): tool declarations, input items, reasoning pass-back,
  // tool_choice, response format.
  if (const OrderedJson* tools = field(body, "tools")) parse_tools(*tools, options, out.version, c);
  const OrderedJson* input = field(body, "input");
  if (!input) bad_request("invalid request body: missing field `input`");
  if (input->is_string()) {
    c.messages.push_back(user_message(input->get<std::string>()));
  } else if (input->is_array()) {
    if (input->empty()) bad_request("Input items array must not be empty");
    InputFolder folder(out.version);
    for (size_t i = 0; i < input->size(); ++i) folder.item((*input)[i], i);
    for (auto& m : folder.finish()) c.messages.push_back(std::move(m));
  } else {
    bad_request("invalid request body: input must be a string or a list of items");
  }

  protocol::enforce_reasoning_pass_back(c, options, "The `reasoning_text` in the thinking mode must be passed back to the API.");
  const OrderedJson* choice = field(body, "tool_choice");
  // Unique names are checked only when the tools are in use (recipe 0.2.0 accepts duplicates with tool_choice none).
  if (!(choice && *choice == "none")) protocol::check_unique_tool_names(c.tools);
  if (choice) parse_tool_choice(*choice, out.version, c);
  if (c.tool_choice == ToolChoice::None) c.tools.clear();

  if (const OrderedJson* text = field(body, "text")) {
    if (const OrderedJson* format = field(*text, "format")) {
      const OrderedJson* type = field(*format, "type");
      const std::string t = type ? require_string(*type, "text.format.type") : "";
      if (t == "json_object") c.response_format = ResponseFormat::JsonObject;
      else if (t != "text") bad_request("invalid request body: text.format.type: unsupported value `" + t + "`");
    }
  }
  if (c.response_format == ResponseFormat::JsonObject && !protocol::mentions_json(c.messages))
    bad_request("Response input messages must contain the word 'json' in some form to use 'text.format' of type "
                "'json_object'.");

  protocol::finish_conversion(body, "max_output_tokens", out);
  return out;
}

}  // namespace deepinfer
