// layers/moe/prefill_chunks.h (the grouped MXFP4 prefill's token chunks, build_chunks_kernel's arithmetic) for every
// group size up to 8192 rows at both chunk caps (128: v3-v8, 192: v9 / v13): the chunks tile [0, rows) in order
// without gaps or overlaps, none is empty or over the cap, every chunk but the last starts and ends on a 16-row
// boundary, their 16-row steps add up to ceil(rows / 16) (the fewest), and the count is the old ceil(rows / cap).
#include <gtest/gtest.h>

#include "layers/moe/prefill_chunks.h"

namespace deepinfer::cuda {
namespace {

TEST(PrefillChunks, TileEveryGroupWithTheFewestSteps) {
  for (int cap : {128, 192}) {
    for (int rows = 1; rows <= 8192; ++rows) {
      const int a = prefill_chunk_count(rows, cap);
      ASSERT_EQ(a, (rows + cap - 1) / cap);
      int next = 0, steps = 0;
      for (int i = 0; i < a; ++i) {
        const PrefillChunk c = prefill_chunk(rows, a, i);
        ASSERT_EQ(c.lo, next) << "cap " << cap << " rows " << rows << " chunk " << i;
        ASSERT_GT(c.hi, c.lo) << "cap " << cap << " rows " << rows << " chunk " << i;
        ASSERT_LE(c.hi - c.lo, cap) << "cap " << cap << " rows " << rows << " chunk " << i;
        if (i + 1 < a) ASSERT_EQ((c.hi - c.lo) % 16, 0) << "cap " << cap << " rows " << rows << " chunk " << i;
        steps += (c.hi - c.lo + 15) / 16;
        next = c.hi;
      }
      ASSERT_EQ(next, rows) << "cap " << cap << " rows " << rows;
      ASSERT_EQ(steps, (rows + 15) / 16) << "cap " << cap << " rows " << rows;
    }
  }
}

// V4.1 at 16384 tokens: a group of 260 rows was 2 x 130 (N 144 + 144); now 144 + 116 (N 144 + 128).
TEST(PrefillChunks, V41WideGroup) {
  const int a = prefill_chunk_count(260, 192);
  ASSERT_EQ(a, 2);
  EXPECT_EQ(prefill_chunk(260, a, 0).lo, 0);
  EXPECT_EQ(prefill_chunk(260, a, 0).hi, 144);
  EXPECT_EQ(prefill_chunk(260, a, 1).lo, 144);
  EXPECT_EQ(prefill_chunk(260, a, 1).hi, 260);
}

}  // namespace
}  // namespace deepinfer::cuda
