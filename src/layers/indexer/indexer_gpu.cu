// The V4 lightning indexer on the GPU (model-spec.md §3 "Lightning indexer"), next to its CPU reference
// lightning_indexer.cpp.
//
// Queries: the FP8 GEMM (wq_b) and a cuBLAS bf16 GEMM (weights_proj) write fp32 straight into the outputs; one
// block per (row, head) then rotates, Hadamard-transforms and FP4-quantizes the head in shared memory with the
// same steps as the key finish (entry_finish.cuh), and scales the head weight.
//
// Selection, per tile of up to 256 rows (the workspace holds one tile's scores, packed):
//   offsets       one block: an exclusive scan of the rows' visible counts (rows that score at all) places each
//                 row's scores in the workspace, so the bound is rows x the most entries a row sees, whatever
//                 the page rounding of the pool;
//   score kernel  grid (entry chunks of 128, rows): a block stages the row's 64 (padded) head queries and the
//                 head weights in shared memory, then 64 keys at a time (bf16 -> fp32), and computes the
//                 64 x 64 head-by-entry dot products in fp32 registers (each thread 4 heads x 4 entries), then
//                 sum_h w_h * relu(q_h . k_e) per entry;
//   select kernel one block per row: a radix select over the order-preserving uint32 image of the scores (4
//                 passes of 8 bits) finds the k-th largest score T and how many entries equal to T to take;
//                 an ordered pass with block scans then emits every entry above T and the lowest-id entries at T,
//                 in ascending entry order.
// Rows with no more visible entries than topk skip the scoring: they take every visible entry.
//
// Decode (<= 8 rows, decode_fused(), default on): the three selection kernels become one,
// index_decode_select_kernel: one score block per 64-entry tile (16 blocks for the 1024 entries of a 4K context,
// twice the score kernel's parallelism), and the row's last block to finish runs the same select over the row's
// scores. Same bits as the three kernels. DEEPINFER_INDEX_SELECT=bins (default) / new / old: the select by bins below,
// and with it the score tiles' batched and 16-byte loads (index_scoring.cuh), the same bits again (bench/gpu/NOTES.md
// "Decode select by bins"). DEEPINFER_INDEX_SCORE_SHAPE=32x1 (indexer_gpu.h): 32-entry tiles, up to twice the score
// blocks, the same bits again (bench/gpu/NOTES.md "Decode score shape"). DEEPINFER_INDEX_QUERY_STAGING=batched
// (indexer_gpu.h): the bins form's score blocks stage their queries and first keys with every load in flight at once,
// the same bits again (bench/gpu/NOTES.md "Query staging in one round trip").
// The query side stays three launches: wq_b (8 MB of FP8 at V4-Flash
// shapes) and weights_proj are GEMVs that need the whole GPU's bandwidth, not one row's blocks, and weights_proj's
// fp32 sums are cuBLAS's, whose order no fused kernel can reproduce bit for bit (the head weights feed every
// score, so the selection would no longer be the same); the finish (RoPE, Hadamard, FP4) is block-wide per head
// (entry_finish.cuh) and would run 64 times over in every score block.
//
// The faster design (not needed for correctness, left for the decode work): queries and keys are FP4 values
// times power-of-two scales, so they are exact in bf16 (and in FP8 e4m3 per 32-block with the scale kept
// aside); the scoring is then a tensor-core GEMM [heads x dim] . [dim x entries] per row (mma.sync bf16 with
// fp32 accumulation, or FP8 wgmma with per-32 scales folded into the epilogue), keys read from a packed FP4
// + e8m0 pool (68 B per entry instead of 256) with cp.async double buffering, several decode rows of one slot
// sharing a key tile, and the relu / head-weight reduction fused into the epilogue; the top-k would run on a
// per-chunk candidate list (threshold from a sampled histogram) instead of re-reading all scores four times.
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "cuda/blas.h"
#include "cuda/check.h"
#include "cuda/launch.h"
#include "cuda/stamp_records.h"
#include "layers/attention/decode_fused.h"
#include "layers/compressor/entry_finish.cuh"
#include "layers/indexer/index_scoring.cuh"
#include "layers/indexer/index_select_bins.cuh"
#include "layers/indexer/indexer_gpu.h"
#include "layers/indexer/select_stamps.cuh"

