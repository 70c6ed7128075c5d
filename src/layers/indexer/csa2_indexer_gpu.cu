// The V4.1 CSA2 indexer on the GPU (model-spec.md §4 "Indexer (index sources)"), next to its CPU reference
// csa2_indexer.cpp.
//
// Queries: the FP8 GEMM (wq_b, 32 x 32 blocks) and a cuBLAS bf16 GEMM (weights_proj) write fp32 straight into the
// outputs; one block per (row, head) then rotates and FP4-quantizes the head in shared memory with the steps of
// entry_finish.cuh, and scales the head weight.
//
// Selection, per tile of up to 128 rows (the workspace holds one tile's scores, max_entries apart):
//   score kernel  grid (entry chunks of 128, rows): a block stages the row's (up to 64, padded) head queries and
//                 head weights in shared memory, then 64 keys at a time (bf16 -> fp32), computes the head-by-entry
//                 dot products in fp32 registers (each thread 4 heads x 4 entries), and sums w_h * relu(q_h . k)
//                 over the heads in double, as csa2_index_scores does: FP4 queries times FP4 keys are exact
//                 products, so the fp32 dot products are exact sums in the usual case and the scores come out
//                 bit-identical to the CPU's;
//   select kernel one block per row: the candidate source first picks its candidate blocks, then every row its
//                 top-k. Both are the same radix select over the order-preserving uint32 image of the scores
//                 (4 passes of 8 bits; key 0 marks an entry that may not be chosen) that finds the k-th largest key
//                 and how many entries equal to it to take, then an ordered pass with block scans that emits
//                 the chosen ones in ascending order (equal scores: the lower id first, like the CPU's sort).
//
// Decode (<= 8 rows): TopK and Reindex in one launch, csa2_decode_select_kernel, V4's decode form (indexer_gpu.cu
// index_decode_select_kernel, bench/gpu/NOTES.md "Decode select by bins"): score blocks per 64-entry tile (or V4's
// other score shapes, DEEPINFER_CSA2_SCORE_SHAPE: csa2_indexer_gpu.h; V4's batched staging,
// DEEPINFER_INDEX_QUERY_STAGING: indexer_gpu.h), the row's last block selects with select_by_bins
// (index_select_bins.cuh) over the same keys. Same selection, entry for entry.
// The only decode form since run 86 (bench/gpu/NOTES.md "V4.1 CSA2 indexer: decode select by bins": V4.1-Flash
// decode 2.5 % faster at b1, 0.8 % at b8, neutral at b64 / b256). The candidate source (its block selection is a second
// top-k over block maxima) in the same launch too, csa2_decode_candidates_kernel: then the blocks selected by bins in
// the same last block (bench/gpu/NOTES.md "V4.1 CSA2 indexer: the candidate source's decode select by bins"; the only
// decode form since run 92: V4.1 batch 1 -1.2 %, batch 8 -0.4 %), unless its chosen block ids do not fit the shared
// area; prefill steps (> 8 rows) take the split kernels.
//
// The faster design (decode work, not needed for correctness): the same tensor-core scoring and packed FP4 key
// pool as described in indexer_gpu.cu, and for the candidate source a per-block max fused into the scoring
// epilogue so that the block selection reads 1/8 of the scores.
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "cuda/blas.h"
#include "cuda/check.h"
#include "cuda/fast_div.h"
#include "cuda/launch.h"
#include "layers/compressor/entry_finish.cuh"
#include "layers/indexer/csa2_indexer_gpu.h"
#include "layers/indexer/index_scoring.cuh"
#include "layers/indexer/index_select_bins.cuh"
#include "layers/indexer/indexer_gpu.h"  // index_select_stamps
#include "layers/indexer/select_stamps.cuh"

