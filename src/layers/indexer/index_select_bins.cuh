// The indexers' fused decode kernels' shared parts (bench/gpu/NOTES.md "Decode select by bins"): the score blocks'
// tile split, score shapes and arrival (DecodeTiles, ShapeTiles, score_tiles, decode_arrive: "Decode score shape")
// and the select by bins, used by the V4 lightning indexer's index_decode_select_kernel (indexer_gpu.cu) and the V4.1
// CSA2 indexer's csa2_decode_select_kernel (csa2_indexer_gpu.cu, its decode form since run 86: bench/gpu/NOTES.md
// "V4.1 CSA2 indexer: decode select by bins").
// The V4 kernels' SASS is instruction-identical to their text before either was moved here (tools/gpu/sass.sh).
#pragma once

#include <cub/block/block_scan.cuh>
#include <cuda/atomic>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "layers/indexer/index_scoring.cuh"

namespace deepinfer::cuda::index_scoring {

// The fused decode kernels of both indexers (V4 index_decode_select_kernel, V4.1 csa2_decode_select_kernel): at most
// kDecodeMaxRows rows per launch, and per row one score block per 64-entry tile of the capacity, at most
// kDecodeBlocks / rows of them (two blocks per H200 SM in all; 1024 entries use 16).
constexpr int kDecodeMaxRows = 8;
constexpr int kDecodeBlocks = 2 * 132;
inline unsigned decode_score_blocks(int capacity, int rows) {
  const int capacity_tiles = (capacity + kTileEntries - 1) / kTileEntries;
  return unsigned(std::max(1, std::min(capacity_tiles, kDecodeBlocks / rows)));
}

// The score blocks of the decode kernels, grid (score blocks, rows): a row of n > 0 visible entries has one active
// block per 64-entry tile, at most gridDim.x of them (then contiguous tile ranges). Each active block scores the
// entries [begin(), end()) into the row's place of the workspace (score_entries: each entry's arithmetic does not
// depend on the tile it falls in), then arrives (decode_arrive); blocks past the active ones return at once.
// `blocks`, `block`: the row's score blocks and this block's place among them, gridDim.x and blockIdx.x but in the CSA2
// selector form (its block 0 selects: `block` -1 there, never active).
struct DecodeTiles {
  int n, tiles, active, block;
  __device__ __forceinline__ explicit DecodeTiles(int n_, int blocks = int(gridDim.x), int block_ = int(blockIdx.x))
      : n(n_), tiles((n_ + kTileEntries - 1) / kTileEntries), active(min(blocks, tiles)), block(block_) {}
  __device__ __forceinline__ bool block_active() const { return unsigned(block) < unsigned(active); }
  __device__ __forceinline__ int begin() const { return block * tiles / active * kTileEntries; }
  __device__ __forceinline__ int end() const { return min(n, (block + 1) * tiles / active * kTileEntries); }
};

// The row's split into a score shape's tiles (ScoreShape, index_scoring.cuh; bench/gpu/NOTES.md "Decode score
// shape"): DecodeTiles counts 64-entry tiles (kTileEntries); splitting n entries in kTile-entry tiles is DecodeTiles's
// split of n * (64 / kTile) entries scaled back: its tiles ceil(n / kTile), its active blocks min(gridDim.x, tiles)
// (the arrival count), its contiguous ranges in multiples of kTile (its member n is n * scale; only begin / end read
// it). The default shape's scale is 1: DecodeTiles itself. n * 2 < 2^31: the callers check the capacity.
template <class Shape>
struct ShapeTiles : DecodeTiles {
  static constexpr int kScale = kTileEntries / Shape::kTileEntries;
  static_assert(kScale * Shape::kTileEntries == kTileEntries, "a shape's tile divides DecodeTiles's");
  __device__ __forceinline__ explicit ShapeTiles(int n_, int blocks = int(gridDim.x), int block = int(blockIdx.x))
      : DecodeTiles(n_ * kScale, blocks, block) {}
  __device__ __forceinline__ int begin() const { return DecodeTiles::begin() / kScale; }
  __device__ __forceinline__ int end() const { return DecodeTiles::end() / kScale; }
};

// The auto shape (DEEPINFER_INDEX_SCORE_SHAPE=auto, bench/gpu/NOTES.md "Decode score shape"): the grid of 32x1
// (shape_score_blocks in 32-entry tiles); per row, `narrow` when its ceil(n / 32) tiles fit the blocks (one tile a
// block): the 32x1 split and score_entries calls; otherwise the 64x2 kernel's split and calls (score_tiles). That
// split is DecodeTiles(n) over this grid: a row that is not narrow has more 32-entry tiles than blocks, so the grid
// is capped (kDecodeBlocks / rows blocks), and the 64x2 grid (min(ceil(capacity / 64), that cap) blocks) either has
// the same cap or at least the row's ceil(n / 64) tiles: either way min(blocks, tiles) is the same active count, so
// the same ranges. Blocks past the active ones return at once, as in every shape (they are not in the arrival
// count). Narrow rows have n <= 32 x 264, so n * 2 does not overflow. Same scores bit for bit either way
// (score_entries), so the same selection.
struct ScoreShapeAuto {};
template <>
struct ShapeTiles<ScoreShapeAuto> : DecodeTiles {
  bool narrow;
  __device__ __forceinline__ explicit ShapeTiles(int n_, int blocks = int(gridDim.x), int block = int(blockIdx.x))
      : ShapeTiles(n_, blocks, block, (n_ + 31) / 32 <= blocks) {}
  __device__ __forceinline__ ShapeTiles(int n_, int blocks, int block, bool narrow_)
      : DecodeTiles(narrow_ ? n_ * 2 : n_, blocks, block), narrow(narrow_) {}
  __device__ __forceinline__ int begin() const { return DecodeTiles::begin() / (narrow ? 2 : 1); }
  __device__ __forceinline__ int end() const { return DecodeTiles::end() / (narrow ? 2 : 1); }
};

// The grid's score blocks per row for a shape of tile_entries-entry tiles (decode_score_blocks in the shape's tiles;
// the auto shape's: 32), on the host.
inline unsigned shape_score_blocks(int tile_entries, int capacity, int rows) {
  return decode_score_blocks(capacity * (kTileEntries / tile_entries), rows);
}

// A score block's entries [e_begin, e_end) of row r (a's queries and head weights, keys of `slot`) in score_entries
// calls of the shape, into sc (the row's scores). The launch's dynamic shared memory is the default shape's
// (score_smem_bytes<HeadSum, kWideLoads>) in every shape, which holds any smaller tile's staging. kBatched: the
// batched staging (DEEPINFER_INDEX_QUERY_STAGING=batched); mark: score_entries's phase marks (none by default);
// keep: score_entries's (KeptScores; none by default).
template <class HeadSum, bool kWideLoads, class Shape, bool kBatched = false, class Marks = NoScoreMarks,
          class Keep = NoScoreKeep>
__device__ __forceinline__ void score_block(const SelectRows& a, int r, int slot, int e_begin, int e_end, float* sc,
                                            float* smem, Marks mark = {}, Keep keep = {}) {
  static_assert(Shape::kTileEntries <= kTileEntries, "the launch's (default shape's) shared memory holds the staging");
  for (int e = e_begin; e < e_end; e += Shape::kEntriesPerBlock) {
    __syncthreads();  // the previous call's shared memory is consumed
    score_entries<HeadSum, kWideLoads, Shape, kBatched>(a.q + int64_t(r) * a.heads * a.dim,
                                                        a.head_w + int64_t(r) * a.heads, a.heads, a.dim, a.keys, slot,
                                                        e, e_end, sc, smem, mark, keep);
  }
}

// A decode score block's work in the shape: its entries [e_begin, e_end) = [tiles.begin(), tiles.end()) of row r;
// ScoreShapeAuto: in 32x1 calls on a narrow row, else in the default shape's (64x2). The caller reads the range
// before the call: read here, the V4 auto kernels compile to another (as long) instruction schedule. kBatched, mark,
// keep: score_block's.
template <class HeadSum, bool kWideLoads, bool kBatched = false, class Shape, class Marks = NoScoreMarks,
          class Keep = NoScoreKeep>
__device__ __forceinline__ void score_tiles(const SelectRows& a, int r, int slot, const ShapeTiles<Shape>& tiles,
                                            int e_begin, int e_end, float* sc, float* smem, Marks mark = {},
                                            Keep keep = {}) {
  if constexpr (std::is_same_v<Shape, ScoreShapeAuto>) {
    if (tiles.narrow)
      score_block<HeadSum, kWideLoads, ScoreShape<32, 1>, kBatched>(a, r, slot, e_begin, e_end, sc, smem, mark, keep);
    else
      score_block<HeadSum, kWideLoads, DefaultScoreShape, kBatched>(a, r, slot, e_begin, e_end, sc, smem, mark, keep);
  } else {
    score_block<HeadSum, kWideLoads, Shape, kBatched>(a, r, slot, e_begin, e_end, sc, smem, mark, keep);
  }
}

// A decode score block's own scores for its pass-1 count (count_top_bytes), kept in shared memory as score_entries
// stores them (the keep of score_tiles): read back through L2 (KeysOfScoresInL2), the keys were one more dependent
// round trip on each score block's path to its arrival (SASS of the batched decode kernels: the scores' STG, the
// block barrier, LDG.E.STRONG.GPU of the same words, then the counts' REDG, whose completion the arrival's release
// then waits for). on: the block's entries [e0, e_end) fit kKeptScores: on a narrow row (one 32-entry tile a block)
// and on a row of at most twice as many 64-entry tiles as blocks (at one row 528 tiles, 33792 entries: V4's CSA rows
// up to a 135K-token context); past that the scores are read from L2 as before. The same floats either way, so the
// same keys and counts.
constexpr int kKeptScores = 2 * kTileEntries;
struct KeptScores {
  float* p;  // [kKeptScores]: entry e0 + i at i
  int e0;
  bool on;
  __device__ __forceinline__ void operator()(int e, float s) const {
    if (on) p[e - e0] = s;
  }
  __device__ __forceinline__ float score(const float* sc, int e) const { return on ? p[e - e0] : __ldcg(sc + e); }
};
// A kernel's KeptScores for its block's entries [e_begin, e_end): its own shared array (one per kernel).
__device__ __forceinline__ KeptScores kept_scores(int e_begin, int e_end) {
  __shared__ float p[kKeptScores];
  return {p, e_begin, e_end - e_begin <= kKeptScores};
}
// KeysOfScoresInL2's keys, of the kept scores where the block kept them.
struct KeysOfKeptScores {
  KeptScores kept;
  const float* sc;
  __device__ __forceinline__ uint32_t operator()(int e) const { return order_key(kept.score(sc, e)); }
};

// How a score block hands its scores to the row's last block: a release / acquire pair at device scope on the row's
// arrival count (the block barrier orders the other threads' score stores before thread 0's release, and its acquire
// before their loads, as CUTLASS's semaphores do), or two sequentially consistent fences (MEMBAR.SC.GPU) around a
// relaxed atomicAdd (V4's DEEPINFER_INDEX_SELECT=old form).
enum class DecodeArrival { AcquireRelease, Fences };

// A score block's arrival on the row's count, after its scores: true, on every thread, on the block that brings the
// count to the row's `active` blocks, which then sees every block's scores and sets the count back to zero when done
// (thread 0, `arrivals = 0`: ready for the next launch). `last`: a __shared__ flag of the kernel. The counts start at
// zero and are left at zero, so two launches that share them must not run at the same time on one device.
template <DecodeArrival kArrival>
__device__ __forceinline__ bool decode_arrive(unsigned& arrivals, int active, bool& last) {
  if constexpr (kArrival == DecodeArrival::AcquireRelease) {
    __syncthreads();
    if (threadIdx.x == 0) {
      ::cuda::atomic_ref<unsigned, ::cuda::thread_scope_device> count(arrivals);
      last = count.fetch_add(1u, ::cuda::memory_order_acq_rel) == unsigned(active - 1);
    }
    __syncthreads();
    return last;
  } else {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&arrivals, 1u) == unsigned(active - 1);
    __syncthreads();
    if (!last) return false;
    __threadfence();
    return true;
  }
}

