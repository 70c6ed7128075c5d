// Sink attention for decode on the GPU (model-spec §3 "Attention"), the CUDA twin of sink_attention.cpp.
//
// One query per sequence, 64 heads of 512, one shared K = V latent per key (MQA): all heads read the same key
// rows, so the work per key row is 64 x 512 x 2 multiply-adds for the scores and as many for the values. At
// that intensity (about 128 FLOP per byte of bf16 key) CUDA cores would be the bottleneck, so both products run
// on the tensor cores (mma.sync m16n8k16 bf16, fp32 accumulation), flash-decoding style:
//  - a block takes one sequence, 16 heads and a contiguous range of key slots (split-K), in tiles of 32 keys
//    double-buffered in shared memory with cp.async; the key rows are gathered through the index lists (the
//    window ring rows, then the selected compressed rows; -1 = empty slot, masked to -inf and zero-filled);
//  - its 4 warps each own 128 of the 512 dims: they compute partial scores over their dims, add the 4 partials
//    in a fixed order through shared memory, run the online softmax (fp32, base 2), and multiply P (bf16) by
//    the values of their dims;
//  - a second kernel merges the splits and adds the sink to the denominator: exp(sink - M) joins the sum of the
//    weights but carries no value.
// The split count normally follows the batch (enough blocks for two waves). In batch-invariant mode
// (algorithms.md §4) every split covers a fixed number of key tiles instead, counted from slot 0, and the merge
// adds the splits in split order, so a query's partial-sum tree depends only on its own key list: neither the
// batch nor a wider key list whose extra slots are empty (a split with no key is skipped by the merge) moves it.
//
//
// Packed FP8 pools (KvFormat::Fp8, layers/attention/kv_record.h; bench/gpu/NOTES.md "Packed FP8 KV record"): the
// key rows arrive as 592-byte records (cp.async into two record stages, 37 KB) instead of 1024-byte bf16 rows, and
// the block decodes a tile into one bf16 key tile in the same swizzled layout before the products (codes x scale,
// exact). Everything after the decode is the bf16 kernel's code on the same bf16 values, so the output bits are
// the same. One bf16 key tile instead of two keeps the shared memory at 93.5 KB (2 blocks per SM, as bf16's 88.5 KB);
// the record stages carry the double buffering.
// V4.1's packed pools (bench/gpu/NOTES.md "V4.1 packed KV records") have two formats in one call: the window rows are
// 528-byte MXFP8 records, the compressed rows 288-byte FP4 records. A record stage row is 528 bytes, each key row
// brings its own format's bytes, and the decode picks the format per row (by the slot's segment: warp-uniform).
#include <algorithm>
#include <cmath>

#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/kernels.h"
#include "cuda/launch.h"
#include "cuda/numerics_mode.h"
#include "cuda/step_kernels.h"
#include "layers/attention/decode_fused.h"
#include "layers/attention/kv_record.h"
#include "layers/attention/window_commit.cuh"
#include "layers/norm_rope/rms_norm.cuh"
#include "layers/norm_rope/rope.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kDim = kAttnDim;               // 512
constexpr int kHeads = kAttnHeads;           // 64
constexpr int kHeadsPerBlock = 16;           // the M side of the mma
constexpr int kKeysPerTile = 32;
constexpr int kWarps = 4;                    // warp w owns dims [128 w, 128 w + 128)
constexpr int kRowBytes = kDim * 2;          // 1024 bytes per latent row
constexpr int kChunks = kRowBytes / 16;      // 64 chunks of 16 bytes per row
constexpr int kTargetBlocks = 2 * 132;       // two waves of blocks over the H200's 132 SMs
constexpr int kInvariantTilesPerSplit = 8;   // batch-invariant mode: 256 keys per split

constexpr int kQBytes = kHeadsPerBlock * kRowBytes;     // 16 KB
constexpr int kKBytes = kKeysPerTile * kRowBytes;       // 32 KB per stage
constexpr int kSBytes = kWarps * kHeadsPerBlock * kKeysPerTile * 4;  // partial scores, 8 KB
constexpr int kSmemBytes = kQBytes + 2 * kKBytes + kSBytes + 2 * kKeysPerTile * 8;
// Packed pools: one bf16 key tile, then two stages of kKeysPerTile records after the row pointers. A call's window
// and compressed segments are in formats kWin and kComp (both Bf16, both Fp8 (V4), or Mxfp8 and Fp4 (V4.1)); a
// stage row holds the larger record (V4: 592 bytes, 18.5 KB a stage; V4.1: 528 bytes, 16.5 KB).
template <KvFormat kFormat>
constexpr int kPoolRowBytes = kFormat == KvFormat::Fp8     ? kvrec::kRowBytes
                              : kFormat == KvFormat::Mxfp8 ? kvrec41::kWindowRowBytes
                              : kFormat == KvFormat::Fp4   ? kvrec41::kEntryRowBytes
                                                           : kRowBytes;
template <KvFormat kWin, KvFormat kComp>
constexpr int kStageRowBytes = kPoolRowBytes<kWin> > kPoolRowBytes<kComp> ? kPoolRowBytes<kWin> : kPoolRowBytes<kComp>;
static_assert(kvrec::kDim == kDim && kvrec41::kDim == kDim, "a record holds one 512-channel latent");

template <KvFormat kWin, KvFormat kComp>
constexpr int smem_bytes() {
  return kWin == KvFormat::Bf16
             ? kSmemBytes
             : kQBytes + kKBytes + kSBytes + 2 * kKeysPerTile * 8 + 2 * kKeysPerTile * kStageRowBytes<kWin, kComp>;
}

// Chunk ch of row r sits at chunk ch ^ (r % 8): ldmatrix reads 8 rows at the same logical chunk, which then
// fall into 8 different 16-byte bank groups.
__device__ __forceinline__ uint32_t swz(int row, int ch) { return uint32_t(row * kRowBytes + ((ch ^ (row & 7)) << 4)); }

// Splits of a `tiles`-tile key list and the tiles each covers (0: the tiles spread evenly over the splits).
struct SplitPlan {
  int splits, tiles_per_split;
};

SplitPlan attention_splits(int batch, int tiles) {
  if (batch_invariant())
    return {(tiles + kInvariantTilesPerSplit - 1) / kInvariantTilesPerSplit, kInvariantTilesPerSplit};
  int splits = (kTargetBlocks + batch * (kHeads / kHeadsPerBlock) - 1) / (batch * (kHeads / kHeadsPerBlock));
  return {std::max(1, std::min(splits, tiles)), 0};
}

struct AttnParams {
  const bf16* q;
  KvRows window, compressed;
  float scale_log2;  // softmax scale * log2(e)
  int splits, tiles;
  int tiles_per_split;  // 0: split s covers tiles [s * tiles / splits, (s + 1) * tiles / splits)
  float* part_o;     // [batch, splits, 64, 512]
  float* part_ml;    // [batch, splits, 64, 2]: running max (base 2) and denominator of the split
};