namespace deepinfer::cuda {

namespace {

using namespace index_scoring;

constexpr int kSelectRowTile = 256;  // rows whose scores the workspace holds at once

struct SelectArgs : SelectRows {  // max_visible: the per-slot capacity of the key pages (max_pages * page_size)
  float* scores;           // packed: row r's scores at scores + offsets[r]
  const int64_t* offsets;  // [tile rows]
  int32_t* rows_out;       // [rows, topk]
};

// offsets[r] = sum of the visible counts of the tile's earlier rows that need scores (more visible than topk).
__global__ void __launch_bounds__(kSelectRowTile) index_offsets_kernel(SelectArgs a, int64_t* offsets, int tile_rows) {
  using Scan = cub::BlockScan<long long, kSelectRowTile>;
  __shared__ typename Scan::TempStorage scan_tmp;
  const int r = int(threadIdx.x);
  long long count = 0;
  if (r < tile_rows) {
    const int n = a.visible_entries(r);
    count = n > a.topk ? n : 0;
  }
  long long offset;
  Scan(scan_tmp).ExclusiveSum(count, offset);
  if (r < tile_rows) offsets[r] = offset;
}

__global__ void __launch_bounds__(kScoreThreads) index_score_kernel(SelectArgs a) {
  extern __shared__ __align__(16) float smem[];  // 16: score_entries's ldmatrix rows and 16-byte key stores
  const int r = int(blockIdx.y);
  const int n = a.visible_entries(r);
  if (n <= a.topk) return;  // the select kernel takes every visible entry
  const int e_begin = int(blockIdx.x) * kEntriesPerBlock;
  if (e_begin >= n) return;
  score_entries<HeadSumF32>(a.q + int64_t(r) * a.heads * a.dim, a.head_w + int64_t(r) * a.heads, a.heads, a.dim,
                            a.keys, a.slots[r], e_begin, n, a.scores + a.offsets[r], smem);
}

// A row that sees no more entries than topk takes them all, ascending, then -1 (every thread of the block).
__device__ __forceinline__ void take_all_visible(int n, int topk, const PagedPool& keys, int slot, int32_t* out) {
  for (int i = int(threadIdx.x); i < topk; i += int(blockDim.x)) out[i] = i < n ? int32_t(pool_row(keys, slot, i)) : -1;
}

template <int kThreads>
struct SelectShared {
  typename cub::BlockScan<int, kThreads>::TempStorage scan;
  unsigned hist[256];
  uint32_t prefix;
  int need;
};

// Where select_top_entries reads the row's scores: the workspace through L2 (__ldcg: in the decode kernel other
// blocks wrote them during this launch), or a copy in shared memory.
struct ScoresInL2 {
  const float* p;
  __device__ __forceinline__ float operator()(int e) const { return __ldcg(p + e); }
};
struct ScoresInShared {
  const float* p;
  __device__ __forceinline__ float operator()(int e) const { return p[e]; }
};

// The top `topk` of the n scores sc(0 .. n-1) (n > topk) as pool rows of the slot, in ascending entry order, into
// out[0, topk); equal scores take the lower entry id (lightning_top_entries). kThreads threads.
template <int kThreads, class Scores>
__device__ __forceinline__ void select_top_entries(Scores sc, int n, int topk, const PagedPool& keys, int slot,
                                                   int32_t* out, SelectShared<kThreads>& sh) {
  using Scan = cub::BlockScan<int, kThreads>;
  const int tid = int(threadIdx.x);

  // Radix select from the top byte down: after the pass for `shift`, `prefix` holds the high bits of the k-th
  // largest key and `need` how many keys with exactly those high bits still belong to the top k.
  uint32_t prefix = 0, mask = 0;
  int need = topk;
  for (int shift = 24; shift >= 0; shift -= 8) {
    radix_histogram<kThreads, false>([&](int e) { return order_key(sc(e)); }, n, shift, mask, prefix, sh.hist);
    // The highest bin b whose count together with the bins above it reaches `need` (bin 0 if none does), and
    // the count above it. Warp 0: lane l holds bins 255 - 8 l down to 248 - 8 l; a scan over the lanes finds the
    // lane of b (threshold_lane), that lane walks its 8 bins.
    if (tid < 32) {
      const int top = 255 - 8 * tid;
      int mine = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) mine += int(sh.hist[top - j]);
      int incl;
      if (tid == threshold_lane(mine, need, tid, incl)) {
        int above = incl - mine, b = top;
        for (int j = 0; j < 8; ++j, --b) {
          if (b == 0 || above + int(sh.hist[b]) >= need) break;
          above += int(sh.hist[b]);
        }
        sh.prefix = prefix | (uint32_t(b) << shift);
        sh.need = need - above;
      }
    }
    __syncthreads();
    prefix = sh.prefix;
    need = sh.need;
    mask |= 0xFFu << shift;
    __syncthreads();  // everyone has read prefix / need before the next pass rewrites them
  }
  const uint32_t threshold = prefix;  // the k-th largest key; `need` (>= 1) of the keys equal to it are taken

