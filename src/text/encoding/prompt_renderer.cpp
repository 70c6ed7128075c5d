#include "text/encoding/prompt_renderer.h"

#include <algorithm>

#include "core/error.h"
#include "text/encoding/python_json.h"

namespace deepinfer {
namespace {

namespace st = special_tokens;

// The differences between the two versions (serving.md §0 item 2, §1.3).
struct VersionTraits {
  bool mid_conversation_system;  // V4.1 keeps later system messages in place behind <｜System｜>
  const char* system_token;      // V4 has no system marker
  const char* calls_block;       // DSML block / invoke / parameter tag names
  const char* invoke_tag;
  const char* parameter_tag;
};

VersionTraits traits_of(ModelVersion version) {
  if (version == ModelVersion::DeepseekV41) return {true, st::kSystem, " calls", " invoke", " parameter"};
  return {false, "", "tool_calls", "invoke", "parameter"};
}

class SegmentWriter {
 public:
  void control(const std::string& text) { push(true, text); }
  void content(const std::string& text) { push(false, text); }
  void append(const std::vector<PromptSegment>& segments) {
    for (const auto& s : segments) push(s.is_template, s.text);
  }
  std::vector<PromptSegment> take() { return std::move(segments_); }

 private:
  void push(bool is_template, const std::string& text) {
    if (!text.empty()) segments_.push_back({is_template, text});
  }
  std::vector<PromptSegment> segments_;
};

// V4: only high/xhigh (and the default) and max add a paragraph; low adds nothing. Recipe 0.2.0 texts
// (serving.md §1.3 "V4 effort": the wording is pinned to this encoder revision).
std::string v4_effort_text(std::optional<ReasoningEffort> effort) {
  const ReasoningEffort e = effort.value_or(ReasoningEffort::High);
  if (e == ReasoningEffort::Low) return {};
  if (e == ReasoningEffort::Max) {
    return "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\n"
           "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively "
           "decompose the problem into its most fundamental components, trace every causal chain to its root, and "
           "resolve the underlying cause rather than any surface symptom.\n"
           "Do not stop reasoning until you have independently verified the solution from multiple angles and are "
           "certain that no assumption remains unchecked and no error remains undiscovered.\n\n";
  }
  return "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
         "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
         "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
         "scenarios.\n"
         "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
         "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";
}

// V4.1: an integer 1-100 line (serving.md §1.3: default 75, low 50, high 75, max 100).
std::string v41_effort_text(std::optional<ReasoningEffort> effort) {
  int level = 75;
  if (effort == ReasoningEffort::Low) level = 50;
  if (effort == ReasoningEffort::Max) level = 100;
  return "Reasoning Effort: " + std::to_string(level) +
         " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
}

std::string effort_text(ModelVersion version, const Conversation& c) {
  if (!c.thinking_mode) return {};
  return version == ModelVersion::DeepseekV41 ? v41_effort_text(c.reasoning_effort)
                                              : v4_effort_text(c.reasoning_effort);
}

// The tools section: instruction prose is template text (its DSML markers and <think> are control tokens), the
// schema lines are client text (plain BPE, serving.md §1.3 tokenization rule).
void tools_section(SegmentWriter& w, const VersionTraits& t, const std::vector<ToolDefinition>& tools) {
  const std::string d = st::kDsml;
  const std::string block = t.calls_block, invoke = t.invoke_tag, param = t.parameter_tag;
  std::string schemas;
  for (const auto& tool : tools) {
    OrderedJson line = OrderedJson::object();
    line["name"] = tool.name;
    line["description"] = tool.description.value_or("");
    line["parameters"] = tool.parameters;
    if (!schemas.empty()) schemas += "\n";
    schemas += python_style_json(line);
  }
  w.control("## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
         "writing a \"<" + d + block + ">\" block like the following:\n\n"
         "<" + d + block + ">\n"
         "<" + d + invoke + " name=\"$TOOL_NAME\">\n"
         "<" + d + param + " name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + d + param + ">\n"
         "...\n"
         "</" + d + invoke + ">\n"
         "<" + d + invoke + " name=\"$TOOL_NAME2\">\n"
         "...\n"
         "</" + d + invoke + ">\n"
         "</" + d + block + ">\n\n"
         "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
         "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
         "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
         "<think>...</think> BEFORE any tool calls or final response.\n\n"
         "Otherwise, output directly after </think> with tool calls or final response.\n\n"
         "### Available Tool Schemas\n\n");
  w.content(schemas);
  w.control("\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n");
}

std::string response_format_section(ModelVersion version) {
  if (version == ModelVersion::DeepseekV41) {
    return "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n" +
           python_style_json(OrderedJson{{"type", "json_object"}});
  }
  return "You are a helpful assistant designed to output JSON.\n## Response Format:\n\nReply with JSON object ONLY.";
}

// One DSML parameter line per argument; string values raw, others as JSON (serving.md §1.3). Arguments that are
// not a JSON object are passed through as a single string parameter named "arguments".
// Parameter names and values are client text; the tags around them are template text.
void render_arguments(SegmentWriter& w, const VersionTraits& t, const std::string& arguments) {
  OrderedJson parsed = OrderedJson::parse(arguments, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) parsed = OrderedJson{{"arguments", arguments}};
  const std::string d = st::kDsml;
  bool first = true;
  for (auto it = parsed.begin(); it != parsed.end(); ++it) {
    const bool is_string = it.value().is_string();
    const std::string value = is_string ? it.value().get<std::string>() : python_style_json(it.value());
    w.control(std::string(first ? "" : "\n") + "<" + d + t.parameter_tag + " name=\"");
    w.content(it.key());
    w.control(std::string("\" string=\"") + (is_string ? "true" : "false") + "\">");
    w.content(value);
    w.control("</" + d + t.parameter_tag + ">");
    first = false;
  }
}

// An invoke without parameters is "<invoke>\n</invoke>" on V4 but keeps the empty parameter line on V4.1.
void render_tool_calls(SegmentWriter& w, const VersionTraits& t, const std::vector<ToolCall>& calls) {
  const std::string d = st::kDsml;
  w.control("\n\n<" + d + t.calls_block + ">\n");
  for (size_t i = 0; i < calls.size(); ++i) {
    const ToolCall& call = calls[i];
    w.control(std::string(i ? "\n" : "") + "<" + d + t.invoke_tag + " name=\"");
    w.content(call.name);
    w.control("\">\n");
    SegmentWriter params;
    render_arguments(params, t, call.arguments);
    std::vector<PromptSegment> p = params.take();
    w.append(p);
    if (!p.empty() || t.mid_conversation_system) w.control("\n");
    w.control("</" + d + t.invoke_tag + ">");
  }
  w.control("\n</" + d + t.calls_block + ">");
}

bool is_user_like(const Message& m) { return m.role == Role::User || m.role == Role::Tool; }

// serving.md §1.2: parallel tool results are re-sorted into the order of the preceding assistant's calls.
void sort_tool_results(std::vector<Message>& messages) {
  std::vector<std::string> call_order;
  size_t i = 0;
  while (i < messages.size()) {
    if (messages[i].role == Role::Assistant && !messages[i].tool_calls.empty()) {
      call_order.clear();
      for (const auto& call : messages[i].tool_calls) call_order.push_back(call.id);
      ++i;
    } else if (is_user_like(messages[i])) {
      std::vector<size_t> slots;
      while (i < messages.size() && is_user_like(messages[i])) {
        if (messages[i].role == Role::Tool) slots.push_back(i);
        ++i;
      }
      if (slots.size() < 2 || call_order.empty()) continue;
      auto rank = [&](const Message& m) {
        auto it = std::find(call_order.begin(), call_order.end(), m.tool_call_id.value_or(""));
        return it == call_order.end() ? size_t{0} : size_t(it - call_order.begin());
      };
      std::vector<Message> results;
      for (size_t s : slots) results.push_back(std::move(messages[s]));
      std::stable_sort(results.begin(), results.end(),
                       [&](const Message& a, const Message& b) { return rank(a) < rank(b); });
      for (size_t k = 0; k < slots.size(); ++k) messages[slots[k]] = std::move(results[k]);
    } else {
      ++i;
    }
  }
}

// Folds messages the way the template expects: consecutive user messages joined by a blank line; on V4 every
// system message is hoisted into the leading system prompt (V4 has no mid-conversation system turn).
std::vector<Message> normalize_messages(const std::vector<Message>& input, const VersionTraits& t) {
  std::vector<Message> out;
  std::optional<std::string> hoisted_system;
  for (const auto& m : input) {
    if (m.role == Role::System && !t.mid_conversation_system) {
      if (!hoisted_system) hoisted_system = m.content;
      else if (!m.content.empty()) {
        if (!hoisted_system->empty()) *hoisted_system += "\n\n";
        *hoisted_system += m.content;
      }
      continue;
    }
    if (m.role == Role::User && !out.empty() && out.back().role == Role::User) {
      // Adjacent user messages form one turn, joined by a blank line (serving.md §1.2). V4 skips the separator
      // around an empty message; V4.1 always inserts it (recipe 0.2.0 behaviour).
      std::string& joined = out.back().content;
      if (t.mid_conversation_system || (!joined.empty() && !m.content.empty())) joined += "\n\n";
      joined += m.content;
      continue;
    }
    out.push_back(m);
  }
  if (hoisted_system) out.insert(out.begin(), system_message(*hoisted_system));
  sort_tool_results(out);
  return out;
}

class PromptBuilder {
 public:
  PromptBuilder(const Conversation& c, ModelVersion version)
      : c_(c), version_(version), t_(traits_of(version)) {}