// Eight e4m3 codes (channel k at byte k) times a scale as eight bf16 (one uint4): code -> half (exact) -> fp32 x scale
// (exact) -> bf16 (exact; kv_record.h).
__device__ __forceinline__ uint4 e4m3x8_bf16(uint2 codes, float scale) {
  const uint32_t words[2] = {codes.x, codes.y};
  uint32_t packed[4];
#pragma unroll
  for (int w = 0; w < 2; ++w) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw pair = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(words[w] >> (16 * h)), __NV_E4M3);
      const float2 f = __half22float2(__half2(pair));
      packed[2 * w + h] = dev::pack_bf16x2(f.x * scale, f.y * scale);
    }
  }
  return make_uint4(packed[0], packed[1], packed[2], packed[3]);
}

// Key tile `buf`'s records (a record stage: kKeysPerTile rows of kStageRowBytes) as bf16 key rows into the swizzled
// tile `dst`. The block's 128 threads are two rows of 64 chunks: a thread keeps one chunk index ch (8 channels) for
// rows r0, r0 + 2, ..., so its offsets are fixed. An empty slot's record was zero-filled and decodes to +0, as the
// bf16 kernel's zero fill (kv_record.h). Every thread of the block; the caller synchronizes before and after.
//  - V4 (Fp8): ch < 56 is 8 nope channels (8 codes, the e8m0 scale of their 64-channel block), ch >= 56 copies 8 bf16
//    RoPE channels (the thread's branch is fixed);
//  - V4.1: the tile's rows [0, window_rows) are window slots (Mxfp8: 8 codes, the e8m0 scale of their 32-channel
//    block), the others compressed (Fp4: 8 nibbles as e4m3 codes worth value x 2^-6, times the e4m3 scale x 64).
//    Rows r0 + 2i of one warp are one row at a time, so the format branch is warp-uniform.
// A thread's rows are decoded in batches of kDecodeBatch: the batch's record bytes are read from shared memory in one
// loop, then converted and stored in a second. Row by row, each row's reads waited for the previous row's store (the
// compiler cannot tell the record stage from the key tile, both in the dynamic shared memory), so a thread's 16 rows
// were 16 dependent shared-memory round trips, each followed by its conversion (SASS of the split kernels: LDS, F2FP
// ... STS, then the next row's LDS; the RoPE chunks LDS.128 / STS.128 in turn, after the nope chunks in the warps that
// hold both). Now all of a batch's loads (V4: 16 for the nope chunks, 8 LDS.128 for the RoPE ones; V4.1: 24) issue
// before its first STS: 2 round trips a thread instead of 16 (32 in the warps with both branches). The same
// conversions of the same bytes: the same bits.
constexpr int kDecodeBatch = 8;
template <KvFormat kWin, KvFormat kComp>
__device__ __forceinline__ void decode_key_records(const uint8_t* rec, uint8_t* dst, int window_rows) {
  constexpr int kRowStep = kWarps * 32 / kChunks;  // 2
  constexpr int kRowsPerThread = kKeysPerTile / kRowStep;  // 16
  constexpr int kRec = kStageRowBytes<kWin, kComp>;
  static_assert(kWarps * 32 % kChunks == 0 && kKeysPerTile % kRowStep == 0, "whole rows per pass");
  static_assert(kRowsPerThread % kDecodeBatch == 0, "whole batches");
  const int ch = int(threadIdx.x) % kChunks, r0 = int(threadIdx.x) / kChunks;
  if constexpr (kWin == KvFormat::Fp8) {
    static_assert(kComp == KvFormat::Fp8, "V4's pools share the FP8 record");
    constexpr int kNopeChunks = kvrec::kNope / 8;  // 56
    if (ch < kNopeChunks) {
      const int codes_at = kvrec::kCodes + 8 * ch, scale_at = kvrec::kScales + ch / (kvrec::kBlock / 8);
#pragma unroll 1
      for (int i0 = 0; i0 < kRowsPerThread; i0 += kDecodeBatch) {
        uint2 codes[kDecodeBatch];
        uint8_t scale[kDecodeBatch];
#pragma unroll
        for (int i = 0; i < kDecodeBatch; ++i) {
          const uint8_t* row = rec + (r0 + kRowStep * (i0 + i)) * kRec;
          codes[i] = *reinterpret_cast<const uint2*>(row + codes_at);
          scale[i] = row[scale_at];
        }
#pragma unroll
        for (int i = 0; i < kDecodeBatch; ++i)
          *reinterpret_cast<uint4*>(dst + swz(r0 + kRowStep * (i0 + i), ch)) =
              e4m3x8_bf16(codes[i], kvrec::decode_scale(scale[i]));
      }
    } else {
      const int rope_at = kvrec::kRope + 16 * (ch - kNopeChunks);
#pragma unroll 1
      for (int i0 = 0; i0 < kRowsPerThread; i0 += kDecodeBatch) {
        uint4 v[kDecodeBatch];
#pragma unroll
        for (int i = 0; i < kDecodeBatch; ++i)
          v[i] = *reinterpret_cast<const uint4*>(rec + (r0 + kRowStep * (i0 + i)) * kRec + rope_at);
#pragma unroll
        for (int i = 0; i < kDecodeBatch; ++i)
          *reinterpret_cast<uint4*>(dst + swz(r0 + kRowStep * (i0 + i), ch)) = v[i];
      }
    }
  } else {
    static_assert(kWin == KvFormat::Mxfp8 && kComp == KvFormat::Fp4, "V4.1's pools: MXFP8 window, FP4 entries");
    const int win_codes_at = kvrec41::kWindowCodes + 8 * ch;
    const int win_scale_at = kvrec41::kWindowScales + ch / (kvrec41::kWindowBlock / 8);
    const int ent_codes_at = kvrec41::kEntryCodes + 4 * ch;
    const int ent_scale_at = kvrec41::kEntryScales + ch / (kvrec41::kEntryBlock / 8);
#pragma unroll 1
    for (int i0 = 0; i0 < kRowsPerThread; i0 += kDecodeBatch) {
      uint2 raw[kDecodeBatch];  // a window row's 8 codes, or an entry row's 8 nibbles in .x
      uint8_t scale[kDecodeBatch];
#pragma unroll
      for (int i = 0; i < kDecodeBatch; ++i) {
        const int r = r0 + kRowStep * (i0 + i);
        const uint8_t* row = rec + r * kRec;
        if (r < window_rows) {
          raw[i] = *reinterpret_cast<const uint2*>(row + win_codes_at);
          scale[i] = row[win_scale_at];
        } else {
          raw[i].x = *reinterpret_cast<const uint32_t*>(row + ent_codes_at);
          scale[i] = row[ent_scale_at];
        }
      }
#pragma unroll
      for (int i = 0; i < kDecodeBatch; ++i) {
        const int r = r0 + kRowStep * (i0 + i);
        uint2 codes;
        float s;
        if (r < window_rows) {
          codes = raw[i];
          s = kvrec::decode_scale(scale[i]);
        } else {
          const uint64_t c = kvrec41::e2m1x8_e4m3_codes(raw[i].x);
          codes = make_uint2(uint32_t(c), uint32_t(c >> 32));
          s = kvrec::code_value(scale[i]) * kvrec41::kE2m1InE4m3;  // exact: a power-of-two multiple
        }
        *reinterpret_cast<uint4*>(dst + swz(r, ch)) = e4m3x8_bf16(codes, s);
      }
    }
  }
}