  // Emit in ascending entry order: entries above the threshold, and the first `need` entries at it.
  int written = 0, ties_seen = 0;
  for (int base = 0; base < n; base += kThreads) {
    const int e = base + tid;
    const uint32_t k = e < n ? order_key(sc(e)) : 0u;
    const int above = e < n && k > threshold, tie = e < n && k == threshold;
    int tie_rank, ties;
    Scan(sh.scan).ExclusiveSum(tie, tie_rank, ties);
    __syncthreads();
    const int take = above || (tie && ties_seen + tie_rank < need);
    int place, taken;
    Scan(sh.scan).ExclusiveSum(take, place, taken);
    __syncthreads();
    if (take && written + place < topk) out[written + place] = int32_t(pool_row(keys, slot, e));
    written += taken;
    ties_seen += ties;
  }
  for (int i = written + tid; i < topk; i += kThreads) out[i] = -1;  // unreachable: written == topk
}

__global__ void __launch_bounds__(kSelectThreads) index_select_kernel(SelectArgs a) {
  __shared__ SelectShared<kSelectThreads> sh;
  const int r = int(blockIdx.x);
  const int n = a.visible_entries(r);
  const int slot = a.slots[r];
  int32_t* out = a.rows_out + int64_t(r) * a.topk;
  if (n <= a.topk) {
    take_all_visible(n, a.topk, a.keys, slot, out);
    return;
  }
  select_top_entries<kSelectThreads>(ScoresInL2{a.scores + a.offsets[r]}, n, a.topk, a.keys, slot, out, sh);
}

// ---- Decode (few rows): scores and top-k in one launch.
//
// Grid (score blocks, rows). A row's active blocks (one per 64-entry tile, at most gridDim.x: then contiguous tile
// ranges) score their tiles with score_entries into the row's place of the packed workspace (the offsets kernel's
// packing, recomputed from the <= kDecodeMaxRows positions); the block that brings the row's arrival count to the
// number of active blocks runs select_top_entries or select_by_bins over the row's scores and sets the count back to
// zero for the next launch. The tile split (DecodeTiles), the arrival (decode_arrive) and select_by_bins are
// index_select_bins.cuh's, shared with the V4.1 CSA2 indexer's decode kernel. The scores are score_entries's (each
// entry's arithmetic does not depend on the tile it falls in, nor on the score shape) and the selection is the unique
// top-k under the tie rule, so the result is the split kernels' bit for bit.
// Shape (ScoreShape, DEEPINFER_INDEX_SCORE_SHAPE): the score blocks' tiles (ShapeTiles) and score_entries calls
// (score_tiles; both index_select_bins.cuh's, shared with the CSA2 decode kernels). The dynamic shared memory stays
// the default shape's in every shape (the launch's), so the select after the ticket (and whether its keys fit in
// shared memory) is the same code in every shape: only the scoring differs.
//
// The arrival counts are a per-device array that starts at zero and is left at zero: two of these launches must
// not run at the same time on one device (the model runs its indexer on the main stream only).
__device__ unsigned int g_decode_arrivals[kDecodeMaxRows];  // kDecodeMaxRows: index_select_bins.cuh
// The bins forms' pass-1 histograms, per row: added by the score blocks (count_top_bytes), read and set back to zero
// by the last block (CountedTopBytes); zero at rest, like the arrival counts.
__device__ TopByteCounts g_decode_top_bytes[kDecodeMaxRows];
// The selector form's rehearsal row (index_select_bins.cuh selector_select): its scores, and its rows out.
__device__ RehearsalScores g_decode_rehearsal_scores = rehearsal_scores();
__device__ int32_t g_decode_rehearsal_out[kDecodeMaxRows][kRehearsalTopk];

// Where row r's scores start in the packed workspace: after the scores of the earlier rows that score (n > topk).
__device__ __forceinline__ int64_t row_score_offset(const SelectArgs& a, int r) {
  int64_t offset = 0;
  for (int q = 0; q < r; ++q) {
    const int m = a.visible_entries(q);
    if (m > a.topk) offset += m;
  }
  return offset;
}

// The selector form's block 0 (decode_select_row, kSelector): rehearses the select (over as many entries as the row
// has, none where the row takes every visible entry), then selects row r after its score blocks' arrivals
// (index_select_bins.cuh selector_select), or takes every visible entry of a row that sees no more than topk. The
// dynamic shared memory holds the staged keys (smem). kLater: select_by_bins's.
template <class Shape, LaterPasses kLater, class Marks>
__device__ __forceinline__ void decode_selector_row(const SelectArgs& a, int r, float* smem,
                                                    BinSelectShared<kScoreThreads>& sh, Marks mark) {
  using Row = SelectorRow<KeysOfScoresInL2, RowsInPool>;
  const int n = a.visible_entries(r);
  const int slot = a.slots[r];
  int32_t* out = a.rows_out + int64_t(r) * a.topk;
  const bool selects = n > a.topk;
  const bool in_shared = size_t(n) * sizeof(float) <= score_smem_bytes<HeadSumF32, false>(a.dim);
  const RowsInPool rows{a.keys, slot};
  const Row rehearsal{true, &g_decode_arrivals[r], 0, &g_decode_top_bytes[r],
                      KeysOfScoresInL2{g_decode_rehearsal_scores.v}, rows, selects ? n : 0, in_shared,
                      g_decode_rehearsal_out[r]};
  auto prepare = [&]() -> Row {
    if (!selects) take_all_visible(n, a.topk, a.keys, slot, out);
    const int active = ShapeTiles<Shape>(n, int(gridDim.x) - 1, 0).active;
    return Row{selects, &g_decode_arrivals[r], active, &g_decode_top_bytes[r],
               KeysOfScoresInL2{a.scores + row_score_offset(a, r)}, rows, n, in_shared, out};
  };
  const int k = selector_select<kScoreThreads, kLater>(rehearsal, prepare, [&](int) { return a.topk; },
                                                       reinterpret_cast<uint32_t*>(smem), sh, mark);
  if (k > 0 && threadIdx.x == 0) g_decode_arrivals[r] = 0u;  // every active block has arrived: ready for the next launch
}

// The body of the decode kernels. kBinSelect: select_by_bins (index_select_bins.cuh) instead of select_top_entries
// (DEEPINFER_INDEX_SELECT=bins or new); kWideLoads: score_entries's batched global loads (=new),
// with its larger shared memory (score_smem_bytes<HeadSumF32, true>). mark: the last block's progress marks (the
// phases kernel's stamps; none in the production kernels). Shape: the score blocks' (ShapeTiles, score_tiles;
// ScoreShapeAuto: 32x1 or 64x2 per row). kBatched: the score blocks' batched staging (DEEPINFER_INDEX_QUERY_STAGING=
// batched, index_scoring.cuh StagedQueries / StagedKeys; the bins form only); score_mark: score_entries's marks and
// kScoreMarkScored after the scoring (the phases kernel's block-0 stamps). kSelector (the bins form with the batched
// staging; DEEPINFER_INDEX_SELECTOR=block, indexer_gpu.h): the grid has one more block a row, its block 0, which
// rehearses the select and selects after the score blocks' arrivals (decode_selector_row; score block i is block i + 1);
// kLater: the selector's later radix passes' counting (DEEPINFER_INDEX_LATER_PASSES). Same result in every form,
// shape, staging and selector.
template <bool kBinSelect, bool kWideLoads, class Shape, bool kBatched, bool kSelector = false,
          LaterPasses kLater = LaterPasses::Match, class Marks, class ScoreMarks = NoScoreMarks>
__device__ __forceinline__ void decode_select_row(const SelectArgs& a, Marks mark, ScoreMarks score_mark = {}) {
  static_assert(!kSelector || (kBinSelect && kBatched), "the selector form: the bins form, batched staging");
  // 128 (16 would do: the select by bins reads its keys as uint4): the dynamic window's start in the select kernels
  // (0x880 / 0x900) as measured since session 39, when this file included stream_gemm.cuh, whose 128-aligned `smem`
  // is the same symbol (without it 0x860 / 0x8c0; tools/gpu/sass_same.sh). Session 48's kept scores (KeptScores,
  // 512 bytes more of static shared memory in the batched and phases kernels) moved it there by as much.
  extern __shared__ __align__(128) float smem[];
  using Shared = std::conditional_t<kBinSelect, BinSelectShared<kScoreThreads>, SelectShared<kScoreThreads>>;
  __shared__ Shared sh;
  __shared__ bool last;
  // The attention's split kernel, next on this stream, may start its blocks now (attention_pdl(), decode_fused.h; a
  // hint: it still waits for this grid's completion): they wait on SMs the select leaves idle.
  pdl_launch_dependents();
  const int r = int(blockIdx.y);
  if constexpr (kSelector) {
    if (blockIdx.x == 0) {
      decode_selector_row<Shape, kLater>(a, r, smem, sh, mark);
      return;
    }
  }
  const int n = a.visible_entries(r);
  const int slot = a.slots[r];
  int32_t* out = a.rows_out + int64_t(r) * a.topk;
  if (n <= a.topk) {
    if (!kSelector && blockIdx.x == 0) take_all_visible(n, a.topk, a.keys, slot, out);  // the selector's, if any
    return;
  }
  // The selector form: block 0 selects (dispatched first: its rehearsal starts with the launch), 1.. score.
  const ShapeTiles<Shape> tiles(n, int(gridDim.x) - (kSelector ? 1 : 0), int(blockIdx.x) - (kSelector ? 1 : 0));
  if (!tiles.block_active()) return;

  float* sc = a.scores + row_score_offset(a, r);
  const int e_begin = tiles.begin(), e_end = tiles.end();
  // The batched bins form (the production kernels): the block's scores counted from shared memory (KeptScores).
  constexpr bool kKeep = kBinSelect && kBatched;
  std::conditional_t<kKeep, KeptScores, NoScoreKeep> kept{};
  if constexpr (kKeep) kept = kept_scores(e_begin, e_end);
  score_tiles<HeadSumF32, kWideLoads, kBatched>(a, r, slot, tiles, e_begin, e_end, sc, smem, score_mark, kept);
  score_mark(kScoreMarkScored);
  // The bins forms: pass 1 of the select counted by the score blocks (index_select_bins.cuh TopByteCounts).
  if constexpr (kKeep)
    count_top_bytes<kScoreThreads, false>(KeysOfKeptScores{kept, sc}, e_begin, e_end, g_decode_top_bytes[r]);
  else if constexpr (kBinSelect)
    count_top_bytes<kScoreThreads, false>(KeysOfScoresInL2{sc}, e_begin, e_end, g_decode_top_bytes[r]);
  if constexpr (kSelector) {
    arrive_for_selector(g_decode_arrivals[r]);
    return;
  }
  // The bins forms arrive with a release / acquire pair instead of two MEMBAR.SC.GPU on the last block's path.
  constexpr DecodeArrival kArrival = kBinSelect ? DecodeArrival::AcquireRelease : DecodeArrival::Fences;
  if (!decode_arrive<kArrival>(g_decode_arrivals[r], tiles.active, last)) return;
  mark(kMarkTicket);
  // The select reads the scores five times: from shared memory (the score staging area, free now) when they fit,
  // which holds 17K scores at dim 128 (a 68K context).
  const bool in_shared = size_t(n) * sizeof(float) <= score_smem_bytes<HeadSumF32, kWideLoads>(a.dim);
  if constexpr (kBinSelect) {
    select_counted<kScoreThreads>(g_decode_top_bytes[r], KeysOfScoresInL2{sc}, RowsInPool{a.keys, slot}, n,
                                  in_shared, reinterpret_cast<uint32_t*>(smem), [&](int) { return a.topk; }, out, sh,
                                  mark);
  } else if (in_shared) {
    for (int e = int(threadIdx.x); e < n; e += kScoreThreads) smem[e] = __ldcg(sc + e);
    __syncthreads();
    select_top_entries<kScoreThreads>(ScoresInShared{smem}, n, a.topk, a.keys, slot, out, sh);
  } else {
    select_top_entries<kScoreThreads>(ScoresInL2{sc}, n, a.topk, a.keys, slot, out, sh);
  }
  if (threadIdx.x == 0) g_decode_arrivals[r] = 0u;  // every active block has arrived: ready for the next launch
}

template <bool kBinSelect, bool kWideLoads>
__global__ void __launch_bounds__(kScoreThreads) index_decode_select_kernel(SelectArgs a) {
  decode_select_row<kBinSelect, kWideLoads, DefaultScoreShape, false>(a, NoSelectMarks{});
}
// The other score shapes (DEEPINFER_INDEX_SCORE_SHAPE); the default's kernel keeps its name and code above.
template <bool kBinSelect, bool kWideLoads, class Shape>
__global__ void __launch_bounds__(kScoreThreads) index_decode_select_shaped_kernel(SelectArgs a) {
  decode_select_row<kBinSelect, kWideLoads, Shape, false>(a, NoSelectMarks{});
}
// The bins form with the batched staging (DEEPINFER_INDEX_QUERY_STAGING=batched), every score shape; the loop
// staging's kernels keep their names and code above. At least kBatchedMinBlocks (2) blocks an SM (the grid has 2 an
// SM; the shared memory allows 3): up to 128 registers, which the batch's 8 query and 4 key vectors (48 registers) need
// in flight at once (without the bound ptxas holds these kernels to 64 and issues the query loads 3 at a time between
// stores).
template <class Shape>
__global__ void __launch_bounds__(kScoreThreads, kBatchedMinBlocks) index_decode_select_batched_kernel(SelectArgs a) {
  decode_select_row<true, false, Shape, true>(a, NoSelectMarks{});
}

// The selector form (DEEPINFER_INDEX_SELECTOR=block) with the batched staging at the auto shape, each later passes'
// count (DEEPINFER_INDEX_LATER_PASSES); register bound as the batched kernel's.
template <LaterPasses kLater>
__global__ void __launch_bounds__(kScoreThreads, kBatchedMinBlocks) index_decode_selector_kernel(SelectArgs a) {
  decode_select_row<true, false, ScoreShapeAuto, true, true, kLater>(a, NoSelectMarks{});
}

// The decode kernel of a form (kBinSelect, kWideLoads) and score shape.
using DecodeKernel = void (*)(SelectArgs);
template <bool kBinSelect, bool kWideLoads>
DecodeKernel decode_select_kernel(IndexScoreShape shape) {
  switch (shape) {
    case IndexScoreShape::Tile64x1: return index_decode_select_shaped_kernel<kBinSelect, kWideLoads, ScoreShape<64, 1>>;
    case IndexScoreShape::Tile32x1: return index_decode_select_shaped_kernel<kBinSelect, kWideLoads, ScoreShape<32, 1>>;
    case IndexScoreShape::Auto: return index_decode_select_shaped_kernel<kBinSelect, kWideLoads, ScoreShapeAuto>;
    default: return index_decode_select_kernel<kBinSelect, kWideLoads>;
  }
}
// The bins form's batched-staging kernel of a score shape.
DecodeKernel decode_select_batched_kernel(IndexScoreShape shape) {
  switch (shape) {
    case IndexScoreShape::Tile64x1: return index_decode_select_batched_kernel<ScoreShape<64, 1>>;
    case IndexScoreShape::Tile32x1: return index_decode_select_batched_kernel<ScoreShape<32, 1>>;
    case IndexScoreShape::Auto: return index_decode_select_batched_kernel<ScoreShapeAuto>;
    default: return index_decode_select_batched_kernel<DefaultScoreShape>;
  }
}
// Whether a decode launch of score_blocks blocks a row takes the selector form: switched on, the bins form with the
// batched staging at auto, and room for its one more block a row (selector_fits; the ticket runs elsewhere).
bool selector_form(IndexDecodeForm form, bool batched, IndexScoreShape shape, unsigned score_blocks, int rows) {
  return index_selector() == IndexSelector::Block && form == IndexDecodeForm::Bins && batched &&
         shape == IndexScoreShape::Auto && selector_fits(score_blocks, rows);
}
// The selector form's kernel of the later passes' switch.
DecodeKernel decode_selector_kernel() {
  return index_later_passes() == IndexLaterPasses::Plain ? index_decode_selector_kernel<LaterPasses::Plain>
                                                         : index_decode_selector_kernel<LaterPasses::Match>;
}

// ---- Diagnostics (indexer_decode_select_phases, and index_select_stamps in the model): the bins kernel with row 0's
// stamps.

// Its register bound is its production kernel's (index_decode_select_batched_kernel's: kBatchedMinBlocks).
// kModelRecord: stamps is a model record (index_select_stamps, select_stamps.cuh), written at every launch without a
// host reset; otherwise indexer_decode_select_phases' buffer (its host sets kStampEntry to ~0 and zeroes the rest).
// runs: 2 for the warm rerun (PhaseStamps, select_stamps.cuh).
// kSelector, kLater: the selector form's (decode_select_row; its block 0 selects, so score block 0 is block 1).
template <class Shape, bool kBatched, bool kModelRecord = false, bool kSelector = false,
          LaterPasses kLater = LaterPasses::Match>
__global__ void __launch_bounds__(kScoreThreads, kBatched ? kBatchedMinBlocks : 1)
    index_decode_select_phases_kernel(SelectArgs a, unsigned long long* stamps, int runs) {
  const int selectors = kSelector ? 1 : 0;
  const bool block0 = blockIdx.x == unsigned(selectors) && blockIdx.y == 0;  // row 0's score block 0
  if (block0 && threadIdx.x == 0) stamps[kStampScoreStart] = clock64();
  // Row 0 tickets (and so closes the record's accumulators) where it selects among more entries than topk.
  const bool row0_record = kModelRecord && blockIdx.y == 0 && a.visible_entries(0) > a.topk;
  if constexpr (kModelRecord) {
    if (blockIdx.y == 0 && threadIdx.x == 0) {
      const int n = a.visible_entries(0);
      model_select_start<Shape>(n, n > a.topk, stamps, int(gridDim.x) - selectors, int(blockIdx.x) - selectors);
    }
  } else {
    if (blockIdx.y == 0 && threadIdx.x == 0) atomicMin(stamps + kStampEntry, dev::globaltimer_ns());
  }
  const PhaseStamps<kModelRecord> marks{blockIdx.y == 0 ? stamps : nullptr, runs};
  decode_select_row<true, false, Shape, kBatched, kSelector, kLater>(
      a, marks, ScoreStamps{block0 ? stamps : nullptr, row0_record ? stamps : nullptr});
}

// The phases kernel of a score shape and staging.
using PhasesKernel = void (*)(SelectArgs, unsigned long long*, int);
template <bool kBatched, bool kModelRecord = false>
PhasesKernel decode_select_phases_kernel(IndexScoreShape shape) {
  switch (shape) {
    case IndexScoreShape::Tile64x1:
      return index_decode_select_phases_kernel<ScoreShape<64, 1>, kBatched, kModelRecord>;
    case IndexScoreShape::Tile32x1:
      return index_decode_select_phases_kernel<ScoreShape<32, 1>, kBatched, kModelRecord>;
    case IndexScoreShape::Auto: return index_decode_select_phases_kernel<ScoreShapeAuto, kBatched, kModelRecord>;
    default: return index_decode_select_phases_kernel<DefaultScoreShape, kBatched, kModelRecord>;
  }
}

// The selector form's phases kernel (decode_selector_kernel's later passes), on a model record or a stamp buffer.
template <bool kModelRecord>
PhasesKernel decode_selector_phases_kernel() {
  return index_later_passes() == IndexLaterPasses::Plain
             ? index_decode_select_phases_kernel<ScoreShapeAuto, true, kModelRecord, true, LaterPasses::Plain>
             : index_decode_select_phases_kernel<ScoreShapeAuto, true, kModelRecord, true, LaterPasses::Match>;
}

// The host side of the stamps: indexer_decode_select_phases' 12 values (indexer_gpu.h) from a stamp buffer or record.
std::vector<double> select_phases(const unsigned long long* host) {
  std::vector<double> out{double(host[kStampTicket] - host[kStampEntry]) * 1e-3,
                          double(host[kStampEnd] - host[kStampEntry]) * 1e-3};
  out.push_back(double(host[kStampClock + kMarkKeys] - host[kStampClock + kMarkTicket]));
  unsigned long long prev = host[kStampClock + kMarkKeys];
  for (int p = 0; p < 4; ++p) {  // passes the early stop skipped: 0
    const unsigned long long t = host[kStampClock + kMarkPass + p];
    out.push_back(t ? double(t - prev) : 0.0);
    if (t) prev = t;
  }
  out.push_back(double(host[kStampClock + kMarkEmit] - prev));
  // Score block 0's phases (0 where a stamp is missing: a row that took every visible entry scores nothing).
  auto cycles = [&](int from, int to) { return host[from] && host[to] ? double(host[to] - host[from]) : 0.0; };
  out.push_back(cycles(kStampScoreStart, kStampScoreClock + kScoreMarkQueries));
  out.push_back(cycles(kStampScoreClock + kScoreMarkQueries, kStampScoreClock + kScoreMarkKeys));
  out.push_back(cycles(kStampScoreClock + kScoreMarkKeys, kStampScoreClock + kScoreMarkScored));
  out.push_back(host[kStampScored] ? double(host[kStampScored] - host[kStampEntry]) * 1e-3 : 0.0);
  return out;
}

// index_select_stamps and index_select_stamps_warm (indexer_gpu.h): DEEPINFER_INDEX_SELECT_STAMPS=1 | warm, read once.
EnvSwitch<bool> g_select_stamps{"DEEPINFER_INDEX_SELECT_STAMPS",
                                [](const char* v) { return env_equals(v, "1") || env_equals(v, "warm"); }};
EnvSwitch<bool> g_select_stamps_warm{"DEEPINFER_INDEX_SELECT_STAMPS",
                                     [](const char* v) { return env_equals(v, "warm"); }};

// The record of the layer whose indexer is `w` on the current device (the end of the file).

}  // namespace