namespace deepinfer::cuda {

namespace {

using namespace index_scoring;

constexpr int kSelectRowTile = 128;  // rows whose scores the workspace holds at once

struct SelectArgs : SelectRows {  // max_visible: min(per-slot capacity of the key pages, max_entries)
  float* scores;        // [tile rows, score_stride]
  int64_t score_stride;
  Csa2Selection selection;
  CandidateBlocks candidates;  // flags of the tile's first row
  // The decode kernels' entry -> candidate block: candidates.block_size for Reindex rows; INT_MAX for the others, whose
  // keys read kEveryEntryAllowed (Csa2KeysInL2).
  FastDiv entry_blocks{INT_MAX};
  int32_t* rows_out;           // [tile rows, topk]
};

__global__ void __launch_bounds__(kScoreThreads) csa2_score_kernel(SelectArgs a) {
  extern __shared__ __align__(16) float smem[];  // 16: score_entries's ldmatrix rows and 16-byte key stores
  const int r = int(blockIdx.y);
  const int n = a.visible_entries(r);
  const int e_begin = int(blockIdx.x) * kEntriesPerBlock;
  if (e_begin >= n) return;
  score_entries<HeadSumF64>(a.q + int64_t(r) * a.heads * a.dim, a.head_w + int64_t(r) * a.heads, a.heads, a.dim,
                            a.keys, a.slots[r], e_begin, n, a.scores + int64_t(r) * a.score_stride, smem);
}

// select_index_topk's eligibility as a key of the radix selects (split and decode kernels): a -inf score is never chosen, a
// Reindex row chooses only inside its candidate blocks (allowed: the row's flags; null for TopK); key 0 marks an
// entry that may not be chosen. `barred`: outside the row's candidate blocks.
__device__ __forceinline__ uint32_t entry_key(float s, bool barred) {
  return s == -INFINITY || barred ? 0u : order_key(s);
}
__device__ __forceinline__ uint32_t entry_key(float s, const uint8_t* allowed, int e, int block_size) {
  return entry_key(s, allowed && !allowed[e / block_size]);
}

// select_candidate_blocks' block score as a key of the selects (the split radix kernel's and the decode candidate
// kernel's): the newest visible block (b == blocks - 1) forced to +inf, every other block the max over its visible
// entries (fmaxf from -inf: a NaN score counts for nothing, as std::max in the CPU's loop), and key 0 (never chosen)
// for a block whose score is -inf (model-spec §4). score_at(e): the row's score of entry e.
template <class ScoreAt>
__device__ __forceinline__ uint32_t candidate_block_key(const ScoreAt& score_at, int b, int blocks, int n,
                                                        int block_size) {
  if (b == blocks - 1) return order_key(INFINITY);
  float m = -INFINITY;
  for (int e = b * block_size; e < min(n, (b + 1) * block_size); ++e) m = fmaxf(m, score_at(e));
  return m == -INFINITY ? 0u : order_key(m);
}

struct RadixShared {
  unsigned hist[256];
  uint32_t prefix;
  int need;
};

using SelectScan = cub::BlockScan<int, kSelectThreads>;

// The k-th largest nonzero key among key_at(0 .. n-1), by radix select from the top byte down: after the pass for
// `shift`, `prefix` holds the high bits of the k-th largest key and `need` how many keys with exactly those high
// bits still belong to the top k. Returns the threshold and sets `need` (>= 1) to the number of keys equal to it
// to take; when no more than k keys are eligible, returns 0 with need 0 (take them all).
template <class KeyAt>
__device__ uint32_t radix_threshold(const KeyAt& key_at, int n, int k, RadixShared& sh, int& need_out) {
  int eligible = 0;
  for (int base = 0; base < n; base += kSelectThreads) {  // uniform trip count: every thread reaches the barrier
    const int i = base + int(threadIdx.x);
    eligible += __syncthreads_count(i < n && key_at(i) != 0u);
  }
  if (eligible <= k) {
    need_out = 0;
    return 0u;
  }
  uint32_t prefix = 0, mask = 0;
  int need = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    radix_histogram<kSelectThreads, true>(key_at, n, shift, mask, prefix, sh.hist);
    if (threadIdx.x == 0) {
      int above = 0, b = 255;
      for (; b > 0; --b) {
        if (above + int(sh.hist[b]) >= need) break;
        above += int(sh.hist[b]);
      }
      sh.prefix = prefix | (uint32_t(b) << shift);
      sh.need = need - above;
    }
    __syncthreads();
    prefix = sh.prefix;
    need = sh.need;
    mask |= 0xFFu << shift;
    __syncthreads();  // everyone has read sh.prefix / sh.need before the next pass rewrites them
  }
  need_out = need;
  return prefix;
}

// Emits, in ascending index order, every eligible key above `threshold` and the first `need` keys equal to it;
// emit(place, i) gets the running place of each. Returns how many were emitted.
template <class KeyAt, class Emit>
__device__ int emit_ascending(const KeyAt& key_at, int n, uint32_t threshold, int need,
                              SelectScan::TempStorage& scan_tmp, const Emit& emit) {
  int written = 0, ties_seen = 0;
  for (int base = 0; base < n; base += kSelectThreads) {
    const int i = base + int(threadIdx.x);
    const uint32_t key = i < n ? key_at(i) : 0u;
    const int above = key != 0u && key > threshold, tie = key != 0u && key == threshold;
    int tie_rank, ties;
    SelectScan(scan_tmp).ExclusiveSum(tie, tie_rank, ties);
    __syncthreads();
    const int take = above || (tie && ties_seen + tie_rank < need);
    int place, taken;
    SelectScan(scan_tmp).ExclusiveSum(take, place, taken);
    __syncthreads();
    if (take) emit(written + place, i);
    written += taken;
    ties_seen += ties;
  }
  return written;
}

__global__ void __launch_bounds__(kSelectThreads) csa2_select_kernel(SelectArgs a) {
  __shared__ SelectScan::TempStorage scan_tmp;
  __shared__ RadixShared sh;

  const int r = int(blockIdx.x);
  const int n = a.visible_entries(r);
  const int slot = a.slots[r];
  const float* sc = a.scores + int64_t(r) * a.score_stride;
  const int block_size = a.candidates.block_size;

  if (a.selection == Csa2Selection::CandidateSource) {
    // select_candidate_blocks: block score = max over its visible entries, the newest block forced to +inf, a
    // block whose score is -inf never chosen, the best topk_blocks kept (model-spec §4).
    uint8_t* flags = a.candidates.flags + int64_t(r) * a.candidates.stride;
    const int blocks = (n + block_size - 1) / block_size;
    auto block_key = [&](int b) {
      return candidate_block_key([&](int e) { return sc[e]; }, b, blocks, n, block_size);
    };
    for (int b = int(threadIdx.x); b < a.candidates.stride; b += kSelectThreads) flags[b] = 0;
    __syncthreads();
    int need;
    const uint32_t threshold = radix_threshold(block_key, blocks, a.candidates.topk_blocks, sh, need);
    emit_ascending(block_key, blocks, threshold, need, scan_tmp, [&](int, int b) { flags[b] = 1; });
  }

  // select_index_topk: a -inf score is never chosen; Reindex rows choose only inside their candidate blocks.
  const uint8_t* allowed =
      a.selection == Csa2Selection::Reindex ? a.candidates.flags + int64_t(r) * a.candidates.stride : nullptr;
  auto key_at = [&](int e) { return entry_key(sc[e], allowed, e, block_size); };
  int need;
  const uint32_t threshold = radix_threshold(key_at, n, a.topk, sh, need);
  int32_t* out = a.rows_out + int64_t(r) * a.topk;
  const int written = emit_ascending(key_at, n, threshold, need, scan_tmp, [&](int place, int e) {
    if (place < a.topk) out[place] = int32_t(pool_row(a.keys, slot, e));
  });
  for (int i = written + int(threadIdx.x); i < a.topk; i += kSelectThreads) out[i] = -1;
}

// ---- Decode (<= 8 rows): scores and top-k in one launch, for TopK and Reindex.
//
// Grid (score blocks, rows), as indexer_gpu.cu's index_decode_select_kernel, with its tile split (DecodeTiles, or
// ShapeTiles in another score shape) and arrival (decode_arrive, release / acquire at device scope) from
// index_select_bins.cuh: a row's active blocks score their tiles with score_entries<HeadSumF64> (the split score
// kernel's arithmetic: each entry's score does not depend on the tile it falls in, nor on the score shape: its dot
// products are the same mma sequence and the double sum of its exactly rounded head terms the same chain)
// into the row's place of the workspace; the row's last block selects and sets the arrival
// count back to zero. Each score block also counts its entries' keys (entry_key) by top byte, and the nonzero ones
// (the eligible entries), into the row's counters (count_top_bytes: pass 1 of the select, done before the ticket).
// The last block stages the keys in shared memory (the score staging area, free now; 17K entries at dim 128) and
// select_by_bins starts at pass 1's bin search (FirstPass::Counted); it takes the top k = min(eligible, topk) of the
// n keys. When fewer than topk entries are eligible, k = eligible makes the k-th
// largest key the smallest nonzero one: every eligible entry is taken and no key-0 entry, as radix_threshold's "take
// them all"; otherwise the k-th largest key is nonzero and the key-0 entries lie below it. Either way the same set
// under the same tie rule (equal keys: the lower entry) in ascending entry order, then -1 past k: csa2_select_kernel's
// output bit for bit.
//
// The arrival counts start at zero and are left at zero: two of these launches must not run at the same time on one
// device (the model runs its indexer on the main stream only).
__device__ unsigned int g_csa2_decode_arrivals[kDecodeMaxRows];  // kDecodeMaxRows: index_select_bins.cuh
// Each row's pass-1 histogram and eligible count, added by its score blocks (count_top_bytes), read and set back to
// zero by its last block (CountedTopBytes): zero at rest, like the arrival counts.
__device__ TopByteCounts g_csa2_decode_top_bytes[kDecodeMaxRows];

// The keys computed from the workspace's scores through L2 (__ldcg: other blocks wrote them during this launch), for
// the decode select's key staging and for select_by_bins where the keys do not fit the shared copy. The flag load
// has no condition, neither on the score nor on the row's kind: a TopK row reads kEveryEntryAllowed with a block size
// no entry reaches (Csa2KeysInL2::of). With entry_key's conditional read the loads ran one at a time (each key's
// score, then its flag behind a branch, TopK rows too: the pointer was null only at run time); run 187's stamps have
// the staging at 6.7 K cycles for a TopK row of 2048 entries and 17.6 K for a Reindex row of 4097, where the candidate
// source's kernel (no flag code) took 3.1 K at 4097. Now a thread's eight scores and flags go out together (SASS).
// Same keys either way.
// The entry's block is a multiply and a shift (FastDiv, SelectArgs::entry_blocks), not a division by a run-time int
// (~25 instructions a key in the last block's staging).
__device__ const uint8_t kEveryEntryAllowed[1] = {1};
struct Csa2KeysInL2 {
  const float* sc;
  const uint8_t* allowed;  // the row's candidate flags, or kEveryEntryAllowed
  FastDiv block;           // the flags' block size; INT_MAX with kEveryEntryAllowed: every entry reads its byte 0
  __device__ __forceinline__ uint32_t operator()(int e) const {
    return entry_key(__ldcg(sc + e), allowed[block.div(e)] == 0);
  }
  // A row's keys; `allowed` null (TopK, the candidate source): no entry barred. `blocks`: SelectArgs::entry_blocks
  // (INT_MAX where allowed is null).
  __device__ __forceinline__ static Csa2KeysInL2 of(const float* sc, const uint8_t* allowed, const FastDiv& blocks) {
    return Csa2KeysInL2{sc, allowed ? allowed : kEveryEntryAllowed, blocks};
  }
};
// A score block's keys for its pass-1 count with its kept scores (index_select_bins.cuh KeptScores): the score from
// shared memory where the block kept it, the flag through L1 (csa2_decode_select_row prefetches the block's flags
// there before it scores). The same score and flag as Csa2KeysInL2's, so the same key.
struct Csa2KeysOfKept {
  KeptScores kept;
  Csa2KeysInL2 l2;
  __device__ __forceinline__ uint32_t operator()(int e) const {
    return entry_key(kept.score(l2.sc, e), l2.allowed[l2.block.div(e)] == 0);
  }
};

// ---- Decode, the candidate source (bench/gpu/NOTES.md "V4.1 CSA2 indexer: the candidate source's decode select by
// bins"; the only decode form since run 92).
// csa2_decode_candidates_kernel is csa2_decode_select_kernel (the candidate source's own top-k is TopK's: unmasked)
// whose last block, after the row's top-k, selects the row's candidate blocks as csa2_select_kernel's first step
// does, from the same scores:
//   keys    one pass over the row's flags: each visible block's key (candidate_block_key, the radix kernel's
//           definition, its entries' scores read through L2), each flag written as if every eligible block were kept
//           (key != 0; 0 past the visible blocks), the eligible blocks counted (as the entry keys are);
//   select  only when more blocks than candidate_topk_blocks are eligible (rows past topk_blocks * block_size
//           entries: 16K at V4.1's 2048 x 8): select_by_bins takes the top topk_blocks block keys (staged in the
//           shared area, free after the top-k, when they and the chosen ids fit; else from L2), writes the chosen
//           block ids into the shared area, and the row's flags are cleared and the chosen ones set.
// The same blocks as radix_threshold + emit_ascending over the same keys: with no more eligible blocks than
// topk_blocks both keep every nonzero key; otherwise the topk_blocks-th largest key is nonzero, so select_by_bins's
// set never holds a key-0 block and is the radix select's (same tie rule: equal keys, the lower block), as argued for
// the entries above. The chosen ids need topk_blocks words of the area (csa2_indexer_select checks).

// The row's scores through L2, and its candidate blocks' keys computed from them.
struct ScoresInL2 {
  const float* sc;
  __device__ __forceinline__ float operator()(int e) const { return __ldcg(sc + e); }
};
struct CandidateBlockKeysInL2 {
  const float* sc;
  int n, blocks, block_size;
  __device__ __forceinline__ uint32_t operator()(int b) const {
    return candidate_block_key(ScoresInL2{sc}, b, blocks, n, block_size);
  }
};
// select_by_bins' "pool rows" of the block selection: the block ids themselves.
struct BlockIds {
  __device__ __forceinline__ int64_t operator()(int b) const { return b; }
};

// The candidate blocks of row r (n > 0 visible entries, scores sc) by the last block, every thread; `area`: the
// dynamic shared memory (score_smem_bytes, free), `eligible_blocks`: a __shared__ count at zero.
__device__ __forceinline__ void decode_candidate_blocks(const SelectArgs& a, int r, int n, const float* sc,
                                                        uint32_t* area, BinSelectShared<kScoreThreads>& sh,
                                                        int& eligible_blocks) {
  const int tid = int(threadIdx.x);
  const int block_size = a.candidates.block_size, keep = a.candidates.topk_blocks;
  const int blocks = (n + block_size - 1) / block_size;
  uint8_t* flags = a.candidates.flags + int64_t(r) * a.candidates.stride;
  const CandidateBlockKeysInL2 keys_l2{sc, n, blocks, block_size};
  const int ids_at = (blocks + 3) / 4 * 4;  // the chosen ids after the keys, 16-byte aligned
  const bool in_shared = (size_t(ids_at) + size_t(keep)) * sizeof(uint32_t) <= score_smem_bytes<HeadSumF64>(a.dim);
  int mine = 0;
  for (int b = tid; b < a.candidates.stride; b += kScoreThreads) {  // blocks <= stride (csa2_indexer_select)
    const uint32_t key = b < blocks ? keys_l2(b) : 0u;
    if (in_shared && b < blocks) area[b] = key;
    flags[b] = key != 0u;
    mine += key != 0u;
  }
  mine = __reduce_add_sync(0xFFFFFFFFu, mine);
  if ((tid & 31) == 0 && mine != 0) atomicAdd(&eligible_blocks, mine);
  __syncthreads();
  if (eligible_blocks <= keep) return;
  int32_t* chosen = reinterpret_cast<int32_t*>(area) + (in_shared ? ids_at : 0);
  if (in_shared) {
    select_by_bins<kScoreThreads>(KeysInShared{area}, BlockIds{}, blocks, keep, chosen, sh);
  } else {
    select_by_bins<kScoreThreads>(keys_l2, BlockIds{}, blocks, keep, chosen, sh);
  }
  for (int b = tid; b < blocks; b += kScoreThreads) flags[b] = 0;
  __syncthreads();  // the clears before the sets (chosen is complete: select_by_bins ends on a barrier)
  for (int i = tid; i < keep; i += kScoreThreads) flags[chosen[i]] = 1;
}

// ---- The selector form (DEEPINFER_CSA2_SELECTOR=block, csa2_indexer_gpu.h; index_select_bins.cuh selector_select,
// shared with V4's since session 66). The selector is the row's block 0 (the first dispatched), score block i its block
// i + 1. Runs 196-197: V4.1's selects end 31.6 -> 24.8 us after their first score block's start, batch 1 -0.75 %. Not
// rehearsed: the candidate source's block selection (decode_candidate_blocks, after the select).
__device__ RehearsalScores g_csa2_rehearsal_scores = rehearsal_scores();
__device__ int32_t g_csa2_rehearsal_out[kDecodeMaxRows][kRehearsalTopk];

template <class Marks>
__device__ __forceinline__ int csa2_selector_select(const SelectArgs& a, int r, int n, int active, int slot,
                                                    const Csa2KeysInL2& keys_l2, uint32_t* keys_sh, int32_t* out,
                                                    BinSelectShared<kScoreThreads>& sh, Marks mark) {
  using Row = SelectorRow<Csa2KeysInL2, RowsInPool>;
  const bool in_shared = size_t(n) * sizeof(uint32_t) <= score_smem_bytes<HeadSumF64>(a.dim);
  const RowsInPool rows{a.keys, slot};
  const Row rehearsal{true,
                      &g_csa2_decode_arrivals[r],
                      active,
                      &g_csa2_decode_top_bytes[r],
                      Csa2KeysInL2::of(g_csa2_rehearsal_scores.v, nullptr, FastDiv(INT_MAX)),
                      rows,
                      n,
                      in_shared,
                      g_csa2_rehearsal_out[r]};
  const Row real{true, &g_csa2_decode_arrivals[r], active, &g_csa2_decode_top_bytes[r], keys_l2, rows, n, in_shared,
                 out};
  return selector_select<kScoreThreads>(
      rehearsal, [&] { return real; }, [&](int eligible) { return min(eligible, a.topk); }, keys_sh, sh, mark);
}

// The decode kernels' body: kCandidates adds the candidate blocks (the candidate source), else TopK / Reindex.
// mark / score_mark: the last block's and score block 0's phase marks (csa2_decode_select_phases_kernel's stamps;
// none in the production kernels, whose code they leave unchanged): the ticket, the keys staged, select_by_bins's
// passes and emit (the candidate source's block selection after it is not stamped).
// Shape (ScoreShape or ScoreShapeAuto, DEEPINFER_CSA2_SCORE_SHAPE): the score blocks' tiles (ShapeTiles) and
// score_entries calls (score_tiles), index_select_bins.cuh's as V4's decode kernel's. The dynamic shared memory stays
// the default shape's (the launch's), so everything after the arrival is the same code in every shape. kBatched: the
// score blocks' batched staging (DEEPINFER_INDEX_QUERY_STAGING=batched, indexer_gpu.h; index_scoring.cuh StagedQueries
// / StagedKeys: V4.1's 32 heads stage zero rows past them, as the loop does), the same scores bit for bit.
// kSelector: the selector form (above): the grid has one more block a row, which selects.
template <bool kCandidates, class Shape, bool kBatched = false, bool kSelector = false, class Marks = NoSelectMarks,
          class ScoreMarks = NoScoreMarks>
__device__ __forceinline__ void csa2_decode_select_row(const SelectArgs& a, Marks mark = {},
                                                       ScoreMarks score_mark = {}) {
  extern __shared__ __align__(16) float smem[];  // 16: select_by_bins reads its keys as uint4
  __shared__ BinSelectShared<kScoreThreads> sh;
  __shared__ bool last;
  __shared__ int eligible_blocks;  // kCandidates
  pdl_launch_dependents();  // as V4's decode select (indexer_gpu.cu decode_select_row): the attention's split may start
  const int r = int(blockIdx.y);
  const int n = a.visible_entries(r);
  const int slot = a.slots[r];
  int32_t* out = a.rows_out + int64_t(r) * a.topk;
  if (n <= 0) {
    if (blockIdx.x == 0) {
      for (int i = int(threadIdx.x); i < a.topk; i += kScoreThreads) out[i] = -1;
      if constexpr (kCandidates)  // select_candidate_blocks of no entries: none
        for (int b = int(threadIdx.x); b < a.candidates.stride; b += kScoreThreads)
          a.candidates.flags[int64_t(r) * a.candidates.stride + b] = 0;
    }
    return;
  }
  // The selector form: block 0 selects (dispatched first: its rehearsal starts with the launch), 1.. score.
  const int score_blocks = int(gridDim.x) - (kSelector ? 1 : 0);
  const ShapeTiles<Shape> tiles(n, score_blocks, int(blockIdx.x) - (kSelector ? 1 : 0));
  const bool selector = kSelector && blockIdx.x == 0;
  if (!selector && !tiles.block_active()) return;

  float* sc = a.scores + int64_t(r) * a.score_stride;
  const int e_begin = tiles.begin(), e_end = tiles.end();
  // kBatched (the production kernels): the block's scores counted from shared memory (KeptScores), and the flags its
  // keys read (the first and last entry's: at most two lines, one byte for TopK rows) towards L1 before the scoring,
  // so that the count makes no L2 round trip (its flag loads were issued with the scores' reads, after the scoring).
  std::conditional_t<kBatched, KeptScores, NoScoreKeep> kept{};
  if (!selector) {
    if constexpr (kBatched) {
      kept = kept_scores(e_begin, e_end);
      if (kept.on && threadIdx.x < 2) {
        const uint8_t* flags = !kCandidates && a.selection == Csa2Selection::Reindex
                                   ? a.candidates.flags + int64_t(r) * a.candidates.stride
                                   : kEveryEntryAllowed;
        const uint8_t* flag = flags + a.entry_blocks.div(threadIdx.x == 0 ? e_begin : e_end - 1);
        prefetch_l1(flag);
      }
    }
    score_tiles<HeadSumF64, false, kBatched>(a, r, slot, tiles, e_begin, e_end, sc, smem, score_mark, kept);
    score_mark(kScoreMarkScored);
  }
  const uint8_t* allowed = !kCandidates && a.selection == Csa2Selection::Reindex
                               ? a.candidates.flags + int64_t(r) * a.candidates.stride
                               : nullptr;
  const Csa2KeysInL2 keys_l2 = Csa2KeysInL2::of(sc, allowed, a.entry_blocks);
  uint32_t* keys_sh = reinterpret_cast<uint32_t*>(smem);
  if (!selector) {  // pass 1 and the eligible count by the score blocks (index_select_bins.cuh TopByteCounts)
    if constexpr (kBatched)
      count_top_bytes<kScoreThreads>(Csa2KeysOfKept{kept, keys_l2}, e_begin, e_end, g_csa2_decode_top_bytes[r]);
    else
      count_top_bytes<kScoreThreads>(keys_l2, e_begin, e_end, g_csa2_decode_top_bytes[r]);
  }
  if constexpr (kCandidates) {
    if (threadIdx.x == 0) eligible_blocks = 0;  // the barriers that follow order it before the block keys' counts
  }
  int k;
  if constexpr (kSelector) {
    if (!selector) {
      arrive_for_selector(g_csa2_decode_arrivals[r]);
      return;
    }
    k = csa2_selector_select(a, r, n, tiles.active, slot, keys_l2, keys_sh, out, sh, mark);
  } else {
    if (!decode_arrive<DecodeArrival::AcquireRelease>(g_csa2_decode_arrivals[r], tiles.active, last)) return;
    mark(kMarkTicket);
    const bool in_shared = size_t(n) * sizeof(uint32_t) <= score_smem_bytes<HeadSumF64>(a.dim);
    k = select_counted<kScoreThreads>(
        g_csa2_decode_top_bytes[r], keys_l2, RowsInPool{a.keys, slot}, n, in_shared, keys_sh,
        [&](int eligible) { return min(eligible, a.topk); }, out, sh, mark);
  }
  for (int i = k + int(threadIdx.x); i < a.topk; i += kScoreThreads) out[i] = -1;
  if constexpr (kCandidates) {
    __syncthreads();  // the shared keys and `sh` are free (select_by_bins ends on a barrier too; kept for clarity)
    decode_candidate_blocks(a, r, n, sc, keys_sh, sh, eligible_blocks);
  }
  if (threadIdx.x == 0) g_csa2_decode_arrivals[r] = 0u;  // every active block has arrived: ready for the next launch
}

__global__ void __launch_bounds__(kScoreThreads) csa2_decode_select_kernel(SelectArgs a) {
  csa2_decode_select_row<false, DefaultScoreShape>(a);
}
__global__ void __launch_bounds__(kScoreThreads) csa2_decode_candidates_kernel(SelectArgs a) {
  csa2_decode_select_row<true, DefaultScoreShape>(a);
}
// The other score shapes (DEEPINFER_CSA2_SCORE_SHAPE); the default's kernels keep their names and code above.
template <bool kCandidates, class Shape>
__global__ void __launch_bounds__(kScoreThreads) csa2_decode_select_shaped_kernel(SelectArgs a) {
  csa2_decode_select_row<kCandidates, Shape>(a);
}

// The batched staging (DEEPINFER_INDEX_QUERY_STAGING=batched) in every score shape; the loop staging's kernels keep
// their names and code above. Up to 128 registers (kBatchedMinBlocks, index_scoring.cuh: a batch's loads in flight).
template <bool kCandidates, class Shape>
__global__ void __launch_bounds__(kScoreThreads, kBatchedMinBlocks) csa2_decode_select_batched_kernel(SelectArgs a) {
  csa2_decode_select_row<kCandidates, Shape, true>(a);
}

// The selector form (DEEPINFER_CSA2_SELECTOR=block) with the batched staging (the default), at the auto and 64x2
// shapes; the other shapes and the loop staging keep the ticket.
template <bool kCandidates, class Shape>
__global__ void __launch_bounds__(kScoreThreads, kBatchedMinBlocks) csa2_decode_selector_kernel(SelectArgs a) {
  csa2_decode_select_row<kCandidates, Shape, true, true>(a);
}

// Diagnostics (index_select_stamps in the model, select_stamps.cuh): the decode kernel of the same form, shape and
// staging with row 0's stamps on the layer's record, as V4's index_decode_select_phases_kernel (indexer_gpu.cu) writes
// them. Its register bound is its production kernel's. runs: 2 for the warm rerun (PhaseStamps, select_stamps.cuh).
template <bool kCandidates, class Shape, bool kBatched, bool kSelector = false>
__global__ void __launch_bounds__(kScoreThreads, kBatched ? kBatchedMinBlocks : 1)
    csa2_decode_select_phases_kernel(SelectArgs a, unsigned long long* stamps, int runs) {
  const bool block0 = blockIdx.x == (kSelector ? 1u : 0u) && blockIdx.y == 0;  // row 0's score block 0
  if (block0 && threadIdx.x == 0) stamps[kStampScoreStart] = clock64();
  if (blockIdx.y == 0 && threadIdx.x == 0) {
    const int n = a.visible_entries(0);
    model_select_start<Shape>(n, n > 0, stamps, int(gridDim.x) - (kSelector ? 1 : 0),
                              int(blockIdx.x) - (kSelector ? 1 : 0));
  }
  const PhaseStamps<true> marks{blockIdx.y == 0 ? stamps : nullptr, runs};
  const bool row0_record = blockIdx.y == 0 && a.visible_entries(0) > 0;  // row 0 tickets: the accumulators close
  csa2_decode_select_row<kCandidates, Shape, kBatched, kSelector>(
      a, marks, ScoreStamps{block0 ? stamps : nullptr, row0_record ? stamps : nullptr});
}
// Whether a launch of this shape and staging takes the selector form (csa2_selector(); csa2_decode_selector_kernel).
// Read once a launch: its kernel and its grid (one more block a row) must agree.
// score_blocks, rows: the launch's score blocks a row and rows (the selector form only where it fits one wave:
// index_select_bins.cuh selector_fits).
bool csa2_selector_form(IndexScoreShape shape, IndexScoreStaging staging, unsigned score_blocks, int rows) {
  return csa2_selector() == Csa2Selector::Block && staging == IndexScoreStaging::Batched &&
         (shape == IndexScoreShape::Auto || shape == IndexScoreShape::Tile64x2) && selector_fits(score_blocks, rows);
}

using Csa2PhasesKernel = void (*)(SelectArgs, unsigned long long*, int);
template <bool kCandidates, bool kBatched>
Csa2PhasesKernel csa2_decode_phases_kernel(IndexScoreShape shape) {
  switch (shape) {
    case IndexScoreShape::Tile64x1: return csa2_decode_select_phases_kernel<kCandidates, ScoreShape<64, 1>, kBatched>;
    case IndexScoreShape::Tile32x1: return csa2_decode_select_phases_kernel<kCandidates, ScoreShape<32, 1>, kBatched>;
    case IndexScoreShape::Auto: return csa2_decode_select_phases_kernel<kCandidates, ScoreShapeAuto, kBatched>;
    default: return csa2_decode_select_phases_kernel<kCandidates, DefaultScoreShape, kBatched>;
  }
}
template <bool kCandidates>
Csa2PhasesKernel csa2_decode_phases_kernel(IndexScoreShape shape, IndexScoreStaging staging, bool selector) {
  if (selector)  // csa2_selector_form
    return shape == IndexScoreShape::Auto
               ? csa2_decode_select_phases_kernel<kCandidates, ScoreShapeAuto, true, true>
               : csa2_decode_select_phases_kernel<kCandidates, DefaultScoreShape, true, true>;
  return staging == IndexScoreStaging::Batched ? csa2_decode_phases_kernel<kCandidates, true>(shape)
                                               : csa2_decode_phases_kernel<kCandidates, false>(shape);
}

// The decode kernel of the candidate source (kCandidates) or TopK / Reindex, in a score shape and staging, in the
// selector form where `selector` (csa2_selector_form).
using Csa2DecodeKernel = void (*)(SelectArgs);
template <bool kCandidates>
Csa2DecodeKernel csa2_decode_kernel(IndexScoreShape shape, IndexScoreStaging staging, bool selector) {
  if (selector)
    return shape == IndexScoreShape::Auto ? csa2_decode_selector_kernel<kCandidates, ScoreShapeAuto>
                                          : csa2_decode_selector_kernel<kCandidates, DefaultScoreShape>;
  if (staging == IndexScoreStaging::Batched) {
    switch (shape) {
      case IndexScoreShape::Tile64x1: return csa2_decode_select_batched_kernel<kCandidates, ScoreShape<64, 1>>;
      case IndexScoreShape::Tile32x1: return csa2_decode_select_batched_kernel<kCandidates, ScoreShape<32, 1>>;
      case IndexScoreShape::Auto: return csa2_decode_select_batched_kernel<kCandidates, ScoreShapeAuto>;
      default: return csa2_decode_select_batched_kernel<kCandidates, DefaultScoreShape>;
    }
  }
  switch (shape) {
    case IndexScoreShape::Tile64x1: return csa2_decode_select_shaped_kernel<kCandidates, ScoreShape<64, 1>>;
    case IndexScoreShape::Tile32x1: return csa2_decode_select_shaped_kernel<kCandidates, ScoreShape<32, 1>>;
    case IndexScoreShape::Auto: return csa2_decode_select_shaped_kernel<kCandidates, ScoreShapeAuto>;
    default: return kCandidates ? csa2_decode_candidates_kernel : csa2_decode_select_kernel;
  }
}

}  // namespace

