// Shared fuzz entry for the output parser: the first byte picks options, the rest is generated text. It checks
// the parser's contract (serving.md §1.4): no crash, and the same result for whole, byte-wise and split feeding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "text/output_parser.h"

namespace deepinfer {

inline void fuzz_output_parser_one(const uint8_t* data, size_t size) {
  if (size == 0) return;
  OutputParserOptions options;
  const uint8_t flags = data[0];
  options.start = static_cast<OutputStart>(flags & 3);
  options.parse_tool_calls = flags & 4;
  options.starts_in_tool_calls = flags & 8;
  options.parse_json_output = flags & 16;
  if (flags & 32) options.stop_sequences = {"STOP", "\n\n"};
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const ParsedOutput whole = parse_output(options, {text}, "stop");
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
  const ParsedOutput bytewise = parse_output(options, bytes, "stop");
  const size_t cut = text.size() / 3;
  const ParsedOutput split = parse_output(options, {text.substr(0, cut), text.substr(cut)}, "stop");
  for (const ParsedOutput* other : {&bytewise, &split}) {
    bool same = other->reasoning == whole.reasoning && other->content == whole.content &&
                other->finish_reason == whole.finish_reason && other->tool_calls.size() == whole.tool_calls.size();
    for (size_t i = 0; same && i < whole.tool_calls.size(); ++i)
      same = other->tool_calls[i].name == whole.tool_calls[i].name &&
             other->tool_calls[i].arguments == whole.tool_calls[i].arguments;
    if (!same) std::abort();  // chunking changed the result
  }
}

}  // namespace deepinfer