// Layout: the tile's row offsets (int64, kSelectRowTile of them), then the packed scores of one tile.
size_t indexer_workspace_bytes(int rows, int max_entries, const IndexerGpu& w) {
  const size_t tile = size_t(std::max(std::min(rows, kSelectRowTile), 0));
  return align256(kSelectRowTile * sizeof(int64_t)) + align256(tile * size_t(std::max(max_entries, 0)) * sizeof(float));
}

namespace {

void check_query(int64_t q_lora, int rows, const IndexerGpu& w) {
  DI_CHECK(w.heads > 0 && w.dim > 0, "cuda::indexer_query: heads and dim must be positive");
  DI_CHECK(w.wq_b.n == int64_t(w.heads) * w.dim && w.wq_b.k == q_lora,
           "cuda::indexer_query: wq_b is [" + std::to_string(w.wq_b.n) + ", " + std::to_string(w.wq_b.k) +
               "], expected [" + std::to_string(int64_t(w.heads) * w.dim) + ", " + std::to_string(q_lora) + "]");
  DI_CHECK(rows >= 0, "cuda::indexer_query: negative row count");
}

void check_finish(int rows, const IndexerGpu& w, int rope_dim, const float* inv_freq) {
  DI_CHECK(w.heads > 0 && w.dim > 0, "cuda::indexer_query: heads and dim must be positive");
  DI_CHECK((w.dim & (w.dim - 1)) == 0 && w.dim % kIndexFp4Block == 0 && w.dim <= 8192,
           "cuda::indexer_query: index head dim " + std::to_string(w.dim) +
               " must be a power of two (Hadamard) and a multiple of " + std::to_string(kIndexFp4Block));
  DI_CHECK(rope_dim >= 0 && rope_dim % 2 == 0 && rope_dim <= w.dim && (rope_dim == 0 || inv_freq),
           "cuda::indexer_query: rope_dim " + std::to_string(rope_dim) + " must be even and <= " + std::to_string(w.dim));
  DI_CHECK(rows >= 0, "cuda::indexer_query: negative row count");
}

}  // namespace