size_t csa2_indexer_workspace_bytes(int rows, int max_entries) {
  const size_t tile = size_t(std::max(std::min(rows, kSelectRowTile), 0));
  return align256(tile * size_t(std::max(max_entries, 0)) * sizeof(float));
}

void csa2_indexer_query(const uint8_t* qr_q, const float* qr_s, int64_t q_lora, const bf16* x,
                        const int32_t* positions, int rows, const Csa2IndexerGpu& w, const float* inv_freq,
                        int rope_dim, float* q_out, bf16* q_fp4, float* head_w, cublasHandle_t blas,
                        cudaStream_t stream) {
  DI_CHECK(w.heads > 0 && w.dim > 0 && w.hidden > 0, "cuda::csa2_indexer_query: heads, dim and hidden must be positive");
  DI_CHECK(w.wq_b.n == int64_t(w.heads) * w.dim && w.wq_b.k == q_lora && w.wq_b.block == 32,
           "cuda::csa2_indexer_query: wq_b is [" + std::to_string(w.wq_b.n) + ", " + std::to_string(w.wq_b.k) +
               "] with block " + std::to_string(w.wq_b.block) + ", expected [" +
               std::to_string(int64_t(w.heads) * w.dim) + ", " + std::to_string(q_lora) + "] with block 32");
  DI_CHECK(w.dim % kIndexFp4Block == 0 && w.dim <= 8192,
           "cuda::csa2_indexer_query: index head dim " + std::to_string(w.dim) + " must be a multiple of " +
               std::to_string(kIndexFp4Block));
  DI_CHECK(rope_dim >= 0 && rope_dim % 2 == 0 && rope_dim <= w.dim && (rope_dim == 0 || inv_freq),
           "cuda::csa2_indexer_query: rope_dim " + std::to_string(rope_dim) + " must be even and <= " +
               std::to_string(w.dim));
  DI_CHECK(w.weights_proj, "cuda::csa2_indexer_query: weights_proj missing");
  DI_CHECK(rows >= 0, "cuda::csa2_indexer_query: negative row count");
  if (rows == 0) return;
  fp8_gemm(qr_q, qr_s, rows, w.wq_b, q_out, OutType::F32, stream);
  gemm_bf16(blas, x, w.hidden, w.weights_proj, w.hidden, head_w, OutType::F32, w.heads, rows, w.heads, w.hidden,
            stream);
  // model-spec §4: the head weights carry (index_head_dim * index_heads)^-1/2, as one fp32 factor (csa2_index_scores).
  const float weight_scale = float(1.0 / std::sqrt(double(w.dim) * double(w.heads)));
  query_finish_kernel<false><<<unsigned(int64_t(rows) * w.heads), kQueryThreads, size_t(w.dim) * sizeof(float),
                                 stream>>>(
      q_out, q_fp4, head_w, positions, w.heads, w.dim, inv_freq, rope_dim, weight_scale);
  DI_CUDA_CHECK_LAUNCH("query_finish_kernel");
}

