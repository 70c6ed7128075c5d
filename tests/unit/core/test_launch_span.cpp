// cuda/launch_span.h: one launch's globaltimer summary from its blocks' (start, end) ns, checked against values worked
// out by hand (host-only; the stream kernels' phase readers use it on the GPU machine).
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "cuda/launch_span.h"

namespace deepinfer::cuda {
namespace {

// Globaltimer values are ~1.7e18 ns: more digits than a double holds, so the differences must be taken in integers.
constexpr uint64_t kBase = 1'700'000'000'123'456'789ull;

TEST(LaunchSpan, OddBlockCount) {
  // starts after the first: 0, 200, 1000 ns; ends after the first start: 5000, 5300, 9000; own times 5000, 5100, 8000.
  const std::vector<std::pair<uint64_t, uint64_t>> blocks = {
      {kBase + 1000, kBase + 9000}, {kBase, kBase + 5000}, {kBase + 200, kBase + 5300}};
  const LaunchSpan p = launch_span(blocks);
  EXPECT_DOUBLE_EQ(p.span_us, 9.0);
  EXPECT_DOUBLE_EQ(p.start_median_us, 0.2);
  EXPECT_DOUBLE_EQ(p.start_last_us, 1.0);
  EXPECT_DOUBLE_EQ(p.end_spread_us, 9.0 - 5.3);
  EXPECT_DOUBLE_EQ(p.block_us, 5.1);
}

TEST(LaunchSpan, EvenCountTakesTheUpperMedian) {
  // starts 0, 100, 300, 700; ends 1000, 1500, 2000, 4000; own 1000, 1400, 1700, 3300 (upper medians: index 2).
  const std::vector<std::pair<uint64_t, uint64_t>> blocks = {
      {kBase, kBase + 1000}, {kBase + 100, kBase + 1500}, {kBase + 300, kBase + 2000}, {kBase + 700, kBase + 4000}};
  const LaunchSpan p = launch_span(blocks);
  EXPECT_DOUBLE_EQ(p.span_us, 4.0);
  EXPECT_DOUBLE_EQ(p.start_median_us, 0.3);
  EXPECT_DOUBLE_EQ(p.start_last_us, 0.7);
  EXPECT_DOUBLE_EQ(p.end_spread_us, 2.0);
  EXPECT_DOUBLE_EQ(p.block_us, 1.7);
}

TEST(LaunchSpan, NoBlocksIsAllZero) {
  const LaunchSpan p = launch_span({});
  EXPECT_EQ(p.span_us, 0.0);
  EXPECT_EQ(p.start_median_us, 0.0);
  EXPECT_EQ(p.start_last_us, 0.0);
  EXPECT_EQ(p.end_spread_us, 0.0);
  EXPECT_EQ(p.block_us, 0.0);
}

}  // namespace
}  // namespace deepinfer::cuda