void indexer_head_weights(const bf16* u, int rows, const IndexerGpu& w, float* head_w, cublasHandle_t blas,
                          cudaStream_t stream) {
  DI_CHECK(w.weights_proj && w.compressor.hidden > 0 && w.heads > 0,
           "cuda::indexer_head_weights: weights_proj / hidden / heads missing");
  DI_CHECK(rows >= 0, "cuda::indexer_head_weights: negative row count");
  if (rows == 0) return;
  const int64_t hidden = w.compressor.hidden;
  gemm_bf16(blas, u, hidden, w.weights_proj, hidden, head_w, OutType::F32, w.heads, rows, w.heads, hidden, stream);
}

void indexer_query(const uint8_t* qr_q, const float* qr_s, int64_t q_lora, const bf16* u, const int32_t* positions,
                   int rows, const IndexerGpu& w, const float* inv_freq, int rope_dim, float* q_out, bf16* q_fp4,
                   float* head_w, cublasHandle_t blas, cudaStream_t stream) {
  indexer_query_project(qr_q, qr_s, q_lora, rows, w, q_out, stream);
  indexer_head_weights(u, rows, w, head_w, blas, stream);
  indexer_query_finish(q_out, q_fp4, head_w, positions, rows, w, inv_freq, rope_dim, nullptr, stream);
}