// The query prologue (DEEPINFER_Q_NORM_PROLOGUE, decode_fused.h; bench/gpu/NOTES.md "Query norm + RoPE in the split
// kernel's prologue"): the 16 query rows of head group hg of sequence b from wq_b's fp32 output through
// rms_norm_f32_rope's norm + RoPE (no weight), as bf16 into the swizzled query tile sQ. Warp w takes rows 4w .. 4w + 3;
// lane l holds float4 l + 32k (k = 0..3) of a row, the slice thread l + 32k of rms_norm_f32_rope's block holds, so the
// sum of squares is the same additions in the same order (norm_warp_row_sum) and every value the same expressions
// (gemm_out4, the per-head norm's bf16 ops add_squares4 / head_rms_factor_bf16x2, rms_scale_rope_pair, rope.cuh): the
// same bf16 query as the norm's launch writes. The RoPE span (at most 64 channels, the host checks) lies in the last
// float4 of each lane (k = 3); its angles are the same for the 16 rows, so lane i computes pair i's once and the lanes
// holding a pair take it with a shuffle.
// Two steps: load_query_rows (the raw fp32 rows, the position, lane i's frequency) before the key lists' round trip, so
// that the round trips overlap, then normalize_query_rows (from the rows' bf16 rounding on) once the first key tile's
// loads are issued. Nothing may consume the rows' loads in between: rounded at the loads (session 63's form), the
// roundings waited for the rows before the key lists' loads issued (SASS: 64 F2F.BF16.F32 a lane between the query's
// LDG.128s and resolve_rows' LDGs), the two round trips one after the other.
constexpr int kQueryRowsPerWarp = kHeadsPerBlock / kWarps;  // 4
constexpr int kQuerySlices = kDim / 4 / 32;                 // 4 float4 per lane and row
static_assert(kDim == 4 * dev::kNormThreads, "a row is one float4 per thread of rms_norm_f32_rope's block");
static_assert(kQueryRowsPerWarp % 2 == 0, "the factors two rows at a time (head_rms_factor_bf16x2)");
struct QueryRowSlices {
  float4 v[kQueryRowsPerWarp][kQuerySlices];
  int32_t position;
  float inv_freq;  // pair `lane`'s, for lanes in the RoPE span's pairs
};

__device__ __forceinline__ void load_query_rows(const QueryNormRope& n, int hg, int b, QueryRowSlices& rows) {
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const auto* x = reinterpret_cast<const float4*>(
                      n.x + (int64_t(b) * kHeads + hg * kHeadsPerBlock + warp * kQueryRowsPerWarp) * kDim) +
                  lane;
#pragma unroll
  for (int i = 0; i < kQueryRowsPerWarp; ++i)
#pragma unroll
    for (int k = 0; k < kQuerySlices; ++k) rows.v[i][k] = x[i * (kDim / 4) + 32 * k];  // raw: rounded in normalize
  if (2 * lane < n.rope_dim) {
    rows.position = n.positions[b];
    rows.inv_freq = n.inv_freq[lane];
  }
}

__device__ __forceinline__ void normalize_query_rows(const QueryNormRope& n, const QueryRowSlices& rows, uint8_t* sQ) {
  constexpr int kRowsPerWarp = kQueryRowsPerWarp, kSlices = kQuerySlices;
  const auto& v = rows.v;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int row0 = warp * kRowsPerWarp;
  const int nope = kDim - n.rope_dim;
  dev::RopeAngle own{0.0f, 1.0f};
  if (2 * lane < n.rope_dim) own = dev::rope_angle(rows.position, rows.inv_freq, false);
  dev::RopeAngle angle[2];
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const int from = (4 * (32 * (kSlices - 1) + lane) + 2 * p - nope) / 2;  // the pair; any lane outside the span
    angle[p].s = __shfl_sync(0xFFFFFFFFu, own.s, from & 31);
    angle[p].c = __shfl_sync(0xFFFFFFFFu, own.c, from & 31);
  }
  // The GEMM's bf16 values (gemm_out4), rounded here and not at the loads (above).
  float4 q[kRowsPerWarp][kSlices];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i)
#pragma unroll
    for (int k = 0; k < kSlices; ++k) q[i][k] = dev::gemm_out4(v[i][k]);
  float r[kRowsPerWarp];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; i += 2) {
    const float2 f = dev::head_rms_factor_bf16x2(
        make_float2(dev::norm_warp_row_sum(q[i], true), dev::norm_warp_row_sum(q[i + 1], true)), kDim, n.eps);
    r[i] = f.x;
    r[i + 1] = f.y;
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
#pragma unroll
    for (int k = 0; k < kSlices; ++k) {
      const int j = 32 * k + lane;
      const float t[4] = {q[i][k].x, q[i][k].y, q[i][k].z, q[i][k].w};
      __nv_bfloat162 out[2];
#pragma unroll
      for (int p = 0; p < 2; ++p)  // only the last slice may reach the span
        out[p] = dev::rms_scale_rope_pair(t[2 * p], t[2 * p + 1], r[i], nullptr, 4 * j + 2 * p,
                                          k == kSlices - 1 ? nope : kDim, [&] { return angle[p]; });
      *reinterpret_cast<uint2*>(sQ + swz(row0 + i, j / 2) + 8 * (j % 2)) = *reinterpret_cast<const uint2*>(out);
    }
  }
}

