// The indexer pieces shared by the V4 lightning indexer (indexer_gpu.cu, model-spec §3) and the V4.1 CSA2 indexer
// (csa2_indexer_gpu.cu, §4): the queries' finish, key rows through the page table, the order-preserving image of a
// score, the score tile kernel body, the radix select's histogram pass, and the rows a select kernel reads with the
// checks of its entry point. The two indexers differ only in the queries' Hadamard transform (V4 only), in how the
// per-head terms w_h * relu(q_h . k) are summed over the heads (fp32 on V4; double of exactly rounded products on
// V4.1, as csa2_index_scores does), which the HeadSum policy names, and in the selection after the scores.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "cuda/device_util.cuh"
#include "layers/compressor/compressor_gpu.h"
#include "layers/compressor/entry_finish.cuh"

namespace deepinfer::cuda::index_scoring {

constexpr int kQueryThreads = 128;

// The queries' finish, one block per (row, head), dim floats of dynamic shared memory: RoPE on the head's last
// rope_dim channels at the query position, the Hadamard transform on V4 (lightning_index_query; not on V4.1,
// csa2_index_scores), FP4 per 32 with ue8m0 scales (the blocks never straddle two heads: dim % 32 == 0, so head by
// head equals the references' pass over the whole query), into q_fp4 as bf16 (FP4 values are exact there: the score
// blocks stage half the bytes and feed the tensor cores without a split), then the head weight times weight_scale, in
// place. The steps are the key finish's (entry_finish.cuh), so queries and keys are quantized by one definition.
template <bool kHadamard>
__global__ void __launch_bounds__(kQueryThreads)
    query_finish_kernel(const float* __restrict__ q, bf16* __restrict__ q_fp4, float* __restrict__ head_w,
                        const int32_t* __restrict__ positions, int heads, int dim, const float* __restrict__ inv_freq,
                        int rope_dim, float weight_scale) {
  extern __shared__ float v[];  // [dim]
  const int64_t b = blockIdx.x;  // row * heads + head
  // The position and the thread's first RoPE frequency are loaded with the head's values, not after the staging's
  // barrier (SASS: their LDGs came after the BAR, a second dependent round trip); r by a 32-bit division (the grid's
  // x is below 2^31; the 64-bit one was a branch around a div_s64 call).
  const int r = int(blockIdx.x) / heads;
  const int32_t position = positions[r];
  const float first_freq = int(threadIdx.x) < rope_dim / 2 ? inv_freq[threadIdx.x] : 0.0f;
  const float* qh = q + b * dim;
  // The launch's block is kQueryThreads: with blockDim.x the loop's trip count took a runtime division (I2F, MUFU.RCP,
  // F2I: ~20 dependent instructions) ahead of the first load.
  for (int d = int(threadIdx.x); d < dim; d += kQueryThreads) v[d] = qh[d];
  __syncthreads();
  finish::rope_slice(v + dim - rope_dim, rope_dim, position, inv_freq, first_freq);
  if constexpr (kHadamard) finish::hadamard(v, dim);
  finish::fp4_ue8m0_block32(v, dim);
  for (int d = int(threadIdx.x); d < dim; d += kQueryThreads) q_fp4[b * dim + d] = __float2bfloat16_rn(v[d]);
  if (threadIdx.x == 0) head_w[b] = __fmul_rn(head_w[b], weight_scale);
}

constexpr int kScoreThreads = 256;  // 16 head groups x 16 entry groups
constexpr int kScoreWarps = kScoreThreads / 32;
constexpr int kHeadSlots = 64;      // heads padded to 64 (V4: 64 index heads, V4.1: 32): up to 4 per thread
constexpr int kTileEntries = 64;    // 4 entries per thread
constexpr int kTilesPerBlock = 2;   // entries per score block: 128
constexpr int kEntriesPerBlock = kTileEntries * kTilesPerBlock;

// The shape of score_entries's work: kTile entries a tile (64: each thread 4 heads x 4 entries; 32: 4 heads x 2
// entries), kTiles tiles a call (the queries staged once for them). DefaultScoreShape (64 x 2) is every kernel's but
// the V4 decode select's under DEEPINFER_INDEX_SCORE_SHAPE (indexer_gpu.h; bench/gpu/NOTES.md "Decode score shape"):
// at few rows a row's entries spread over more, smaller score blocks. The thread -> head mapping (head group hg =
// thread / 16: heads hg + 16 i) does not depend on the shape, only how many entries (eg + 16 j, j < kTile / 16) a
// thread covers, so each entry's arithmetic is the same in every shape (score_entries).
template <int kTile, int kTiles>
struct ScoreShape {
  static_assert(kTile == 64 || kTile == 32, "a tile is 16 entry groups x 4 or x 2 entries");
  static_assert(kTiles >= 1, "at least one tile a call");
  static constexpr int kTileEntries = kTile;
  static constexpr int kTilesPerBlock = kTiles;
  static constexpr int kEntriesPerBlock = kTile * kTiles;
  static constexpr int kThreadEntries = kTile / 16;  // entries a thread covers per tile
};
using DefaultScoreShape = ScoreShape<kTileEntries, kTilesPerBlock>;

__device__ __forceinline__ int64_t pool_row(const PagedPool& p, int slot, int e) {
  return int64_t(p.page_table[int64_t(slot) * p.max_pages + e / p.page_size]) * p.page_size + e % p.page_size;
}

// Order-preserving image of a score: a larger float gives a larger key. -0 is folded onto +0 first, because the
// references compare the scores as numbers (equal, so the lower id wins). Every finite score and +-inf map to a
// nonzero key, so 0 is free to mark "not eligible".
__device__ __forceinline__ uint32_t order_key(float f) {
  if (f == 0.0f) f = 0.0f;
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// V4 (lightning_index_scores): sum_h w_h * relu(q_h . k) in fp32.
struct HeadSumF32 {
  using T = float;
  static __device__ __forceinline__ void add(T& s, float relu_dot, float w) { s += w * relu_dot; }
};
// V4.1 (csa2_index_scores): the relu'd dot product times the head weight rounded to fp32, summed in double.
struct HeadSumF64 {
  using T = double;
  static __device__ __forceinline__ void add(T& s, float relu_dot, float w) { s += double(__fmul_rn(relu_dot, w)); }
};

// Row stride (bf16) of the staged queries and keys: dim + 8, so the 8 rows of an ldmatrix (16 bytes each) fall into
// the 8 different 16-byte bank groups whenever (dim + 8) / 8 is odd (dim 32, 64, 128: the models' index head dims).
constexpr int score_row_stride(int dim) { return dim + 8; }
// Row stride (floats) of a tile's dot products [head][entry]: kTile + 16 = 16 mod 32, so the head-sum reads of a warp
// (head groups 2w, 2w + 1 x 16 entries) hit 32 different banks.
template <int kTile>
constexpr int score_dot_stride() {
  return kTile + 16;
}

// Dynamic shared memory of score_entries: the staged queries and keys (bf16), the tile's dot products, the head
// weights, the per-warp partials (the same in every staging form; kWideLoads is kept for the callers' sizes).
template <class HeadSum, bool kWideLoads = false, class Shape = DefaultScoreShape>
constexpr size_t score_smem_bytes(int dim) {
  constexpr int kTile = Shape::kTileEntries;
  // Rows of (dim + 8) bf16 are 16-byte multiples (ldmatrix's rows, dim % 16 == 0); the partials follow an even count
  // of floats, so a double array there is 8-byte aligned.
  return (size_t(kHeadSlots + kTile) * score_row_stride(dim) / 2 + size_t(kHeadSlots) * score_dot_stride<kTile>() +
          kHeadSlots) *
             sizeof(float) +
         size_t(kScoreWarps) * kTile * sizeof(typename HeadSum::T);
}

// ---- Batched staging (DEEPINFER_INDEX_QUERY_STAGING=batched, indexer_gpu.h; bench/gpu/NOTES.md "Query staging in
// one round trip"). score_entries's scalar staging loads a thread's query vectors one at a time, each after a
// division by dim; its key staging loads the page table and then the key, per 16-byte vector: 2 round trips per
// vector, 2 to 4 vectors. The batched staging stores the same values at the same shared addresses
// (score_row_stride), with every global load of a batch of 128 channels (dim 128: one batch) in flight before the
// first store: a thread loads its entry's page-table row, its 4 query vectors (16 bytes: 8 bf16 channels) and the
// head weight, then its kTile / 16 key vectors (16 bytes: 8 bf16), then stores them: 2 round trips for the queries
// and the first tile's keys together.
// Who stages what, thread x of warp w, lane l:
//   queries  vector i = j kScoreThreads + x of the batch's 64 heads x 16 vectors: head i / 16, channels 128 b + 8 (i
//            % 16) .. + 7: 16 consecutive threads read one head's 256 bytes; a quarter warp's stores fill 128
//            contiguous bytes of a row (no bank conflict);
//   keys     entry 8 (w % (kTile / 8)) + l / 4 of the tile (the same for all of a thread's vectors: one page-table
//            load), 16-byte vectors 4 (kScoreWarps / (kTile / 8) (b * kPer + j) + w / (kTile / 8)) + l % 4: 4 lanes
//            read 64 bytes of a key row, stored as loaded (a quarter warp's 8 16-byte stores cover 2 entries x 4
//            vectors, 2 ways at dim 128).
// Needs dim % 32 == 0 (whole tiles); score_entries takes the scalar staging otherwise (the entry points check dim % 16
// == 0 only: check_select_heads). The 16-byte loads need the queries and the key pool 16-byte aligned
// (batched_staging_aligned: the entry points launch the loop kernels otherwise).
constexpr int kStageChannels = 128;  // channels of a batch
constexpr int kStageQueryVecs = 4;   // 16-byte query loads a thread per batch
static_assert(kScoreThreads * kStageQueryVecs * 8 == kHeadSlots * kStageChannels, "a batch's query vectors");

// The batched-staging kernels' __launch_bounds__ minimum of blocks an SM (indexer_gpu.cu, csa2_indexer_gpu.cu): 2
// blocks of 256 threads, up to 128 registers a thread, which a batch's loads in flight need (ptxas otherwise holds
// the decode kernels to 64 and splits the batch).
constexpr int kBatchedMinBlocks = 2;
__device__ __forceinline__ bool batched_staging_fits(int dim) { return dim % 32 == 0; }
__device__ __forceinline__ int staging_batches(int dim) { return (dim + kStageChannels - 1) / kStageChannels; }

// A thread's query vectors of batch b.
struct StagedQueries {
  uint4 v[kStageQueryVecs];
  // Head and first channel of vector j of batch b (d >= dim: past the row, nothing staged).
  static __device__ __forceinline__ void at(int b, int j, int& h, int& d) {
    const int i = j * kScoreThreads + int(threadIdx.x);
    h = i / (kStageChannels / 8);
    d = kStageChannels * b + 8 * (i % (kStageChannels / 8));
  }
  __device__ __forceinline__ void load(const bf16* __restrict__ q_row, int heads, int dim, int b) {
#pragma unroll
    for (int j = 0; j < kStageQueryVecs; ++j) {
      int h, d;
      at(b, j, h, d);
      v[j] = d < dim && h < heads ? *reinterpret_cast<const uint4*>(q_row + h * dim + d) : make_uint4(0, 0, 0, 0);
    }
  }
  __device__ __forceinline__ void store(bf16* qs, int ld, int dim, int b) const {
#pragma unroll
    for (int j = 0; j < kStageQueryVecs; ++j) {
      int h, d;
      at(b, j, h, d);
      if (d < dim) *reinterpret_cast<uint4*>(qs + h * ld + d) = v[j];
    }
  }
};

// The scalar and wide stagings of the queries: the row's 64 (padded) head rows in 16-byte vectors, kBatch loads a
// thread in flight before their stores (1: the loop form; the wide form's batches otherwise); zeros past `heads`.
template <int kBatch>
__device__ __forceinline__ void stage_query_rows(const bf16* __restrict__ q_row, int heads, int dim, bf16* qs,
                                                 int ld) {
  const int vecs = dim / 8;
  for (int i0 = int(threadIdx.x); i0 < kHeadSlots * vecs; i0 += kScoreThreads * kBatch) {
    uint4 v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j * kScoreThreads;
      v[j] = i < kHeadSlots * vecs && i / vecs < heads ? *reinterpret_cast<const uint4*>(q_row + i * 8)
                                                        : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j * kScoreThreads;
      if (i < kHeadSlots * vecs) *reinterpret_cast<uint4*>(qs + (i / vecs) * ld + (i % vecs) * 8) = v[j];
    }
  }
}

// A thread's key vectors of a kTile-entry tile, batch by batch.
template <int kTile>
struct StagedKeys {
  static constexpr int kPer = kTile / 16;  // 16-byte vectors a thread per batch: kTile entries x 128 channels / 256
  static constexpr int kOcts = kTile / 8;  // 8-entry groups of the tile
  static_assert(kScoreWarps % kOcts == 0, "a warp's entries are the same in every batch");
  int el;       // the thread's entry of the tile
  int64_t row;  // its pool row; -1 past n (zeros staged, as the scalar staging's)
  uint4 raw[kPer];