void indexer_query_project(const uint8_t* qr_q, const float* qr_s, int64_t q_lora, int rows, const IndexerGpu& w,
                           float* q_out, cudaStream_t stream) {
  check_query(q_lora, rows, w);
  if (rows > 0) fp8_gemm(qr_q, qr_s, rows, w.wq_b, q_out, OutType::F32, stream);
}

void indexer_query_finish(const float* q_out, bf16* q_fp4, float* head_w, const int32_t* positions, int rows,
                          const IndexerGpu& w, const float* inv_freq, int rope_dim, cudaEvent_t weights_ready,
                          cudaStream_t stream) {
  check_finish(rows, w, rope_dim, inv_freq);
  if (rows == 0) return;
  if (weights_ready) DI_CUDA_CHECK(cudaStreamWaitEvent(stream, weights_ready, 0));
  // RoPE, Hadamard and FP4 of q_out into q_fp4; head_w scaled by heads^-1/2 * dim^-1/2 (model-spec §3 "Lightning
  // indexer").
  const float weight_scale = float(1.0 / std::sqrt(double(w.heads)) / std::sqrt(double(w.dim)));
  query_finish_kernel<true><<<unsigned(int64_t(rows) * w.heads), kQueryThreads, size_t(w.dim) * sizeof(float),
                                 stream>>>(
      q_out, q_fp4, head_w, positions, w.heads, w.dim, inv_freq, rope_dim, weight_scale);
  DI_CUDA_CHECK_LAUNCH("query_finish_kernel<hadamard>");
}