// The scan over warp 0's lanes that both selects (select_top_entries, select_by_bins) use to find a radix pass's
// threshold bin: the highest bin b whose count together with the bins above it reaches `need` (bin 0 if none does).
// Lane l holds bins 255 - 8 l down to 248 - 8 l, `mine` their count. Returns the lane that holds b (31 if no lane's
// inclusive count reaches `need`: bin 0 is lane 31's) and sets `incl` to this lane's count of its bins and those above
// them (on that lane, incl - mine is the count above its 8 bins, where its walk starts). Warp 0 calls it. The walks
// stay the callers' own: select_top_entries (indexer_gpu.cu) reloads the lane's bins from shared memory, select_by_bins
// keeps them in registers (bench/gpu/NOTES.md "Decode select by bins"), so each kernel compiles as before.
__device__ __forceinline__ int threshold_lane(int mine, int need, int lane, int& incl) {
  incl = mine;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xFFFFFFFFu, incl, o);
    if (lane >= o) incl += v;
  }
  const unsigned reached = __ballot_sync(0xFFFFFFFFu, incl >= need);
  return reached ? __ffs(int(reached)) - 1 : 31;
}

// ---- The decode kernels' select by bins (V4: DEEPINFER_INDEX_SELECT=bins or new; bench/gpu/NOTES.md "Decode select by
// bins"). select_top_entries (indexer_gpu.cu) is latency-bound when one 256-thread block runs it alone at the end of
// the decode kernel (run 46: issue 3.3 %, 0.54 eligible warps per scheduler): per pass it clears the histogram, counts
// with one shared atomic per key (the keys of one row share their top bytes: same-address atomics serialize), and warp
// 0 walks its bins with dependent shared loads; the emit then runs two block scans and a dependent page-table load per
// 256 entries. The select below keeps the radix passes and the tie rule and changes only how the work is done:
//   keys         the order_key images are computed once (in the shared copy, or on the fly from L2);
//   histograms   one atomic per distinct bin per warp (__match_any_sync), two histograms in turn so the next
//                pass's is cleared while this one counts (two barriers a pass instead of four);
//   bin search   warp 0 reads its 8 bins into registers once;
//   early stop   when the threshold bin holds exactly the keys still needed, every key of it is taken, so the
//                remaining passes cannot change the selection (below);
//   emit         each thread owns kEmitItems consecutive entries: one block scan per kThreads * kEmitItems
//                entries of a packed (above, at-threshold) count, and every item's page-table load issued
//                before the scan (all of a thread's together: no load behind a condition, here or in the passes).
// Same selection as select_top_entries, entry for entry: the passes pick the same bins (the counts do not depend
// on the order of the atomics). After the pass that covers the bits `mask` the selection is {keys whose masked
// bits are above `prefix`} plus the `need` lowest ids whose masked bits equal it; after the last pass that is
// select_top_entries's rule (mask all ones, prefix the k-th largest key). Stopping early when the bin's count
// equals `need` takes every key of the bin: a set of topk keys, every key outside it below every key in it, which
// is the one top-k set with no equal keys split between inside and outside, as select_top_entries's is (it takes
// all keys equal to the k-th largest when it takes topk of them).
template <int kThreads>
struct BinSelectShared {
  typename cub::BlockScan<int, kThreads, cub::BLOCK_SCAN_WARP_SCANS>::TempStorage scan;
  unsigned hist[2][256];
  uint32_t prefix;
  int need;
  int whole_bin;  // the threshold bin holds exactly `need` keys: the passes stop
};