  static __device__ __forceinline__ int vec_at(int b, int j) {
    const int warp = int(threadIdx.x) / 32;
    return 4 * (kScoreWarps / kOcts * (b * kPer + j) + warp / kOcts) + (int(threadIdx.x) & 3);
  }
  __device__ __forceinline__ void lookup(const PagedPool& keys, int slot, int tile0, int n) {
    el = 8 * (int(threadIdx.x) / 32 % kOcts) + (int(threadIdx.x) & 31) / 4;
    const int e = tile0 + el;
    row = e < n ? pool_row(keys, slot, e) : int64_t(-1);
  }
  __device__ __forceinline__ void load(const PagedPool& keys, int dim, int b) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int v = vec_at(b, j);
      raw[j] = row >= 0 && v < dim / 8 ? *reinterpret_cast<const uint4*>(keys.pool + row * keys.width + v * 8)
                                       : make_uint4(0, 0, 0, 0);
    }
  }
  // The bf16 vectors as loaded (zeros past n: the scalar staging's values) at row stride ld.
  __device__ __forceinline__ void store(bf16* ks, int ld, int dim, int b) const {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int v = vec_at(b, j);
      if (v < dim / 8) *reinterpret_cast<uint4*>(ks + el * ld + v * 8) = raw[j];
    }
  }
  // The tile's keys alone (tiles after the first of a score_entries call): lookups, then per batch loads, stores.
  __device__ __forceinline__ void stage(const PagedPool& keys, int slot, int tile0, int n, int dim, bf16* ks,
                                        int ld) {
    lookup(keys, slot, tile0, n);
    for (int b = 0; b < staging_batches(dim); ++b) {
      load(keys, dim, b);
      store(ks, ld, dim, b);
    }
  }
};