void indexer_select(const bf16* q, const float* head_w, const int32_t* slots, const int32_t* positions, int rows,
                    const IndexerGpu& w, const PagedPool& keys, int32_t* rows_out, void* workspace,
                    cudaStream_t stream) {
  check_select_heads("cuda::indexer_select", w.heads, w.dim, w.topk);
  DI_CHECK(w.compressor.ratio > 0, "cuda::indexer_select: the index compressor has no ratio");
  check_select_keys("cuda::indexer_select", keys, w.dim);
  check_select_queries("cuda::indexer_select", q);
  DI_CHECK(rows >= 0, "cuda::indexer_select: negative row count");
  if (rows == 0) return;

  const int capacity = keys.max_pages * keys.page_size;
  int64_t* offsets = static_cast<int64_t*>(workspace);
  float* scores = reinterpret_cast<float*>(static_cast<char*>(workspace) + align256(kSelectRowTile * sizeof(int64_t)));
  const size_t score_smem = score_smem_bytes<HeadSumF32>(w.dim);
  auto args = [&](int r0) {
    SelectArgs a;
    static_cast<SelectRows&>(a) =
        select_rows(q, head_w, slots, positions, r0, w.heads, w.dim, w.topk, w.compressor.ratio, keys, capacity);
    a.scores = scores;
    a.offsets = offsets;
    a.rows_out = rows_out + int64_t(r0) * w.topk;
    return a;
  };

  if (decode_fused() && rows <= kDecodeMaxRows) {
    const IndexDecodeForm form = index_decode_form();
    const IndexScoreShape shape = form == IndexDecodeForm::Old ? IndexScoreShape::Tile64x2 : index_score_shape();
    DI_CHECK(shape_tile_entries(shape) == 64 || capacity < (1 << 30),
             "cuda::indexer_select: key capacity too large for 32-entry score tiles");  // ShapeTiles: n * 2
    // The batched staging: the bins form only (DEEPINFER_INDEX_QUERY_STAGING, indexer_gpu.h), 16-byte aligned rows.
    const bool batched = index_score_staging() == IndexScoreStaging::Batched && batched_staging_aligned(q, keys);
    // The selector form (DEEPINFER_INDEX_SELECTOR=block): one more block a row, its block 0.
    const unsigned score_blocks = shape_score_blocks(shape_tile_entries(shape), capacity, rows);
    const bool selector = selector_form(form, batched, shape, score_blocks, rows);
    const dim3 grid(score_blocks + (selector ? 1u : 0u), unsigned(rows));
    auto* kernel = selector                       ? decode_selector_kernel()
                   : form == IndexDecodeForm::New ? decode_select_kernel<true, true>(shape)
                   : form == IndexDecodeForm::Bins
                       ? (batched ? decode_select_batched_kernel(shape) : decode_select_kernel<true, false>(shape))
                       : index_decode_select_kernel<false, false>;
    // The default shape's shared memory in every shape (decode_select_row).
    const size_t decode_smem = form == IndexDecodeForm::New ? score_smem_bytes<HeadSumF32, true>(w.dim) : score_smem;
    // Select stamps inside the model (index_select_stamps, the bins form): the phases kernel of the same shape and
    // staging on the layer's record instead.
    unsigned long long* record =
        form == IndexDecodeForm::Bins && index_select_stamps() ? select_stamp_record(w.weights_proj, stream) : nullptr;
    if (record) {
      const PhasesKernel stamped = selector  ? decode_selector_phases_kernel<true>()
                                   : batched ? decode_select_phases_kernel<true, true>(shape)
                                             : decode_select_phases_kernel<false, true>(shape);
      DI_CUDA_CHECK(cudaFuncSetAttribute(stamped, cudaFuncAttributeMaxDynamicSharedMemorySize, int(decode_smem)));
      stamped<<<grid, kScoreThreads, decode_smem, stream>>>(args(0), record, index_select_stamps_warm() ? 2 : 1);
      DI_CUDA_CHECK_LAUNCH("index_decode_select_phases_kernel");
      return;
    }
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(decode_smem)));
    kernel<<<grid, kScoreThreads, decode_smem, stream>>>(args(0));
    DI_CUDA_CHECK_LAUNCH("index_decode_select_kernel");
    return;
  }
  DI_CUDA_CHECK(cudaFuncSetAttribute(index_score_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(score_smem)));
  const unsigned chunks = unsigned((capacity + kEntriesPerBlock - 1) / kEntriesPerBlock);

  for (int r0 = 0; r0 < rows; r0 += kSelectRowTile) {
    const int tile_rows = std::min(kSelectRowTile, rows - r0);
    const SelectArgs a = args(r0);
    index_offsets_kernel<<<1, kSelectRowTile, 0, stream>>>(a, offsets, tile_rows);
    DI_CUDA_CHECK_LAUNCH("index_offsets_kernel");
    index_score_kernel<<<dim3(chunks, unsigned(tile_rows)), kScoreThreads, score_smem, stream>>>(a);
    DI_CUDA_CHECK_LAUNCH("index_score_kernel");
    index_select_kernel<<<unsigned(tile_rows), kSelectThreads, 0, stream>>>(a);
    DI_CUDA_CHECK_LAUNCH("index_select_kernel");
  }
}