constexpr int kCountItems = 8;  // keys per thread per round of a histogram pass
constexpr int kEmitItems = 8;   // consecutive entries per thread in the emit (8 x 256 = 2048 per block scan)

// Where select_by_bins reads the keys: the order_key images in shared memory, or computed from the workspace's
// scores through L2 (more entries than the shared copy holds).
struct KeysInShared {
  const uint32_t* p;
  __device__ __forceinline__ uint32_t operator()(int e) const { return p[e]; }
};
struct KeysOfScoresInL2 {
  const float* p;
  __device__ __forceinline__ uint32_t operator()(int e) const { return order_key(__ldcg(p + e)); }
};

// k[j] = key_at(e0 + j) for e0 + j < n (past n the last entry's key: the caller masks those with e0 + j < n). The
// loads have no condition (the entry clamped into the row, n > 0), so a thread's go out together: behind a branch per
// item (`e0 + j < n ? key_at(e0 + j) : 0`) the compiler waited for each before the next where key_at is more than a
// load (the CSA2 select's flags; bench/gpu/NOTES.md "Session 33").
template <class KeyAt>
__device__ __forceinline__ void load_emit_keys(const KeyAt& key_at, int e0, int n, uint32_t (&k)[kEmitItems]) {
#pragma unroll
  for (int j = 0; j < kEmitItems; ++j) k[j] = key_at(min(e0 + j, n - 1));
}
// Shared copy: two 16-byte loads (e0 is a multiple of 8: 32-byte aligned) instead of eight 8-way conflicting ones.
__device__ __forceinline__ void load_emit_keys(const KeysInShared& key_at, int e0, int n, uint32_t (&k)[kEmitItems]) {
  static_assert(kEmitItems == 8, "two uint4 loads");
  if (e0 + kEmitItems <= n) {
    const uint4 a = *reinterpret_cast<const uint4*>(key_at.p + e0);
    const uint4 b = *reinterpret_cast<const uint4*>(key_at.p + e0 + 4);
    k[0] = a.x, k[1] = a.y, k[2] = a.z, k[3] = a.w, k[4] = b.x, k[5] = b.y, k[6] = b.z, k[7] = b.w;
  } else {
#pragma unroll
    for (int j = 0; j < kEmitItems; ++j) k[j] = e0 + j < n ? key_at.p[e0 + j] : 0u;
  }
}

