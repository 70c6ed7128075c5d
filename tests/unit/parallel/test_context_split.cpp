// The zigzag split of a context-parallel prefill (parallel/context_split.h) against arithmetic: it covers every
// position exactly once, each rank holds chunks r and 2R - 1 - r, and the causal work per rank is equal when the
// prompt divides into 2R chunks (chunk i and 2R - 1 - i together hold positions whose (p + 1) sums to the same
// constant for every i) and within one chunk-boundary position's work otherwise; contiguous cuts are ~2x off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "parallel/context_split.h"

namespace deepinfer::parallel {
namespace {

TEST(ZigzagSplit, CoversEveryPositionOnce) {
  for (int ranks : {1, 2, 3, 4, 8}) {
    for (int64_t tokens : {0, 1, 5, 16, 17, 1000, 32768}) {
      std::vector<int> seen(size_t(tokens), 0);
      const auto split = zigzag_split(tokens, ranks);
      ASSERT_EQ(split.size(), size_t(ranks));
      for (const auto& ranges : split)
        for (const TokenRange& r : ranges)
          for (int64_t p = r.begin; p < r.end; ++p) ++seen[size_t(p)];
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }))
          << ranks << " ranks, " << tokens << " tokens";
    }
  }
}

TEST(ZigzagSplit, RankTakesChunkRAndItsMirror) {
  const auto split = zigzag_split(80, 4);  // chunks of 10
  ASSERT_EQ(split[1].size(), 2u);
  EXPECT_EQ(split[1][0].begin, 10);
  EXPECT_EQ(split[1][0].end, 20);
  EXPECT_EQ(split[1][1].begin, 60);  // chunk 2 * 4 - 1 - 1 = 6
  EXPECT_EQ(split[1][1].end, 70);
}

TEST(ZigzagSplit, CausalWorkIsBalanced) {
  // Divisible: exactly equal. Work of chunk i (length L) = L * (i L + (L + 1) / 2) summed with chunk 2R - 1 - i's:
  // L^2 (2R - 1) + L (L + 1), the same for every i.
  for (int ranks : {2, 4, 8}) {
    const int64_t tokens = 2 * ranks * 4096;
    const auto split = zigzag_split(tokens, ranks);
    const double L = 4096, expected = L * L * (2 * ranks - 1) + L * (L + 1);
    for (const auto& ranges : split) EXPECT_EQ(causal_work(ranges), expected);
  }
  // Not divisible: within the work of one extra position at the far end (the chunk lengths differ by <= 1).
  const int64_t tokens = 32768 + 13;
  const int ranks = 4;
  const auto split = zigzag_split(tokens, ranks);
  double lo = 1e300, hi = 0;
  for (const auto& ranges : split) {
    lo = std::min(lo, causal_work(ranges));
    hi = std::max(hi, causal_work(ranges));
  }
  EXPECT_LE(hi - lo, 2.0 * double(tokens));
  // Contiguous cuts for comparison: the last rank does (2R - 1) / R x the mean's share of the first.
  std::vector<TokenRange> last{{tokens - tokens / ranks, tokens}}, first{{0, tokens / ranks}};
  EXPECT_GT(causal_work(last), 5.0 * causal_work(first));
  std::printf("zigzag over %d ranks, %lld tokens: causal work max / min = %.6f (contiguous: %.1f)\n", ranks,
              static_cast<long long>(tokens), hi / lo, causal_work(last) / causal_work(first));
}

TEST(ZigzagSplit, BadArgumentsAreErrors) {
  EXPECT_THROW(zigzag_split(10, 0), Error);
  EXPECT_THROW(zigzag_split(-1, 2), Error);
}

TEST(StepQuerySplit, ContiguousAlignedCover) {
  for (int ranks : {1, 2, 3, 4, 8}) {
    for (int64_t rows : {0, 1, 5, 15, 16, 17, 87, 100, 256, 1000, 2048}) {
      const auto split = step_query_split(rows, ranks, 16);
      ASSERT_EQ(split.size(), size_t(ranks));
      int64_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        const TokenRange& q = split[size_t(r)];
        EXPECT_EQ(q.begin, next) << ranks << " ranks, " << rows << " rows, rank " << r;
        EXPECT_LE(q.begin, q.end);
        if (r > 0) EXPECT_TRUE(q.begin % 16 == 0 || q.begin == rows) << ranks << " ranks, " << rows << " rows";
        // Within half an alignment step of the even cut.
        const int64_t even = int64_t(r + 1) * rows / ranks;
        if (r + 1 < ranks && q.end < rows && q.end > q.begin) EXPECT_LE(std::llabs(q.end - even), 8);
        next = q.end;
      }
      EXPECT_EQ(next, rows);
    }
  }
  // Two ranks: equal halves when they are aligned, the nearest aligned cut otherwise.
  auto cut = [](int64_t rows) { return step_query_split(rows, 2, 16)[0].end; };
  EXPECT_EQ(cut(256), 128);
  EXPECT_EQ(cut(2048), 1024);
  EXPECT_EQ(cut(87), 48);   // 43 -> 48
  EXPECT_EQ(cut(10), 0);    // 5 -> 0: rank 1 takes all 10
  EXPECT_EQ(step_query_split(7, 1, 16)[0].end, 7);
  EXPECT_THROW(step_query_split(4, 0, 16), Error);
  EXPECT_THROW(step_query_split(4, 2, 0), Error);
}

}  // namespace
}  // namespace deepinfer::parallel