  RenderedPrompt build() {
    std::vector<Message> messages = normalize_messages(c_.messages, t_);
    has_tools_ = c_.tool_choice != ToolChoice::None && !c_.tools.empty();
    append_system_sections(messages);
    w_.control(st::kBos);
    for (size_t i = 0; i < messages.size(); ++i) render_message(messages, i);
    const bool continues = !messages.empty() && messages.back().role == Role::Assistant && messages.back().prefix;
    if (!continues) open_assistant_turn();
    return RenderedPrompt{w_.take()};
  }

 private:
  // The tools and response-format sections follow the leading system prompt (one is created if there is none).
  void append_system_sections(std::vector<Message>& messages) {
    const bool json = c_.response_format == ResponseFormat::JsonObject;
    if (!has_tools_ && !json) return;
    if (messages.empty() || messages.front().role != Role::System) messages.insert(messages.begin(), system_message(""));
    SegmentWriter sections;
    if (has_tools_) {
      sections.control("\n\n");
      tools_section(sections, t_, c_.tools);
    }
    if (json) sections.control("\n\n" + response_format_section(version_));
    system_sections_ = sections.take();
  }

  void render_message(const std::vector<Message>& messages, size_t index) {
    const Message& m = messages[index];
    const std::string effort = index == 0 ? effort_text(version_, c_) : std::string();
    if (index == 0 && (!effort.empty() || m.role == Role::System)) w_.control(t_.system_token);
    w_.content(effort);
    const Message* prev = index > 0 ? &messages[index - 1] : nullptr;
    switch (m.role) {
      case Role::System:
        if (index > 0) w_.control(t_.system_token);
        w_.content(m.content);
        if (index == 0) w_.append(system_sections_);
        break;
      case Role::User:
      case Role::Tool:
        // serving.md §1.2: tool results fold into the user turn, adjacent ones joined by a blank line.
        w_.control(prev && is_user_like(*prev) ? "\n\n" : st::kUser);
        w_.content(m.role == Role::Tool ? "<tool_result>" + m.content + "</tool_result>" : m.content);
        break;
      case Role::LatestReminder:
        w_.control(st::kLatestReminder);
        w_.content(m.content);
        break;
      case Role::Assistant:
        render_assistant(m, index + 1 == messages.size() && m.prefix);
        break;
    }
  }

