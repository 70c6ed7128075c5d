#include "text/output_parser.h"

#include <algorithm>
#include <cstdio>

namespace deepinfer {
namespace {

constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kDsmlBegin = "<｜DSML｜";
constexpr std::string_view kDsmlEnd = "</｜DSML｜";
// Both block spellings end the tool-call block: V4 `tool_calls`, V4.1 ` calls` (serving.md §1.4).
constexpr std::string_view kCallsEndV4 = "</｜DSML｜tool_calls>";
constexpr std::string_view kCallsEndV41 = "</｜DSML｜ calls>";

enum class Stage {
  Answer, AnswerLeading, Json, AfterJson, ToolCalls, ToolName, ArgsFirst, ArgsNext, ParamName, ParamType,
  ParamValueString, ParamValueJson, Reasoning, ReasoningLeading, Finished,
};

// What happens to bytes: either those not matched by any marker (the stage default) or a matched marker.
enum class Action {
  Content, ContentAsSpace, Reasoning, Skip, Invalid, Stop, ToolCallBegin, ToolName, ToolNameEnd, ArgsRaw, ArgsString,
  ArgsLabel, ContentLabel,
};

// Incremental matcher for one marker. Literal: KMP over the pattern. NewlinesThenLiteral: any run of '\n' right
// before the pattern belongs to the match (so "\n\n</think>" drops the newlines). LeadingNewline: the very first
// byte of the stage is a '\n'.
class Matcher {
 public:
  enum class Kind { Literal, NewlinesThenLiteral, LeadingNewline };

  Matcher(Kind kind, std::string_view pattern) : kind_(kind), pattern_(pattern), failure_(pattern.size(), 0) {
    for (size_t i = 1, k = 0; i < pattern_.size();) {
      if (pattern_[i] == pattern_[k]) failure_[i++] = ++k;
      else if (k) k = failure_[k - 1];
      else failure_[i++] = 0;
    }
  }

  // Returns true when the marker is complete with this byte.
  bool feed(unsigned char byte) {
    switch (kind_) {
      case Kind::Literal:
        len_ = advance(len_, byte);
        return len_ == pattern_.size();
      case Kind::NewlinesThenLiteral:
        if (len_ == 0 && byte == '\n') {
          ++newlines_;
        } else {
          const size_t next = advance(len_, byte);
          if (next <= len_) newlines_ = 0;  // the literal restarted, so the newline run is no longer adjacent
          len_ = next;
        }
        return len_ == pattern_.size();
      case Kind::LeadingNewline:
        if (first_byte_) leading_matched_ = byte == '\n';
        first_byte_ = false;
        return leading_matched_;
    }
    return false;
  }

  // Bytes at the end of the input that belong to a possible (or complete) match.
  size_t matching_len() const {
    if (kind_ == Kind::LeadingNewline) return leading_matched_ ? 1 : 0;
    return len_ + (kind_ == Kind::NewlinesThenLiteral ? newlines_ : 0);
  }

 private:
  size_t advance(size_t len, unsigned char byte) const {
    while (len > 0 && static_cast<unsigned char>(pattern_[len]) != byte) len = failure_[len - 1];
    if (len < pattern_.size() && static_cast<unsigned char>(pattern_[len]) == byte) ++len;
    return len;
  }

  Kind kind_;
  std::string pattern_;
  std::vector<size_t> failure_;
  size_t len_ = 0;
  size_t newlines_ = 0;
  bool first_byte_ = true;
  bool leading_matched_ = false;
};

struct Branch {
  Matcher matcher;
  Stage next;
  Action on_match;
  std::string label;  // text emitted for ArgsLabel / ContentLabel
};

void append_json_escaped(std::string& out, std::string_view bytes) {
  for (unsigned char ch : bytes) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (ch < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          out += buf;
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
}

}  // namespace

struct OutputParser::Impl {
  OutputParserOptions options;
  Stage stage = Stage::Answer;
  std::vector<Branch> branches;
  Action unmatched = Action::Content;
  std::string stash;            // bytes of the current stage not yet emitted (a possible marker prefix)
  std::string pending_name;     // a call exists for clients only once its name is complete (recipe behaviour)
  bool spaced = false;          // JSON mode: this stage already emitted its single space
  bool finished = false;
  bool stopped = false;
  int tool_calls = 0;
  size_t invalid = 0;
  std::vector<OutputDelta>* out = nullptr;

  explicit Impl(OutputParserOptions opts) : options(std::move(opts)) {
    options.stop_sequences.erase(
        std::remove_if(options.stop_sequences.begin(), options.stop_sequences.end(),
                       [](const std::string& s) { return s.empty(); }),
        options.stop_sequences.end());
    Stage first = Stage::AnswerLeading;
    if (options.starts_in_tool_calls) first = Stage::ToolCalls;
    else if (options.start == OutputStart::ReasoningStart) first = Stage::ReasoningLeading;
    else if (options.start == OutputStart::ReasoningContinuation) first = Stage::Reasoning;
    else if (options.start == OutputStart::ContentContinuation) first = Stage::Answer;
    enter(first);
  }

