// The grouped MXFP4 prefill's split of one expert group into token chunks (build_chunks_kernel in
// mxfp4_prefill.cu): a = ceil(rows / max_rows) chunks, as before, but cut on 16-row boundaries, so that the
// chunks' wgmma N steps (16 rows each) add up to ceil(rows / 16), the fewest possible. The near-equal split it
// replaces rounded every chunk up to 16 on its own: at 16384 tokens (uniform top-6: V4 384 +- 19, V4.1 256 +- 15 rows a
// group) 5.3 % of the chunks' columns were padding, and the wgmma steps drop by 3.2 % (V4) / 2.5 % (V4.1).
// Each token's output column depends only on that token (the chunk sizes are bitwise-neutral: run 200's
// `chunks<=N bitwise-vs-192` lines), so any split gives the same bits. Plain C++ with host + device qualifiers:
// tests/unit/core/test_prefill_chunks.cpp checks the very arithmetic the kernel runs.
#pragma once

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

}  // namespace deepinfer::cuda