// score_entries's progress marks for latency benchmarks (indexer_gpu.cu's phases kernel): mark(i) is called by every
// thread of the score block, in every score_entries call, when the queries (kScoreMarkQueries) and the call's first
// tile's keys (kScoreMarkKeys) are staged; kScoreMarkScored is the caller's (after its score_entries calls). The
// default does nothing (the production kernels' code is the same as without the marks).
enum ScoreMark : int { kScoreMarkQueries = 0, kScoreMarkKeys, kScoreMarkScored, kScoreMarkCount };
struct NoScoreMarks {
  __device__ __forceinline__ void operator()(int) const {}
};
// score_entries's hand-over of each score it stores to a caller that reads it again: keep(e, score) beside dest[e] =
// score (index_select_bins.cuh KeptScores). The default keeps none (the production kernels' code is the same).
struct NoScoreKeep {
  __device__ __forceinline__ void operator()(int, float) const {}
};

// A tile's dot products q_h . k_e on the tensor cores, into dots [kHeadSlots][score_dot_stride<kTile>()] (score_entries
// reads them): warp w computes heads 16 (w % 4) .. + 15 (its m16 block; warps past head_iters blocks idle) against
// the tile's entries 8 (kTile / 16) (w / 4) .. + kTile / 2 - 1, K in order in 16-channel steps, one fp32 accumulator
// an element. A (queries) and B (keys), bf16 in qs / ks at row stride ld, through ldmatrix. Fragments as the PTX
// ISA's m16n8k16 (dev::mma_bf16_m16n8k16), lane 4g + c.
template <int kTile>
__device__ __forceinline__ void tile_dots(const bf16* qs, const bf16* ks, int ld, int dim, int head_iters,
                                          float* dots) {
  constexpr int kNb = kTile / 16;  // 8-entry blocks a warp
  static_assert(kNb % 2 == 0, "ldmatrix x4 loads two 8-entry blocks");
  constexpr int kDld = score_dot_stride<kTile>();
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, c = lane % 4;
  const int hb = warp % 4, nb0 = warp / 4 * kNb;
  if (hb >= head_iters) return;  // uniform in the warp
  // ldmatrix x4, lanes 8m .. 8m + 7 the rows of matrix m. A: m = (row half lane / 8 % 2, K half lane / 16), in the
  // order of a0 .. a3; B: m = (8-entry block lane / 16, K half lane / 8 % 2), b0 b1 of one block then of the next.
  const bf16* q_rows = qs + (16 * hb + lane % 16) * ld + 8 * (lane / 16);
  const bf16* k_rows = ks + (8 * nb0 + lane % 8 + 8 * (lane / 16)) * ld + 8 * (lane / 8 % 2);
  float d[kNb][4] = {};
  for (int k = 0; k < dim; k += 16) {
    uint32_t a0, a1, a2, a3;
    dev::ldmatrix_x4(dev::smem_u32(q_rows + k), a0, a1, a2, a3);
#pragma unroll
    for (int np = 0; np < kNb / 2; ++np) {
      uint32_t b0, b1, b2, b3;
      dev::ldmatrix_x4(dev::smem_u32(k_rows + 16 * np * ld + k), b0, b1, b2, b3);
      dev::mma_bf16_m16n8k16(d[2 * np], a0, a1, a2, a3, b0, b1);
      dev::mma_bf16_m16n8k16(d[2 * np + 1], a0, a1, a2, a3, b2, b3);
    }
  }
  // D: rows g, g + 8 of the m16 block, columns 2c, 2c + 1 of each 8-entry block.
  float* out = dots + (16 * hb + g) * kDld + 8 * nb0 + 2 * c;
#pragma unroll
  for (int nb = 0; nb < kNb; ++nb) {
    *reinterpret_cast<float2*>(out + 8 * nb) = make_float2(d[nb][0], d[nb][1]);
    *reinterpret_cast<float2*>(out + 8 * kDld + 8 * nb) = make_float2(d[nb][2], d[nb][3]);
  }
}