  // serving.md §1.3: history reasoning is dropped unless tools are declared; a trailing `prefix` message is the
  // turn being continued, so its reasoning stays and the turn is left open (no EOS, no </think> when the
  // continuation is still inside the reasoning).
  void render_assistant(const Message& m, bool continued) {
    w_.control(st::kAssistant);
    const bool keep_reasoning = has_tools_ || continued;
    bool reasoning_open = false;
    if (version_ == ModelVersion::DeepseekV41) {
      if (c_.thinking_mode && keep_reasoning) {
        w_.control(st::kThinkingStart);
        w_.content(m.reasoning_content.value_or(""));
        reasoning_open = true;
      }
    } else if ((continued || (c_.thinking_mode && has_tools_)) && m.reasoning_content) {
      w_.control(st::kThinkingStart);
      w_.content(*m.reasoning_content);
      reasoning_open = true;
    }
    if (!(continued && reasoning_open && m.content.empty())) w_.control(st::kThinkingEnd);
    w_.content(m.content);
    if (!m.tool_calls.empty()) render_tool_calls(w_, t_, m.tool_calls);
    if (!continued) w_.control(st::kEos);
  }

  void open_assistant_turn() {
    w_.control(st::kAssistant);
    w_.control(c_.thinking_mode ? st::kThinkingStart : st::kThinkingEnd);
    // serving.md §1.3: tool_choice=required pre-opens the DSML block.
    if (c_.tool_choice == ToolChoice::Required && !c_.tools.empty())
      w_.control(std::string("\n\n<") + st::kDsml + t_.calls_block + ">\n");
  }

  const Conversation& c_;
  ModelVersion version_;
  VersionTraits t_;
  bool has_tools_ = false;
  std::vector<PromptSegment> system_sections_;  // template/client segments appended to the leading system prompt
  SegmentWriter w_;
};

}  // namespace

std::string RenderedPrompt::prompt() const {
  std::string out;
  for (const auto& s : segments) out += s.text;
  return out;
}

RenderedPrompt render_prompt(const Conversation& conversation, ModelVersion version) {
  return PromptBuilder(conversation, version).build();
}

}  // namespace deepinfer