  void literal(std::string_view pattern, Stage next, Action action, std::string label = {}) {
    branches.push_back({Matcher(Matcher::Kind::Literal, pattern), next, action, std::move(label)});
  }
  void tool_block_start() {
    if (options.parse_tool_calls)
      branches.push_back({Matcher(Matcher::Kind::NewlinesThenLiteral, kDsmlBegin), Stage::ToolCalls, Action::Skip, {}});
  }
  void leading_newline(Stage self) {
    branches.push_back({Matcher(Matcher::Kind::LeadingNewline, ""), self, Action::Skip, {}});
  }
  void stop_sequences() {
    for (const auto& s : options.stop_sequences) literal(s, Stage::Finished, Action::Stop);
  }

  // The markers each stage listens for, in priority order (first complete match wins).
  void enter(Stage next) {
    stage = next;
    branches.clear();
    stash.clear();
    spaced = false;
    switch (stage) {
      case Stage::Answer:
      case Stage::AnswerLeading:
        if (options.parse_json_output) {
          literal("```json\n", Stage::Json, Action::Skip);
          literal("```\n", Stage::Json, Action::Skip);
          literal("{", Stage::Json, Action::ContentLabel, "{");
          literal("[", Stage::Json, Action::ContentLabel, "[");
        } else {
          stop_sequences();
        }
        tool_block_start();
        if (stage == Stage::AnswerLeading) leading_newline(Stage::AnswerLeading);
        literal(kThinkEnd, Stage::Answer, Action::Invalid);  // stray </think> in the answer is dropped
        unmatched = options.parse_json_output ? Action::ContentAsSpace : Action::Content;
        break;
      case Stage::Json:
        stop_sequences();
        literal("\n```", Stage::AfterJson, Action::Skip);
        unmatched = Action::Content;
        break;
      case Stage::AfterJson:
        tool_block_start();
        unmatched = Action::ContentAsSpace;
        break;
      case Stage::ToolCalls:
        literal("invoke name=\"", Stage::ToolName, Action::ToolCallBegin);
        literal(kCallsEndV4, Stage::Finished, Action::Skip);
        literal(kCallsEndV41, Stage::Finished, Action::Skip);
        unmatched = Action::Skip;
        break;
      case Stage::ToolName:
        literal("\"", Stage::ArgsFirst, Action::ToolNameEnd);
        unmatched = Action::ToolName;
        break;
      case Stage::ArgsFirst:
      case Stage::ArgsNext: {
        const bool first = stage == Stage::ArgsFirst;
        // Recipe 0.2.0: the argument key is the raw text from after `name=` (its quotes included) up to the first
        // space, so `name="city" string=...` gives `"city": ` and truncated output keeps whatever key text arrived.
        literal("parameter name=", Stage::ParamName, Action::ArgsLabel, first ? "{" : ", ");
        literal(kDsmlEnd, Stage::ToolCalls, Action::ArgsLabel, first ? "{}" : "}");
        unmatched = Action::Skip;
        break;
      }
      case Stage::ParamName:
        literal(" ", Stage::ParamType, Action::ArgsLabel, ": ");
        unmatched = Action::ArgsRaw;
        break;
      case Stage::ParamType:
        literal("true\">", Stage::ParamValueString, Action::ArgsLabel, "\"");
        literal("false\">", Stage::ParamValueJson, Action::Skip);
        unmatched = Action::Skip;
        break;
      case Stage::ParamValueString:
        literal(kDsmlEnd, Stage::ArgsNext, Action::ArgsLabel, "\"");
        unmatched = Action::ArgsString;
        break;
      case Stage::ParamValueJson:
        literal(kDsmlEnd, Stage::ArgsNext, Action::Skip);
        unmatched = Action::ArgsRaw;
        break;
      case Stage::Reasoning:
      case Stage::ReasoningLeading:
        tool_block_start();
        if (stage == Stage::ReasoningLeading) leading_newline(Stage::ReasoningLeading);
        branches.push_back({Matcher(Matcher::Kind::NewlinesThenLiteral, kThinkEnd), Stage::AnswerLeading, Action::Skip, {}});
        unmatched = Action::Reasoning;
        break;
      case Stage::Finished:
        unmatched = Action::Invalid;
        break;
    }
  }

  void push(DeltaKind kind, std::string text) {
    if (text.empty() && kind != DeltaKind::ToolCallBegin) return;
    const int index = kind == DeltaKind::Reasoning || kind == DeltaKind::Content ? -1 : tool_calls - 1;
    if (!out->empty() && out->back().kind == kind && kind != DeltaKind::ToolCallBegin && out->back().tool_index == index) {
      out->back().text += text;
      return;
    }
    out->push_back({kind, std::move(text), index});
  }