// Where select_by_bins finds the pool row of entry e of the row's slot: through the page table (global memory), per
// emitted item. A functor rather than the pool and slot as arguments: passed directly, they change the bins kernel's
// PTX (a 64-bit multiply becomes mul.wide) and its SASS (72,576 -> 72,704 bytes).
struct RowsInPool {
  const PagedPool& keys;
  int slot;
  __device__ __forceinline__ int64_t operator()(int e) const { return pool_row(keys, slot, e); }
};

// The emit's pool rows of a thread's items, the entries e0 .. e0 + kEmitItems - 1 (e0 a multiple of kEmitItems; an
// entry past n gets any row: it is never written). Generic: row_at per item, the entry clamped into the row (no load
// behind a condition). The emit is bound by its instructions at 8 warps (run 190: ~3.6 K cycles a 2048-entry segment
// with no global load in it), and pool_row is a page-table load and a division per item.
template <class RowAt>
__device__ __forceinline__ void emit_rows(const RowAt& row_at, int e0, int n, int64_t (&row)[kEmitItems]) {
#pragma unroll
  for (int j = 0; j < kEmitItems; ++j) row[j] = row_at(min(e0 + j, n - 1));
}
// Pages of a multiple of kEmitItems entries (64 in the engine): a thread's items lie in e0's page, at consecutive rows,
// so one pool_row a thread. Else per item.
__device__ __forceinline__ void emit_rows(const RowsInPool& rows, int e0, int n, int64_t (&row)[kEmitItems]) {
  if (rows.keys.page_size % kEmitItems == 0) {
    const int64_t first = rows(min(e0, n - 1));  // e0 < n: e0's row (past n: unused)
#pragma unroll
    for (int j = 0; j < kEmitItems; ++j) row[j] = first + j;
  } else {
    emit_rows<RowsInPool>(rows, e0, n, row);
  }
}

// The CSA2 decode select's selector form (csa2_indexer_gpu.cu, DEEPINFER_CSA2_SELECTOR=block): a block of its own
// selects, so a score block only arrives (release, after the barrier that ends its counts) and returns, and the
// selector waits until the row's `active` score blocks have arrived (thread 0 polls with acquire; the barrier hands
// what it saw to the other threads, as decode_arrive's does). No score block waits on anything: the spinning selectors
// (one a row, at most kDecodeMaxRows) hold one block slot each, and a score block that finds no free slot starts when
// another kernel's block retires.
__device__ __forceinline__ void arrive_for_selector(unsigned& arrivals) {
  __syncthreads();
  if (threadIdx.x == 0) {
    ::cuda::atomic_ref<unsigned, ::cuda::thread_scope_device> count(arrivals);
    count.fetch_add(1u, ::cuda::memory_order_release);
  }
}
__device__ __forceinline__ void wait_for_score_blocks(const unsigned& arrivals, int active) {
  if (threadIdx.x == 0) dev::spin_until_count(&arrivals, unsigned(active));
  __syncthreads();
}

