// Shared by the runtime tests (tests/unit/runtime): the tokenizer.json of a byte-level BPE tokenizer for the
// 512-token fixture vocabulary, to which each test adds its own added tokens before writing the file.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "text/pretokenize.h"
#include "text/tokenizer_bpe.h"

namespace deepinfer::testing {

// ids 0..255: the bytes; 256 .. 256 + pairs - 1: the pairs of the letters a..p ("aa", "ab", ..., "ap", "ba", ...);
// no merges; DeepSeek's pre-tokenizer splits and the byte-level decoder.
inline nlohmann::json byte_level_tokenizer_spec(int pairs) {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[to_byte_level(std::string(1, char(b)))] = b;
  for (int i = 0; i < pairs; ++i) vocab[std::string{char('a' + i / 16), char('a' + i % 16)}] = 256 + i;
  json steps = json::array();
  for (const auto& pattern : kDeepseekSplitPatterns)
    steps.push_back(json{{"type", "Split"}, {"pattern", {{"Regex", std::string(pattern)}}},
                         {"behavior", "Isolated"}, {"invert", false}});
  steps.push_back(json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}});
  json spec;
  spec["normalizer"] = nullptr;
  spec["pre_tokenizer"] = json{{"type", "Sequence"}, {"pretokenizers", steps}};
  spec["decoder"] = {{"type", "ByteLevel"}};
  spec["model"] = json{{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}};
  return spec;
}

}  // namespace deepinfer::testing
