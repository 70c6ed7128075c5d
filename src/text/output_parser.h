// Incremental parser for generated text (serving.md §1.4): splits the byte stream into reasoning, answer
// content and DSML tool calls (with argument JSON streamed as deltas), handles JSON mode and stop sequences.
// It works byte by byte and holds back only bytes that could still start a marker, so any chunking of the
// same output -- even inside a UTF-8 character -- yields the same concatenated result.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

// Where parsing begins (serving.md §1.4 "Start"); the prompt decides it (thinking mode / prefix continuation).
enum class OutputStart {
  Content,                // non-thinking: answer text, leading newlines dropped
  ReasoningStart,         // thinking: prompt ended in <think>; leading newlines dropped
  ReasoningContinuation,  // prefix continuation inside reasoning; newlines kept
  ContentContinuation,    // prefix continuation inside the answer; newlines kept
};

struct OutputParserOptions {
  bool parse_tool_calls = true;
  bool starts_in_tool_calls = false;  // tool_choice=required: the prompt already opened the DSML block
  bool parse_json_output = false;     // response_format json_object
  OutputStart start = OutputStart::Content;
  std::vector<std::string> stop_sequences;  // matched in answer text / JSON only; empty ones ignored
};

enum class DeltaKind { Reasoning, Content, ToolCallBegin, ToolName, ToolArguments };

struct OutputDelta {
  DeltaKind kind;
  std::string text;     // bytes; may end inside a UTF-8 character, the concatenation is always whole
  int tool_index = -1;  // for tool-call deltas
};

class OutputParser {
 public:
  explicit OutputParser(OutputParserOptions options);
  ~OutputParser();
  OutputParser(OutputParser&&) noexcept;
  OutputParser& operator=(OutputParser&&) noexcept;

  std::vector<OutputDelta> feed(std::string_view bytes);
  std::vector<OutputDelta> finish();  // flushes held-back bytes; further feeds are ignored

  bool stopped_by_sequence() const;     // a stop sequence ended the answer
  int tool_call_count() const;
  size_t invalid_bytes() const;         // stray </think> and text after a finished tool-call block / stop

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct ParsedToolCall {
  std::string name;
  std::string arguments;
};

struct ParsedOutput {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  std::string finish_reason;  // "stop", "length", "tool_calls", "content_filter"
};

// Folds deltas into a final message (what a non-streaming response carries).
class ParsedOutputBuilder {
 public:
  void add(const std::vector<OutputDelta>& deltas);
  // backend_reason: why generation ended ("stop", "length", "content_filter"); a parsed tool call turns "stop"
  // into "tool_calls" (serving.md §1.4 "Finish reasons").
  ParsedOutput build(const OutputParser& parser, const std::string& backend_reason) const;

 private:
  ParsedOutput out_;
};

// Parses a whole output given as chunks; convenience for tests and non-streaming callers.
ParsedOutput parse_output(const OutputParserOptions& options, const std::vector<std::string_view>& chunks,
                          const std::string& backend_reason);

}  // namespace deepinfer