// The decode select's progress marks for latency benchmarks (index_decode_select_phases_kernel, bench/gpu/
// index_select_latency.cu): mark(i) is called by every thread of the last block once phase i is done block-wide
// (after the barrier that ends it): its ticket, the keys staged, each radix pass (kMarkPass + pass), the emit.
// The default does nothing (the production kernels' code is the same as without the marks).
enum SelectMark : int { kMarkTicket = 0, kMarkKeys, kMarkPass, kMarkEmit = kMarkPass + 4, kMarkCount };
// select_runs / in_run: how many times the last block runs the select on the same keys, and the marks of run `run`
// (PhaseStamps' warm rerun, select_stamps.cuh; here one run, so the production kernels' code is unchanged).
struct NoSelectMarks {
  __device__ __forceinline__ void operator()(int) const {}
  static constexpr int select_runs() { return 1; }
  __device__ __forceinline__ NoSelectMarks in_run(int) const { return {}; }
};

// ---- The first radix pass counted by the score blocks (bench/gpu/NOTES.md "Session 34": pass 1 took 8-10 K cycles
// of the last block at V4.1's 2048-4097 entries, run 187). Pass 1 counts every key of the row by its top byte (no
// prefix yet), so each score block can count its own entries' keys right after scoring them, into per-row counters
// in global memory (zero at rest), before it arrives: the arrival's release / acquire hands the counts to the last
// block with the scores. The last block reads the 256 bins in one round trip while it stages the keys, sets the
// counters back to zero, and select_by_bins<kThreads, FirstPass::Counted> starts at pass 1's bin search. The counts
// do not depend on which block adds them, or in what order: the same histogram, so the same selection.
struct TopByteCounts {
  unsigned bins[256];  // the row's keys by top byte (key 0 in bin 0, as pass 1 counts it)
  unsigned nonzero;    // the row's nonzero keys (the CSA2 select's eligible entries)
};

// A score block's part, every thread, after its scores: the keys key_at(e_begin .. e_end - 1) (e_begin < e_end) added
// to c, one atomic per distinct top byte per warp (__match_any_sync, as the passes count). The barrier first: the
// block's scores were written by its first threads (score_entries), and the keys read them back.
// kNonzero: count the nonzero keys too (V4's select needs no eligible count).
template <int kThreads, bool kNonzero = true, class KeyAt>
__device__ __forceinline__ void count_top_bytes(const KeyAt& key_at, int e_begin, int e_end, TopByteCounts& c) {
  __syncthreads();
  const int lane = int(threadIdx.x) & 31;
  int nonzero = 0;
  for (int base = e_begin; base < e_end; base += kThreads) {  // warp-uniform trip count: __match_any_sync
    const int e = base + int(threadIdx.x);
    const bool valid = e < e_end;
    const uint32_t key = key_at(min(e, e_end - 1));  // clamped, not conditional: the key's loads go out together
    nonzero += valid && key != 0u;
    const unsigned counting = __ballot_sync(0xFFFFFFFFu, valid);
    if (valid) {
      const unsigned peers = __match_any_sync(counting, key >> 24);
      if (lane == __ffs(int(peers)) - 1) atomicAdd(&c.bins[key >> 24], unsigned(__popc(peers)));
    }
  }
  if constexpr (kNonzero) {
    nonzero = __reduce_add_sync(0xFFFFFFFFu, nonzero);
    if (lane == 0 && nonzero != 0) atomicAdd(&c.nonzero, unsigned(nonzero));
  }
}

// The last block's part (kThreads >= 256 threads): load() right after the ticket (its round trip overlaps the key
// staging), fill() pass 1's histogram of select_by_bins's shared memory before the barrier that ends the staging,
// release() after that barrier (every thread has read the counters): zero for the next launch.
struct CountedTopBytes {
  TopByteCounts& c;
  unsigned bin = 0, nonzero = 0;
  __device__ __forceinline__ void load() {
    if (threadIdx.x < 256) bin = __ldcg(&c.bins[threadIdx.x]);
    nonzero = __ldcg(&c.nonzero);
  }
  template <int kThreads>
  __device__ __forceinline__ void fill(BinSelectShared<kThreads>& sh) const {
    static_assert(kThreads >= 256, "a bin per thread");
    if (threadIdx.x < 256) sh.hist[0][threadIdx.x] = bin;
  }
  __device__ __forceinline__ void release() const {
    if (threadIdx.x < 256) c.bins[threadIdx.x] = 0u;
    if (threadIdx.x == 0) c.nonzero = 0u;
  }
};

// Whether select_by_bins counts its first pass (Count) or finds it in sh.hist[0] (Counted: CountedTopBytes::fill,
// before a barrier).
enum class FirstPass { Count, Counted };

// How select_by_bins counts the passes after the first: one atomic per distinct bin a warp (Match, as pass 1:
// __match_any_sync), or a plain shared atomic per key (Plain; V4's selector form under DEEPINFER_INDEX_LATER_PASSES=
// plain, indexer_gpu.h). Pass 1's byte (the sign and exponent bits) puts most of a row's keys in a few bins, where one
// atomic a bin pays; the later passes count one such bin's keys by mantissa bits, spread over the bins, where
// __match_any_sync's latency is the cost (V4's pass 2: run 192 2.7 -> 1.9 K cycles alone, run 298 2.43 -> 1.63 K in
// the step). The same counts either way.
enum class LaterPasses { Match, Plain };