// One score block's work (kScoreThreads threads, score_smem_bytes<HeadSum, kWideLoads, Shape> of dynamic shared
// memory): the scores of entries [e_begin, min(e_begin + Shape::kEntriesPerBlock, n)) of one row into dest[e].
// q_row [heads, dim] (bf16) and w_row [heads] are the row's FP4-valued queries and scaled head weights; the keys are
// the slot's rows of `keys` (bf16). dim % 16 == 0 (check_select_heads).
// The row's (up to 64, padded) head queries and head weights are staged in shared memory, then kTile keys at a time
// (bf16, as stored). The tile's dot products q_h . k run on the tensor cores (tile_dots: mma.sync m16n8k16, bf16
// operands, fp32 accumulation; bench/gpu/NOTES.md "Session 68"): warp w takes heads 16 (w % 4) .. + 15 (warps past
// the row's head groups idle) against half the tile's entries, K in 16-channel steps in order. The products of bf16
// values are exact, so the dot product is the exact sum wherever the sum of the products' magnitudes stays below 2^24
// granules of the smallest (GpuMmaBf16Exactness). The dots go to shared memory [head][entry]; then thread (hg, eg)
// sums its heads hg + 16 i of entries eg + 16 j with HeadSum, and the warps' partials are summed in warp order.
// kWideLoads (the decode kernel under DEEPINFER_INDEX_SELECT=new; bench/gpu/NOTES.md "Decode select by bins"),
// the same values staged, with the global loads issued in batches: the queries 4 vectors a thread before any is
// stored, a tile's keys all page-table lookups first, then all 16-byte key loads, then the stores (2 round trips
// instead of 8).
// Shape (ScoreShape): the text above is the default's (64 x 2); a 32-entry tile gives each warp 2 8-entry blocks
// instead of 4 and each thread 2 entries (eg, eg + 16) instead of 4. An entry's score is the same in every shape, bit
// for bit: its dot products are the same mma sequence over the same operands (an mma's output element depends on its
// own row and column only), HeadSum adds the same heads in the same order (i = 0 .. 3), the shfl_xor 16 pairs the
// same head groups (2 warp, 2 warp + 1: lanes l and l ^ 16 still share eg), and the final sum runs over the same 8
// warps in warp order.
// kBatched (not with kWideLoads; DEEPINFER_INDEX_QUERY_STAGING=batched, the decode kernels' bins form): the batched
// staging above for the queries and every tile's keys when dim % 32 == 0; the same values at the same addresses, so
// the same scores bit for bit. mark: the phase marks (NoScoreMarks: none); keep: each stored score handed over too
// (NoScoreKeep: none).
template <class HeadSum, bool kWideLoads = false, class Shape = DefaultScoreShape, bool kBatched = false,
          class Marks = NoScoreMarks, class Keep = NoScoreKeep>
