// The DeepSeek V3/V4 pre-tokenizer (model-spec.md §7), implemented by hand instead of with a regex engine.
//
// tokenizer.json runs three Split steps (behaviour "Isolated": matches and the gaps between them both
// become pieces), each on every piece of the previous step, then ByteLevel:
//   1. \p{N}{1,3}
//   2. [一-龥぀-ゟ゠-ヿ]+                      (U+4E00-9FA5, U+3040-309F, U+30A0-30FF)
//   3. [ASCII punct][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ | ?[\p{P}\p{S}]+[\r\n]* |
//      \s*[\r\n]+ | \s+(?!\S) | \s+
// HF evaluates them with Oniguruma: a leftmost backtracking search in which the first alternative that
// matches wins; pretokenize.cpp reproduces exactly that, including the backtracking of \s*, \s+(?!\S).
// Invalid UTF-8 bytes are single characters of class Other (like an unassigned code point).
#pragma once

#include <string_view>
#include <vector>

namespace deepinfer {

// The three Split regexes, spelled exactly as in the DeepSeek tokenizer.json; the loader accepts a
// tokenizer.json only if its pre_tokenizer uses these (anything else would need a real regex engine).
extern const std::string_view kDeepseekSplitPatterns[3];

// Appends the pieces of text (consecutive, non-empty, covering text) to pieces.
void pretokenize(std::string_view text, std::vector<std::string_view>& pieces);

}  // namespace deepinfer