// select_top_entries's contract (n > topk; the top `topk` of the keys key_at(0 .. n-1) as pool rows row_at(e) in
// ascending entry order; equal keys: the lower entry id) by the steps above. kThreads threads.
template <int kThreads, FirstPass kFirst = FirstPass::Count, LaterPasses kLater = LaterPasses::Match, class KeyAt,
          class RowAt, class Marks = NoSelectMarks>
__device__ __forceinline__ void select_by_bins(const KeyAt& key_at, const RowAt& row_at, int n, int topk,
                                               int32_t* out, BinSelectShared<kThreads>& sh, Marks mark = {}) {
  using Scan = cub::BlockScan<int, kThreads, cub::BLOCK_SCAN_WARP_SCANS>;
  const int tid = int(threadIdx.x), lane = tid & 31;

  uint32_t prefix = 0, mask = 0;
  int need = topk;
  if constexpr (kFirst == FirstPass::Count) {
    for (int b = tid; b < 256; b += kThreads) sh.hist[0][b] = 0;
    __syncthreads();
  }
  for (int pass = 0, shift = 24; shift >= 0; ++pass, shift -= 8) {
    unsigned* hist = sh.hist[pass & 1];
    // The next pass's histogram: the pass before this one read it (its bin search ended before the last barrier).
    for (int b = tid; b < 256; b += kThreads) sh.hist[(pass & 1) ^ 1][b] = 0;
    // kCountItems keys a thread (striped: coalesced) loaded before any is counted, so that their loads are in
    // flight together (from L2: one round trip per kThreads * kCountItems keys, not per kThreads); warp-uniform
    // trip counts: __match_any_sync needs the whole warp. Counted: pass 1's histogram is there already.
    const int count_end = kFirst == FirstPass::Counted && pass == 0 ? 0 : n;
    for (int base = 0; base < count_end; base += kThreads * kCountItems) {
      uint32_t k[kCountItems];
#pragma unroll
      for (int j = 0; j < kCountItems; ++j)  // clamped, not conditional: as load_emit_keys (past n: not counted)
        k[j] = key_at(min(base + j * kThreads + tid, n - 1));
#pragma unroll
      for (int j = 0; j < kCountItems; ++j) {
        const bool counts = base + j * kThreads + tid < n && (k[j] & mask) == prefix;
        const uint32_t bin = (k[j] >> shift) & 0xFFu;
        const unsigned counting = __ballot_sync(0xFFFFFFFFu, counts);
        if (counts) {
          if (kLater == LaterPasses::Plain && pass > 0) {
            atomicAdd(&hist[bin], 1u);
          } else {
            const unsigned peers = __match_any_sync(counting, bin);
            if (lane == __ffs(int(peers)) - 1) atomicAdd(&hist[bin], unsigned(__popc(peers)));
          }
        }
      }
    }
    __syncthreads();
    // select_top_entries's bin search: the highest bin b whose count with the bins above it reaches `need` (bin 0
    // if none does). Lane l holds bins 255 - 8 l down to 248 - 8 l.
    if (tid < 32) {
      const int top = 255 - 8 * tid;
      int c[8], mine = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) mine += c[j] = int(hist[top - j]);
      int incl;
      if (tid == threshold_lane(mine, need, tid, incl)) {
        int above = incl - mine, b = top, count = 0;
        bool found = false;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (found) continue;
          b = top - j;
          count = c[j];
          if (b == 0 || above + count >= need) found = true;
          else above += count;
        }
        sh.prefix = prefix | (uint32_t(b) << shift);
        sh.need = need - above;
        sh.whole_bin = count == need - above;
      }
    }
    __syncthreads();
    // Read before the next pass's barrier, after which warp 0 rewrites them.
    prefix = sh.prefix;
    need = sh.need;
    mask |= 0xFFu << shift;
    mark(kMarkPass + pass);
    if (sh.whole_bin) break;
  }

  // Emit in ascending entry order: the entries whose masked key is above `prefix`, and the first `need` entries
  // equal to it. A thread's place: the entries taken before its first = those above + min(those at, need).
  int above_seen = 0, ties_seen = 0;
  for (int seg = 0; seg < n; seg += kThreads * kEmitItems) {
    const int e0 = seg + tid * kEmitItems;
    uint32_t k[kEmitItems];
    load_emit_keys(key_at, e0, n, k);
    unsigned above_bits = 0, tie_bits = 0;
    int64_t row[kEmitItems];
#pragma unroll
    for (int j = 0; j < kEmitItems; ++j) {
      const bool valid = e0 + j < n;
      const uint32_t m = k[j] & mask;
      if (valid && m > prefix) above_bits |= 1u << j;
      if (valid && m == prefix) tie_bits |= 1u << j;
    }
    // Every item's row is read before the scan, which hides the page-table load; only the chosen items' rows are
    // written. Unconditional (emit_rows): loaded only for the candidates, behind a branch per item, the loads ran one
    // at a time (the emit took 9.4 K / 15.5 K cycles at 2048 / 4097 entries in run 187's V4.1 stamps).
    emit_rows(row_at, e0, n, row);
    // Counts of one segment are at most kThreads * kEmitItems = 2048: two 16-bit fields.
    static_assert(kThreads * kEmitItems < (1 << 15), "packed counts");
    const int packed = (__popc(above_bits) << 16) | __popc(tie_bits);
    int before, total;
    Scan(sh.scan).ExclusiveSum(packed, before, total);
    int above = above_seen + (before >> 16), ties = ties_seen + (before & 0xFFFF);
#pragma unroll
    for (int j = 0; j < kEmitItems; ++j) {
      int place = -1;
      if ((above_bits >> j) & 1u) {
        place = above + min(ties, need);
        ++above;
      } else if ((tie_bits >> j) & 1u) {
        if (ties < need) place = above + ties;
        ++ties;
      }
      if (place >= 0 && place < topk) out[place] = int32_t(row[j]);
    }
    above_seen += total >> 16;
    ties_seen += total & 0xFFFF;
    __syncthreads();  // the scan's storage is reused by the next segment
  }
  mark(kMarkEmit);
  const int written = above_seen + min(ties_seen, need);
  for (int i = written + tid; i < topk; i += kThreads) out[i] = -1;  // unreachable: written == topk
}