__device__ __forceinline__ void score_entries(const bf16* __restrict__ q_row, const float* __restrict__ w_row,
                                              int heads, int dim, const PagedPool& keys, int slot, int e_begin,
                                              int n, float* __restrict__ dest, float* smem, Marks mark = {},
                                              Keep keep = {}) {
  static_assert(!(kWideLoads && kBatched), "the wide form batches its own loads");
  using T = typename HeadSum::T;
  constexpr int kTile = Shape::kTileEntries, kTiles = Shape::kTilesPerBlock;
  constexpr int kJ = Shape::kThreadEntries;  // entries eg + 16 j of the tile, j < kJ
  constexpr int kDld = score_dot_stride<kTile>();
  const int ld = score_row_stride(dim);
  bf16* qs = reinterpret_cast<bf16*>(smem);                 // [kHeadSlots][ld]
  bf16* ks = qs + kHeadSlots * ld;                          // [kTile][ld]
  float* dots = reinterpret_cast<float*>(ks + kTile * ld);  // [kHeadSlots][kDld]
  float* hw = dots + kHeadSlots * kDld;                     // [kHeadSlots]
  T* red = reinterpret_cast<T*>(hw + kHeadSlots);           // [kScoreWarps][kTile]
  const bool batched = kBatched && batched_staging_fits(dim);  // uniform

  if constexpr (kWideLoads) {
    stage_query_rows<kStageQueryVecs>(q_row, heads, dim, qs, ld);
  } else if (batched) {
    // The queries, the head weight and the first tile's keys, each batch's loads in flight together.
    const float w = threadIdx.x < kHeadSlots && int(threadIdx.x) < heads ? w_row[threadIdx.x] : 0.0f;
    StagedKeys<kTile> first;
    first.lookup(keys, slot, e_begin, n);
    for (int b = 0; b < staging_batches(dim); ++b) {
      StagedQueries qv;
      qv.load(q_row, heads, dim, b);
      first.load(keys, dim, b);
      qv.store(qs, ld, dim, b);
      if (threadIdx.x < kHeadSlots && b == 0) hw[threadIdx.x] = w;
      mark(kScoreMarkQueries);
      first.store(ks, ld, dim, b);
    }
  } else {
    stage_query_rows<1>(q_row, heads, dim, qs, ld);
  }
  if (!batched) {
    if (threadIdx.x < kHeadSlots) hw[threadIdx.x] = int(threadIdx.x) < heads ? w_row[threadIdx.x] : 0.0f;
    mark(kScoreMarkQueries);
  }

  const int eg = int(threadIdx.x) & 15, hg = int(threadIdx.x) >> 4;
  const int head_iters = (heads + 15) / 16;  // uniform: the head slots past the last real head are skipped
  const int vecs = dim / 8;                  // 16-byte vectors per key row
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;

  for (int t = 0; t < kTiles; ++t) {
    const int tile0 = e_begin + t * kTile;
    if (tile0 >= n) break;
    // The queries are staged; the previous tile's keys, dot products and partial sums are consumed (batched: the
    // first tile's keys were staged with the queries).
    if (!batched || t > 0) __syncthreads();
    if (batched) {
      if (t > 0) StagedKeys<kTile>().stage(keys, slot, tile0, n, dim, ks, ld);
    } else if constexpr (kWideLoads) {
      constexpr int kBatch = kJ;  // dim 128: the tile's 1024 (64 entries) or 512 (32) vectors in one batch
      for (int v0 = int(threadIdx.x); v0 < kTile * vecs; v0 += kScoreThreads * kBatch) {
        int64_t row[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int v = v0 + b * kScoreThreads, e = tile0 + v / vecs;
          row[b] = v < kTile * vecs && e < n ? pool_row(keys, slot, e) : int64_t(-1);
        }
        uint4 raw[kBatch];  // one 16-byte load a vector
#pragma unroll
        for (int b = 0; b < kBatch; ++b)
          raw[b] = row[b] >= 0 ? *reinterpret_cast<const uint4*>(keys.pool + row[b] * keys.width +
                                                                  ((v0 + b * kScoreThreads) % vecs) * 8)
                               : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int v = v0 + b * kScoreThreads;
          if (v < kTile * vecs) *reinterpret_cast<uint4*>(ks + (v / vecs) * ld + (v % vecs) * 8) = raw[b];
        }
      }
    } else {
      for (int v = int(threadIdx.x); v < kTile * vecs; v += kScoreThreads) {
        const int el = v / vecs, part = v % vecs, e = tile0 + el;
        *reinterpret_cast<uint4*>(ks + el * ld + part * 8) =
            e < n ? *reinterpret_cast<const uint4*>(keys.pool + pool_row(keys, slot, e) * keys.width + part * 8)
                  : make_uint4(0, 0, 0, 0);
      }
    }
    __syncthreads();
    if (t == 0) mark(kScoreMarkKeys);

    tile_dots<kTile>(qs, ks, ld, dim, head_iters, dots);
    __syncthreads();

    // Thread (hg, eg): heads hg + 16 i, entries eg + 16 j of the tile.
    T part[kJ];
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      T s = T(0);
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (i < head_iters) HeadSum::add(s, fmaxf(dots[(hg + 16 * i) * kDld + eg + 16 * j], 0.0f), hw[hg + 16 * i]);
      // Lanes l and l ^ 16 hold the same entries for the head groups 2 warp and 2 warp + 1.
      part[j] = s + __shfl_xor_sync(0xFFFFFFFFu, s, 16);
    }
    if (lane < 16)