void csa2_indexer_select(const bf16* q, const float* head_w, const int32_t* slots, const int32_t* positions,
                         int rows, const Csa2IndexerGpu& w, int ratio, const PagedPool& keys, int max_entries,
                         Csa2Selection selection, const CandidateBlocks& candidates, int32_t* rows_out,
                         void* workspace, cudaStream_t stream) {
  check_select_heads("cuda::csa2_indexer_select", w.heads, w.dim, w.topk);
  DI_CHECK(ratio == 1 || ratio == 2, "cuda::csa2_indexer_select: ratio " + std::to_string(ratio) + " is not 1 or 2");
  check_select_keys("cuda::csa2_indexer_select", keys, w.dim);
  check_select_queries("cuda::csa2_indexer_select", q);
  DI_CHECK(max_entries >= 0, "cuda::csa2_indexer_select: negative max_entries");
  if (selection != Csa2Selection::TopK) {
    DI_CHECK(candidates.flags && candidates.block_size > 0 &&
                 int64_t(candidates.stride) * candidates.block_size >= int64_t(max_entries),
             "cuda::csa2_indexer_select: the candidate blocks need flags, a positive block size and a stride of at "
             "least ceil(max_entries / block_size) = " +
                 std::to_string(candidates.block_size > 0 ? (max_entries + candidates.block_size - 1) /
                                                                candidates.block_size
                                                          : 0));
    DI_CHECK(selection != Csa2Selection::CandidateSource || candidates.topk_blocks > 0,
             "cuda::csa2_indexer_select: candidate_topk_blocks must be positive");
  }
  DI_CHECK(rows >= 0, "cuda::csa2_indexer_select: negative row count");
  if (rows == 0) return;

  const int max_visible = std::min(keys.max_pages * keys.page_size, max_entries);
  const size_t score_smem = score_smem_bytes<HeadSumF64>(w.dim);
  auto args = [&](int r0) {  // the tile of rows that starts at row r0
    SelectArgs a;
    static_cast<SelectRows&>(a) =
        select_rows(q, head_w, slots, positions, r0, w.heads, w.dim, w.topk, ratio, keys, max_visible);
    a.scores = static_cast<float*>(workspace);
    a.score_stride = max_entries;
    a.selection = selection;
    a.candidates = candidates;
    if (candidates.flags) a.candidates.flags = candidates.flags + int64_t(r0) * candidates.stride;
    a.entry_blocks = FastDiv(selection == Csa2Selection::Reindex ? candidates.block_size : INT_MAX);
    a.rows_out = rows_out + int64_t(r0) * w.topk;
    return a;
  };

  // Decode: one launch (bench/gpu/NOTES.md "V4.1 CSA2 indexer: decode select by bins", run 86); the candidate source
  // too when its chosen block ids fit the kernel's shared area (V4.1's 2048 do; bench/gpu/NOTES.md "V4.1 CSA2 indexer:
  // the candidate source's decode select by bins", run 92), else the split kernels.
  const bool source = selection == Csa2Selection::CandidateSource;
  // The score shape (DEEPINFER_CSA2_SCORE_SHAPE): its grid, the default shape's shared memory in every shape.
  if (rows <= kDecodeMaxRows &&
      (!source || size_t(candidates.topk_blocks) * sizeof(int32_t) <= score_smem)) {
    const IndexScoreShape shape = csa2_score_shape();
    DI_CHECK(shape_tile_entries(shape) == 64 || max_visible < (1 << 30),
             "cuda::csa2_indexer_select: key capacity too large for 32-entry score tiles");  // ShapeTiles: n * 2
    // DEEPINFER_INDEX_QUERY_STAGING (indexer_gpu.h), 16-byte aligned rows.
    const IndexScoreStaging staging =
        batched_staging_aligned(q, keys) ? index_score_staging() : IndexScoreStaging::Loop;
    const unsigned score_blocks = shape_score_blocks(shape_tile_entries(shape), max_visible, rows);
    const bool selector = csa2_selector_form(shape, staging, score_blocks, rows);
    const Csa2DecodeKernel kernel = source ? csa2_decode_kernel<true>(shape, staging, selector)
                                           : csa2_decode_kernel<false>(shape, staging, selector);
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(score_smem)));
    // The selector form: one more block a row (its block 0 selects).
    const dim3 grid(score_blocks + (selector ? 1u : 0u), unsigned(rows));
    // Select stamps inside the model (index_select_stamps, indexer_gpu.h): the phases kernel of the same form, shape
    // and staging on the layer's record instead.
    if (unsigned long long* record = index_select_stamps() ? select_stamp_record(w.weights_proj, stream) : nullptr) {
      const Csa2PhasesKernel stamped = source ? csa2_decode_phases_kernel<true>(shape, staging, selector)
                                              : csa2_decode_phases_kernel<false>(shape, staging, selector);
      DI_CUDA_CHECK(cudaFuncSetAttribute(stamped, cudaFuncAttributeMaxDynamicSharedMemorySize, int(score_smem)));
      stamped<<<grid, kScoreThreads, score_smem, stream>>>(args(0), record, index_select_stamps_warm() ? 2 : 1);
      DI_CUDA_CHECK_LAUNCH("csa2_decode_select_phases_kernel");
      return;
    }
    kernel<<<grid, kScoreThreads, score_smem, stream>>>(args(0));
    DI_CUDA_CHECK_LAUNCH(source ? "csa2_decode_candidates_kernel" : "csa2_decode_select_kernel");
    return;
  }
  DI_CUDA_CHECK(cudaFuncSetAttribute(csa2_score_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(score_smem)));
  const unsigned chunks = unsigned((max_visible + kEntriesPerBlock - 1) / kEntriesPerBlock);

  for (int r0 = 0; r0 < rows; r0 += kSelectRowTile) {
    const int tile_rows = std::min(kSelectRowTile, rows - r0);
    const SelectArgs a = args(r0);
    if (chunks > 0) {
      csa2_score_kernel<<<dim3(chunks, unsigned(tile_rows)), kScoreThreads, score_smem, stream>>>(a);
      DI_CUDA_CHECK_LAUNCH("csa2_score_kernel");
    }
    csa2_select_kernel<<<unsigned(tile_rows), kSelectThreads, 0, stream>>>(a);
    DI_CUDA_CHECK_LAUNCH("csa2_select_kernel");
  }
}

}  // namespace deepinfer::cuda