// The keys key_at(0 .. count-1) staged into keys_sh when `in_shared` (the decode selects' keys, before their select).
template <int kThreads, class KeyAt>
__device__ __forceinline__ void stage_keys(const KeyAt& key_at, int count, bool in_shared, uint32_t* keys_sh) {
  if (in_shared) {
#pragma unroll 8  // up to 2048 entries in one round trip to L2
    for (int e = int(threadIdx.x); e < count; e += kThreads) keys_sh[e] = key_at(e);
  }
}

// select_by_bins from pass 1's counts (FirstPass::Counted) over the keys stage_keys staged (`in_shared`) or key_at.
template <int kThreads, LaterPasses kLater = LaterPasses::Match, class KeyAt, class RowAt, class Marks>
__device__ __forceinline__ void select_counted_keys(const KeyAt& key_at, const RowAt& row_at, int n, int k,
                                                    bool in_shared, const uint32_t* keys_sh, int32_t* out,
                                                    BinSelectShared<kThreads>& sh, Marks mark) {
  if (in_shared) {
    select_by_bins<kThreads, FirstPass::Counted, kLater>(KeysInShared{keys_sh}, row_at, n, k, out, sh, mark);
  } else {
    select_by_bins<kThreads, FirstPass::Counted, kLater>(key_at, row_at, n, k, out, sh, mark);
  }
}

// The decode kernels' last block after its ticket (V4's decode_select_row, V4.1's csa2_decode_select_row): pass 1's
// counts loaded (CountedTopBytes on `counts`, the row's counters), the keys key_at(0 .. n-1) staged into keys_sh when
// `in_shared`, the counters released, then select_by_bins from pass 1's bin search over the staged keys or key_at
// (from L2), into out. k_of(nonzero): the selection size from the counted nonzero keys (V4: its topk); nothing is
// selected at k = 0. mark: the select marks (kMarkKeys here; the warm rerun's runs, PhaseStamps). Returns k.
template <int kThreads, class KeyAt, class RowAt, class TopK, class Marks>
__device__ __forceinline__ int select_counted(TopByteCounts& counts, const KeyAt& key_at, const RowAt& row_at, int n,
                                              bool in_shared, uint32_t* keys_sh, const TopK& k_of, int32_t* out,
                                              BinSelectShared<kThreads>& sh, Marks mark) {
  CountedTopBytes counted{counts};
  counted.load();
  stage_keys<kThreads>(key_at, n, in_shared, keys_sh);
  counted.fill(sh);
  __syncthreads();
  counted.release();
  mark(kMarkKeys);
  const int k = k_of(int(counted.nonzero));
  for (int run = 0; run < mark.select_runs() && k > 0; ++run) {  // one run but in the warm-rerun stamps
    if (run > 0) {
      counted.fill(sh);  // pass 1's histogram again (the passes reuse sh.hist[0])
      __syncthreads();
      mark(kMarkKeys);
    }
    select_counted_keys<kThreads>(key_at, row_at, n, k, in_shared, keys_sh, out, sh, mark.in_run(run));
  }
  return k;
}

// ---- The selector form (V4: DEEPINFER_INDEX_SELECTOR=block, indexer_gpu.h; V4.1: DEEPINFER_CSA2_SELECTOR=block,
// csa2_indexer_gpu.h; bench/gpu/NOTES.md "Session 35" and "Session 66"). Run 193's stamps: the last block's passes and
// emit cost ~8 K cycles (V4.1) / ~2 K (V4) more on their first run in a layer than when run again, with PDL off or the
// branches serial too: the code's first fetch on an SM that has not run it. The ticket cannot know which SM will
// select; a block of its own can: one more block a row (its block 0, dispatched first), which rehearses the select on a
// row of its own while the score blocks score (the keys staged, the passes and the emit: one loop over a rehearsal and the
// real run, not unrolled, so both run the same instructions), then waits for the score blocks' arrivals
// (wait_for_score_blocks; they arrive_for_selector and return) and selects with its code in the SM's instruction
// cache. Same scores, counts and select: the same rows out.
// The rehearsal: the keys of RehearsalScores staged for min(n, kRehearsalEntries) entries (as many as the real run's),
// the select over the first m = min(n, kRehearsalSelect) of them (one round of each pass's loop and one emit segment,
// each thread's unrolled items run, most of them masked: the same instructions for a fraction of the work), pass 1's
// histogram their one top byte, the m / 2 odd entries taken into a row of its own (rehearsal_out); nothing of the
// row's own state (counts, arrivals, out) is touched. Its keys split in pass 2's byte, whose bin of the odd entries
// then holds exactly the keys needed: the early stop ends the passes there, after pass 1's bin search and pass 2's
// count and bin search, the code of every later pass too. Run 195: with the select over 2048 entries the rehearsal
// outlasted V4.1's layer-2 scoring (8 us); run 297 (V4, ties in every pass, 64 taken: four passes): the arrivals were
// seen ~2 us later than the ticket form's last block saw them.
// Whether a selector form's one more block a row keeps a decode grid of score_blocks score blocks a row within the one
// wave of kDecodeBlocks / rows blocks a row that the ticket form's grid fills (past it the last score blocks wait for a
// second wave: run 299, V4's 34 x 8 blocks at batch 8, +0.75 %). Both indexers' selector forms take it (V4's
// selector_form, V4.1's csa2_selector_form).
inline bool selector_fits(unsigned score_blocks, int rows) { return score_blocks < unsigned(kDecodeBlocks / rows); }