#pragma unroll
      for (int j = 0; j < kJ; ++j) red[warp * kTile + eg + 16 * j] = part[j];
    __syncthreads();
    if (threadIdx.x < kTile) {
      const int e = tile0 + int(threadIdx.x);
      if (e < n) {
        T s = T(0);
        for (int w = 0; w < kScoreWarps; ++w) s += red[w * kTile + threadIdx.x];
        dest[e] = float(s);
        keep(e, float(s));
      }
    }
  }
}

// One pass of the radix selects (4 passes of 8 bits over order_key images, from the top byte down): hist[b] = how
// many of the keys key_at(0 .. n-1) whose bits under `mask` equal `prefix` have byte b at `shift`; kSkipZero leaves
// key 0 out (V4.1: an entry that may not be chosen). Called by every thread of the kThreads-thread block; hist is
// complete when it returns.
template <int kThreads, bool kSkipZero, class KeyAt>
__device__ __forceinline__ void radix_histogram(const KeyAt& key_at, int n, int shift, uint32_t mask, uint32_t prefix,
                                                unsigned* hist) {
  for (int b = int(threadIdx.x); b < 256; b += kThreads) hist[b] = 0;
  __syncthreads();
  for (int i = int(threadIdx.x); i < n; i += kThreads) {
    const uint32_t key = key_at(i);
    if ((!kSkipZero || key != 0u) && (key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xFFu], 1u);
  }
  __syncthreads();
}