  void apply(Action action, std::string_view bytes, const std::string& label) {
    switch (action) {
      case Action::Content: push(DeltaKind::Content, std::string(bytes)); break;
      case Action::ContentAsSpace:
        // JSON mode blanks the prose around the JSON: one space per stage run (recipe 0.2.0 fed whole).
        if (!spaced) push(DeltaKind::Content, " ");
        spaced = true;
        break;
      case Action::Reasoning: push(DeltaKind::Reasoning, std::string(bytes)); break;
      case Action::Skip: break;
      case Action::Invalid: invalid += bytes.size(); break;
      case Action::Stop: stopped = true; break;
      case Action::ToolCallBegin: pending_name.clear(); break;
      case Action::ToolName: pending_name += bytes; break;
      case Action::ToolNameEnd:
        ++tool_calls;
        push(DeltaKind::ToolCallBegin, {});
        push(DeltaKind::ToolName, std::move(pending_name));
        pending_name.clear();
        break;
      case Action::ArgsRaw: push(DeltaKind::ToolArguments, std::string(bytes)); break;
      case Action::ArgsString: {
        std::string escaped;
        append_json_escaped(escaped, bytes);
        push(DeltaKind::ToolArguments, std::move(escaped));
        break;
      }
      case Action::ArgsLabel: push(DeltaKind::ToolArguments, label); break;
      case Action::ContentLabel: push(DeltaKind::Content, label); break;
    }
  }

  void feed_byte(char byte) {
    stash += byte;
    for (auto& branch : branches) {
      if (!branch.matcher.feed(static_cast<unsigned char>(byte))) continue;
      const size_t matched = branch.matcher.matching_len();
      const std::string_view all(stash);
      if (matched < all.size()) apply(unmatched, all.substr(0, all.size() - matched), {});
      const Branch done = std::move(branch);
      apply(done.on_match, all.substr(all.size() - matched), done.label);
      enter(done.next);
      return;
    }
  }

  // Emits everything that can no longer be part of a marker.
  void release(size_t keep) {
    if (stash.size() <= keep) return;
    apply(unmatched, std::string_view(stash).substr(0, stash.size() - keep), {});
    stash.erase(0, stash.size() - keep);
  }

  size_t held_back() const {
    size_t keep = 0;
    for (const auto& b : branches) keep = std::max(keep, b.matcher.matching_len());
    return keep;
  }
};

OutputParser::OutputParser(OutputParserOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
OutputParser::~OutputParser() = default;
OutputParser::OutputParser(OutputParser&&) noexcept = default;
OutputParser& OutputParser::operator=(OutputParser&&) noexcept = default;

std::vector<OutputDelta> OutputParser::feed(std::string_view bytes) {
  std::vector<OutputDelta> out;
  if (impl_->finished) return out;
  impl_->out = &out;
  for (char byte : bytes) impl_->feed_byte(byte);
  impl_->release(impl_->held_back());
  impl_->out = nullptr;
  return out;
}

std::vector<OutputDelta> OutputParser::finish() {
  std::vector<OutputDelta> out;
  if (impl_->finished) return out;
  impl_->out = &out;
  impl_->release(0);
  impl_->out = nullptr;
  impl_->finished = true;
  return out;
}

bool OutputParser::stopped_by_sequence() const { return impl_->stopped; }
int OutputParser::tool_call_count() const { return impl_->tool_calls; }
size_t OutputParser::invalid_bytes() const { return impl_->invalid; }

void ParsedOutputBuilder::add(const std::vector<OutputDelta>& deltas) {
  for (const auto& d : deltas) {
    switch (d.kind) {
      case DeltaKind::Reasoning: out_.reasoning += d.text; break;
      case DeltaKind::Content: out_.content += d.text; break;
      case DeltaKind::ToolCallBegin: out_.tool_calls.emplace_back(); break;
      case DeltaKind::ToolName: out_.tool_calls.at(d.tool_index).name += d.text; break;
      case DeltaKind::ToolArguments: out_.tool_calls.at(d.tool_index).arguments += d.text; break;
    }
  }
}

ParsedOutput ParsedOutputBuilder::build(const OutputParser& parser, const std::string& backend_reason) const {
  ParsedOutput result = out_;
  if (parser.stopped_by_sequence()) result.finish_reason = "stop";
  else if (backend_reason == "stop" && !result.tool_calls.empty()) result.finish_reason = "tool_calls";
  else result.finish_reason = backend_reason;
  return result;
}

ParsedOutput parse_output(const OutputParserOptions& options, const std::vector<std::string_view>& chunks,
                          const std::string& backend_reason) {
  OutputParser parser(options);
  ParsedOutputBuilder builder;
  for (auto chunk : chunks) builder.add(parser.feed(chunk));
  builder.add(parser.finish());
  return builder.build(parser, backend_reason);
}

}  // namespace deepinfer
