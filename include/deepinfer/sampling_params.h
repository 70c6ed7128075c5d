// How one request turns logits into tokens, and when it stops (public API, DESIGN.md "A narrow public API").
//
// The order of operations on one row of logits (src/runtime/sampler.cpp implements it):
//   1. penalties: repetition (prompt + output tokens), then frequency and presence (output tokens only);
//   2. logprobs, when asked, are the log-softmax of these penalised logits (before temperature / truncation);
//   3. temperature == 0: greedy (argmax, the lowest id on ties);
//      otherwise softmax(logits / temperature), then the top-k mask, then top-p on the renormalised top-k
//      distribution, then min-p (relative to the most likely token), and one draw from what is left.
//   (with a structured-output spec, the grammar's token mask is applied after step 1: disallowed tokens get
//   logit -inf before logprobs, greedy and the temperature / top-k / top-p / min-p steps.)
// The draw uses a counter-based generator keyed by (seed, position of the token in the sequence), so a
// request's samples do not depend on what else runs in the same batch, nor on preemption and recompute.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deepinfer {

// Structured output (issue 6, serving.md §4): at most one of json_schema / regex / ebnf / json_object / tools.
// Validated at submit: a grammar that does not compile rejects the request with a message naming the problem.
// The output is constrained to the grammar; EOS is allowed only where the grammar is complete, and the request
// ends (reason `finished`) when the grammar has taken EOS. Needs a tokenizer (EngineOptions.tokenizer).
struct StructuredOutput {
  std::string json_schema;   // JSON Schema text (strict: a missing additionalProperties means false)
  std::string regex;         // ECMAScript-like regex, matched against the whole output
  std::string ebnf;          // GBNF-style grammar, start rule `root`
  bool json_object = false;  // any JSON object (response_format json_object)
  // DSML tool calls (serving.md §1.3): the OpenAI `tools` array as JSON text ([{"type": "function", "function":
  // {"name", "parameters", "strict"}}]). Each tool's parameter schema becomes its parameter grammar: string
  // parameters as raw text (string="true"), all others as JSON values (string="false").
  std::string tools;
  // "required": the output is the tool-call block (after the `\n\n<｜DSML｜tool_calls>\n` opening the prompt
  // already holds, see tool_block_in_prompt); "auto": free text (no U+FF5C), then optionally one tool-call
  // block -- applied only when at least one tool is "strict": true, otherwise the output is unconstrained.
  std::string tool_choice = "required";
  bool tool_block_in_prompt = true;  // tool_choice=required: the prompt ends with the block's opening line
  std::string dsml_version = "v4";   // "v4" (`<｜DSML｜tool_calls>`) or "v4.1" (`<｜DSML｜ calls>`)
  // JSON whitespace: false = compact, true = [ \t\n\r]* allowed between tokens.
  bool any_whitespace = false;
  // The prompt ended in thinking mode (`<think>`): sampling is free until the model emits `</think>`
  // (the tokenizer's token), and the grammar applies from the token after it.
  bool after_think = false;

  bool active() const { return !json_schema.empty() || !regex.empty() || !ebnf.empty() || json_object || !tools.empty(); }
};

struct SamplingParams {
  // 0 = greedy. Must be >= 0.
  float temperature = 1.0f;
  // Keep the smallest set of most likely tokens whose probability reaches top_p. In (0, 1].
  float top_p = 1.0f;
  // Keep the k most likely tokens; 0 or -1 = all.
  int top_k = 0;
  // Drop tokens whose probability is below min_p * (probability of the most likely token). In [0, 1].
  float min_p = 0.0f;
  // > 0; 1 = off. A seen token's logit l becomes l / p when l > 0, l * p otherwise (CTRL / HF semantics).
  float repetition_penalty = 1.0f;
  // Subtracted once from the logit of every token already generated (OpenAI semantics). In [-2, 2].
  float presence_penalty = 0.0f;
  // Subtracted count times from the logit of every token generated count times. In [-2, 2].
  float frequency_penalty = 0.0f;

  // Tokens to generate at most (finish reason `length`). >= 1.
  int max_tokens = 16;
  // Generation ends with reason `stopped` when one of these ids is sampled (the id is kept in token_ids).
  std::vector<int32_t> stop_token_ids;
  // Generation ends with reason `stopped` when the output text contains one of these strings; the text is
  // cut before it. Needs a tokenizer.
  std::vector<std::string> stop;
  // false: the model's EOS token ends generation with reason `finished`.
  bool ignore_eos = false;

  // -1: no logprobs. k >= 0: the sampled token's logprob and the k most likely alternatives (k <= 20).
  int logprobs = -1;

  // Key of the request's own generator. Unset: the engine derives one from its own seed and the request's
  // serial number (reproducible for one engine run, different between requests).
  std::optional<uint64_t> seed;

  // Constrained decoding; inactive by default.
  StructuredOutput structured;

  // Convenience constructors.
  static SamplingParams greedy(int max_tokens = 16) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = max_tokens;
    return p;
  }
};

}  // namespace deepinfer