constexpr int kMaxIndexDim = 256;    // the select entry points' bound on the index head dim
constexpr int kSelectThreads = 512;  // threads of a select kernel block (one block per row)

inline size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The batched staging's 16-byte loads (StagedQueries, StagedKeys): the queries and the key pool 16-byte aligned (a
// row's queries then are too: heads * dim bf16 with dim % 16 == 0). check_select_queries asks it of the queries.
inline bool batched_staging_aligned(const bf16* q, const PagedPool& keys) {
  return reinterpret_cast<uintptr_t>(q) % 16 == 0 && reinterpret_cast<uintptr_t>(keys.pool) % 16 == 0;
}

// What both indexers' select kernels read of a tile of rows: the rows' FP4-valued queries [rows, heads * dim] and
// scaled head weights [rows, heads], their slots and positions, top-k, the compression ratio, the key pool and the
// most entries a row may see (the per-slot capacity of the key pages; on V4.1 also at most max_entries). Each
// indexer's kernel arguments derive from it.
struct SelectRows {
  const bf16* q;
  const float* head_w;
  const int32_t* slots;
  const int32_t* positions;
  int heads, dim, topk, ratio;
  PagedPool keys;
  int max_visible;

  // Entry s is visible to the query at t iff s < (t + 1) div ratio (model-spec §3 "Lightning indexer", §4 "Indexer").
  __device__ __forceinline__ int visible_entries(int r) const { return min((positions[r] + 1) / ratio, max_visible); }
};

