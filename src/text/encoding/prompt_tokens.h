// Token ids of a rendered prompt (serving.md §1.3 tokenization rule).
//
// Only template text can produce control tokens: every occurrence of a control-token spelling inside a template
// segment is that token. All other text (the rest of the template text and all client text) is encoded as plain
// byte-level BPE in maximal runs, so a control token typed by a client costs ordinary tokens and cannot open a turn.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/encoding/prompt_renderer.h"
#include "text/tokenizer.h"

namespace deepinfer {

struct PromptPiece {
  bool special = false;  // true: exactly one control token
  std::string text;
};

// The control-token spellings the renderers emit (BOS, EOS, System, User, Assistant, latest_reminder, <think>,
// </think>, ｜DSML｜).
const std::vector<std::string>& prompt_control_tokens();

// Splits the prompt into control tokens and plain-text runs (adjacent plain text merged; no empty pieces).
std::vector<PromptPiece> prompt_pieces(const RenderedPrompt& prompt);

// Encodes the pieces with `tokenizer`. Throws deepinfer::Error when a control token is missing from the tokenizer
// (e.g. <｜System｜> in a tokenizer.json without it).
std::vector<int32_t> encode_prompt(const RenderedPrompt& prompt, const Tokenizer& tokenizer);

}  // namespace deepinfer