// indexer_gpu.h: the decode kernel of the select by bins alone, once, eager, with row 0's phase stamps.
std::vector<double> indexer_decode_select_phases(const bf16* q, const float* head_w, const int32_t* slots,
                                                 const int32_t* positions, int rows, const IndexerGpu& w,
                                                 const PagedPool& keys, int32_t* rows_out, void* workspace,
                                                 cudaStream_t stream) {
  const std::string who = "cuda::indexer_decode_select_phases";
  check_select_heads(who, w.heads, w.dim, w.topk);
  DI_CHECK(w.compressor.ratio > 0, who + ": the index compressor has no ratio");
  check_select_keys(who, keys, w.dim);
  check_select_queries(who, q);
  DI_CHECK(rows >= 1 && rows <= kDecodeMaxRows, who + ": 1.." + std::to_string(kDecodeMaxRows) + " rows");
  const int capacity = keys.max_pages * keys.page_size;
  SelectArgs a;
  static_cast<SelectRows&>(a) =
      select_rows(q, head_w, slots, positions, 0, w.heads, w.dim, w.topk, w.compressor.ratio, keys, capacity);
  a.scores = reinterpret_cast<float*>(static_cast<char*>(workspace) + align256(kSelectRowTile * sizeof(int64_t)));
  a.offsets = static_cast<const int64_t*>(workspace);  // unread by the decode kernel
  a.rows_out = rows_out;
  const IndexScoreShape shape = index_score_shape();
  DI_CHECK(shape_tile_entries(shape) == 64 || capacity < (1 << 30),
           who + ": key capacity too large for 32-entry score tiles");  // ShapeTiles: n * 2
  const bool batched = index_score_staging() == IndexScoreStaging::Batched && batched_staging_aligned(q, keys);
  // indexer_select's choice of form (its selector form where it takes it: selector_form).
  const unsigned score_blocks = shape_score_blocks(shape_tile_entries(shape), capacity, rows);
  const bool selector = selector_form(IndexDecodeForm::Bins, batched, shape, score_blocks, rows);
  const PhasesKernel kernel = selector  ? decode_selector_phases_kernel<false>()
                              : batched ? decode_select_phases_kernel<true>(shape)
                                        : decode_select_phases_kernel<false>(shape);
  const size_t smem = score_smem_bytes<HeadSumF32>(w.dim);  // the default shape's in every shape (decode_select_row)
  DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  // A diagnostic, never captured: its own stamp buffer.
  unsigned long long* stamps = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&stamps, sizeof(unsigned long long) * kStampCount));
  std::vector<unsigned long long> host(kStampCount, 0);
  host[kStampEntry] = ~0ull;  // atomicMin's start
  DI_CUDA_CHECK(cudaMemcpyAsync(stamps, host.data(), sizeof(unsigned long long) * kStampCount,
                                cudaMemcpyHostToDevice, stream));
  const dim3 grid(score_blocks + (selector ? 1u : 0u), unsigned(rows));
  kernel<<<grid, kScoreThreads, smem, stream>>>(a, stamps, index_select_stamps_warm() ? 2 : 1);
  DI_CUDA_CHECK_LAUNCH("index_decode_select_phases_kernel");
  DI_CUDA_CHECK(cudaMemcpyAsync(host.data(), stamps, sizeof(unsigned long long) * kStampCount,
                                cudaMemcpyDeviceToHost, stream));
  DI_CUDA_CHECK(cudaStreamSynchronize(stream));
  DI_CUDA_CHECK(cudaFree(stamps));
  return select_phases(host.data());
}

// Select stamps inside the model (indexer_gpu.h index_select_stamps): the slots and each device's records.
namespace {

// One record per index source and device (V4's CSA layers, V4.1's Full and Reindex layers), weights_proj naming the
// layer (cuda/stamp_records.h, as the route stamps).
constexpr int kSelectStampSlots = 256;
StampRecords& select_records() {
  static StampRecords records{kSelectStampSlots, kRecWords};
  return records;
}

}  // namespace

// select_stamps.cuh. Null (the launch runs the production kernel) once kSelectStampSlots are taken, or where the
// device has no records yet and `stream` is capturing (no allocation there: set_index_select_stamps allocates them
// first).
unsigned long long* select_stamp_record(const void* layer, cudaStream_t stream) {
  return select_records().record(layer, stream);
}

bool index_select_stamps() { return g_select_stamps.get(); }
void set_index_select_stamps(bool on) {
  if (on) select_records().allocate();  // this device's records, outside any capture
  g_select_stamps.set(on);
}
bool index_select_stamps_warm() { return g_select_stamps_warm.get(); }
void set_index_select_stamps_warm(bool on) { g_select_stamps_warm.set(on); }

std::vector<IndexSelectStampRecord> indexer_select_stamps_read() {
  const std::vector<unsigned long long> raw = select_records().read();
  const int used = int(raw.size() / kRecWords);
  std::vector<IndexSelectStampRecord> out;
  for (int i = 0; i < used; ++i) {
    const unsigned long long* s = raw.data() + size_t(i) * kRecWords;
    IndexSelectStampRecord r;
    r.slot = i;
    r.launches = s[kRecLaunches];
    r.grid = int(s[kRecGrid]);
    r.active = int(s[kRecActive]);
    r.entries = int(s[kRecEntries]);
    r.start_spread_us = double(int64_t(s[kRecStartLatest] - s[kStampEntry])) * 1e-3;
    r.staged_latest_us = double(int64_t(s[kRecStagedLatest] - s[kStampEntry])) * 1e-3;
    r.scored_first_us = double(int64_t(s[kRecScored] - s[kStampEntry])) * 1e-3;
    r.scored_latest_us = double(int64_t(s[kRecScoredLatest] - s[kStampEntry])) * 1e-3;
    r.phases = select_phases(s);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace deepinfer::cuda