// The tile of rows that starts at row r0 of the step's arrays.
inline SelectRows select_rows(const bf16* q, const float* head_w, const int32_t* slots, const int32_t* positions,
                              int r0, int heads, int dim, int topk, int ratio, const PagedPool& keys,
                              int max_visible) {
  return SelectRows{q + int64_t(r0) * heads * dim, head_w + int64_t(r0) * heads, slots + r0, positions + r0, heads,
                    dim, topk, ratio, keys, max_visible};
}

// The select entry points' checks (`who` names the entry point in the messages): the query heads the score tile
// holds, the head dim and top-k; and the key pool's rows and pages.
inline void check_select_heads(const std::string& who, int heads, int dim, int topk) {
  DI_CHECK(heads > 0 && heads <= kHeadSlots,
           who + ": " + std::to_string(heads) + " index heads, 1 to " + std::to_string(kHeadSlots) + " supported");
  DI_CHECK(dim > 0 && dim % 16 == 0 && dim <= kMaxIndexDim, who + ": index head dim " + std::to_string(dim) +
                                                                " must be a multiple of 16, at most " +
                                                               std::to_string(kMaxIndexDim));
  DI_CHECK(topk > 0, who + ": topk must be positive");
}
// Every staging form reads the queries in 16-byte vectors (8 bf16).
inline void check_select_queries(const std::string& who, const bf16* q) {
  DI_CHECK(reinterpret_cast<uintptr_t>(q) % 16 == 0, who + ": the queries must be 16-byte aligned");
}
inline void check_select_keys(const std::string& who, const PagedPool& keys, int dim) {
  DI_CHECK(keys.width == dim,
           who + ": key rows are " + std::to_string(keys.width) + " wide, dim is " + std::to_string(dim));
  DI_CHECK(keys.pool && keys.page_table && keys.page_size > 0 && keys.max_pages > 0,
           who + ": the key pool has no pages");
  DI_CHECK(int64_t(keys.max_pages) * keys.page_size < (int64_t(1) << 31), who + ": key capacity too large");
}

}  // namespace deepinfer::cuda::index_scoring