// One split's unnormalised output, running max (base 2) and denominator for the 16 heads of head group hg of
// sequence b, into part_o / part_ml. The work of one block of kWarps warps with smem_bytes<kWin, kComp>() of shared
// memory (the split kernel's block). kWin / kComp: the row formats of the window and compressed pools. kNormQuery:
// the query rows come from *qn's fp32 rows through normalize_query_rows (p.q: only the zero-fill loads' dummy address).
template <KvFormat kWin, KvFormat kComp, bool kNormQuery = false>
__device__ __forceinline__ void attend_split(const AttnParams& p, int split, int hg, int b, uint8_t* smem,
                                             const QueryNormRope* qn = nullptr) {
  constexpr bool kFp8 = kWin != KvFormat::Bf16;  // packed records (V4's FP8 or V4.1's MXFP8 / FP4)
  static_assert(kFp8 == (kComp != KvFormat::Bf16), "both segments bf16, or both packed");
  constexpr int kKeyTiles = kFp8 ? 1 : 2;  // bf16: double-buffered key tiles; FP8: one, the records double-buffered
  constexpr int kRec = kStageRowBytes<kWin, kComp>;  // a record stage's row
  constexpr int kRecChunks = kRec / 16;
  constexpr int kRecStageBytes = kKeysPerTile * kRec;
  uint8_t* sQ = smem;
  uint8_t* sK = smem + kQBytes;
  float* sS = reinterpret_cast<float*>(smem + kQBytes + kKeyTiles * kKBytes);
  const uint8_t** sRow =
      reinterpret_cast<const uint8_t**>(smem + kQBytes + kKeyTiles * kKBytes + kSBytes);  // [2][32]
  uint8_t* sRec = smem + kQBytes + kKeyTiles * kKBytes + kSBytes + 2 * kKeysPerTile * 8;  // FP8: [2][32] records

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, c = lane % 4;
  const int lw = p.window.stride, lc = p.compressed.stride;
  const int tile_begin = p.tiles_per_split ? split * p.tiles_per_split : split * p.tiles / p.splits;
  const int tile_end =
      p.tiles_per_split ? min(p.tiles, tile_begin + p.tiles_per_split) : (split + 1) * p.tiles / p.splits;

  // The 16 query rows of this head group.
  const uint8_t* qsrc = reinterpret_cast<const uint8_t*>(p.q + (int64_t(b) * kHeads + hg * kHeadsPerBlock) * kDim);
  [[maybe_unused]] QueryRowSlices qrows;  // kNormQuery: the fp32 rows, in registers until the key loads are issued
  if constexpr (kNormQuery) {
    if (tile_begin < tile_end) load_query_rows(*qn, hg, b, qrows);
  } else {
    for (int id = tid; id < kHeadsPerBlock * kChunks; id += kWarps * 32) {
      const int r = id / kChunks, ch = id % kChunks;
      dev::cp_async16(dev::smem_u32(sQ + swz(r, ch)), qsrc + r * kRowBytes + ch * 16);
    }
  }

  // Slot -> latent row (null for an empty slot): the window slots first, then the compressed ones.
  auto resolve_rows = [&](int tile, int buf) {
    if (tid < kKeysPerTile) {
      const int slot = tile * kKeysPerTile + tid;
      const uint8_t* row = nullptr;
      if (slot < lw) {
        const int r = p.window.rows[int64_t(b) * lw + slot];
        if (r >= 0) row = static_cast<const uint8_t*>(p.window.pool) + int64_t(r) * kPoolRowBytes<kWin>;
      } else if (slot < lw + lc) {
        const int r = p.compressed.rows[int64_t(b) * lc + (slot - lw)];
        if (r >= 0) row = static_cast<const uint8_t*>(p.compressed.pool) + int64_t(r) * kPoolRowBytes<kComp>;
      }
      sRow[buf * kKeysPerTile + tid] = row;
    }
  };
  // Rows [0, window_rows(tile)) of a tile are window slots, the rest compressed slots (or past the list).
  auto window_rows = [&](int tile) { return min(max(lw - tile * kKeysPerTile, 0), kKeysPerTile); };
  // A thread's row pointers are read from sRow in one loop, then its copies issued in a second. Read chunk by chunk,
  // each pointer's read waited for the previous chunk's cp.async (a shared-memory write as far as the compiler knows),
  // so a thread's copies (16 for bf16 rows, 10 for V4's records, 9 for V4.1's) were issued one shared-memory round
  // trip apart (SASS: LDS.64, the null test, LDGSTS, then the next LDS.64), delaying the tile's last copy and so its
  // arrival; now all of a thread's LDS.64 issue before its first LDGSTS. Copy k of thread tid is copy
  // tid + k * kThreads of the tile (kThreads: the block, the launch's); only the last may lie past the tile's copies.
  // The same copies (addresses, sizes) in the same commit group.
  auto load_keys = [&](int tile, int buf) {
    constexpr int kThreads = kWarps * 32;
    constexpr int kRowChunks = kFp8 ? kRecChunks : kChunks;  // 16-byte copies per key row
    constexpr int kCopies = kKeysPerTile * kRowChunks;
    constexpr int kPerThread = (kCopies + kThreads - 1) / kThreads;
    static_assert(kRec % 16 == 0, "a record stage row is whole chunks");
    auto copy_id = [&](int k) { return unsigned(tid) + unsigned(k * kThreads); };
    auto has_copy = [&](int k) { return kCopies % kThreads == 0 || k < kPerThread - 1 || copy_id(k) < kCopies; };
    const uint8_t* rows[kPerThread];
#pragma unroll
    for (int k = 0; k < kPerThread; ++k)
      if (has_copy(k)) rows[k] = sRow[buf * kKeysPerTile + int(copy_id(k) / kRowChunks)];
    const uint32_t dst = kFp8 ? dev::smem_u32(sRec + buf * kRecStageBytes) : dev::smem_u32(sK + buf * kKBytes);
    [[maybe_unused]] const int wr = window_rows(tile);
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      if (!has_copy(k)) continue;
      const int r = int(copy_id(k) / kRowChunks), ch = int(copy_id(k) % kRowChunks);
      const uint8_t* row = rows[k];
      if constexpr (kFp8) {  // the records as they are, into record stage buf
        if constexpr (kWin != kComp)  // a row brings its own format's bytes (V4.1: 33 or 18 chunks)
          if (ch * 16 >= (r < wr ? kPoolRowBytes<kWin> : kPoolRowBytes<kComp>)) continue;
        dev::cp_async16(dst + uint32_t(r * kRec + ch * 16), row ? row + ch * 16 : qsrc, row ? 16 : 0);
      } else {
        // An empty slot is zero-filled: its weight is 0 and 0 * 0 keeps the values finite.
        dev::cp_async16(dst + swz(r, ch), row ? row + ch * 16 : qsrc, row ? 16 : 0);
      }
    }
  };

  float o[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY};  // rows g and g + 8, base-2 logits
  float l_run[2] = {0.0f, 0.0f};            // this thread's share of the denominators

  if (tile_begin < tile_end) {
    resolve_rows(tile_begin, 0);
    __syncthreads();
    load_keys(tile_begin, 0);
  }
  dev::cp_async_commit();
  // The query norm while the first key tile is in flight; the loop's barriers order its stores before the products.
  if constexpr (kNormQuery)
    if (tile_begin < tile_end) normalize_query_rows(*qn, qrows, sQ);

  for (int tile = tile_begin, it = 0; tile < tile_end; ++tile, ++it) {
    const int buf = it & 1;
    const bool has_next = tile + 1 < tile_end;
    if (has_next) resolve_rows(tile + 1, buf ^ 1);
    __syncthreads();
    if (has_next) load_keys(tile + 1, buf ^ 1);
    dev::cp_async_commit();
    dev::cp_async_wait<1>();
    __syncthreads();
    if constexpr (kFp8) {  // the one key tile: the previous tile's products ended at the barrier after resolve_rows
      decode_key_records<kWin, kComp>(sRec + buf * kRecStageBytes, sK, window_rows(tile));
      __syncthreads();
    }
    // Which of the 32 slots hold a key (read before the next iteration may overwrite sRow[buf]).
    const uint32_t valid = __ballot_sync(0xFFFFFFFFu, sRow[buf * kKeysPerTile + lane] != nullptr);
    const uint8_t* keys = kFp8 ? sK : sK + buf * kKBytes;

    // ---- partial scores over this warp's 128 dims: S_w [16 heads x 32 keys]
    float s[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      const int ch0 = (warp * 128 + kk * 16) / 8;
      uint32_t a0, a1, a2, a3;
      dev::ldmatrix_x4(dev::smem_u32(sQ + swz(lane % 16, ch0 + lane / 16)), a0, a1, a2, a3);
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        const int key = np * 16 + (lane % 8) + 8 * (lane / 16);
        uint32_t b0, b1, b2, b3;
        dev::ldmatrix_x4(dev::smem_u32(keys + swz(key, ch0 + (lane / 8) % 2)), b0, b1, b2, b3);
        dev::mma_bf16_m16n8k16(s[2 * np], a0, a1, a2, a3, b0, b1);
        dev::mma_bf16_m16n8k16(s[2 * np + 1], a0, a1, a2, a3, b2, b3);
      }
    }
    float* my_s = sS + warp * kHeadsPerBlock * kKeysPerTile;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      *reinterpret_cast<float2*>(my_s + g * kKeysPerTile + 8 * j + 2 * c) = make_float2(s[j][0], s[j][1]);
      *reinterpret_cast<float2*>(my_s + (g + 8) * kKeysPerTile + 8 * j + 2 * c) = make_float2(s[j][2], s[j][3]);
    }
    __syncthreads();
    // Full scores: the 4 partials added in warp order (every warp gets the same numbers).
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = g + (e >= 2 ? 8 : 0), col = 8 * j + 2 * c + (e & 1);
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) v += sS[(w * kHeadsPerBlock + row) * kKeysPerTile + col];
        s[j][e] = (valid >> col) & 1u ? v * p.scale_log2 : -INFINITY;
      }
    }

    // ---- online softmax (base 2) for rows g and g + 8
    float corr[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
      const float m_new = fmaxf(m_run[h], mx);
      corr[h] = m_run[h] == -INFINITY ? 0.0f : exp2f(m_run[h] - m_new);
      m_run[h] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          s[j][e] = s[j][e] == -INFINITY ? 0.0f : exp2f(s[j][e] - m_new);
          sum += s[j][e];
        }
      }
      l_run[h] = l_run[h] * corr[h] + sum;
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      o[j][0] *= corr[0];
      o[j][1] *= corr[0];
      o[j][2] *= corr[1];
      o[j][3] *= corr[1];
    }

    // ---- O += P V over this warp's dims; P's C-fragment layout is the A-fragment layout of the next mma.
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const uint32_t a0 = dev::pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
      const uint32_t a1 = dev::pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
      const uint32_t a2 = dev::pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      const uint32_t a3 = dev::pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      const int key = kk * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
