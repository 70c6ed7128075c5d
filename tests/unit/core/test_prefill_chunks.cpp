// layers/moe/prefill_chunks.h (the grouped MXFP4 prefill's token chunks, build_chunks_kernel's arithmetic) for every
// group size up to 8192 rows at both chunk caps (128: v3-v8, 192: v9 / v13): the chunks tile [0, rows) in order
// without gaps or overlaps, none is empty or over the cap, every chunk but the last starts and ends on a 16-row
// boundary, their 16-row steps add up to ceil(rows / 16) (the fewest), and the count is the old ceil(rows / cap).
// Also v13's per-item pieces against what they replace: the stage ring advanced tile by tile and the item walk
// advanced by the grid stride (the divisions), and the R pass's byte span (v3's SIMD byte max / min).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

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
        if (i + 1 < a) {
          ASSERT_EQ((c.hi - c.lo) % 16, 0) << "cap " << cap << " rows " << rows << " chunk " << i;
        }
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

// prefill_ring_next from {0, 0} over n tiles is prefill_ring_at(n): every ring of 1..8 stages (the kernels' 2..4 and
// kMaxStages within) over 100,000 tiles.
TEST(PrefillChunks, CarriedRingIsTheDividedOne) {
  for (int stages = 1; stages <= 8; ++stages) {
    PrefillRing r{0, 0u};
    for (int n = 0; n <= 100000; ++n) {
      const PrefillRing d = prefill_ring_at(n, stages);
      ASSERT_EQ(r.idx, d.idx) << "stages " << stages << " tile " << n;
      ASSERT_EQ(r.ph, d.ph) << "stages " << stages << " tile " << n;
      r = prefill_ring_next(r, stages);
    }
  }
}

// item_walk_next from item_walk_at(cid) by the stride item_walk_at(G) is (i / nb, i % nb) of i = cid + j G: every
// nb 1..64 (V4 / V4.1 w13 / w2: 16..56), grid 1..160 (132 SMs on an H100) and block, over 64 items a block.
TEST(PrefillChunks, CarriedItemWalkIsTheDividedOne) {
  for (int nb = 1; nb <= 64; ++nb) {
    for (int G = 1; G <= 160; ++G) {
      const ItemWalk stride = item_walk_at(G, nb);
      for (int cid = 0; cid < G; ++cid) {
        ItemWalk w = item_walk_at(cid, nb);
        for (int j = 0; j < 64; ++j) {
          const int i = cid + j * G;
          ASSERT_EQ(w.chunk, i / nb) << "nb " << nb << " G " << G << " cid " << cid << " j " << j;
          ASSERT_EQ(w.rest, i % nb) << "nb " << nb << " G " << G << " cid " << cid << " j " << j;
          w = item_walk_next(w, stride, nb);
        }
      }
    }
  }
}

// v3's pass as mxfp4_prefill.cu ran it: __vmaxu4 / __vminu4 (per-byte max / min of two words) over the words, then
// max4 / min4 of the result.
uint32_t vop4(uint32_t a, uint32_t b, bool is_max) {
  uint32_t r = 0;
  for (int k = 0; k < 4; ++k) {
    const uint32_t x = (a >> (8 * k)) & 0xFFu, y = (b >> (8 * k)) & 0xFFu;
    r |= (is_max ? (x > y ? x : y) : (x < y ? x : y)) << (8 * k);
  }
  return r;
}
uint32_t fold4(uint32_t w, bool is_max) {
  uint32_t r = w & 0xFFu;
  for (int k = 1; k < 4; ++k) {
    const uint32_t x = (w >> (8 * k)) & 0xFFu;
    r = is_max ? (x > r ? x : r) : (x < r ? x : r);
  }
  return r;
}

// scale_span folded over a lane's word pairs (the half pair: its first word twice) against v3's pass (the half pair's
// second word 0 for the max, 0xFFFFFFFF for the min): 0 to 8 pairs, random words and words of few distinct bytes
// (ties, 0x00 and 0xFF at every position).
TEST(PrefillChunks, ScaleSpanIsTheSimdBytePass) {
  std::mt19937 rng(165);
  const uint32_t bytes[] = {0x00u, 0x01u, 0x7Fu, 0x80u, 0xFEu, 0xFFu};
  auto word = [&](bool few) {
    if (!few) return uint32_t(rng());
    uint32_t w = 0;
    for (int k = 0; k < 4; ++k) w |= bytes[rng() % 6] << (8 * k);
    return w;
  };
  for (int trial = 0; trial < 200000; ++trial) {
    const int pairs = trial % 9;
    const bool half = (trial / 9) % 2, few = (trial / 18) % 2;
    uint32_t mx = 0, mn = 0xFFFFFFFFu;
    ScaleSpan s;
    for (int p = 0; p < pairs; ++p) {
      const uint32_t a = word(few), b = word(few);
      const bool h = half && p == pairs - 1;
      mx = vop4(mx, vop4(a, h ? 0u : b, true), true);
      mn = vop4(mn, vop4(a, h ? 0xFFFFFFFFu : b, false), false);
      s = scale_span(s, a, h ? a : b);
    }
    ASSERT_EQ(s.mx, fold4(mx, true)) << "trial " << trial;
    ASSERT_EQ(s.mn, fold4(mn, false)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace deepinfer::cuda