constexpr int kRehearsalEntries = kScoreThreads * kCountItems;
constexpr int kRehearsalSelect = kScoreThreads;
constexpr int kRehearsalTopk = kRehearsalSelect / 2;
// The rehearsal row's scores: 0 at even entries (order key 0x80000000), FLT_MIN = 2^-126 at odd ones (0x80800000, a
// normal number: no flush to zero): the same top byte, pass 2's bytes 0x00 and 0x80. A kernel file's copy:
// `__device__ RehearsalScores name = rehearsal_scores();`.
struct RehearsalScores {
  float v[kRehearsalEntries];
};
constexpr RehearsalScores rehearsal_scores() {
  RehearsalScores s{};
  for (int i = 1; i < kRehearsalEntries; i += 2) s.v[i] = 0x1p-126f;
  return s;
}

// Where a selector's run reads and writes (selector_select): `selects` false (a real row's only) when the row has
// nothing to select (its caller took it otherwise); its `active` score blocks arrive on `arrivals` after adding pass
// 1's counts to `counts`; the keys key_at(0 .. n-1), staged into shared memory when `in_shared`; the rows row_at(e)
// into out. A rehearsal row: key_at over a RehearsalScores row, n the entries it stands in for (0: no rehearsal),
// out [kRehearsalTopk] of its own; its arrivals, active and counts are not read.
template <class KeyAt, class RowAt>
struct SelectorRow {
  bool selects;
  unsigned* arrivals;
  int active;
  TopByteCounts* counts;
  KeyAt key_at;
  RowAt row_at;
  int n;
  bool in_shared;
  int32_t* out;
};

// The selector block's part (every thread): the rehearsal over `rehearsal`, then the real row, prepare()'s (called
// once, by every thread, after the rehearsal: V4's takes a row that sees no more than topk entries there), selected
// as select_counted selects once its score blocks have arrived: pass 1's counts loaded and released, the keys staged,
// k = k_of(the counted nonzero keys) rows written. mark: select_counted's (the ticket mark when the arrivals are seen;
// the rehearsal's passes unstamped). kLater: select_by_bins's. Returns k (0 when the real row does not select).
template <int kThreads, LaterPasses kLater = LaterPasses::Match, class KeyAt, class RowAt, class Prepare, class TopK,
          class Marks>
__device__ __forceinline__ int selector_select(const SelectorRow<KeyAt, RowAt>& rehearsal, const Prepare& prepare,
                                               const TopK& k_of, uint32_t* keys_sh, BinSelectShared<kThreads>& sh,
                                               Marks mark) {
  int k = 0;
#pragma unroll 1  // one copy of the code for both runs: the rehearsal fetches the real run's instructions
  for (int run = 0; run < 2; ++run) {
    const bool real = run == 1;
    const SelectorRow<KeyAt, RowAt> row = real ? prepare() : rehearsal;
    if (real) {
      if (!row.selects) return 0;
      wait_for_score_blocks(*row.arrivals, row.active);
      mark(kMarkTicket);
    }
    const int staged = real ? row.n : min(row.n, kRehearsalEntries);
    const int m = real ? row.n : min(row.n, kRehearsalSelect);
    CountedTopBytes counted{*row.counts};
    if (real) {
      counted.load();
    } else {
      counted.bin = threadIdx.x == (0x80000000u >> 24) ? unsigned(m) : 0u;  // every rehearsal key's top byte
      counted.nonzero = unsigned(m);
    }
    stage_keys<kThreads>(row.key_at, staged, row.in_shared, keys_sh);
    counted.fill(sh);
    __syncthreads();
    if (real) {
      counted.release();
      mark(kMarkKeys);
    }
    k = real ? k_of(int(counted.nonzero)) : m / 2;
    const Marks run_marks = mark.in_run(real ? mark.select_runs() - 1 : -1);  // in_run(-1): no stamps
    if (k > 0)
      select_counted_keys<kThreads, kLater>(row.key_at, row.row_at, m, k, row.in_shared, keys_sh, row.out, sh,
                                            run_marks);
  }
  return k;
}

}  // namespace deepinfer::cuda::index_scoring