#pragma unroll
      for (int dn = 0; dn < 8; ++dn) {
        const int ch = (warp * 128 + dn * 16) / 8 + lane / 16;
        uint32_t b0, b1, b2, b3;
        dev::ldmatrix_x4_trans(dev::smem_u32(keys + swz(key, ch)), b0, b1, b2, b3);
        dev::mma_bf16_m16n8k16(o[2 * dn], a0, a1, a2, a3, b0, b1);
        dev::mma_bf16_m16n8k16(o[2 * dn + 1], a0, a1, a2, a3, b2, b3);
      }
    }
  }
  dev::cp_async_wait<0>();

  // ---- this split's unnormalised output, running max and denominator
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xFFFFFFFFu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xFFFFFFFFu, l_run[h], 2);
  }
  const int64_t part = (int64_t(b) * p.splits + split) * kHeads + hg * kHeadsPerBlock;
  float* out0 = p.part_o + (part + g) * kDim + warp * 128;
  float* out1 = p.part_o + (part + g + 8) * kDim + warp * 128;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    *reinterpret_cast<float2*>(out0 + 8 * j + 2 * c) = make_float2(o[j][0], o[j][1]);
    *reinterpret_cast<float2*>(out1 + 8 * j + 2 * c) = make_float2(o[j][2], o[j][3]);
  }
  if (warp == 0 && c == 0) {
    p.part_ml[(part + g) * 2 + 0] = m_run[0];
    p.part_ml[(part + g) * 2 + 1] = l_run[0];
    p.part_ml[(part + g + 8) * 2 + 0] = m_run[1];
    p.part_ml[(part + g + 8) * 2 + 1] = l_run[1];
  }
}

// PDL (attention_pdl(), cuda/launch.h): every block waits before its first global access (the query rows, the index
// lists, the pools: the predecessors'; the partials the previous merge read), then lets the merge's blocks in (no
// shared memory: they take slots beside the splits and wait there).
template <KvFormat kWin, KvFormat kComp>
__global__ void __launch_bounds__(kWarps * 32) sink_attention_split_kernel(AttnParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  pdl_wait();
  pdl_launch_dependents();
  attend_split<kWin, kComp>(p, blockIdx.x, blockIdx.y, blockIdx.z, smem);
}

// The split kernel with the query prologue (normalize_query_rows): the same blocks, each normalising and rotating its
// head group's query rows from qn.x instead of loading the bf16 rows; the redundant work across the splits of a group
// (16 rows of 2 KB from L2, 2 sincosf per lane) replaces the norm kernel's launch on the layer's chain.
template <KvFormat kWin, KvFormat kComp>
__global__ void __launch_bounds__(kWarps * 32) sink_attention_split_qnorm_kernel(AttnParams p, QueryNormRope qn) {
  extern __shared__ __align__(16) uint8_t smem[];
  pdl_wait();  // as sink_attention_split_kernel
  pdl_launch_dependents();
  attend_split<kWin, kComp, true>(p, blockIdx.x, blockIdx.y, blockIdx.z, smem, &qn);
}

constexpr int kMergeThreads = kDim / 4;  // 4 dims per thread

// The attention core's epilogue run by the merge launch (AttentionEpilogue, step_kernels.h): the de-rotation of the
// merged row b (rope(o, inverse) of its last rope_dim channels, at o_positions[b]) and the window commit of step row
// b (window_commit_row).
struct MergeEpilogue {
  const int32_t* o_positions;
  const float* inv_freq;
  int rope_dim;
  void* pool;
  const int32_t *slots, *positions, *chunk_first, *chunk_rows;
  int window, slots_capacity, row_bytes;
};

