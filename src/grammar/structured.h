// Structured output, part 3: from a request's StructuredOutput spec to a Grammar (issue 6, serving.md §1.3, §4),
// including the DSML tool-call grammar of V4 / V4.1.
#pragma once

#include <string>
#include <string_view>

#include "deepinfer/sampling_params.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar {

// Copies src's rules into dst (names prefixed, rule references renumbered); returns the index of src's root.
int32_t embed_grammar(Grammar& dst, const Grammar& src, const std::string& prefix);

struct DsmlOptions {
  bool v41 = false;             // tag spelling: V4 `tool_calls`/`invoke`/`parameter`, V4.1 ` calls`/` invoke`/` parameter`
  bool required = true;         // true: only the block; false ("auto"): free text, then optionally the block
  bool block_in_prompt = true;  // required: the prompt already ends with "\n\n<｜DSML｜tool_calls>\n"
  bool any_whitespace = false;  // JSON whitespace of string="false" values
};

// The DSML tool-call grammar for an OpenAI tools array (JSON text), exactly the layout the prompt renderer
// writes for assistant tool calls (src/text/encoding/prompt_renderer.cpp render_tool_calls):
//   <｜DSML｜invoke name="N">\n (<｜DSML｜parameter name="K" string="B">V</｜DSML｜parameter>\n)* </｜DSML｜invoke>
// invokes joined by "\n", the block closed by "\n</｜DSML｜tool_calls>". Parameters follow the schema's
// property order; required ones must appear, optional ones may be skipped. A parameter whose schema is a
// string (type "string", or an enum / const of strings) is raw text (string="true": no '<', or one of the
// enum values, or an anchored pattern); every other one is a JSON value of its schema (string="false").
// V4.1 keeps an empty line in an invoke without parameters. Errors name the tool and the parameter.
Grammar compile_dsml_tool_calls(std::string_view tools_json, const DsmlOptions& opts = {});

// The compiled grammar of a request's spec; throws deepinfer::Error whose message starts with the field name
// (e.g. "structured.json_schema: ..."). Precondition: spec.active().
Grammar compile_structured(const StructuredOutput& spec);

// False for tool_choice "auto" when no tool is "strict": true (the calls are then left unconstrained); true
// otherwise (also for malformed tools, so that compile_structured reports them).
bool structured_applies(const StructuredOutput& spec);

// True if the spec needs the DSML added tokens as grammar text (a tool-call grammar).
inline bool needs_dsml_tokens(const StructuredOutput& spec) { return !spec.tools.empty(); }

}  // namespace deepinfer::grammar
