// CI smoke run of the libFuzzer entry (fuzz/output_parser) built with the normal compiler: a fixed-seed stream
// of inputs assembled from the markers the parser reacts to, so every stage and cut point gets exercised.
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "fuzz/output_parser/output_parser_fuzz_entry.h"

namespace deepinfer {
namespace {

TEST(OutputParserFuzzSmoke, ChunkingInvariantOnMarkerSoup) {
  const char* pieces[] = {"<think>", "</think>", "\n", "\n\n", "<｜DSML｜", "</｜DSML｜", "tool_calls>", " calls>",
                          "invoke name=\"", "parameter name=\"", "\" string=\"", "true\">", "false\">", "\"", "{",
                          "[", "```json\n", "```\n", "\n```", "STOP", "é", "\xF0\x9F\x99\x82", "\xE6", "x", "\x01"};
  std::mt19937 rng(2024);
  for (int iteration = 0; iteration < 3000; ++iteration) {
    std::string input(1, static_cast<char>(rng() & 0xFF));
    const int n = std::uniform_int_distribution<int>(0, 40)(rng);
    for (int i = 0; i < n; ++i) input += pieces[rng() % (sizeof pieces / sizeof *pieces)];
    fuzz_output_parser_one(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  SUCCEED();
}

}  // namespace
}  // namespace deepinfer
