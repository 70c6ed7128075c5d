// The grouped MXFP4 prefill's split of one expert group into token chunks (build_chunks_kernel in
// mxfp4_prefill.cu): a = ceil(rows / max_rows) chunks, as before, but cut on 16-row boundaries, so that the
// chunks' wgmma N steps (16 rows each) add up to ceil(rows / 16), the fewest possible. The near-equal split it
// replaces rounded every chunk up to 16 on its own: at 16384 tokens (uniform top-6: V4 384 +- 19, V4.1 256 +- 15 rows a
// group) 5.3 % of the chunks' columns were padding, and the wgmma steps drop by 3.2 % (V4) / 2.5 % (V4.1).
// Each token's output column depends only on that token (the chunk sizes are bitwise-neutral: run 200's
// `chunks<=N bitwise-vs-192` lines), so any split gives the same bits. Plain C++ with host + device qualifiers:
// tests/unit/core/test_prefill_chunks.cpp checks the very arithmetic the kernel runs.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DI_CHUNKS_HD __host__ __device__ __forceinline__
#else
#define DI_CHUNKS_HD inline
#endif

namespace deepinfer::cuda {

struct PrefillChunk {
  int lo, hi;  // rows [lo, hi) of the group
};

// Chunks of a group of `rows` >= 1 rows, each at most max_rows (a multiple of 16) rows.
DI_CHUNKS_HD constexpr int prefill_chunk_count(int rows, int max_rows) { return (rows + max_rows - 1) / max_rows; }

// Chunk i of a = prefill_chunk_count(rows, max_rows): the group's T = ceil(rows / 16) 16-row tiles dealt out as
// evenly as possible (the first T % a chunks one tile more); the last chunk ends at `rows`, so it alone holds the
// padding of the last tile. T >= a, so every chunk keeps at least one row; at most ceil(T / a) <= max_rows / 16 tiles.
DI_CHUNKS_HD constexpr PrefillChunk prefill_chunk(int rows, int a, int i) {
  const int t = (rows + 15) / 16, q = t / a, e = t % a;
  const int lo = 16 * (i * q + (i < e ? i : e));
  const int hi = lo + 16 * (q + (i < e ? 1 : 0));
  return PrefillChunk{lo, hi < rows ? hi : rows};
}

// The stage ring's position after `step` tiles: index step % stages and mbarrier phase parity (step / stages) & 1.
// prefill_ring_next is the same position one tile on (no division), so a ring carried from {0, 0} over n tiles is
// prefill_ring_at(n, stages): v13 carries it over its items instead of dividing once an item.
struct PrefillRing {
  int idx;
  uint32_t ph;
};
DI_CHUNKS_HD constexpr PrefillRing prefill_ring_at(int step, int stages) {
  return PrefillRing{step % stages, uint32_t(step / stages) & 1u};
}
DI_CHUNKS_HD constexpr PrefillRing prefill_ring_next(PrefillRing r, int stages) {
  return r.idx + 1 == stages ? PrefillRing{0, r.ph ^ 1u} : PrefillRing{r.idx + 1, r.ph};
}

// A block's walk over its items cid + j G (item i: chunk i / nb, weight rows (i % nb) x rows), carried over j
// (v13's consumers; a runtime `i / nb` is ~20 dependent instructions on the per-item path): with G = q nb + r,
// i + G = (chunk + q) nb + rest + r and 0 <= rest + r < 2 nb, so one conditional step keeps 0 <= rest < nb.
struct ItemWalk {
  int chunk, rest;  // item = chunk nb + rest, 0 <= rest < nb
};
DI_CHUNKS_HD constexpr ItemWalk item_walk_at(int item, int nb) { return ItemWalk{item / nb, item % nb}; }
// The walk one stride on; `stride` = item_walk_at(G, nb).
DI_CHUNKS_HD constexpr ItemWalk item_walk_next(ItemWalk w, ItemWalk stride, int nb) {
  return w.rest + stride.rest >= nb ? ItemWalk{w.chunk + stride.chunk + 1, w.rest + stride.rest - nb}
                                    : ItemWalk{w.chunk + stride.chunk, w.rest + stride.rest};
}

// The prefill kernels' R pass (mxfp4_prefill.cu's row_scale_range): the largest and smallest e8m0 byte of a row's item
// scales, folded over pairs of 4-byte words. The same extremes as v3's former pass (__vmaxu4 / __vminu4 from 0 /
// 0xFFFFFFFF, then max4 / min4); a lane with no word keeps 0 / 0xFF, max4(0) / min4(0xFFFFFFFF). Byte by byte: ~half
// the instructions a word.
struct ScaleSpan {
  uint32_t mx = 0, mn = 0xFF;
};
DI_CHUNKS_HD constexpr uint32_t span_max(uint32_t a, uint32_t b) { return a > b ? a : b; }
DI_CHUNKS_HD constexpr uint32_t span_min(uint32_t a, uint32_t b) { return a < b ? a : b; }
// Byte k of w, zero-extended. On the device one PRMT (ptxas made a shift and a mask of the C++ form): selector 0x444k
// takes byte k of w and three zero bytes of the second operand; the CPU test checks the C++ form.
DI_CHUNKS_HD uint32_t span_byte(uint32_t w, int k) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(w, 0u, 0x4440u | uint32_t(k));
#else
  return (w >> (8 * k)) & 0xFFu;
#endif
}
DI_CHUNKS_HD ScaleSpan scale_span(ScaleSpan s, uint32_t a, uint32_t b) {
  const uint32_t a0 = span_byte(a, 0), a1 = span_byte(a, 1), a2 = span_byte(a, 2), a3 = span_byte(a, 3);
  const uint32_t b0 = span_byte(b, 0), b1 = span_byte(b, 1), b2 = span_byte(b, 2), b3 = span_byte(b, 3);
  ScaleSpan r;
  r.mx = span_max(span_max(span_max(s.mx, a0), span_max(a1, a2)),
                  span_max(span_max(a3, b0), span_max(b1, span_max(b2, b3))));
  r.mn = span_min(span_min(span_min(s.mn, a0), span_min(a1, a2)),
                  span_min(span_min(a3, b0), span_min(b1, span_min(b2, b3))));
  return r;
}

}  // namespace deepinfer::cuda