// merge_head<kHeld > 0>'s loads of splits [kS, kEnd): split s's ml and v by ld.global.cg (__ldcg's load) at an
// immediate offset from the two bases, under the predicate s < splits; past the end ml[s].x stays -inf and v[s] is
// left undefined (never read). Written as __ldcg per split, ptxas rematerialized both bases under each split's
// predicate (~14 instructions a split: 320 from the wait to the last load for 24 splits, SASS).
template <int kS, int kEnd>
__device__ __forceinline__ void load_held_splits(float2* ml, float4* v, const float2* ml_base, const float4* v_base,
                                                 int splits) {
  if constexpr (kS < kEnd) {
    ml[kS].x = -INFINITY;
    asm volatile("{\n .reg .pred p;\n setp.lt.s32 p, %2, %3;\n @p ld.global.cg.v2.f32 {%0, %1}, [%4+%5];\n}\n"
                 : "+f"(ml[kS].x), "=f"(ml[kS].y)
                 : "n"(kS), "r"(splits), "l"(ml_base), "n"(kS * kHeads * 8));
    asm volatile(
        "{\n .reg .pred p;\n setp.lt.s32 p, %4, %5;\n @p ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%6+%7];\n}\n"
        : "=f"(v[kS].x), "=f"(v[kS].y), "=f"(v[kS].z), "=f"(v[kS].w)
        : "n"(kS), "r"(splits), "l"(v_base), "n"(kS * kHeads * kDim * 4));
    load_held_splits<kS + 1, kEnd>(ml, v, ml_base, v_base, splits);
  }
}

// out[b, h] = sum_s 2^(m_s - M) O_s / (sum_s 2^(m_s - M) l_s + 2^(sink_h - M)), M = max(sink_h, max_s m_s), the
// splits added in split order. kMergeThreads threads. The partials are read through L2 (__ldcg).
// kDerotate: the thread's two pairs de-rotated when they lie in the RoPE channels, with rope_item's functions on
// the same bf16 pairs (the rounded outputs), so rope(out, inverse)'s bits (rope.cuh); the host guarantees that the
// RoPE span starts on a thread's first channel. kHeld > 0: splits <= kHeld * kMergeBatch, all loaded at once.
constexpr int kMergeBatch = 8;  // merge_head: the splits whose partials a thread loads at once
template <bool kDerotate = false, int kHeld = 0>
__device__ __forceinline__ void merge_head(const float* __restrict__ part_o, const float* __restrict__ part_ml,
                                           const float* __restrict__ sink, int splits, int b, int h,
                                           bf16* __restrict__ out, const MergeEpilogue* e = nullptr) {
  // __fmul_rn: the product rounded on its own, as before the first batch moved into pass 1 (nvcc then contracted
  // exp2f's sink2 - M into an FFMA).
  const float sink2 = __fmul_rn(sink[h], 1.4426950408889634f);
  const int64_t idx0 = int64_t(b) * splits * kHeads + h;  // split s: idx0 + s * kHeads
  // kDerotate: the position and the thread's frequencies start towards L1 here, beside the partials' loads, and are
  // read after the sums: loaded only there, their L2 round trip was the block's last step (SASS: LDG, sincosf, the
  // store); loaded here into registers, they were held across the sums' loop and the reciprocal's slow-path call
  // (ptxas then spilled inside the loop).
  const int pair = kDerotate ? (4 * int(threadIdx.x) - (kDim - e->rope_dim)) / 2 : -1;  // the thread's first pair
  if (kDerotate && pair >= 0) {
    prefetch_l1(e->o_positions + b);
    prefetch_l1(e->inv_freq + pair);  // pair and pair + 1: one line (pair even)
  }
  float den, acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if constexpr (kHeld > 0) {
    // splits <= kHeld * kMergeBatch (launch_sink_attention; batch <= 2): every split's partials loaded at once, one
    // L2 round trip (the batched form below: one a batch and pass, five for CSA's 20 splits, SASS), then the same
    // operations on the same values in split order: the max from sink2 up, den from exp2f(sink2 - M), and each
    // split's exp2f(m - M) and its FFMAs (those nvcc contracts den += w * l and acc += w * v into, SASS).
    // Run 246 (session 52, helper-156): V4.1 batch 1 -1.2 %, V4 flat.
    constexpr int kSplits = kHeld * kMergeBatch;
    float2 ml[kSplits];
    float4 v[kSplits];
    load_held_splits<0, kSplits>(ml, v, reinterpret_cast<const float2*>(part_ml) + idx0,
                                 reinterpret_cast<const float4*>(part_o + idx0 * kDim) + threadIdx.x, splits);
    float M = sink2;
#pragma unroll
    for (int s = 0; s < kSplits; ++s)
      if (s < splits) M = fmaxf(M, ml[s].x);
    den = exp2f(sink2 - M);
#pragma unroll
    for (int s0 = 0; s0 < kSplits; s0 += kMergeBatch) {
      // A batch's weights, then its sums under a predicate: with exp2f inside the skip test each split was a branch
      // around a dependent FADD -> MUFU.EX2 -> FFMA chain (SASS). A skipped split's weight is computed and dropped
      // (past the end: exp2f(-inf)).
      float w[kMergeBatch];
#pragma unroll
      for (int i = 0; i < kMergeBatch; ++i) {
        w[i] = exp2f(ml[s0 + i].x - M);
        asm volatile("" : "+f"(w[i]));  // computed here: nvcc sinks it into the select's branch otherwise (SASS)
      }
#pragma unroll
      for (int i = 0; i < kMergeBatch; ++i) {
        const int s = s0 + i;
        const bool add = s < splits && ml[s].x != -INFINITY;  // not past the end, and the split has a key
        den = add ? __fmaf_rn(w[i], ml[s].y, den) : den;
        acc[0] = add ? __fmaf_rn(w[i], v[s].x, acc[0]) : acc[0];
        acc[1] = add ? __fmaf_rn(w[i], v[s].y, acc[1]) : acc[1];
        acc[2] = add ? __fmaf_rn(w[i], v[s].z, acc[2]) : acc[2];
        acc[3] = add ? __fmaf_rn(w[i], v[s].w, acc[3]) : acc[3];
      }
    }
  } else {
    // The splits in batches of kMergeBatch, each batch's loads issued before its arithmetic: one L2 round trip per
    // batch and pass (a split's loads used to wait for the previous split's, ~0.3 us each: CSA's 20 splits made the
    // merge 8.9 us in the step, HCA's 5 4.1 us; run 131's trace). The same operations on the same values in split
    // order. Run 138 (same call, against the same build without it): V4 batch 1 -2.1 %, V4.1 -1.3 %.
    // The first batch's pass-2 operands (ml, v: they do not depend on M) are loaded in pass 1 with its m, so pass 2
    // starts on registers: one L2 round trip less when splits <= kMergeBatch, and later batches' loads issue at once
    // (SASS: pass 2's loads came only after pass 1's max). The same values in the same order of splits.
    auto load_batch = [&](int s0, float2 (&ml)[kMergeBatch], float4 (&v)[kMergeBatch]) {
#pragma unroll
      for (int i = 0; i < kMergeBatch; ++i) {
        if (s0 + i < splits) {
          const int64_t idx = idx0 + int64_t(s0 + i) * kHeads;
          ml[i] = __ldcg(reinterpret_cast<const float2*>(part_ml) + idx);
          // Loaded whether or not the split has a key (the buffer is allocated either way; unused then).
          v[i] = __ldcg(reinterpret_cast<const float4*>(part_o + idx * kDim) + threadIdx.x);
        }
      }
    };
    float2 ml0[kMergeBatch];
    float4 v0[kMergeBatch];
    load_batch(0, ml0, v0);
    float M = sink2;
#pragma unroll
    for (int i = 0; i < kMergeBatch; ++i)
      if (i < splits) M = fmaxf(M, ml0[i].x);
    for (int s0 = kMergeBatch; s0 < splits; s0 += kMergeBatch) {
      float m[kMergeBatch];
#pragma unroll
      for (int i = 0; i < kMergeBatch; ++i)
        if (s0 + i < splits) m[i] = __ldcg(part_ml + (idx0 + int64_t(s0 + i) * kHeads) * 2);
#pragma unroll
      for (int i = 0; i < kMergeBatch; ++i)
        if (s0 + i < splits) M = fmaxf(M, m[i]);
    }
    den = exp2f(sink2 - M);
    auto add_batch = [&](int s0, const float2 (&ml)[kMergeBatch], const float4 (&v)[kMergeBatch]) {
#pragma unroll
      for (int i = 0; i < kMergeBatch; ++i) {
        if (s0 + i >= splits || ml[i].x == -INFINITY) continue;  // past the end, or a split with no key
        const float w = exp2f(ml[i].x - M);
        den += w * ml[i].y;
        acc[0] += w * v[i].x;
        acc[1] += w * v[i].y;
        acc[2] += w * v[i].z;
        acc[3] += w * v[i].w;
      }
    };
    add_batch(0, ml0, v0);
    for (int s0 = kMergeBatch; s0 < splits; s0 += kMergeBatch) {
      float2 ml[kMergeBatch];
      float4 v[kMergeBatch];
      load_batch(s0, ml, v);
      add_batch(s0, ml, v);
    }
  }
  const float inv = 1.0f / den;
  auto* dst = reinterpret_cast<uint2*>(out + (int64_t(b) * kHeads + h) * kDim) + threadIdx.x;
  uint2 packed = make_uint2(dev::pack_bf16x2(acc[0] * inv, acc[1] * inv), dev::pack_bf16x2(acc[2] * inv, acc[3] * inv));
  if constexpr (kDerotate) {
    if (pair >= 0) {  // the thread's first pair is in the RoPE span
      const int32_t position = e->o_positions[b];
      uint32_t words[2] = {packed.x, packed.y};
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const dev::RopeAngle a = dev::rope_angle(position, e->inv_freq[pair + k], true);
        __nv_bfloat162 v = dev::rope_rotate(*reinterpret_cast<const __nv_bfloat162*>(&words[k]), a);
        words[k] = *reinterpret_cast<const uint32_t*>(&v);
      }
      packed = make_uint2(words[0], words[1]);
    }
  }
  *dst = packed;
}

