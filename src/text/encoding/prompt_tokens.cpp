#include "text/encoding/prompt_tokens.h"

#include "core/error.h"

namespace deepinfer {

const std::vector<std::string>& prompt_control_tokens() {
  namespace st = special_tokens;
  static const std::vector<std::string> tokens = {st::kBos,           st::kEos,           st::kSystem,
                                                  st::kUser,          st::kAssistant,     st::kLatestReminder,
                                                  st::kThinkingStart, st::kThinkingEnd,   st::kDsml};
  return tokens;
}

namespace {

void add_plain(std::vector<PromptPiece>& out, std::string_view text) {
  if (text.empty()) return;
  if (!out.empty() && !out.back().special) out.back().text += text;
  else out.push_back({false, std::string(text)});
}

// The control token spelled at `text[at]`, or nullptr. No spelling is a prefix of another, so the first hit is it.
const std::string* control_token_at(std::string_view text, size_t at) {
  for (const auto& token : prompt_control_tokens())
    if (text.compare(at, token.size(), token) == 0) return &token;
  return nullptr;
}

}  // namespace

std::vector<PromptPiece> prompt_pieces(const RenderedPrompt& prompt) {
  std::vector<PromptPiece> out;
  for (const PromptSegment& segment : prompt.segments) {
    if (!segment.is_template) {
      add_plain(out, segment.text);
      continue;
    }
    const std::string_view text = segment.text;
    size_t plain_from = 0;
    for (size_t at = 0; at < text.size();) {
      // Every control token starts with '<' or with the first byte of "｜" (U+FF5C).
      if (text[at] == '<' || static_cast<unsigned char>(text[at]) == 0xEF) {
        if (const std::string* token = control_token_at(text, at)) {
          add_plain(out, text.substr(plain_from, at - plain_from));
          out.push_back({true, *token});
          at += token->size();
          plain_from = at;
          continue;
        }
      }
      ++at;
    }
    add_plain(out, text.substr(plain_from));
  }
  return out;
}

std::vector<int32_t> encode_prompt(const RenderedPrompt& prompt, const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (const PromptPiece& piece : prompt_pieces(prompt)) {
    if (piece.special) {
      const int32_t id = tokenizer.token_id(piece.text);
      if (id < 0) throw Error("prompt encoding: the tokenizer has no control token " + piece.text);
      ids.push_back(id);
      continue;
    }
    const std::vector<int32_t> part = tokenizer.encode(piece.text, /*allow_special=*/false);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

}  // namespace deepinfer
