// V4 and V4.1 prompt rendering (serving.md §1.2-§1.3, model-spec.md §7).
// The prompt is kept as segments so that token encoding can treat template control text as special
// tokens and all client text as plain BPE (serving.md §1.3 tokenization rule).
#pragma once

#include <string>
#include <vector>

#include "text/encoding/conversation.h"

namespace deepinfer {

namespace special_tokens {
inline constexpr const char* kBos = "<｜begin▁of▁sentence｜>";
inline constexpr const char* kEos = "<｜end▁of▁sentence｜>";
inline constexpr const char* kSystem = "<｜System｜>";
inline constexpr const char* kUser = "<｜User｜>";
inline constexpr const char* kAssistant = "<｜Assistant｜>";
inline constexpr const char* kLatestReminder = "<｜latest_reminder｜>";
inline constexpr const char* kThinkingStart = "<think>";
inline constexpr const char* kThinkingEnd = "</think>";
inline constexpr const char* kDsml = "｜DSML｜";
}  // namespace special_tokens

struct PromptSegment {
  bool is_template = false;  // true: control text (special tokens allowed); false: client text (plain BPE)
  std::string text;
};

struct RenderedPrompt {
  std::vector<PromptSegment> segments;
  std::string prompt() const;
};

RenderedPrompt render_prompt(const Conversation& conversation, ModelVersion version);

}  // namespace deepinfer