__global__ void __launch_bounds__(kMergeThreads) sink_attention_merge_kernel(const float* __restrict__ part_o,
                                                                             const float* __restrict__ part_ml,
                                                                             const float* __restrict__ sink,
                                                                             int splits, bf16* __restrict__ out) {
  pdl_wait();  // PDL (attention_pdl()): the split's partials
  merge_head(part_o, part_ml, sink, splits, blockIdx.y, blockIdx.x, out);
}

// The merge with the attention core's epilogue (merge_epilogue(), decode_fused.h): grid (kHeads + 1, batch); blocks x <
// kHeads merge and de-rotate head x of row y, block kHeads commits step row y to the window ring. The window rows are
// no longer read once the split kernel is done (stream order), as for window_commit_derotate after the merge. The
// dependents (wo_a) may launch at once: they wait for this grid's completion before reading o. kHeld: merge_head's.
template <int kHeld>
__global__ void __launch_bounds__(kMergeThreads) sink_attention_merge_epilogue_kernel(
    const float* __restrict__ part_o, const float* __restrict__ part_ml, const float* __restrict__ sink, int splits,
    bf16* __restrict__ out, const MergeEpilogue e) {
  // PDL (attention_pdl()): every block waits for the split's completion: the partials, and the window reads that
  // the commit below must not overtake.
  pdl_wait();
  pdl_launch_dependents();
  if (blockIdx.x == kHeads) {
    window_commit_row(e.pool, e.slots, e.positions, e.chunk_first, e.chunk_rows, blockIdx.y, e.window,
                      e.slots_capacity, e.row_bytes);
    return;
  }
  merge_head<true, kHeld>(part_o, part_ml, sink, splits, blockIdx.y, blockIdx.x, out, &e);
}

// The query rows of sink_attention_decode_committed's QueryNormRope form: the prologue's inputs, and the bf16 rows
// that the norm's own launch writes for a form that declines the prologue.
struct QueryPrologue {
  QueryNormRope norm;
  bf16* q;
};

// The norm's own launch (rms_norm_f32_rope of the query heads, as V4's decode step called it before the prologue).
void query_norm_launch(const QueryNormRope& n, bf16* q, int batch, cudaStream_t stream) {
  rms_norm_f32_rope(n.x, nullptr, q, int64_t(batch) * kHeads, kDim, n.eps, kHeads, n.positions, n.inv_freq,
                    n.rope_dim, KvCacheRows{}, stream);
}

// The split + merge launch of the plan in p, with the key loads of the pools' formats. With epi, the merge runs the
// epilogue too (sink_attention_merge_epilogue_kernel); returns whether it did. With qp, the split kernel runs the
// query prologue (p.q = qp->q, not written).
template <KvFormat kWin, KvFormat kComp>
bool launch_sink_attention(const AttnParams& p, int batch, const float* sink, bf16* out, cudaStream_t stream,
                           const MergeEpilogue* epi, const QueryPrologue* qp) {
  constexpr int smem = smem_bytes<kWin, kComp>();
  LaunchSpec split{dim3(unsigned(p.splits), kHeads / kHeadsPerBlock, unsigned(batch)), dim3(kWarps * 32), smem, stream};
  split.pdl = attention_pdl();
  if (qp) {
    DI_CUDA_CHECK(cudaFuncSetAttribute(sink_attention_split_qnorm_kernel<kWin, kComp>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    DI_CUDA_CHECK(launch(split, sink_attention_split_qnorm_kernel<kWin, kComp>, p, qp->norm));
  } else {
    DI_CUDA_CHECK(cudaFuncSetAttribute(sink_attention_split_kernel<kWin, kComp>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    DI_CUDA_CHECK(launch(split, sink_attention_split_kernel<kWin, kComp>, p));
  }
  LaunchSpec merge{dim3(epi ? kHeads + 1 : kHeads, unsigned(batch)), dim3(kMergeThreads), 0, stream};
  merge.pdl = split.pdl;
  if (epi) {
    // Up to 24 splits' partials in one round trip (merge_head<kHeld>) where the grid (<= 130 blocks) needs at most
    // one block an SM: the held splits cost registers (64 / 118 / 166 against the batched form's 72), which would cut
    // the blocks an SM holds at larger batches.
    const int held = batch <= 2 && p.splits <= 3 * kMergeBatch ? (p.splits + kMergeBatch - 1) / kMergeBatch : 0;
    auto* kernel = held == 3   ? sink_attention_merge_epilogue_kernel<3>
                   : held == 2 ? sink_attention_merge_epilogue_kernel<2>
                   : held == 1 ? sink_attention_merge_epilogue_kernel<1>
                               : sink_attention_merge_epilogue_kernel<0>;
    DI_CUDA_CHECK(launch(merge, kernel, p.part_o, p.part_ml, sink, p.splits, out, *epi));
    return true;
  }
  DI_CUDA_CHECK(launch(merge, sink_attention_merge_kernel, p.part_o, p.part_ml, sink, p.splits, out));
  return false;
}

// sink_attention_decode's launch, with the merge's epilogue when epi is set (returns whether the epilogue ran) and
// the query prologue when qp is set (q = qp->q).
bool sink_attention_launch(const bf16* q, int batch, const KvRows& window, const KvRows& compressed, const float* sink,
                           float scale, bf16* out, void* workspace, cudaStream_t stream, const MergeEpilogue* epi,
                           const QueryPrologue* qp = nullptr) {
  if (batch == 0) return false;
  DI_CHECK(window.stride >= 0 && compressed.stride >= 0, "cuda::sink_attention_decode: negative stride");
  // The pools' row formats: both bf16, both V4's FP8 record, or V4.1's MXFP8 window and FP4 entries. An absent
  // segment takes the format its model pairs with the present one.
  auto companion = [](KvFormat f) {
    return f == KvFormat::Mxfp8 ? KvFormat::Fp4 : f == KvFormat::Fp4 ? KvFormat::Mxfp8 : f;
  };
  const KvFormat win = window.stride > 0 ? window.format : companion(compressed.format);
  const KvFormat comp = compressed.stride > 0 ? compressed.format : companion(win);
  DI_CHECK(comp == companion(win) && win != KvFormat::Fp4,
           std::string("cuda::sink_attention_decode: window rows ") + kv_format_name(win) + " with compressed rows " +
               kv_format_name(comp) + " (supported: bf16 / bf16, fp8 / fp8, mxfp8 / fp4)");
  const int tiles = std::max(1, (window.stride + compressed.stride + kKeysPerTile - 1) / kKeysPerTile);
  AttnParams p;
  p.q = q;
  p.window = window;
  p.compressed = compressed;
  p.scale_log2 = scale * 1.4426950408889634f;
  const SplitPlan plan = attention_splits(batch, tiles);
  p.splits = plan.splits;
  p.tiles_per_split = plan.tiles_per_split;
  p.tiles = tiles;
  p.part_o = static_cast<float*>(workspace);
  p.part_ml = p.part_o + size_t(batch) * p.splits * kHeads * kDim;
  if (win == KvFormat::Fp8)
    return launch_sink_attention<KvFormat::Fp8, KvFormat::Fp8>(p, batch, sink, out, stream, epi, qp);
  if (win == KvFormat::Mxfp8)
    return launch_sink_attention<KvFormat::Mxfp8, KvFormat::Fp4>(p, batch, sink, out, stream, epi, qp);
  return launch_sink_attention<KvFormat::Bf16, KvFormat::Bf16>(p, batch, sink, out, stream, epi, qp);
}

}  // namespace

size_t sink_attention_workspace_bytes(int batch, int window_stride, int compressed_stride) {
  const int tiles = (window_stride + compressed_stride + kKeysPerTile - 1) / kKeysPerTile;
  const int splits = attention_splits(batch, std::max(tiles, 1)).splits;
  return size_t(batch) * splits * kHeads * (kDim + 2) * sizeof(float);
}

void sink_attention_decode(const bf16* q, int batch, const KvRows& window, const KvRows& compressed, const float* sink,
                           float scale, bf16* out, void* workspace, cudaStream_t stream) {
  sink_attention_launch(q, batch, window, compressed, sink, scale, out, workspace, stream, nullptr);
}

namespace {

// sink_attention_decode_committed, with the query prologue when qp is set (q = qp->q).
void sink_attention_committed_launch(const bf16* q, int batch, const KvRows& window, const KvRows& compressed,
                                     const float* sink, float scale, void* workspace, const AttentionEpilogue& e,
                                     cudaStream_t stream, const QueryPrologue* qp) {
  // The merge's epilogue covers one step row per query row (block kHeads of row b commits step row b), whole heads of
  // kDim channels, a RoPE span that starts on a thread's first channel, and the window row formats window_commit
  // copies (kv_cache.cu).
  const bool fits = merge_epilogue() && batch > 0 && e.rows == batch && e.o_rows == batch && e.heads == kHeads &&
                    e.dim == kDim && e.rope_dim >= 0 && e.rope_dim <= kDim && e.rope_dim % 4 == 0 &&
                    (e.format == KvFormat::Bf16 || e.format == KvFormat::Fp8 || e.format == KvFormat::Mxfp8);
  const MergeEpilogue epi{e.o_positions, e.inv_freq,  e.rope_dim, e.pool,
                          e.slots,       e.positions, e.chunk_first, e.chunk_rows,
                          e.window,      e.slots_capacity, fits ? kv_row_bytes(e.format, e.dim) : 0};
  if (!sink_attention_launch(q, batch, window, compressed, sink, scale, e.o, workspace, stream, fits ? &epi : nullptr,
                             qp))
    commit_window_and_derotate(e, stream);
}

}  // namespace

void sink_attention_decode_committed(const bf16* q, int batch, const KvRows& window, const KvRows& compressed,
                                     const float* sink, float scale, void* workspace, const AttentionEpilogue& e,
                                     cudaStream_t stream) {
  sink_attention_committed_launch(q, batch, window, compressed, sink, scale, workspace, e, stream, nullptr);
}

void sink_attention_decode_committed(const QueryNormRope& n, bf16* q, int batch, const KvRows& window,
                                     const KvRows& compressed, const float* sink, float scale, void* workspace,
                                     const AttentionEpilogue& e, cudaStream_t stream) {
  // The prologue takes at most one pair of the RoPE span per lane (normalize_query_rows).
  const bool prologue =
      query_norm_prologue() && batch > 0 && n.rope_dim >= 0 && n.rope_dim % 2 == 0 && n.rope_dim <= 2 * 32;
  if (!prologue && batch > 0) query_norm_launch(n, q, batch, stream);
  const QueryPrologue qp{n, q};
  sink_attention_committed_launch(q, batch, window, compressed, sink, scale, workspace, e, stream,
                                  prologue ? &qp : nullptr);
}

}  // namespace deepinfer::cuda
