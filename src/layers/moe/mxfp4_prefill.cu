// MXFP4 routed experts for prefill (many tokens per expert): a grouped tile GEMM on Hopper's wgmma, the
// prefill counterpart of mxfp4_experts.cu's decode kernel, checked against the same CPU reference
// (swiglu_expert.cpp's products: e2m1 codes times e8m0 scales per 32 along K, FP8-quantized activations).
//
// Why bf16 operands: each weight row has its own power-of-two scale per 32 columns of K, and each token its own
// per 32 / 128. With FP8 operands every 32-wide wgmma would need its product promoted with a per-column scale
// (the V4.1 path of fp8_gemm.cu, 22-28 % of the FP8 rate measured, bench/gpu/NOTES.md); with bf16 operands both
// scales go into the operands exactly (an e2m1 value times 2^e and an e4m3 value times 2^e are bf16 values for
// every scale the formats allow), and the tensor cores accumulate the whole K in fp32 with no promotion.
//  - The activations are expanded once per call (q * xs -> bf16, exact) into the workspace; every N tile then
//    streams them with cp.async into 128-byte-swizzled shared memory.
//  - The weights travel as nibbles (half the bytes of FP8): cp.async brings each 128-wide K tile's codes and
//    scales into a 3-stage ring, and the threads expand their own 16-byte chunks to bf16 in the swizzled operand
//    buffer while the tensor cores still work on the previous K tile (two operand buffers).
// Tile: 128 tokens of one group x 128 weight rows x 128 K, two consumer warpgroups of 64 tokens each.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/env_switch.h"
#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/kernels.h"
#include "cuda/mbarrier.cuh"
#include "cuda/wgmma.cuh"
#include "cuda/skinny_gemm.cuh"
#include "layers/moe/fp4_tables.h"
#include "layers/moe/prefill_chunks.h"

namespace deepinfer::cuda {

namespace {

// DEEPINFER_PREFILL_KERNEL, read once (v3::resolve).
enum class PrefillEnv : uint8_t { Unset, Swapped, V5, V8, V9, V13, Other };
EnvSwitch<PrefillEnv> g_prefill_env{"DEEPINFER_PREFILL_KERNEL", [](const char* v) {
  return !v                       ? PrefillEnv::Unset
         : env_equals(v, "swapped") ? PrefillEnv::Swapped
         : env_equals(v, "v5")      ? PrefillEnv::V5
         : env_equals(v, "v8")      ? PrefillEnv::V8
         : env_equals(v, "v9")      ? PrefillEnv::V9
         : env_equals(v, "v13")     ? PrefillEnv::V13
         : v[0] == '\0'             ? PrefillEnv::Unset
                                    : PrefillEnv::Other;
}};

namespace pf {

constexpr int kBM = 128, kBN = 128, kBK = 128;
constexpr int kStages = 3;
constexpr int kThreads = 256;
constexpr int kPanel = 128 * 128;                   // one 64-wide K panel of 128 rows of bf16 (128 bytes a row)
constexpr int kOpBytes = 2 * kPanel;                // a 128 x 128 bf16 operand tile: two panels, 32 KB
constexpr int kRawBytes = kBN * kBK / 2;            // 128 rows x 64 bytes of nibbles
constexpr int kSlotBytes = 512 * 4;                 // one 4-byte scale word per 16-byte nibble chunk
constexpr int kStageBytes = kOpBytes + kRawBytes + kSlotBytes;
constexpr int kSmemBytes = kStages * kStageBytes + 2 * kOpBytes + 1024;

using wgmma::commit;
using dev::fence_proxy_async_smem;  // cuda/mbarrier.cuh
using wgmma::fence_regs;
using wgmma::smem_desc;
using wgmma::wait_all;
__device__ __forceinline__ void cp_async4(uint32_t smem_addr, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr), "l"(gmem));
}


// One e2m1 nibble as an fp32 bit pattern: its 3 magnitude bits in the exponent's two low bits and the top
// mantissa bit give the value times 2^-126 (normal and subnormal alike); sign to bit 31.
__device__ __forceinline__ float e2m1_tiny(uint32_t nib) {
  return __uint_as_float(((nib & 7u) << 22) | ((nib & 8u) << 28));
}

// 8 nibbles (columns 0..7, even column in the low nibble) times `scale` -> 8 bf16, exact.
__device__ __forceinline__ uint4 expand8(uint32_t w, float scale) {
  uint32_t out[4];
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const uint32_t x = w >> (8 * b);
    const float lo = e2m1_tiny(x) * 0x1p126f * scale;
    const float hi = e2m1_tiny(x >> 4) * 0x1p126f * scale;
    out[b] = dev::pack_bf16x2(lo, hi);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

__global__ void __launch_bounds__(256) dequant_bf16_kernel(const uint8_t* __restrict__ q, const float* __restrict__ xs,
                                                           bf16* __restrict__ a, int64_t chunks, int k, int xb_log2) {
  for (int64_t id = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; id < chunks; id += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e0 = id * 8;
    const int64_t row = e0 / k;
    const int col = int(e0 % k);
    const float s = xs[row * (k >> xb_log2) + (col >> xb_log2)];
    const uint2 v = *reinterpret_cast<const uint2*>(q + e0);
    uint32_t h[4];
    skinny::e4m3x4_to_f16x4(v.x, h[0], h[1]);
    skinny::e4m3x4_to_f16x4(v.y, h[2], h[3]);
    uint32_t o[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h[i]));
      o[i] = dev::pack_bf16x2(f.x * s, f.y * s);
    }
    *reinterpret_cast<uint4*>(a + e0) = make_uint4(o[0], o[1], o[2], o[3]);
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    mxfp4_prefill_kernel(const bf16* __restrict__ A, const uint8_t* __restrict__ W, const uint8_t* __restrict__ WS,
                         const int32_t* __restrict__ expert_ids, const int32_t* __restrict__ row_offsets,
                         int m_tiles, void* __restrict__ y, bool y_bf16, int N, int K) {
  const int group = blockIdx.y / m_tiles, mt = blockIdx.y % m_tiles;
  const int row_end = row_offsets[group + 1];
  const int m0 = row_offsets[group] + mt * kBM;
  if (m0 >= row_end) return;
  const int64_t e = expert_ids[group];
  const int n0 = blockIdx.x * kBN;

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* stages = smem;
  uint8_t* bop = smem + kStages * kStageBytes;

  const int tid = threadIdx.x;
  const int wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int k_tiles = K / kBK;
  const uint8_t* wbase = W + (e * N + n0) * int64_t(K / 2);
  const uint8_t* sbase = WS + (e * N + n0) * int64_t(K / 32);

  auto load_tile = [&](int kt, int stage) {
    uint8_t* st = stages + stage * kStageBytes;
    // A: 128 rows x 256 bytes = 2048 chunks, 8 per thread; chunk ch of a row goes to panel ch / 8, swizzled.
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int id = tid + i * kThreads;
      const int row = id / 16, ch = id % 16;
      const int p = ch / 8, c8 = ch % 8;
      const uint32_t off = uint32_t(p * kPanel + row * 128 + ((c8 ^ (row & 7)) << 4));
      const int gm = m0 + row;
      dev::cp_async16(dev::smem_u32(st + off), A + int64_t(min(gm, row_end - 1)) * K + kt * kBK + ch * 8,
                      gm < row_end ? 16 : 0);
    }
    // B nibbles: 128 rows x 64 bytes = 512 chunks, 2 per thread, and the row's 4 scale bytes of this K tile.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int id = tid + i * kThreads;
      const int row = id / 4, c16 = id % 4;
      dev::cp_async16(dev::smem_u32(st + kOpBytes + row * 64 + c16 * 16),
                      wbase + int64_t(row) * (K / 2) + kt * 64 + c16 * 16);
      cp_async4(dev::smem_u32(st + kOpBytes + kRawBytes + id * 4), sbase + int64_t(row) * (K / 32) + kt * 4);
    }
  };

  // The thread expands the two nibble chunks it copied itself (visible after its own cp.async wait).
  auto expand_tile = [&](int stage, int buf) {
    const uint8_t* st = stages + stage * kStageBytes;
    uint8_t* op = bop + buf * kOpBytes;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int id = tid + i * kThreads;
      const int row = id / 4, c16 = id % 4;
      const uint4 raw = *reinterpret_cast<const uint4*>(st + kOpBytes + row * 64 + c16 * 16);
      const uint32_t sw = *reinterpret_cast<const uint32_t*>(st + kOpBytes + kRawBytes + id * 4);
      const float scale = dev::e8m0_to_float(uint8_t(sw >> (8 * c16)));
      uint8_t* prow = op + (c16 / 2) * kPanel + row * 128;
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c8 = (c16 % 2) * 4 + j;
        *reinterpret_cast<uint4*>(prow + ((c8 ^ (row & 7)) << 4)) = expand8(words[j], scale);
      }
    }
  };

  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_tile(s, s);
    dev::cp_async_commit();
  }

  for (int kt = 0; kt < k_tiles; ++kt) {
    dev::cp_async_wait<kStages - 2>();  // this thread's copies of tile kt have landed
    expand_tile(kt % kStages, kt % 2);  // overlaps the tensor cores' work on tile kt - 1
    fence_proxy_async_smem();           // generic-proxy writes (cp.async, st.shared) -> wgmma reads
    fence_regs(acc);
    wait_all();                   // this warpgroup's tile kt - 1 is done
    fence_regs(acc);
    __syncthreads();                    // tile kt complete everywhere; stage / buffer of kt - 1 free
    if (kt + kStages - 1 < k_tiles) load_tile(kt + kStages - 1, (kt + kStages - 1) % kStages);
    dev::cp_async_commit();

    const uint32_t a_base = dev::smem_u32(stages + (kt % kStages) * kStageBytes + wg * 64 * 128);
    const uint32_t b_base = dev::smem_u32(bop + (kt % 2) * kOpBytes);
    fence_regs(acc);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      const uint32_t off = uint32_t((kk / 4) * kPanel + (kk % 4) * 32);
      wgmma::m64n128k16_bf16(acc, smem_desc(a_base + off), smem_desc(b_base + off), (kt > 0 || kk > 0) ? 1 : 0);
    }
    commit();
  }
  fence_regs(acc);
  wait_all();
  fence_regs(acc);

  const int r0 = m0 + wg * 64 + warp * 16 + lane / 4, r1 = r0 + 8;
  // Two adjacent columns of a row: fp32, or rounded to bf16 (y_bf16, mxfp4_grouped_gemm_prefill's y_type).
  auto store2 = [&](int r, int col, float a, float b) {
    const int64_t at = int64_t(r) * N + col;
    if (y_bf16)
      *reinterpret_cast<uint32_t*>(static_cast<bf16*>(y) + at) = dev::pack_bf16x2(a, b);
    else
      *reinterpret_cast<float2*>(static_cast<float*>(y) + at) = make_float2(a, b);
  };
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int col = n0 + 8 * i + 2 * (lane % 4);
    if (r0 < row_end) store2(r0, col, acc[4 * i], acc[4 * i + 1]);
    if (r1 < row_end) store2(r1, col, acc[4 * i + 2], acc[4 * i + 3]);
  }
}

}  // namespace pf

// =========================================================================================================
// v3: swapped roles (bench/gpu/NOTES.md "Grouped MXFP4 prefill v3"). The expert weights are wgmma's A operand, fed
// from registers (m64nNk32 e4m3, A in registers), the tokens are B (N = the chunk's rows rounded up to 16, at most
// 128) in shared memory. Why: v2 (FP8 operands, a producer warpgroup that expanded every weight tile into shared
// memory; removed, its design in NOTES "Grouped MXFP4 prefill v2") measured 23-26 % of the dense FP8 rate; here each
// consumer thread expands exactly its own A fragment in registers (no expanded tile in shared memory, no
// producer-side expansion), and N follows the group's rows (no empty 128-row tiles).
//
// Weights: the decode-packed layout (kernels.h "Fragment-ordered MXFP4 experts", mxfp4_pack), the only copy the
// GPU model keeps. Per 16-row tile and pair of K steps, lane (g, c) of the packed entry holds row g and row g + 8,
// columns 8c..8c+7 of both steps. wgmma's register A wants columns 4c..4c+3 and 16+4c..16+4c+3 of one step in
// lane c, i.e. half (c & 1) of the words of lanes c / 2 and 2 + c / 2: each thread reads those two 16-byte
// entries (ld.shared.v4 from the stage) and picks its halves with one prmt per register (lane-dependent
// selector), so the activations keep their natural K order and travel by TMA.
//
// Scales. Every code is e2m1 x 2^(6 - d) in e4m3 (v2's fold with headroom: 6 x 2^6 = 384 <= 448 fits e4m3, and for
// d <= 11 every nonzero code is an e4m3 normal, 0.5 x 2^-5 >= 2^-6, so the codes come from one 8-entry table per d
// through prmt and the fold is exact), d relative to the row's largest scale over the whole K (R, read once per
// item): the weight scales are then inside the codes and the promotion of each 128-wide K tile is one FFMA per
// element with the token's scale (acc += part x xs), the row's 2^(R - 133) applied once in the epilogue. Rows of a
// tile with a block more than 11 binades below R fold against the tile's own maximum instead and are promoted with
// the extra factor 2^(tmax - R) (a warp that has such a row pays one FMUL per element for that tile). A 64-row warpgroup whose item holds a tile spanning more
// than 11 binades within itself runs that item per 32 (each block its own partial and factor, as V4.1 always
// does for its per-32 activation scales); exact in every case. Factors below 2^-149 flush to zero (a block more
// than 2^126 below its row's largest: nothing a real checkpoint holds).
//
// Roles (384 threads, one block per SM, persistent over a device-built list of items = (chunk of <= 128 rows of
// one group) x (128 weight rows)): warpgroup 2 is the producer: per item one bulk copy per 16-row tile of its
// scales into one of two item slots; per 128-wide K tile into a ring stage: one bulk copy per 16-row tile of the
// packed nibbles (1 KB), TMA of the N token rows (128-byte swizzle, boxes of 16 rows), and the tokens' scales by
// 4-byte cp.async (completion through cp.async.mbarrier.arrive). Warpgroups 0 / 1 are consumers of 64 weight rows
// each: while the tensor cores run tile kt they expand tile kt + 1 into the second register set, then promote.
// Deterministic: one item per output element, fixed K order, no atomics.
namespace v3 {

constexpr int kThreads = 384;
constexpr int kMaxTokens = 128;                        // wgmma N at most (accumulator + partial: 2 x 64 floats)
constexpr int kTokenStep = 16;                         // N granularity (= TMA box rows)
constexpr int kBBytes = kMaxTokens * 128;              // token rows x 128 bytes of e4m3 (one 128-wide K tile)
constexpr int kNibBytes = 8 * 1024;                    // 8 packed 16-row tiles x 2 step pairs x 512 bytes
constexpr int kTsBytes = 4 * kMaxTokens * 4;           // token scales: 4 blocks (V4.1) x 128 tokens
constexpr int kStageBytes = kBBytes + kNibBytes + kTsBytes;
constexpr int kMaxStages = 8;
constexpr int kBarBytes = 8 * (2 * kMaxStages + 4);
constexpr int kSmemCap = 227 * 1024;
constexpr int kProducerRegs = 56, kConsumerRegs = 224;  // 128 x 56 + 256 x 224 = 64512 = 384 x 168
constexpr int kMaxFold = 11;
static_assert(kStageBytes % 1024 == 0, "stages keep the 1024-byte alignment of the swizzled token tile");
// Stage layout for CW consumer warpgroups of 64 weight rows each (v3 / v5 / v9: CW = 2, the constants above;
// v8: CW = 3, items of 192 weight rows): tokens, then 4 CW packed 16-row nibble tiles of 1 KB, then token scales.
// MT: token rows of the stage's token tile (v3-v8: kMaxTokens = 128; v9: kMaxTokens9 = 192): MT x 128 bytes of
// tokens, then the nibbles, then MT token-scale rows of 16 bytes (v5's TMA rows; v3's 4 x MT floats, the same bytes).
constexpr int kMaxTokens9 = 192;  // v9: wgmma N at most (m64n192k32; NOTES "Grouped MXFP4 prefill v9 (wide groups)")
template <int CW>
constexpr int kNibBytesOf = CW * 4 * 1024;
template <int MT>
constexpr int kBBytesOf = MT * 128;
template <int CW, int MT = kMaxTokens>
constexpr int kStageBytesOf = kBBytesOf<MT> + kNibBytesOf<CW> + 16 * MT;
static_assert(kNibBytesOf<2> == kNibBytes && kStageBytesOf<2> == kStageBytes, "CW = 2 is v3's stage");
static_assert(kStageBytesOf<3> % 1024 == 0, "v8 stages keep the 1024-byte alignment");
static_assert(kStageBytesOf<2, kMaxTokens9> % 1024 == 0, "v9 stages keep the 1024-byte alignment");
// v8's barriers, byte offsets from Params::bars: the tokens' `full` / `empty` per stage where v3 / v5 keep theirs (0,
// 8 kMaxStages), then per consumer warpgroup w its weight slice's `wfull` / `wempty` per stage (kV8WFull / kV8WEmpty
// + 8 kMaxStages w) and its share of the item scale slots, `sfull` / `sempty` per slot (kV8SFull / kV8SEmpty + 16 w).
constexpr int kV8WFull = 16 * kMaxStages, kV8WEmpty = kV8WFull + 24 * kMaxStages;
constexpr int kV8SFull = kV8WEmpty + 24 * kMaxStages, kV8SEmpty = kV8SFull + 48;
constexpr int kV8Bars = kV8SEmpty + 48;

// Shared-memory carve for a given K: the ring, two item scale slots (8 tiles x ceil(K / 256) groups x 128 bytes),
// the barriers.
struct Carve {
  int stages = 0, groups8 = 0, slot_bytes = 0, bytes = 0;
  uint32_t slots = 0, bars = 0;
};
// bar_bytes: v8's layout (kV8Bars) is larger than v3 / v5's. mt: v9's 192-token stages.
Carve carve_for(int64_t k, int cw = 2, int bar_bytes = kBarBytes, int mt = kMaxTokens) {
  Carve c;
  const int stage_bytes = cw == 3             ? kStageBytesOf<3>
                          : mt == kMaxTokens ? kStageBytesOf<2>
                                             : kStageBytesOf<2, kMaxTokens9>;
  c.groups8 = int((k / 32 + 7) / 8);
  c.slot_bytes = 4 * cw * c.groups8 * 128;
  const int64_t room = kSmemCap - 1024 - bar_bytes - 2 * int64_t(c.slot_bytes);
  c.stages = int(std::min<int64_t>(kMaxStages, room / stage_bytes));
  c.slots = uint32_t(c.stages * stage_bytes);
  c.bars = c.slots + uint32_t(2 * c.slot_bytes);
  c.bytes = int(c.bars) + bar_bytes + 1024;
  return c;
}

using dev::bulk_g2s;  // cuda/mbarrier.cuh
using dev::mbar_arrive;
using dev::mbar_arrive_expect_tx;
using dev::mbar_init;
using dev::mbar_wait;
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
// 2^(ref - 133) as a float, exact for every e8m0 byte ref < 255 (a subnormal below ref = 7): the scale that turns
// a code folded relative to ref (code = e2m1 x 2^(6 - (ref - e))) back into e2m1 x 2^(e - 127).
__device__ __forceinline__ float code_scale(uint32_t ref) {
  return ref >= 7 ? __uint_as_float((ref - 6) << 23) : __uint_as_float(1u << (ref + 16));
}
// 2-D TMA tile (x = byte column, y = row) into shared memory, completing its bytes on `bar`.
__device__ __forceinline__ void tma_2d(uint32_t dst, const CUtensorMap* map, int x, int y, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
// 4-byte cp.async, zero-filled when src_bytes == 0.
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// One arrival on `bar` once every cp.async this thread issued so far has landed (counted in the barrier's init).
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ float4 lds_f4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr));
  return v;
}
// OR of `v` over the 128 threads of consumer warpgroup `wg` (named barrier 1 + wg).
template <int kBarrier>
__device__ __forceinline__ bool bar_any(bool v) {
  uint32_t r;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 q, %1, 0;\nbar.red.or.pred p, %2, 128, q;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(r)
      : "r"(uint32_t(v)), "n"(kBarrier)
      : "memory");
  return r != 0;
}
__device__ __forceinline__ bool warpgroup_any(bool v, int wg) { return wg == 0 ? bar_any<1>(v) : bar_any<2>(v); }
__device__ __forceinline__ uint32_t max4(uint32_t w) {
  return max(max(w & 0xFF, (w >> 8) & 0xFF), max((w >> 16) & 0xFF, w >> 24));
}
__device__ __forceinline__ uint32_t min4(uint32_t w) {
  return min(min(w & 0xFF, (w >> 8) & 0xFF), min((w >> 16) & 0xFF, w >> 24));
}
// R (largest e8m0 scale) and the smallest scale of a lane's rows g and g + 8 over K, from the item scale slot at
// srow (v3's R / smallest-scale pass, every kernel's): lane c of the quad reads groups c, c + 4, ..., then the quad
// exchanges. half_group: K's last 128 columns hold 4 steps, blocks y / w of the last group are past K (padding).
// Byte by byte (prefill_chunks.h's ScaleSpan: the extremes of __vmaxu4 / __vminu4 then max4 / min4, about half the
// instructions a group; its CPU test compares the two).
struct ScaleRange {
  uint32_t rg, rh, lg, lh;
};
__device__ __forceinline__ ScaleRange row_scale_range(uint32_t srow, int groups8, int c, bool half_group) {
  ScaleSpan sg, sh;
  for (int q = c; q < groups8; q += 4) {
    const uint4 e = ld_shared_v4(srow + uint32_t(q * 128));
    const bool half = half_group && q == groups8 - 1;
    sg = scale_span(sg, e.x, half ? e.x : e.y);
    sh = scale_span(sh, e.z, half ? e.z : e.w);
  }
  ScaleRange r{sg.mx, sh.mx, sg.mn, sh.mn};
#pragma unroll
  for (int d = 1; d < 4; d <<= 1) {
    r.rg = max(r.rg, __shfl_xor_sync(0xFFFFFFFFu, r.rg, d));
    r.rh = max(r.rh, __shfl_xor_sync(0xFFFFFFFFu, r.rh, d));
    r.lg = min(r.lg, __shfl_xor_sync(0xFFFFFFFFu, r.lg, d));
    r.lh = min(r.lh, __shfl_xor_sync(0xFFFFFFFFu, r.lh, d));
  }
  return r;
}
// 2^x as a float for x <= 0, exact down to the smallest subnormal, 0 below it.
__device__ __forceinline__ float exp2i(int x) {
  return x >= -126 ? __uint_as_float(uint32_t(127 + x) << 23) : x >= -149 ? __uint_as_float(1u << (149 + x)) : 0.0f;
}
// Bytes d of D (one per 32-block) with d > 11 flagged by their top bit: d >= 128 has it already; for d < 128,
// d + 116 >= 128 iff d >= 12. A carry out of a byte with d >= 140 may flag its neighbour too: a spurious flag
// only picks another exact encoding (tile maximum or per-32), never a wrong one.
__device__ __forceinline__ uint32_t fold_flags(uint32_t D) { return (D | (D + 0x74747474u)) & 0x80808080u; }

// Token slot of token t in a stage's scale block: thread lane c reads tokens 16p + 2c + {0, 1, 8, 9} (its
// accumulator columns for column blocks 2p and 2p + 1) as one 16-byte load.
__device__ __forceinline__ int ts_slot(int t) { return (t & ~15) + ((t >> 1) & 3) * 4 + ((t >> 3) & 1) * 2 + (t & 1); }

struct Item {
  int expert, m0, valid, n0;
};
// Work list written by build_chunks_kernel: [0] = chunks; records {expert, first row, rows, 0} from int offset 4.
// Item i = (chunk i / nb, weight rows 128 (i % nb)..): consecutive items share their tokens.
// `rows`: weight rows per item (128; v8: 192).
__device__ __forceinline__ Item decode_item(const int* tl, int item, int nb, int rows = 128) {
  const int chunk = item / nb;
  const int4 r = reinterpret_cast<const int4*>(tl + 4)[chunk];
  return Item{r.x, r.y, r.z, (item - chunk * nb) * rows};
}
// The same item from its carried (chunk, rest) (v13's consumers; prefill_chunks.h's ItemWalk).
__device__ __forceinline__ Item item_in(const int* tl, ItemWalk w, int rows) {
  const int4 r = reinterpret_cast<const int4*>(tl + 4)[w.chunk];
  return Item{r.x, r.y, r.z, w.rest * rows};
}

// One block: per group ceil(rows / kMax) chunks cut on 16-row boundaries (prefill_chunk: the fewest wgmma N steps), in
// group order (block-wide scans over 1024 groups at a time: deterministic). kMax: 128 (v3-v8), 192 (v9).
template <int kMax = kMaxTokens>
__global__ void __launch_bounds__(1024) build_chunks_kernel(const int32_t* __restrict__ offsets,
                                                            const int32_t* __restrict__ ids, int groups,
                                                            int* __restrict__ tl) {
  __shared__ int wsum[32];
  __shared__ int carry;
  int4* rec = reinterpret_cast<int4*>(tl + 4);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  if (tid == 0) carry = 0;
  __syncthreads();
  for (int base = 0; base < groups; base += 1024) {
    const int g = base + tid;
    int a = 0, o = 0, r = 0, e = 0;
    if (g < groups) {
      o = offsets[g];
      r = offsets[g + 1] - o;
      e = ids[g];
      a = prefill_chunk_count(r, kMax);
    }
    int incl = a;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int x = __shfl_up_sync(0xFFFFFFFFu, incl, d);
      if (lane >= d) incl += x;
    }
    if (lane == 31) wsum[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      int v = wsum[lane];
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int x = __shfl_up_sync(0xFFFFFFFFu, v, d);
        if (lane >= d) v += x;
      }
      wsum[lane] = v;
    }
    __syncthreads();
    const int p = carry + (warp > 0 ? wsum[warp - 1] : 0) + incl - a;
    for (int i = 0; i < a; ++i) {
      const PrefillChunk c = prefill_chunk(r, a, i);
      rec[p + i] = make_int4(e, o + c.lo, c.hi - c.lo, 0);
    }
    __syncthreads();
    if (tid == 0) carry += wsum[31];
    __syncthreads();
  }
  if (tid == 0) tl[0] = carry;
}

// v9 at act block 128: each chunk's token scales in v3's stage order per K tile: out[(c xb + x) 192 + ts_slot(t)] =
// xs[(m0 + t) xb + x] for t < the chunk's rows, 0 up to 192. A stage's scales are then one 768-byte bulk copy and a
// consumer thread reads its four tokens of each 16 with one 16-byte load (v3's load_ts<false>; v5-v8's TMA rows take
// four 4-byte loads: at N = 192, 48 loads per tile and thread instead of 12; SASS of the NT 12 loop 363 -> 317
// instructions). The same floats, promoted in the same order: the same bits.
__global__ void __launch_bounds__(256) chunk_scales_kernel(const int* __restrict__ tl, const float* __restrict__ xs,
                                                           int xb, float* __restrict__ out) {
  const int64_t total = int64_t(tl[0]) * kMaxTokens9 * xb;
  for (int64_t id = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; id < total; id += int64_t(gridDim.x) * blockDim.x) {
    const int x = int(id % xb);  // fastest: coalesced reads of a token's scale row
    const int64_t ct = id / xb;
    const int t = int(ct % kMaxTokens9);
    const int64_t c = ct / kMaxTokens9;
    const int4 r = reinterpret_cast<const int4*>(tl + 4)[c];
    out[(c * xb + x) * kMaxTokens9 + ts_slot(t)] = t < r.z ? xs[int64_t(r.y + t) * xb + x] : 0.0f;
  }
}

struct Params {
  const float* xs;     // v3 / v5 / v8: the tokens' scales; v9 at act block 128: the chunks' (chunk_scales_kernel)
  const uint8_t* wp;   // packed nibbles (mxfp4_pack)
  const uint8_t* sp;   // packed scales
  const int* tl;
  void* y;             // [rows, n]: fp32, or bf16 where y_bf16
  int n, k, stages, groups8;
  uint32_t slots, bars;
  bool y_bf16 = false;  // mxfp4_grouped_gemm_prefill's y_type
};

// Position in the stage ring: index and mbarrier phase parity, advanced without divisions (a runtime modulo is
// ~20 instructions; per tile that would be a tenth of the consumer's budget).
using Ring = PrefillRing;  // prefill_chunks.h
// The packed kernels' dynamic shared memory from its first 1024-byte boundary (the 128-byte swizzle's pattern repeats
// every 1024 bytes), as a shared address: the stages start there, the item scale slots and the barriers at P.slots /
// P.bars (carve_for).
__device__ __forceinline__ uint32_t stage_base(uint8_t* smem_raw) {
  return dev::smem_u32(reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023)));
}
__device__ __forceinline__ Ring ring_at(int step, int stages) { return prefill_ring_at(step, stages); }
__device__ __forceinline__ Ring ring_next(Ring r, int stages) { return prefill_ring_next(r, stages); }
// A consumer's ring position at an item's first tile: from the block's tile count g (a division: v3-v9), or carried
// over the items (v13: g is a Ring); ring_done moves g past the item, `next` being the position after its last tile.
__device__ __forceinline__ Ring ring_of(int g, int stages) { return ring_at(g, stages); }
__device__ __forceinline__ Ring ring_of(Ring g, int) { return g; }
__device__ __forceinline__ void ring_done(int& g, int KT, Ring) { g += KT; }
__device__ __forceinline__ void ring_done(Ring& g, int, Ring next) { g = next; }

// Scale bytes of one 128-wide K tile for the thread's two rows (the flags of fold_flags are recomputed where
// needed: two registers fewer per set).
struct TileScales {
  uint32_t eg, eh;
  __device__ __forceinline__ uint32_t flags_g(uint32_t rg) const { return fold_flags(rg * 0x01010101u - eg); }
  __device__ __forceinline__ uint32_t flags_h(uint32_t rh) const { return fold_flags(rh * 0x01010101u - eh); }
};

// Everything a consumer thread keeps for one item.
struct RowState {
  uint32_t rg, rh;        // R of rows g and g + 8 (largest e8m0 scale over K)
  uint32_t srow;          // shared address of entry g of this warp's 16-row tile in the item scale slot
};

// Whether a 128-wide K tile of one of this thread's rows spans more than kMaxFold binades among its groups c, c + 4,
// ... (the warpgroup's OR makes the item wide: its tiles run block by block; v3's and v5's consumers).
__device__ __forceinline__ bool lane_tiles_wide(const Params& P, const RowState& rs, int c, bool half_group) {
  bool wide = false;
  for (int q = c; q < P.groups8; q += 4) {
    const uint4 e = ld_shared_v4(rs.srow + uint32_t(q * 128));
    const bool half = half_group && q == P.groups8 - 1;
    wide |= max4(e.x) - min4(e.x) > uint32_t(kMaxFold) || max4(e.z) - min4(e.z) > uint32_t(kMaxFold);
    if (!half) wide |= max4(e.y) - min4(e.y) > uint32_t(kMaxFold) || max4(e.w) - min4(e.w) > uint32_t(kMaxFold);
  }
  return wide;
}

// One K step's A registers from its packed nibbles: xa / xb hold the 8 codes of rows g (low halves) and g + 8 (high
// halves) at K 4c.. and 16 + 4c..; d8g / d8h are the rows' fold distances (R - e) of this 32-block. The magnitudes
// through one prmt per 4 codes from the e4m3 table shifted down by d binades, the signs through prmt's
// sign-replicate selectors (expand_tile and expand_clean: one definition, the same instructions).
// The step's codes from its tables: tg0 / tg1 (row g) and th0 / th1 (row g + 8), fp4_step_codes' or
// fp4_step_codes_d8's.
__device__ __forceinline__ void fp4_step_codes_of(uint32_t (&aj)[4], uint32_t xa, uint32_t xb, uint32_t tg0,
                                                  uint32_t tg1, uint32_t th0, uint32_t th1) {
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const uint32_t x = q ? xb : xa;
    const uint32_t wm = x & 0x77777777u, ws4 = x << 4;
    const uint32_t mg = prmt(tg0, tg1, wm), mh = prmt(th0, th1, wm >> 16);
    const uint32_t sg = prmt(ws4, x, 0xD9C8u), sh = prmt(ws4, x, 0xFBEAu);
    aj[2 * q] = mg | (sg & 0x80808080u);
    aj[2 * q + 1] = mh | (sh & 0x80808080u);
  }
}
__device__ __forceinline__ void fp4_step_codes(uint32_t (&aj)[4], uint32_t xa, uint32_t xb, uint32_t d8g,
                                               uint32_t d8h) {
  fp4_step_codes_of(aj, xa, xb, fp4tab::table0(d8g), fp4tab::table1(d8g), fp4tab::table0(d8h), fp4tab::table1(d8h));
}
// fp4_step_codes of block j from dg8 / dh8 = the rows' distances x 8 (byte j each, every distance < 32): the same
// table words by a byte broadcast instead of a multiply (layers/moe/fp4_tables.h), so no multiplier constants in
// registers (v13's NT 11 / 12 loop with two A sets spilled for those two).
__device__ __forceinline__ void fp4_step_codes_d8(uint32_t (&aj)[4], uint32_t xa, uint32_t xb, uint32_t dg8,
                                                  uint32_t dh8, int j) {
  const auto perm = [](uint32_t a, uint32_t b, uint32_t sel) { return prmt(a, b, sel); };
  fp4_step_codes_of(aj, xa, xb, fp4tab::table0_d8(dg8, j, perm), fp4tab::table1_d8(dg8, j, perm),
                    fp4tab::table0_d8(dh8, j, perm), fp4tab::table1_d8(dh8, j, perm));
}

// A K tile's codes a[4 steps][4] from this lane's packed nibbles (nib: its entries in the stage, sel: its half) and
// the rows' fold distances dg / dh (a byte per 32-block): expand_tile's and expand_clean's loads and fp4_step_codes.
// kOneBlock with blk >= 0: only block blk is expanded, the other three get zero codes (a wide item's pass).
// kD8 (fp4_step_codes_d8): dg / dh hold the distances x 8 (every distance < 32).
template <bool kOneBlock, bool kD8 = false>
__device__ __forceinline__ void fp4_tile_codes(uint32_t (&a)[4][4], uint32_t nib, uint32_t sel, uint32_t dg,
                                               uint32_t dh, int blk) {
#pragma unroll
  for (int pp = 0; pp < 2; ++pp) {
    const uint4 e1 = ld_shared_v4(nib + uint32_t(pp * 512)), e2 = ld_shared_v4(nib + uint32_t(pp * 512 + 32));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * pp + h;  // K step (32-block) of the tile
      if (kOneBlock && blk >= 0 && j != blk) {
        a[j][0] = a[j][1] = a[j][2] = a[j][3] = 0u;
        continue;
      }
      const uint32_t xa = prmt(h ? e1.z : e1.x, h ? e1.w : e1.y, sel);  // row g | row g + 8, K 4c..
      const uint32_t xb = prmt(h ? e2.z : e2.x, h ? e2.w : e2.y, sel);  // the same at K 16 + 4c..
      if constexpr (kD8)
        fp4_step_codes_d8(a[j], xa, xb, dg, dh, j);
      else
        fp4_step_codes(a[j], xa, xb, (dg >> (8 * j)) & 0xFF, (dh >> (8 * j)) & 0xFF);
    }
  }
}

// This thread's index read with a volatile move (CleanLane's kRemat): what is derived from it cannot be hoisted by NVVM
// out of a loop or above a branch, so it is recomputed where used instead of held in a register (consumers: warpgroup
// t / 128, warp t / 32 % 4, lane t % 32).
__device__ __forceinline__ uint32_t fresh_tid() {
  uint32_t t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
}
// Expands tile kt (stage base `st`) into the A registers a[4 steps][4] and returns its scales. With blk < 0 a row
// folds against R, or against the tile's maximum where one of its blocks lies more than 11 binades below R (the
// whole tile promoted at once). With blk >= 0 (kPer32: every block; else the 4 sub-steps of a wide item) a block
// more than 11 binades below R is encoded with d = 0 and promoted with its own factor; with blk >= 0 only block
// blk is expanded and the other three are zero codes (a wide item's tile runs as 4 passes of the same code).
// kFreshLane (v13): the lane read with fresh_tid (else NVVM hoists the selector above the item's switch, one register
// held over every clean K loop).
template <bool kPer32, int MT = kMaxTokens, bool kFreshLane = false>
__device__ __forceinline__ TileScales expand_tile(uint32_t (&a)[4][4], uint32_t st, int kt, const RowState& rs, int wt,
                                                  int blk) {
  TileScales s;
  const uint32_t sa = rs.srow + uint32_t((kt >> 1) * 128 + (kt & 1) * 4);
  s.eg = lds32(sa);
  s.eh = lds32(sa + 8);
  uint32_t dg = rs.rg * 0x01010101u - s.eg, dh = rs.rh * 0x01010101u - s.eh;  // no borrows: R >= every byte
  const uint32_t fg = fold_flags(dg), fh = fold_flags(dh);
  if (kPer32 || blk >= 0) {
    dg &= ~((fg >> 7) * 0xFFu);
    dh &= ~((fh >> 7) * 0xFFu);
  } else {
    if (fg) dg = max4(s.eg) * 0x01010101u - s.eg;
    if (fh) dh = max4(s.eh) * 0x01010101u - s.eh;
  }
  // Lane (g, c) reads the packed entries of lanes (g, c / 2) and (g, 2 + c / 2), 32 bytes apart, and keeps half
  // c & 1 of each word (prmt selector 0x5410: low halves, 0x7632: high halves).
  const int lane = kFreshLane ? int(fresh_tid() & 31u) : int(threadIdx.x & 31);
  const uint32_t sel = (lane & 1) ? 0x7632u : 0x5410u;
  const uint32_t nib = st + kBBytesOf<MT> + uint32_t(wt * 1024 + ((lane >> 2) * 4 + ((lane & 3) >> 1)) * 16);
  fp4_tile_codes<!kPer32>(a, nib, sel, dg, dh, blk);
  return s;
}

// acc += part x token scale (x row factor fg / fh where a row folds off R). ts: this stage's scale block of the
// K block, already offset to this lane (16-byte loads of tokens 16p + 2c + {0, 1, 8, 9}).
// kTok4 (v5): the stage holds each token's scales as one 16-byte row (TMA boxes of 4 floats x 16 tokens), `ts`
// already points at float `sel` of token 2c; tokens 16p + 2c + {0, 1, 8, 9} are four 4-byte loads (rows 16 bytes
// apart: 4 distinct banks over the 4 lanes c, conflict-free). Same values, same FFMA order as v3.
template <bool kTok4>
__device__ __forceinline__ float4 load_ts(uint32_t ts, int p) {
  if constexpr (kTok4) {
    const uint32_t b = ts + uint32_t(p * 256);
    return make_float4(__uint_as_float(lds32(b)), __uint_as_float(lds32(b + 16)), __uint_as_float(lds32(b + 128)),
                       __uint_as_float(lds32(b + 144)));
  } else {
    return lds_f4(ts + uint32_t(p * 64));
  }
}
// acc += part x token scale, v3's unscaled promotion (the same FFMAs in the same order); ts = float `sel` of token 2c.
// kTok4 = false (v9): v3's stage order (ts_slot), ts = this lane's 16 bytes of the first 16 tokens.
// Token group p's eight FFMAs with its scales t (promote_clean's and promote_clean_ahead's one order).
template <int NT>
__device__ __forceinline__ void promote_group(float (&acc)[8 * NT], const float (&part)[8 * NT], int p, float4 t) {
  acc[8 * p + 0] = fmaf(part[8 * p + 0], t.x, acc[8 * p + 0]);
  acc[8 * p + 1] = fmaf(part[8 * p + 1], t.y, acc[8 * p + 1]);
  acc[8 * p + 2] = fmaf(part[8 * p + 2], t.x, acc[8 * p + 2]);
  acc[8 * p + 3] = fmaf(part[8 * p + 3], t.y, acc[8 * p + 3]);
  acc[8 * p + 4] = fmaf(part[8 * p + 4], t.z, acc[8 * p + 4]);
  acc[8 * p + 5] = fmaf(part[8 * p + 5], t.w, acc[8 * p + 5]);
  acc[8 * p + 6] = fmaf(part[8 * p + 6], t.z, acc[8 * p + 6]);
  acc[8 * p + 7] = fmaf(part[8 * p + 7], t.w, acc[8 * p + 7]);
}
template <int NT, bool kTok4 = true>
__device__ __forceinline__ void promote_clean(float (&acc)[8 * NT], const float (&part)[8 * NT], uint32_t ts) {
#pragma unroll
  for (int p = 0; p < NT; ++p) promote_group<NT>(acc, part, p, load_ts<kTok4>(ts, p));
}

// Act block 32: this lane's scales of a block's first kAhead token groups (p < kAhead), loaded before the block's
// wgmma wait: after it (wait_group's memory clobber keeps later ld.shared behind it) the first FFMA waited one LDS
// round trip, four times a K tile (NOTES "helper-151"). Run 244 (session 52, helper-154): V4.1 w2 25.9-26.2 -> 26.4-26.7 %
// of the dense FP8 rate, w13 ~+1.5 %.
// v9's groups ahead at NT = N / 16: 4 (16 registers; 32 FFMAs issue while the later groups' loads are in flight);
// 2 at NT 12 (one A set at N 192: 4 made its loop spill 31 more values a tile; 2 and none spill the same 15 more).
constexpr int scales_ahead_v9(int nt) { return nt >= 12 ? 2 : nt < 4 ? nt : 4; }
template <int kAhead, bool kTok4>
struct ScalesAhead {
  float4 t[kAhead > 0 ? kAhead : 1];
  __device__ __forceinline__ void load(uint32_t ts) {
#pragma unroll
    for (int p = 0; p < kAhead; ++p) t[p] = load_ts<kTok4>(ts, p);
  }
};
// promote_clean with groups p < kAhead's scales from `pre` (loaded from the same `ts` of the same stage, which no one
// writes before the stage's release): the same values, FFMAs and per-element order, so the same bits.
template <int NT, bool kTok4, int kAhead>
__device__ __forceinline__ void promote_clean_ahead(float (&acc)[8 * NT], const float (&part)[8 * NT], uint32_t ts,
                                                    const ScalesAhead<kAhead, kTok4>& pre) {
  static_assert(kAhead >= 1 && kAhead <= NT, "kAhead groups of the NT");
#pragma unroll
  for (int p = 0; p < NT; ++p) {
    promote_group<NT>(acc, part, p, p < kAhead ? pre.t[p < kAhead ? p : 0] : load_ts<kTok4>(ts, p));
  }
}

template <int NT, bool kTok4 = false>
__device__ __forceinline__ void promote(float (&acc)[8 * NT], const float (&part)[8 * NT], uint32_t ts, float fg,
                                        float fh, bool scaled) {
  if (scaled) {
#pragma unroll
    for (int p = 0; p < NT; ++p) {
      const float4 t = load_ts<kTok4>(ts, p);
      acc[8 * p + 0] = fmaf(part[8 * p + 0], t.x * fg, acc[8 * p + 0]);
      acc[8 * p + 1] = fmaf(part[8 * p + 1], t.y * fg, acc[8 * p + 1]);
      acc[8 * p + 2] = fmaf(part[8 * p + 2], t.x * fh, acc[8 * p + 2]);
      acc[8 * p + 3] = fmaf(part[8 * p + 3], t.y * fh, acc[8 * p + 3]);
      acc[8 * p + 4] = fmaf(part[8 * p + 4], t.z * fg, acc[8 * p + 4]);
      acc[8 * p + 5] = fmaf(part[8 * p + 5], t.w * fg, acc[8 * p + 5]);
      acc[8 * p + 6] = fmaf(part[8 * p + 6], t.z * fh, acc[8 * p + 6]);
      acc[8 * p + 7] = fmaf(part[8 * p + 7], t.w * fh, acc[8 * p + 7]);
    }
  } else {
    promote_clean<NT, kTok4>(acc, part, ts);
  }
}

// One wgmma of block j of a 128-wide K tile into d, started from zero (act block 32: each block's product is promoted
// with its own token scale; v3's kAct32 tile, consume_clean's too): the codes aj, db the token tile's descriptor.
template <int NT>
__device__ __forceinline__ void issue_block(float (&d)[8 * NT], const uint32_t (&aj)[4], uint64_t db, int j) {
  wgmma::fence_regs_n(d);
  wgmma::fence();
  wgmma::m64nNk32_e4m3_rs<16 * NT>(d, aj, db + 2 * j, 0);
  wgmma::commit();
}

// Factor of block j of a row promoted per 32: 1 where the block folds off R, else 2^(e_j - R) (its codes use d = 0).
__device__ __forceinline__ float block_factor(uint32_t e, uint32_t flags, int j, uint32_t r) {
  return (flags >> (8 * j + 7)) & 1 ? exp2i(int((e >> (8 * j)) & 0xFF) - int(r)) : 1.0f;
}

// bf16 y in whole 32-byte sectors (NOTES "Session 58": 2-byte stores of rows g and g + 8, two half sectors a token,
// cost what fp32 stores do): lanes g and g + 1 (lane ^ 4) trade one value of a token, so that lane g (even) holds
// rows g, g + 1 and lane g + 1 rows g + 8, g + 9; each stores the pair it returns at row g + bf16_pair_row(odd), and
// a token's 16 rows of a warp are one sector written by one instruction. Every lane of the warp calls it (the trade).
__device__ __forceinline__ uint32_t bf16_row_pair(float vg, float vh, bool odd) {
  const float traded = __shfl_xor_sync(0xFFFFFFFFu, odd ? vg : vh, 4);
  return odd ? dev::pack_bf16x2(traded, vh) : dev::pack_bf16x2(vg, traded);
}
__device__ __forceinline__ int bf16_pair_row(bool odd) { return odd ? 7 : 0; }  // odd lane g: rows g + 7, g + 8

// v3's epilogue: y[token][n0 + row] = acc x 2^(R - 133), straight from the fragments (32 contiguous bytes per 8 rows;
// bf16 y as row pairs, bf16_row_pair); consume_item's and consume_clean's.
template <int NT>
__device__ __forceinline__ void store_item(const Params& P, const Item& it, const RowState& rs, const float (&acc)[8 * NT],
                                           int wg, int warp, int lane) {
  const int c = lane & 3;
  const float og = code_scale(rs.rg), oh = code_scale(rs.rh);
  const int row = it.n0 + 64 * wg + 16 * warp + (lane >> 2);
  const bool odd = (lane >> 2) & 1;
#pragma unroll
  for (int i = 0; i < 2 * NT; ++i) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const int t = 8 * i + 2 * c + b;
      const int64_t at = int64_t(it.m0 + t) * P.n + row;
      const float vg = acc[4 * i + b] * og, vh = acc[4 * i + 2 + b] * oh;
      if (P.y_bf16) {
        const uint32_t pair = bf16_row_pair(vg, vh, odd);  // every lane: the trade
        if (t < it.valid)
          *reinterpret_cast<uint32_t*>(static_cast<bf16*>(P.y) + at + bf16_pair_row(odd)) = pair;
      } else if (t < it.valid) {
        float* const yr = static_cast<float*>(P.y) + at;
        yr[0] = vg;
        yr[8] = vh;
      }
    }
  }
}

// One item of N = 16 NT tokens for this consumer warpgroup: the K loop (two register sets: pass q + 1 expanded
// while the tensor cores run pass q) and the epilogue. A pass is a whole 128-wide K tile (4 wgmmas chained, one
// promotion), or on a wide item (act block 128, `wide`) one of the tile's 4 blocks at a time (the other blocks'
// codes zero): the same code with a per-block factor. V4.1 (kAct32) promotes every block with its own activation
// scale: 4 wgmmas per tile, each waited and promoted. `g` is the block's K-tile counter (ring position).
// kTok4 (v5): the token scales sit in the stage as 16-byte rows per token (see load_ts); everything else is v3's.
// kSplit (v8): the stage's token part and this warpgroup's weight slice are waited for and released on their own
// barriers (v8's bar layout, kV8Bars). MT: the stage's token rows (v9: 192). kFreshLane (v13): expand_tile's.
template <int NT, bool kAct32, bool kTok4 = false, int CW = 2, bool kSplit = false, int MT = kMaxTokens,
          bool kFreshLane = false, class Step = int>
__device__ __forceinline__ void consume_item(const Params& P, uint32_t s_base, const Item& it, const RowState& rs,
                                             bool wide, Step& g, int wg, int warp, int lane) {
  constexpr int N = 16 * NT;
  const int KT = P.k / 128;
  const int wt = 4 * wg + warp;
  const int c = lane & 3;
  const uint32_t s_full = s_base + P.bars, s_empty = s_full + 8 * kMaxStages;
  float acc[8 * NT], part[8 * NT];
#pragma unroll
  for (int i = 0; i < 8 * NT; ++i) acc[i] = 0.0f;
  uint32_t a0[4][4], a1[4][4];
  TileScales t0, t1;

  auto stage_of = [&](Ring r) { return s_base + uint32_t(r.idx * kStageBytesOf<CW, MT>); };
  auto wait_full = [&](Ring r) {
    mbar_wait(s_full + 8 * r.idx, r.ph);
    if constexpr (kSplit) mbar_wait(s_full + kV8WFull + 8 * (kMaxStages * wg + r.idx), r.ph);
  };
  auto release = [&](Ring r) {
    dev::fence_proxy_async_smem();  // cuda/mbarrier.cuh: this warp's ld.shared of the stage before the next bulk copy
    __syncwarp();
    if (lane == 0) {
      mbar_arrive(s_empty + 8 * r.idx);
      if constexpr (kSplit) mbar_arrive(s_full + kV8WEmpty + 8 * (kMaxStages * wg + r.idx));
    }
  };
  Ring cur = ring_of(g, P.stages);  // the stage of the tile in flight

  if constexpr (kAct32) {
    wait_full(cur);
    t0 = expand_tile<true, MT, kFreshLane>(a0, stage_of(cur), 0, rs, wt, 0);
    auto tile = [&](int kt, uint32_t (&a)[4][4], const TileScales& sc, uint32_t (&an)[4][4], TileScales& tn) {
      const Ring nxt = ring_next(cur, P.stages);
      const uint32_t st = stage_of(cur);
      const uint64_t db = wgmma::smem_desc(st);
      const uint32_t ts = st + kBBytesOf<MT> + kNibBytesOf<CW> + uint32_t(kTok4 ? c * 32 : c * 16);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        issue_block<NT>(part, a[j], db, j);
        if (j == 0 && kt + 1 < KT) {
          wait_full(nxt);
          tn = expand_tile<true, MT, kFreshLane>(an, stage_of(nxt), kt + 1, rs, wt, 0);
        }
        wgmma::wait_all();
        wgmma::fence_regs_n(part);
        const uint32_t flg = sc.flags_g(rs.rg), flh = sc.flags_h(rs.rh);
        const bool scaled = __any_sync(0xFFFFFFFFu, ((flg | flh) & (0x80u << (8 * j))) != 0);
        const float fg = block_factor(sc.eg, flg, j, rs.rg), fh = block_factor(sc.eh, flh, j, rs.rh);
        promote<NT, kTok4>(acc, part, ts + uint32_t(kTok4 ? j * 4 : j * MT * 4), fg, fh, scaled);
      }
      release(cur);
      cur = nxt;
    };
    for (int kt = 0; kt < KT; kt += 2) {
      tile(kt, a0, t0, a1, t1);
      if (kt + 1 < KT) tile(kt + 1, a1, t1, a0, t0);
    }
  } else {
    const int sl = wide ? 2 : 0;  // passes per tile: 1, or 4 on a wide item
    const int Q = KT << sl;
    auto blk_of = [&](int q) { return wide ? (q & 3) : -1; };
    wait_full(cur);
    t0 = expand_tile<false, MT, kFreshLane>(a0, stage_of(cur), 0, rs, wt, blk_of(0));
    auto pass = [&](int q, uint32_t (&a)[4][4], const TileScales& sc, uint32_t (&an)[4][4], TileScales& tn) {
      const int blk = blk_of(q);
      const bool tile_ends = blk < 0 || blk == 3;
      const Ring nxt = tile_ends ? ring_next(cur, P.stages) : cur;
      const uint32_t st = stage_of(cur);
      const uint64_t db = wgmma::smem_desc(st);
      wgmma::fence_regs_n(part);
      wgmma::fence();
#pragma unroll
      for (int j = 0; j < 4; ++j) wgmma::m64nNk32_e4m3_rs<N>(part, a[j], db + 2 * j, j);
      wgmma::commit();
      if (q + 1 < Q) {
        if (tile_ends) wait_full(nxt);
        tn = expand_tile<false, MT, kFreshLane>(an, stage_of(nxt), (q + 1) >> sl, rs, wt, blk_of(q + 1));
      }
      wgmma::wait_all();
      wgmma::fence_regs_n(part);
      const uint32_t flg = sc.flags_g(rs.rg), flh = sc.flags_h(rs.rh);
      float fg = 1.0f, fh = 1.0f;
      bool scaled;
      if (blk < 0) {
        scaled = __any_sync(0xFFFFFFFFu, (flg | flh) != 0);
        if (flg) fg = exp2i(int(max4(sc.eg)) - int(rs.rg));
        if (flh) fh = exp2i(int(max4(sc.eh)) - int(rs.rh));
      } else {
        scaled = __any_sync(0xFFFFFFFFu, ((flg | flh) & (0x80u << (8 * blk))) != 0);
        fg = block_factor(sc.eg, flg, blk, rs.rg);
        fh = block_factor(sc.eh, flh, blk, rs.rh);
      }
      promote<NT, kTok4>(acc, part,
                         st + kBBytesOf<MT> + kNibBytesOf<CW> + uint32_t(kTok4 ? c * 32 + ((q >> sl) & 3) * 4 : c * 16), fg, fh,
                         scaled);
      if (tile_ends) release(cur);
      cur = nxt;
    };
    for (int q = 0; q < Q; q += 2) {
      pass(q, a0, t0, a1, t1);
      if (q + 1 < Q) pass(q + 1, a1, t1, a0, t0);
    }
  }
  ring_done(g, KT, cur);
  store_item<NT>(P, it, rs, acc, wg, warp, lane);
}

// v3's kernel (the reference the other packed kernels are bitwise equal to, and their last fallback). Its cluster
// form v4 (clusters of 2 / 4 / 8 CTAs sharing the token tiles by TMA multicast, NOTES "Grouped MXFP4 prefill v4")
// was removed.
template <bool kAct32>
__global__ void __launch_bounds__(kThreads, 1)
    mxfp4_prefill_v3_kernel(const __grid_constant__ CUtensorMap qmap, const Params P) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t s_base = stage_base(smem_raw);
  const uint32_t s_full = s_base + P.bars, s_empty = s_full + 8 * kMaxStages;
  const uint32_t s_sfull = s_empty + 8 * kMaxStages, s_sempty = s_sfull + 16;

  const int tid = threadIdx.x;
  const int nb = P.n / 128, KT = P.k / 128;
  // Items round-robin over the blocks.
  const int units = P.tl[0] * nb;
  const int G = int(gridDim.x), cid = int(blockIdx.x);
  const int my_items = cid < units ? (units - cid + G - 1) / G : 0;
  if (my_items == 0) return;  // uniform over the block: before any barrier use
  auto item_of = [&](int j) { return cid + j * G; };

  if (tid == 0) {
    for (int s = 0; s < P.stages; ++s) {
      mbar_init(s_full + 8 * s, 129);  // 128 producer cp.async arrivals + the expect_tx arrival
      mbar_init(s_empty + 8 * s, 8);  // lane 0 of each consumer warp
    }
    for (int s = 0; s < 2; ++s) {
      mbar_init(s_sfull + 8 * s, 1);
      mbar_init(s_sempty + 8 * s, 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int64_t tiles16 = P.n / 16;  // packed 16-row tiles per expert
  const int xb = kAct32 ? P.k / 32 : P.k / 128;
  if (tid >= 256) {
    // ------------------------------------------------------------------------------------------- producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    const int pt = tid - 256;
    Ring r{0, 0u};
    for (int j = 0; j < my_items; ++j) {
      const Item it = decode_item(P.tl, item_of(j), nb);
      const int ntok = (it.valid + kTokenStep - 1) / kTokenStep * kTokenStep;
      const int64_t tile0 = int64_t(it.expert) * tiles16 + it.n0 / 16;
      if (pt == 0) {
        const uint32_t slot = s_base + P.slots + uint32_t((j & 1) * 8 * P.groups8 * 128);
        mbar_wait(s_sempty + 8 * (j & 1), ((j >> 1) & 1) ^ 1);
        mbar_arrive_expect_tx(s_sfull + 8 * (j & 1), uint32_t(8 * P.groups8 * 128));
        for (int t = 0; t < 8; ++t)
          bulk_g2s(slot + uint32_t(t * P.groups8 * 128), P.sp + (tile0 + t) * P.groups8 * 128,
                   uint32_t(P.groups8 * 128), s_sfull + 8 * (j & 1));
      }
      for (int kt = 0; kt < KT; ++kt, r = ring_next(r, P.stages)) {
        const uint32_t st = s_base + uint32_t(r.idx * kStageBytes), full = s_full + 8 * r.idx;
        mbar_wait(s_empty + 8 * r.idx, r.ph ^ 1u);
        if (pt == 0) {
          mbar_arrive_expect_tx(full, uint32_t(kNibBytes + ntok * 128));
          for (int t = 0; t < 8; ++t)
            bulk_g2s(st + kBBytes + uint32_t(t * 1024), P.wp + ((tile0 + t) * (P.k / 64) + 2 * kt) * 512, 1024, full);
          for (int b = 0; b < ntok / kTokenStep; ++b)
            tma_2d(st + uint32_t(b * kTokenStep * 128), &qmap, kt * 128, it.m0 + b * kTokenStep, full);
        }
        if (pt < ntok) {
          const int src_tok = it.m0 + min(pt, it.valid - 1);
          const uint32_t dst = st + kBBytes + kNibBytes + uint32_t(ts_slot(pt) * 4);
          const int bytes = pt < it.valid ? 4 : 0;
          if constexpr (kAct32) {
#pragma unroll
            for (int jb = 0; jb < 4; ++jb)
              cp_async4(dst + uint32_t(jb * kMaxTokens * 4), P.xs + int64_t(src_tok) * xb + 4 * kt + jb, bytes);
          } else {
            cp_async4(dst, P.xs + int64_t(src_tok) * xb + kt, bytes);
          }
        }
        cp_async_arrive(full);
      }
    }
  } else {
    // ------------------------------------------------------------------------------------------- consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
    const int wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, c = lane & 3, gq = lane >> 2;
    const int wt = 4 * wg + warp;
    const bool half_group = (P.k & 255) != 0;  // the last scale group holds 4 steps (its other 4 bytes are padding)
    int g = 0;
    for (int j = 0; j < my_items; ++j) {
      const Item it = decode_item(P.tl, item_of(j), nb);
      const int nt = (it.valid + kTokenStep - 1) / kTokenStep;
      const uint32_t slot = s_base + P.slots + uint32_t((j & 1) * 8 * P.groups8 * 128);
      mbar_wait(s_sfull + 8 * (j & 1), (j >> 1) & 1);

      // R (largest scale) and the smallest scale of rows g and g + 8 over K (row_scale_range).
      RowState rs;
      rs.srow = slot + uint32_t(wt * P.groups8 * 128 + gq * 16);
      const auto [rg, rh, lg, lh] = row_scale_range(rs.srow, P.groups8, c, half_group);
      rs.rg = rg;
      rs.rh = rh;
      // A wide item (act block 128): a tile of one of the warpgroup's rows spans more than 11 binades; its tiles
      // then run block by block (V4.1 promotes per block anyway).
      bool wide = false;
      if constexpr (!kAct32) {
        if (rg - lg > uint32_t(kMaxFold) || rh - lh > uint32_t(kMaxFold))
          wide = lane_tiles_wide(P, rs, c, half_group);
        wide = warpgroup_any(wide, wg);
      }

      // N = 16 nt tokens: one instantiation per width.
#define DI_V3_CASE(T)                                                 \
  case T:                                                             \
    consume_item<T, kAct32>(P, s_base, it, rs, wide, g, wg, warp, lane); \
    break;
      switch (nt) {
        DI_V3_CASE(1) DI_V3_CASE(2) DI_V3_CASE(3) DI_V3_CASE(4) DI_V3_CASE(5) DI_V3_CASE(6) DI_V3_CASE(7)
        DI_V3_CASE(8)
        default: break;
      }
#undef DI_V3_CASE
      dev::warp_release_stage(s_sempty + 8 * (j & 1));  // cuda/mbarrier.cuh: the reads before its next bulk copy
    }
  }
}

// =========================================================================================================
// v5 (bench/gpu/NOTES.md "Grouped MXFP4 prefill v5"): v3's item list, operand roles, codes and promotion order, with
//  - every byte of a stage brought by one elected producer thread through the async copy engines: the packed nibbles
//    (eight 1 KB bulk copies), the token tile (2-D TMA, 128-byte swizzle) and now the token scales too (2-D TMA
//    boxes of 4 floats x 16 tokens from xs [rows, k / act_block]: each token's 16-byte row; act block 32: the tile's
//    4 blocks, act block 128: the aligned group of 4 tiles, float kt & 3 used). v3 fetched them with one 4-byte
//    cp.async per token and stage from 128 producer threads (ncu: 58 % excess L2 sectors, 6.4 of 32 bytes used per
//    sector); `full` now counts one arrival (the expect_tx) plus the bytes;
//  - a lean consumer path for clean items (no row of the warpgroup's 64 has a 32-block more than 11 binades below
//    its largest scale over K: every random and checkpoint-like item): codes folded against R only, the unscaled
//    promotion, no per-tile flags, votes or factor branches (v3 runs all of that per pass: ~420 issued instructions
//    per warp and 128-wide K tile against ~220 here). Items that are not clean run v3's consumer (consume_item with
//    the 16-byte token-scale rows). Every wgmma, code and FFMA is v3's, in v3's order: the output is bitwise v3's.
// Needs xs rows of 16-byte multiples (k / act_block % 4 == 0: the V4 / V4.1 shapes; act block 32 always) and a
// 16-byte-aligned xs; elsewhere v3 runs (the same bits).

// Codes of tile kt for a clean item: v3's expand_tile with every fold flag zero (d = R - e for all 4 blocks).
// kD8 (v13 at NT 12): the tables by fp4_step_codes_d8; a clean item's distances are <= kMaxFold (< 32).
template <bool kD8 = false>
__device__ __forceinline__ void expand_clean(uint32_t (&a)[4][4], uint32_t nib, uint32_t sa, uint32_t rg, uint32_t rh,
                                             uint32_t sel) {
  const uint32_t eg = lds32(sa), eh = lds32(sa + 8);
  const uint32_t dg = rg * 0x01010101u - eg, dh = rh * 0x01010101u - eh;
  static_assert(!kD8 || kMaxFold <= int(fp4tab::kD8MaxDistance), "d8 tables: a clean item's distances < 32");
  if constexpr (kD8)
    fp4_tile_codes<false, true>(a, nib, sel, dg << fp4tab::kD8Shift, dh << fp4tab::kD8Shift, -1);
  else
    fp4_tile_codes<false>(a, nib, sel, dg, dh, -1);
}

// store_item with its per-store work cut (v13; why: NOTES "Grouped MXFP4 prefill v13"): the same products
// acc x 2^(R - 133) to the same addresses under the same t < valid. store_item's SASS spends ~21 instructions per pair
// of stores (a BSSY / BRA / BSYNC region per pair, the 64-bit row offset rebuilt from int64(m0 + t) x n each time:
// 1,033 instructions per warp at NT 12, 96 of them STG); here a pair is its address off the lane's first token row,
// one ISETP, two FMUL and two predicated stores (inline PTX: a plain `if` compiles to the branch region again): 368.
template <int NT>
__device__ __forceinline__ void store_item_lean(const Params& P, const Item& it, uint32_t rg, uint32_t rh,
                                                const float (&acc)[8 * NT], int wg, int warp, int lane) {
  const int c = lane & 3;
  const float og = code_scale(rg), oh = code_scale(rh);
  // n through an empty asm: as P.n the 48 token offsets (8i + b) n are loop-invariant, and NVVM hoisted them to the
  // kernel's entry (48 64-bit values spilled, reloaded here and in every K loop: SASS).
  int n = P.n;
  asm volatile("" : "+r"(n));
  // Token 2c of this lane's column pairs: y + (m0 + 2c) n + row; token 8i + 2c + b lies (8i + b) n elements further.
  const int64_t at0 = int64_t(it.m0 + 2 * c) * n + (it.n0 + 64 * wg + 16 * warp + (lane >> 2));
  const int left = it.valid - 2 * c;  // token 8i + 2c + b exists iff 8i + b < left
  if (P.y_bf16) {  // half the bytes, in whole sectors (bf16_row_pair)
    const bool odd = (lane >> 2) & 1;
    bf16* const z0 = static_cast<bf16*>(P.y) + at0 + bf16_pair_row(odd);
#pragma unroll
    for (int i = 0; i < 2 * NT; ++i) {
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const uint32_t pair = bf16_row_pair(acc[4 * i + b] * og, acc[4 * i + 2 + b] * oh, odd);
        asm volatile(
            "{\n.reg .pred p;\nsetp.lt.s32 p, %0, %1;\n@p st.global.b32 [%2], %3;\n}\n" ::"r"(8 * i + b),
            "r"(left), "l"(z0 + (8 * i + b) * n), "r"(pair)
            : "memory");
      }
    }
    return;
  }
  float* const y0 = static_cast<float*>(P.y) + at0;
#pragma unroll
  for (int i = 0; i < 2 * NT; ++i) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      float* const yr = y0 + (8 * i + b) * n;
      asm volatile(
          "{\n.reg .pred p;\nsetp.lt.s32 p, %0, %1;\n"
          "@p st.global.f32 [%2], %3;\n@p st.global.f32 [%2+32], %4;\n}\n" ::"r"(8 * i + b),
          "r"(left), "l"(yr), "f"(acc[4 * i + b] * og), "f"(acc[4 * i + 2 + b] * oh)
          : "memory");
    }
  }
}

// What every clean consumer loop shares (consume_clean's loop forms for v5 / v8 / v9 / v13): this lane's offsets into
// a stage (its nibbles, its token-scale row), the `full` / `empty` rings, and the steps of a K tile that are the same
// in each loop form. The loops differ only in the order of these steps and in how many partials they keep in flight.
// CW: consumer warpgroups (the stage layout; v8: 3). kSplit (v8 / v9): a stage's token part and this warpgroup's weight
// slice have barriers of their own (`full` / `empty` of the tokens, `wfull` / `wempty` of warpgroup wg's slice; v8's
// bar layout, kV8Bars): a tile waits for both and releases both. The slice's barriers live in a base class that is
// empty without kSplit (as plain members, even unused, they changed the SASS of v5's clean loops).
template <bool kSplit>
struct SliceBars {
  __device__ __forceinline__ SliceBars(uint32_t, int) {}
};
template <>
struct SliceBars<true> {
  uint32_t s_wfull, s_wempty;  // warpgroup wg's `wfull` / `wempty` of stage 0
  __device__ __forceinline__ SliceBars(uint32_t s_full, int wg)
      : s_wfull(s_full + kV8WFull + 8 * kMaxStages * wg), s_wempty(s_full + kV8WEmpty + 8 * kMaxStages * wg) {}
};
// kTok4: the stage's token scales as v5's TMA rows (16 bytes per token, load_ts<true>); false (v9 at act block 128):
// v3's order (chunk_scales_kernel, load_ts<false>).
// kRemat (v9 / v13; why: NOTES "Grouped MXFP4 prefill v11"): the lane's offsets (nibbles, token scales, PRMT
// selector, its rows' scale entries) and its warpgroup's slice barriers are recomputed from the thread index where used
// (fresh_tid), R of its two rows and the item's scale slot travel in one register (rgh): held in registers over the
// K loop instead, they made the NT 12 loop reload 4 such values and cycle 7 accumulators through local memory per
// tile. The addresses and values are those of the held form, so are the bits.
template <int CW, bool kSplit = false, int MT = kMaxTokens, bool kTok4_ = true, bool kRemat = false>
struct CleanLane : SliceBars<kSplit> {
  static constexpr bool kTok4 = kTok4_;
  uint32_t s_base, s_full, s_empty;
  uint32_t sel;      // PRMT selector of this lane's nibble half (expand_clean)
  uint32_t nib_off;  // this lane's nibbles in a stage
  uint32_t ts_off;   // this lane's token-scale row (token 2c) in a stage
  // kRemat: rs.rg | rs.rh << 8 (e8m0 bytes) | the item scale slot (0 / 1) << 16: one register over the loop
  // instead of three (rs.srow is recomputed from the slot and the thread index).
  uint32_t rgh;
  uint32_t slot0;  // kRemat: the first item scale slot (s_base + P.slots), uniform
  int groups8;     // kRemat: P.groups8
  int lane;
  const RowState& rs;

  __device__ __forceinline__ CleanLane(const Params& P, uint32_t base, const RowState& row_state, int wg, int warp,
                                       int lane_)
      : SliceBars<kSplit>(base + P.bars, wg),
        s_base(base),
        s_full(base + P.bars),
        s_empty(s_full + 8 * kMaxStages),
        sel((lane_ & 1) ? 0x7632u : 0x5410u),
        nib_off(uint32_t(kBBytesOf<MT> + (4 * wg + warp) * 1024 + ((lane_ >> 2) * 4 + ((lane_ & 3) >> 1)) * 16)),
        ts_off(uint32_t(kBBytesOf<MT> + kNibBytesOf<CW> + (lane_ & 3) * (kTok4 ? 32 : 16))),
        rgh(row_state.rg | row_state.rh << 8 |
            uint32_t(row_state.srow - (base + P.slots) >= uint32_t(8 * P.groups8 * 128)) << 16),
        slot0(base + P.slots),
        groups8(P.groups8),
        lane(lane_),
        rs(row_state) {}

  __device__ __forceinline__ uint32_t stage(Ring r) const { return s_base + uint32_t(r.idx * kStageBytesOf<CW, MT>); }
  // Warpgroup wg's `wfull` / `wempty` of stage 0 (kSplit).
  __device__ __forceinline__ uint32_t wfull() const {
    if constexpr (kRemat) return s_full + uint32_t(kV8WFull + 8 * kMaxStages * (fresh_tid() >> 7));
    else return this->s_wfull;
  }
  __device__ __forceinline__ uint32_t wempty() const {
    if constexpr (kRemat) return s_full + uint32_t(kV8WEmpty + 8 * kMaxStages * (fresh_tid() >> 7));
    else return this->s_wempty;
  }
  // This lane's nibbles in stage st (expand_clean's nib) and its PRMT selector (expand_clean's sel).
  __device__ __forceinline__ uint32_t nib(uint32_t st) const {
    if constexpr (kRemat) {
      const uint32_t t = fresh_tid();
      return st + uint32_t(kBBytesOf<MT>) + (t >> 5) * 1024u + (((t & 31u) >> 2) * 4u + ((t & 3u) >> 1)) * 16u;
    } else {
      return st + nib_off;
    }
  }
  // R of rows g / g + 8 (expand_clean's rg / rh, store_item's). kRemat: unpacked with a volatile bfe where used (not
  // hoisted out of the loop by NVVM, which would keep both halves live again).
  __device__ __forceinline__ uint32_t rg() const { return kRemat ? rgh_field<0, 8>() : rs.rg; }
  __device__ __forceinline__ uint32_t rh() const { return kRemat ? rgh_field<8, 8>() : rs.rh; }
  // Bits [kPos, kPos + kLen) of rgh, extracted by a volatile bfe (kept at its use).
  template <int kPos, int kLen>
  __device__ __forceinline__ uint32_t rgh_field() const {
    uint32_t r;
    asm volatile("bfe.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(rgh), "n"(kPos), "n"(kLen));
    return r;
  }
  __device__ __forceinline__ uint32_t selector() const {
    if constexpr (kRemat) return 0x5410u + (fresh_tid() & 1u) * 0x2222u;  // 0x5410 / 0x7632 as sel
    else return sel;
  }
  // This lane's token-scale row (token 2c) in a stage.
  __device__ __forceinline__ uint32_t ts_lane() const {
    if constexpr (kRemat) return uint32_t(kBBytesOf<MT> + kNibBytesOf<CW>) + (fresh_tid() & 3u) * (kTok4 ? 32u : 16u);
    else return ts_off;
  }
  __device__ __forceinline__ void wait_full(Ring r) const {
    mbar_wait(s_full + 8 * r.idx, r.ph);
    if constexpr (kSplit) mbar_wait(wfull() + 8 * r.idx, r.ph);
  }
  // Tile kt's scales of this lane's rows in the item scale slot.
  __device__ __forceinline__ uint32_t scales(int kt) const {
    return srow() + uint32_t((kt >> 1) * 128 + (kt & 1) * 4);
  }
  // rs.srow: entry g of this warp's 16-row tile in the item scale slot (prefill_v5_body's R pass: slot j & 1 of
  // 4 CW x groups8 x 128 bytes; warp wt's tile at wt x groups8 x 128, row g at 16 g). kRemat: from rgh's slot bit and
  // the thread index (CW = 2, v9's layout).
  __device__ __forceinline__ uint32_t srow() const {
    if constexpr (kRemat) {
      static_assert(CW == 2, "kRemat is v9's layout");
      const uint32_t t = fresh_tid();
      const uint32_t slot = rgh_field<16, 1>();
      return slot0 + (slot * 8u + (t >> 5)) * uint32_t(groups8 * 128) + ((t & 31u) >> 2) * 16u;
    } else {
      return rs.srow;
    }
  }
  // (No helper for wait_full + expand_clean: consume_clean writes the pair out at each call; through one function NVVM
  // ordered the scale-address arithmetic differently and ptxas spilled more in v5, bench/gpu/NOTES.md "Merged device
  // code".)
  // This lane's token scales in stage st (promote_clean's ts). Act block 128: tile kt's float of the 4-tile TMA box
  // (v9: the stage holds tile kt's block alone).
  __device__ __forceinline__ uint32_t tile_scale(uint32_t st, int kt) const {
    return kTok4 ? st + ts_lane() + uint32_t((kt & 3) * 4) : st + ts_lane();
  }
  // Act block 32: the tile's block j (0..3; v9: blocks of MT floats).
  __device__ __forceinline__ uint32_t block_scale(uint32_t st, int j) const {
    return st + ts_lane() + uint32_t(kTok4 ? j * 4 : j * MT * 4);
  }
  // This warp is done with stage r: one arrival on its `empty` barrier.
  __device__ __forceinline__ void release(Ring r) const {
    dev::fence_proxy_async_smem();  // cuda/mbarrier.cuh: this warp's ld.shared of the stage before the next bulk copy
    __syncwarp();
    int lane_now = lane;
    if constexpr (kRemat) lane_now = int(fresh_tid() & 31u);
    if (lane_now == 0) {
      mbar_arrive(s_empty + 8 * r.idx);
      if constexpr (kSplit) mbar_arrive(wempty() + 8 * r.idx);
    }
  }
};

// v3's 4-wgmma group of one 128-wide K tile into d, started from zero: the codes a, the token tile of stage st.
template <int NT>
__device__ __forceinline__ void issue_tile(float (&d)[8 * NT], uint32_t (&a)[4][4], uint32_t st) {
  const uint64_t db = wgmma::smem_desc(st);
  wgmma::fence_regs_n(d);
  wgmma::fence();
#pragma unroll
  for (int j = 0; j < 4; ++j) wgmma::m64nNk32_e4m3_rs<16 * NT>(d, a[j], db + 2 * j, j);
  wgmma::commit();
}

// v13 (kLeanTail) at act block 128: consume_clean's code tables by fp4_step_codes_d8 from this NT on (NT 12's loop
// with two A sets spilled the two multiplier constants of fp4_step_codes; NT 11's fits without).
constexpr int kV13D8From = 12;

// One clean item of N = 16 NT tokens for this consumer warpgroup. Act block 128: per 128-wide K tile 4 chained
// wgmmas into `part`, the next tile's codes expanded while they run, wait, one FFMA per element (v3's pass with
// blk < 0 and no flags). Act block 32: per block one wgmma, waited and promoted with its own token scale, the next
// tile expanded behind the first (v3's kAct32 tile with every factor 1).
// CW: consumer warpgroups (stage layout, v8: 3). kLean (v8, 160 registers per consumer thread): never two partials,
// and at NT >= 7 one A set (the next tile is expanded after this tile's last wait, not while its wgmmas run: acc +
// partial + 2 A sets would be 16 NT + 32 = 144 / 160 data registers); the same codes, wgmmas and FFMAs in the same
// order, so the same bits.
// kSplit (v8): the stage's tokens and this warpgroup's weight slice are waited for and released on their own
// barriers (CleanLane); the loop is the same.
// MT (v9): the stage's token rows (192). kOneAFrom (v9, 240 registers): from this NT on, one A set (acc + partial + A
// = 16 NT + 16: 208 data registers at NT = 12) without kLean's "never two partials" (v9 keeps them at NT <= 6).
template <int NT, bool kAct32, int CW = 2, bool kLean = false, bool kSplit = false, int MT = kMaxTokens,
          int kOneAFrom = 1000, bool kRemat = false, bool kLeanTail = false, int kAhead = 0, class Step = int>
__device__ __forceinline__ void consume_clean(const Params& P, uint32_t s_base, const Item& it, const RowState& rs,
                                              Step& g, int wg, int warp, int lane) {
  const int KT = P.k / 128;
  // v9 at act block 128: the token scales in v3's order (chunk_scales_kernel); else v5's TMA rows. At act block 32 the
  // 4-float loads of v3's order cost more spills than they save (SASS of v9's NT 12 per-32 loop: 87 LDL / 82 STL).
  constexpr bool kTok4 = MT != kMaxTokens9 || kAct32;
  const CleanLane<CW, kSplit, MT, kTok4, kRemat> L(P, s_base, rs, wg, warp, lane);
  // v13 at NT 12 (two A sets: acc + partial + 32 = 224 data registers): the code tables without multiplier constants.
  constexpr bool kD8 = kLeanTail && !kAct32 && NT >= kV13D8From;
  float acc[8 * NT], part[8 * NT];
#pragma unroll
  for (int i = 0; i < 8 * NT; ++i) acc[i] = 0.0f;
  uint32_t a0[4][4], a1[4][4];
  Ring cur = ring_of(g, P.stages);
  L.wait_full(cur);
  expand_clean<kD8>(a0, L.nib(L.stage(cur)), L.scales(0), L.rg(), L.rh(), L.selector());

  // Two partial sets where the registers allow (acc + 2 partials + 2 A sets: 24 NT + 32 <= 176 at NT = 6), so that
  // a wgmma group runs while the previous partial is promoted; every partial is still v3's group started from zero
  // and promoted in v3's order, so the sums are v3's bit for bit. NT = 7, 8: one partial (v3's sequence).
  constexpr bool kDual = NT <= 6 && !kLean;
  constexpr bool kOneA = (kLean && NT >= 7) || NT >= kOneAFrom;
  if constexpr (kDual && !kAct32) {
    // Act block 128, two partials within a pair of tiles (no group pending across the loop's back edge, which made
    // ptxas serialize: C7514): issue kt -> expand kt + 1 -> issue kt + 1 -> wait kt -> promote kt, expand kt + 2
    // (tile kt + 1's wgmmas run meanwhile) -> wait kt + 1 -> promote kt + 1. Each partial is v3's 4-wgmma group of
    // one tile, promoted in tile order: v3's sums.
    float part1[8 * NT];
    int kt = 0;
    for (; kt + 1 < KT; kt += 2) {
      const Ring r1 = ring_next(cur, P.stages);
      const uint32_t s0 = L.stage(cur), s1 = L.stage(r1);
      issue_tile<NT>(part, a0, s0);
      L.wait_full(r1);
      expand_clean(a1, L.nib(s1), L.scales(kt + 1), L.rg(), L.rh(), L.selector());
      issue_tile<NT>(part1, a1, s1);
      wgmma::wait_group<1>();
      wgmma::fence_regs_n(part);
      promote_clean<NT, kTok4>(acc, part, L.tile_scale(s0, kt));
      L.release(cur);
      const Ring r2 = ring_next(r1, P.stages);
      if (kt + 2 < KT) {
        L.wait_full(r2);
        expand_clean(a0, L.nib(L.stage(r2)), L.scales(kt + 2), L.rg(), L.rh(), L.selector());
      }
      wgmma::wait_group<0>();
      wgmma::fence_regs_n(part1);
      promote_clean<NT, kTok4>(acc, part1, L.tile_scale(s1, kt + 1));
      L.release(r1);
      cur = r2;
    }
    if (kt < KT) {  // odd K tile count: the last tile alone (its codes in a0)
      const uint32_t s0 = L.stage(cur);
      issue_tile<NT>(part, a0, s0);
      wgmma::wait_group<0>();
      wgmma::fence_regs_n(part);
      promote_clean<NT, kTok4>(acc, part, L.tile_scale(s0, kt));
      L.release(cur);
      cur = ring_next(cur, P.stages);
    }
  } else if constexpr (kDual) {
    float part1[8 * NT];
    {
      // Per tile: wgmma of block j + 1 issued before block j's promotion.
      auto tile = [&](int kt, uint32_t (&a)[4][4], uint32_t (&an)[4][4]) {
        const Ring nxt = ring_next(cur, P.stages);
        const uint32_t st = L.stage(cur);
        const uint64_t db = wgmma::smem_desc(st);
        auto issue = [&](float (&d)[8 * NT], int j) { issue_block<NT>(d, a[j], db, j); };
        issue(part, 0);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (j < 3) issue((j & 1) ? part : part1, j + 1);
          ScalesAhead<kAhead, kTok4> pre;
          if constexpr (kAhead > 0) pre.load(L.block_scale(st, j));
          if (j == 0 && kt + 1 < KT) {
            L.wait_full(nxt);
            expand_clean(an, L.nib(L.stage(nxt)), L.scales(kt + 1), L.rg(), L.rh(), L.selector());
          }
          if (j < 3)
            wgmma::wait_group<1>();
          else
            wgmma::wait_group<0>();
          float(&pj)[8 * NT] = (j & 1) ? part1 : part;
          wgmma::fence_regs_n(pj);
          if constexpr (kAhead > 0)
            promote_clean_ahead<NT, kTok4, kAhead>(acc, pj, L.block_scale(st, j), pre);
          else
            promote_clean<NT, kTok4>(acc, pj, L.block_scale(st, j));
        }
        L.release(cur);
        cur = nxt;
      };
      for (int kt = 0; kt < KT; kt += 2) {
        tile(kt, a0, a1);
        if (kt + 1 < KT) tile(kt + 1, a1, a0);
      }
    }
  } else {
    auto tile = [&](int kt, uint32_t (&a)[4][4], uint32_t (&an)[4][4]) {
      const Ring nxt = ring_next(cur, P.stages);
      const uint32_t st = L.stage(cur);
      if constexpr (kAct32) {
        const uint64_t db = wgmma::smem_desc(st);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          issue_block<NT>(part, a[j], db, j);
          ScalesAhead<kAhead, kTok4> pre;
          if constexpr (kAhead > 0) pre.load(L.block_scale(st, j));
          if (!kOneA && j == 0 && kt + 1 < KT) {
            L.wait_full(nxt);
            expand_clean(an, L.nib(L.stage(nxt)), L.scales(kt + 1), L.rg(), L.rh(), L.selector());
          }
          wgmma::wait_all();
          wgmma::fence_regs_n(part);
          if constexpr (kAhead > 0)
            promote_clean_ahead<NT, kTok4, kAhead>(acc, part, L.block_scale(st, j), pre);
          else
            promote_clean<NT, kTok4>(acc, part, L.block_scale(st, j));
        }
      } else {
        issue_tile<NT>(part, a, st);
        if (!kOneA && kt + 1 < KT) {
          L.wait_full(nxt);
          expand_clean<kD8>(an, L.nib(L.stage(nxt)), L.scales(kt + 1), L.rg(), L.rh(), L.selector());
        }
        wgmma::wait_all();
        wgmma::fence_regs_n(part);
        promote_clean<NT, kTok4>(acc, part, L.tile_scale(st, kt));
      }
      L.release(cur);
      // kOneA: `a` is dead (its wgmmas retired), so `an` may take its registers.
      if (kOneA && kt + 1 < KT) {
        L.wait_full(nxt);
        expand_clean<kD8>(an, L.nib(L.stage(nxt)), L.scales(kt + 1), L.rg(), L.rh(), L.selector());
      }
      cur = nxt;
    };
    if constexpr (NT >= kOneAFrom) {
      // v9 (N 176 / 192): one code set for every tile (tile kt + 1's codes overwrite tile kt's once its wgmmas
      // retired). Alternating two sets as below, ptxas kept both allocated (acc + partial + 32 = 224 at NT 12) and
      // spilled 4 accumulators and 3 addresses per tile.
      for (int kt = 0; kt < KT; ++kt) tile(kt, a0, a0);
    } else {
      for (int kt = 0; kt < KT; kt += 2) {
        tile(kt, a0, a1);
        if (kt + 1 < KT) tile(kt + 1, a1, a0);
      }
    }
  }
  ring_done(g, KT, cur);
  if constexpr (kRemat) {
    // The epilogue's row addresses from values NVVM cannot see before the loop ends (else it keeps a 64-bit row
    // offset live over the K loop): the item through an empty asm, the thread's coordinates read afresh.
    Item at = it;
    asm volatile("" : "+r"(at.m0), "+r"(at.valid), "+r"(at.n0));
    const int t = int(fresh_tid());
    if constexpr (kLeanTail) {  // v13
      // The item scale slot released here, before the stores, not after them in consume_items_v13: its last read was
      // tile KT - 1's expansion. The release's fence (MEMBAR.ALL.CTA) waits for the warp's outstanding memory
      // operations: after the stores, for all 8 NT of them. Slot j & 1 is rgh's bit 16 (CleanLane::srow).
      dev::warp_release_stage(L.s_full + uint32_t(kV8SEmpty) + 16u * (uint32_t(t) >> 7) +
                              8u * L.template rgh_field<16, 1>());
      store_item_lean<NT>(P, at, L.rg(), L.rh(), acc, t >> 7, (t >> 5) & 3, t & 31);
    } else {
      store_item<NT>(P, at, RowState{L.rg(), L.rh(), 0u}, acc, t >> 7, (t >> 5) & 3, t & 31);
    }
  } else {
    store_item<NT>(P, it, rs, acc, wg, warp, lane);
  }
}

// v9's register split (first v6's: NOTES "Grouped MXFP4 prefill v6"): one producer warpgroup at 24 registers, two
// consumer warpgroups at 240.
constexpr int kProducerRegs9 = 24, kConsumerRegs9 = 240;  // 128 x 24 + 256 x 240 = 64512 = 384 x 168

// v8's three consumer warpgroups (CW = 3; first built as v7, NOTES "Grouped MXFP4 prefill v7", whose kernel was
// removed once v8 replaced it): so that each SM scheduler holds three consumer warps instead of two (run 41's ncu of
// v5: latency-bound, 0.58 eligible of 2.25 active warps per scheduler). An item is a chunk x 192 weight rows (three
// 64-row units; a chunk's last item holds n / 64 % 3 units, its other warpgroups only pass the stages on); a stage
// holds the token tile once for 192 rows. 512 threads, registers 24 (producer) / 160 (consumers):
// 128 x 24 + 384 x 160 = 64,512. At 160 a consumer has no room for two partials (kLean), and at NT >= 7 only for
// one A set. The consumers' code is v5's (consume_clean / consume_item with CW = 3): bitwise v5 / v3.
constexpr int kThreads8 = 512;
constexpr int kProducerRegs8 = 24, kConsumerRegs8 = 160;  // 128 x 24 + 384 x 160 = 64512 <= 65536
// OR of `v` over the 128 threads of consumer warpgroup `wg` (named barrier 1 + wg; v8's third warpgroup: 3).
template <int CW>
__device__ __forceinline__ bool wg_any(bool v, int wg) {
  if constexpr (CW == 3) {
    if (wg == 2) return bar_any<3>(v);
  }
  return warpgroup_any(v, wg);
}

// v8 (PrefillKernel::Fp8SwappedV8; bench/gpu/NOTES.md "Grouped MXFP4 prefill v8"): v7 (three consumer warpgroups of
// 64 weight rows, 192-row items, the same stage layout and the same consumer loops: above) with the stage refilled in
// pieces that each have their own barriers, from run 52's stall samples of v7 (NOTES "Per-instruction stall
// samples"): the consumers waited on `full` (~15 % of the samples), the producer found the ring full a third of the
// time, and a stage was refilled only after the slowest of the three warpgroups released it, by 12 one-KB bulk copies
// + 2 x 6-7 TMA boxes issued one after another by one thread.
//  - Weights: warpgroup w's slice of a stage (its four 16-row tiles of one 128-wide K tile, 4 x 1 KB at 8 k-byte
//    strides in the decode-packed layout) is ONE 2-D TMA box over the existing pack seen as [16-row tiles][k u64]
//    (box 128 u64 x 4 tiles), completing on the slice's own `wfull` and refilled as soon as warpgroup w alone
//    released it (`wempty`, 4 arrivals): a fast warpgroup's next weights are in flight while the slowest still works.
//    No new layout: the box lands exactly as v7's four bulk copies did.
//  - Tokens: the chunk's N rows as ONE TMA box (a tensor map per box height 16..128: the 128-byte swizzle repeats
//    every 8 rows, so one 16 b-row box writes the bytes v7's b boxes of 16 rows wrote) and its token scales as one
//    box (4 floats x N), on the tokens' own `full` / `empty` (12 arrivals: every consumer warp).
//  - Four producer threads, one per producer warp (warp w < 3: warpgroup w's weight slices and its share of the item
//    scale slots; warp 3: the tokens), each waiting only on its own `empty` barriers, so no refill queues behind
//    another's wait.
// The consumers run v7's code (consume_clean / consume_item with CW = 3 and kSplit: two waits and two arrivals per
// tile instead of one): the same codes, wgmmas and FFMAs in the same order, so the same bits as v7 / v5 / v3.
// kBoxes box heights: v8 8 (16..128 rows), v9 12 (16..192).
template <int kBoxes>
struct BoxMaps {
  CUtensorMap q[kBoxes];  // q[b]: token rows, boxes of 128 bytes x 16 (b + 1) rows, 128-byte swizzle
  CUtensorMap s[kBoxes];  // s[b]: token scales (xs), boxes of 4 floats x 16 (b + 1) rows
  CUtensorMap w;          // packed nibbles as [16-row tiles][k u64], boxes of 128 u64 x 4 tiles
};
using V8Maps = BoxMaps<kMaxTokens / kTokenStep>;
using V9Maps = BoxMaps<kMaxTokens9 / kTokenStep>;  // 25 maps, 3,200 bytes of kernel parameters

// v8's four producer threads (lane 0 of producer warp pw; see above). Warp pw < 3 follows every item and K tile like
// consumer warpgroup pw (the same ring positions): where the item has no unit pw (a chunk's last item with fewer
// than 3) it still takes each of its stages in turn and arrives on `wfull` / `sfull` without bytes, so that the
// warpgroup's idle pass keeps every barrier's phase.
// v9 (CW = 2, MT = 192): warps 0 / 1 the two consumer warpgroups' weight slices and scale-slot shares, warp 2 the
// tokens (up to 192 rows in one box), warp 3 idle; items of 128 weight rows (every item has both units).
template <bool kAct32, int CW = 3, int MT = kMaxTokens, class Maps = V8Maps>
__device__ __forceinline__ void produce_v8(const Maps& M, const Params& P, uint32_t s_base, int pw, int my_items,
                                           int nb, int cid, int G) {
  constexpr int kStage = kStageBytesOf<CW, MT>;
  const uint32_t s_bars = s_base + P.bars;
  const int KT = P.k / 128;
  const int tiles16 = P.n / 16;
  const uint32_t slot_tiles = uint32_t(P.groups8 * 128);  // bytes of one 16-row tile's scales in an item slot
  Ring r{0, 0u};
  for (int j = 0; j < my_items; ++j) {
    const Item it = decode_item(P.tl, cid + j * G, nb, 64 * CW);
    if (pw == CW) {
      const int nbox = (it.valid + kTokenStep - 1) / kTokenStep;
      const CUtensorMap* qm = &M.q[nbox - 1];
      const CUtensorMap* sm = &M.s[nbox - 1];
      for (int kt = 0; kt < KT; ++kt, r = ring_next(r, P.stages)) {
        const uint32_t st = s_base + uint32_t(r.idx * kStage), full = s_bars + 8 * r.idx;
        mbar_wait(s_bars + 8 * kMaxStages + 8 * r.idx, r.ph ^ 1u);
        if constexpr (MT == kMaxTokens9 && !kAct32) {
          // v9 at act block 128: the tokens' box, then the chunk's 192 scales of tile kt from chunk_scales_kernel's
          // array (P.xs; 768 bytes). A box past q's end counts its full size.
          constexpr uint32_t kTs = kMaxTokens9 * 4;
          const int64_t chunk = (cid + j * G) / nb;
          mbar_arrive_expect_tx(full, uint32_t(nbox * kTokenStep * 128) + kTs);
          tma_2d(st, qm, kt * 128, it.m0, full);
          bulk_g2s(st + kBBytesOf<MT> + kNibBytesOf<CW>, P.xs + (chunk * (P.k / 128) + kt) * kMaxTokens9, kTs, full);
        } else {
          // A box past q's / xs's end still counts its full size (as v5's boxes).
          mbar_arrive_expect_tx(full, uint32_t(nbox * kTokenStep * (128 + 16)));
          tma_2d(st, qm, kt * 128, it.m0, full);
          tma_2d(st + kBBytesOf<MT> + kNibBytesOf<CW>, sm, kAct32 ? 4 * kt : (kt & ~3), it.m0, full);
        }
      }
    } else if (CW == 3 || pw < CW) {  // v9: warp 3 has nothing to copy
      const bool mine = (P.n - it.n0) / 64 > pw;  // the item has unit pw
      const int tile0 = it.expert * tiles16 + it.n0 / 16 + 4 * pw;
      const uint32_t sfull = s_bars + kV8SFull + 16 * pw + 8 * (j & 1);
      const uint32_t slot = s_base + P.slots + uint32_t((j & 1) * 4 * CW) * slot_tiles + uint32_t(4 * pw) * slot_tiles;
      mbar_wait(s_bars + kV8SEmpty + 16 * pw + 8 * (j & 1), ((j >> 1) & 1) ^ 1);
      if (mine) {
        mbar_arrive_expect_tx(sfull, 4 * slot_tiles);
        for (int t = 0; t < 4; ++t)
          bulk_g2s(slot + uint32_t(t) * slot_tiles, P.sp + int64_t(tile0 + t) * slot_tiles, slot_tiles, sfull);
      } else {
        mbar_arrive(sfull);
      }
      for (int kt = 0; kt < KT; ++kt, r = ring_next(r, P.stages)) {
        const uint32_t wfull = s_bars + kV8WFull + 8 * (kMaxStages * pw + r.idx);
        mbar_wait(s_bars + kV8WEmpty + 8 * (kMaxStages * pw + r.idx), r.ph ^ 1u);
        if (mine) {
          mbar_arrive_expect_tx(wfull, 4 * 1024);
          tma_2d(s_base + uint32_t(r.idx * kStage + kBBytesOf<MT> + pw * 4096), &M.w, kt * 128, tile0, wfull);
        } else {
          mbar_arrive(wfull);
        }
      }
    }
  }
}

// v9's clean loop (see mxfp4_prefill_v9_kernel) keeps one A set from NT = 11 on (consume_clean's kOneAFrom).
constexpr int kV9OneAFrom = 11;
// v13: two A sets at every NT, so at NT 11 / 12 too the next tile's `full` waits, loads and expansion run under the
// tile's wgmma group instead of after its wait (helper-162, session 54: the chain from the DEPBAR to the next
// group 319 -> ~160 instructions a tile at NT 12, 310 -> ~150 at NT 11). acc + partial + 2 A sets = 224 data
// registers at N 192: spill-free with fp4_step_codes_d8 (kV13D8From) and consume_item's kFreshLane (one register
// fewer over every clean loop). The same codes, wgmmas and FFMAs in the same order: v9's bits.
constexpr int kV13OneAFrom = 13;

// v13's consumer loop: v9's (prefill_v5_body's) with the per-item path shortened (helper-165): the ring position and
// the item walk carried (no runtime `g / stages` or `item / nb`, ~20 dependent instructions each). The same items,
// codes, wgmmas and FFMAs in the same order: v9's bits.
struct ItemHead {
  Item it;
  RowState rs;
  bool clean;
};
// Item j's head (walk: its chunk and rest): its record, the scale-slot wait, the R / smallest-scale pass over the item
// scale slot (row_scale_range) and the clean vote (prefill_v5_body's).
__device__ __forceinline__ ItemHead item_head_v13(const Params& P, uint32_t s_base, int j, ItemWalk walk, int wg,
                                                  int wt, int lane) {
  const int c = lane & 3, gq = lane >> 2;
  const bool half_group = (P.k & 255) != 0;
  ItemHead h;
  h.it = item_in(P.tl, walk, 128);
  const uint32_t slot = s_base + P.slots + uint32_t((j & 1) * 8 * P.groups8 * 128);
  mbar_wait(s_base + P.bars + kV8SFull + 16 * wg + 8 * (j & 1), (j >> 1) & 1);
  h.rs.srow = slot + uint32_t(wt * P.groups8 * 128 + gq * 16);
  const auto [rg, rh, lg, lh] = row_scale_range(h.rs.srow, P.groups8, c, half_group);
  h.rs.rg = rg;
  h.rs.rh = rh;
  h.clean = !wg_any<2>(rg - lg > uint32_t(kMaxFold) || rh - lh > uint32_t(kMaxFold), wg);
  return h;
}
__device__ __forceinline__ void consume_items_v13(const Params& P, uint32_t s_base, int my_items, int nb, int cid,
                                                  int G) {
  const int tid = threadIdx.x;
  const int wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  Ring g{0, 0u};
  const ItemWalk stride = item_walk_at(G, nb);
  ItemWalk walk = item_walk_at(cid, nb);  // item j's
  for (int j = 0; j < my_items; ++j, walk = item_walk_next(walk, stride, nb)) {
    const ItemHead h = item_head_v13(P, s_base, j, walk, wg, 4 * wg + warp, lane);
    const int nt = (h.it.valid + kTokenStep - 1) / kTokenStep;
#define DI_V13_CASE(T)                                                                                          \
  case T:                                                                                                       \
    if (h.clean) {                                                                                              \
      consume_clean<T, false, 2, false, true, kMaxTokens9, kV13OneAFrom, true, true>(P, s_base, h.it, h.rs, g,  \
                                                                                    wg, warp, lane);            \
    } else {                                                                                                    \
      const bool wide = wg_any<2>(lane_tiles_wide(P, h.rs, lane & 3, (P.k & 255) != 0), wg);                   \
      consume_item<T, false, false, 2, true, kMaxTokens9, true>(P, s_base, h.it, h.rs, wide, g, wg, warp,       \
                                                                int(fresh_tid() & 31u));                        \
      dev::warp_release_stage(s_base + P.bars + kV8SEmpty + 16 * wg + 8 * (j & 1));                             \
    }                                                                                                           \
    break;
    switch (nt) {
      DI_V13_CASE(1) DI_V13_CASE(2) DI_V13_CASE(3) DI_V13_CASE(4) DI_V13_CASE(5) DI_V13_CASE(6) DI_V13_CASE(7)
      DI_V13_CASE(8) DI_V13_CASE(9) DI_V13_CASE(10) DI_V13_CASE(11) DI_V13_CASE(12)
      default:  // no such chunk (1..192 rows): the slot passed on as prefill_v5_body does
        dev::warp_release_stage(s_base + P.bars + kV8SEmpty + 16 * wg + 8 * (j & 1));
        break;
    }
#undef DI_V13_CASE
  }
}

// The v5 / v8 / v9 / v13 kernel body. kV8 with CW = 3: v8 (above: three consumer warpgroups, produce_v8, its barriers,
// the consumers' kSplit); kV8 with CW = 2 and MT = 192: v9 (below); kLeanTail: v13 (v9 with store_item_lean; its
// consumers run consume_items_v13); everything else is v5's code. kRemat (v9 / v13): the clean consumers recompute the
// lane's offsets where used (CleanLane), and the non-clean consumer gets its lane read afresh (what NVVM derives from a
// lane known before the switch it hoists above it: live over every case's K loop).
template <bool kAct32, int CW = 2, bool kV8 = false, int MT = kMaxTokens, class Maps = V8Maps, bool kLeanTail = false>
__device__ __forceinline__ void prefill_v5_body(const CUtensorMap& qmap, const CUtensorMap& smap, const Params& P,
                                                const Maps* m8 = nullptr) {
  constexpr bool kV9 = MT == kMaxTokens9;
  static_assert(CW == 2 || (CW == 3 && kV8), "three consumer warpgroups: v8");
  static_assert(!kV8 || CW == 3 || kV9, "v8 is v7 with split stage barriers");
  static_assert(!kV9 || (kV8 && CW == 2), "v9 is v8's pieces with two consumer warpgroups");
  static_assert(!kLeanTail || kV9, "v13 is v9 (the remat form) with store_item_lean");
  constexpr bool kRemat = kV9;
  constexpr int kProdRegs = CW == 3 ? kProducerRegs8 : kV9 ? kProducerRegs9 : kProducerRegs;
  constexpr int kConsRegs = CW == 3 ? kConsumerRegs8 : kV9 ? kConsumerRegs9 : kConsumerRegs;
  constexpr int kRows = 64 * CW;  // weight rows per item
  constexpr int kStage = kStageBytesOf<CW, MT>;
  extern __shared__ uint8_t smem_raw[];

  const uint32_t s_base = stage_base(smem_raw);
  const uint32_t s_full = s_base + P.bars, s_empty = s_full + 8 * kMaxStages;
  const uint32_t s_sfull = s_empty + 8 * kMaxStages, s_sempty = s_sfull + 16;

  const int tid = threadIdx.x;
  const int nb = CW == 2 ? P.n / 128 : (P.n / 64 + CW - 1) / CW, KT = P.k / 128;  // items per chunk
  // 64-row units of an item: CW, except a v8 chunk's last item (n / 64 % 3 of them).
  auto units_of = [&](const Item& it) { return CW == 2 ? 2 : min(CW, (P.n - it.n0) / 64); };
  const int items = P.tl[0] * nb;
  const int G = int(gridDim.x), cid = int(blockIdx.x);
  const int my_items = cid < items ? (items - cid + G - 1) / G : 0;
  if (my_items == 0) return;
  auto item_of = [&](int j) { return cid + j * G; };

  if (tid == 0) {
    for (int s = 0; s < P.stages; ++s) {
      mbar_init(s_full + 8 * s, 1);   // the producer's expect_tx arrival; the rest is bytes
      mbar_init(s_empty + 8 * s, 4 * CW);  // lane 0 of each consumer warp
      if constexpr (kV8) {
        for (int w = 0; w < CW; ++w) {
          mbar_init(s_full + kV8WFull + 8 * (kMaxStages * w + s), 1);  // weight producer w's arrival + bytes
          mbar_init(s_full + kV8WEmpty + 8 * (kMaxStages * w + s), 4);  // lane 0 of warpgroup w's warps
        }
      }
    }
    for (int s = 0; s < 2; ++s) {
      if constexpr (kV8) {
        for (int w = 0; w < CW; ++w) {
          mbar_init(s_full + kV8SFull + 16 * w + 8 * s, 1);
          mbar_init(s_full + kV8SEmpty + 16 * w + 8 * s, 4);
        }
      } else {
        mbar_init(s_sfull + 8 * s, 1);
        mbar_init(s_sempty + 8 * s, 4 * CW);
      }
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int64_t tiles16 = P.n / 16;
  if (tid >= 128 * CW) {
    // ------------------------------------------------------------------------------------------- producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProdRegs));
    if constexpr (kV8) {
      // Four producer threads: lane 0 of each producer warp (produce_v8).
      if (tid % 32 == 0) produce_v8<kAct32, CW, MT>(*m8, P, s_base, (tid - 128 * CW) / 32, my_items, nb, cid, G);
      return;
    }
    if (tid != 128 * CW) return;  // one thread issues every copy (no barrier follows)
    Ring r{0, 0u};
    for (int j = 0; j < my_items; ++j) {
      const Item it = decode_item(P.tl, item_of(j), nb, kRows);
      const int nbox = (it.valid + kTokenStep - 1) / kTokenStep;
      const int tiles = 4 * units_of(it);  // 16-row weight tiles of the item (nibbles and scales of those only)
      const int64_t tile0 = int64_t(it.expert) * tiles16 + it.n0 / 16;
      const uint32_t slot = s_base + P.slots + uint32_t((j & 1) * 4 * CW * P.groups8 * 128);
      mbar_wait(s_sempty + 8 * (j & 1), ((j >> 1) & 1) ^ 1);
      mbar_arrive_expect_tx(s_sfull + 8 * (j & 1), uint32_t(tiles * P.groups8 * 128));
      for (int t = 0; t < tiles; ++t)
        bulk_g2s(slot + uint32_t(t * P.groups8 * 128), P.sp + (tile0 + t) * P.groups8 * 128, uint32_t(P.groups8 * 128),
                 s_sfull + 8 * (j & 1));
      const uint8_t* wsrc = P.wp + tile0 * (P.k / 64) * 512;
      for (int kt = 0; kt < KT; ++kt, r = ring_next(r, P.stages)) {
        const uint32_t st = s_base + uint32_t(r.idx * kStage), full = s_full + 8 * r.idx;
        mbar_wait(s_empty + 8 * r.idx, r.ph ^ 1u);
        // Bytes: nibbles + every token box (a box past q's / xs's end still counts its full size).
        mbar_arrive_expect_tx(full, uint32_t(tiles * 1024 + nbox * kTokenStep * (128 + 16)));
#pragma unroll
        for (int t = 0; t < tiles; ++t)
          bulk_g2s(st + kBBytes + uint32_t(t * 1024), wsrc + (int64_t(t) * (P.k / 64) + 2 * kt) * 512, 1024, full);
        const int sx = kAct32 ? 4 * kt : (kt & ~3);
        for (int b = 0; b < nbox; ++b) {
          tma_2d(st + uint32_t(b * kTokenStep * 128), &qmap, kt * 128, it.m0 + b * kTokenStep, full);
          tma_2d(st + kBBytes + kNibBytesOf<CW> + uint32_t(b * kTokenStep * 16), &smap, sx, it.m0 + b * kTokenStep,
                 full);
        }
      }
    }
  } else {
    // ------------------------------------------------------------------------------------------- consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsRegs));
    if constexpr (kLeanTail) {  // v13's consumer loop is its own; below: v5 / v8 / v9
      consume_items_v13(P, s_base, my_items, nb, cid, G);
      return;
    }
    const int wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, c = lane & 3, gq = lane >> 2;
    const int wt = 4 * wg + warp;
    const bool half_group = (P.k & 255) != 0;
    int g = 0;
    for (int j = 0; j < my_items; ++j) {
      const Item it = decode_item(P.tl, item_of(j), nb, kRows);
      const int nt = (it.valid + kTokenStep - 1) / kTokenStep;
      const uint32_t slot = s_base + P.slots + uint32_t((j & 1) * 4 * CW * P.groups8 * 128);
      // v8: this warpgroup's own share of the item slot has its own barriers (computed where used: an address
      // kept live over the item changed v5's SASS).
      auto item_empty = [&] { return kV8 ? s_full + kV8SEmpty + 16 * wg + 8 * (j & 1) : s_sempty + 8 * (j & 1); };
      mbar_wait(kV8 ? s_full + kV8SFull + 16 * wg + 8 * (j & 1) : s_sfull + 8 * (j & 1), (j >> 1) & 1);
      if (CW == 3 && wg >= units_of(it)) {
        // v8, a chunk's last item with fewer than 3 units: this warpgroup has no rows; it passes the item's stages
        // on (`empty` counts every consumer warp: waiting `full` first keeps each arrival in its stage's phase), and
        // its weight slices' barriers too (produce_v8 arrives on `wfull` without bytes).
        Ring r = ring_at(g, P.stages);
        for (int kt = 0; kt < KT; ++kt, r = ring_next(r, P.stages)) {
          mbar_wait(s_full + 8 * r.idx, r.ph);
          if constexpr (kV8) mbar_wait(s_full + kV8WFull + 8 * (kMaxStages * wg + r.idx), r.ph);
          __syncwarp();
          if (lane == 0) {
            mbar_arrive(s_empty + 8 * r.idx);
            if constexpr (kV8) mbar_arrive(s_full + kV8WEmpty + 8 * (kMaxStages * wg + r.idx));
          }
        }
        g += KT;
        __syncwarp();
        if (lane == 0) mbar_arrive(item_empty());
        continue;
      }

      // v3's R / smallest-scale pass over the item scale slot.
      RowState rs;
      rs.srow = slot + uint32_t(wt * P.groups8 * 128 + gq * 16);
      const auto [rg, rh, lg, lh] = row_scale_range(rs.srow, P.groups8, c, half_group);
      rs.rg = rg;
      rs.rh = rh;
      // Clean: every block of every row of the warpgroup within 11 binades of its row's R (no fold flag anywhere).
      const bool clean = !wg_any<CW>(rg - lg > uint32_t(kMaxFold) || rh - lh > uint32_t(kMaxFold), wg);
      bool wide = false;
      if (!kAct32 && !clean) wide = wg_any<CW>(lane_tiles_wide(P, rs, c, half_group), wg);

#define DI_V5_CASE(T)                                                                   \
  case T:                                                                               \
    if (clean)                                                                          \
      consume_clean<T, kAct32, CW, CW == 3, kV8>(P, s_base, it, rs, g, wg, warp, lane); \
    else                                                                                \
      consume_item<T, kAct32, true, CW, kV8>(P, s_base, it, rs, wide, g, wg, warp, lane); \
    break;
#define DI_V9_CASE(T)                                                                                          \
  case T:                                                                                                      \
    if (clean)                                                                                                 \
      consume_clean<T, kAct32, 2, false, true, MT, kV9OneAFrom, kRemat, false,                                 \
                    kAct32 ? scales_ahead_v9(T) : 0>(P, s_base, it, rs, g, wg, warp, lane);                    \
    else                                                                                                       \
      consume_item<T, kAct32, kAct32, 2, true, MT>(P, s_base, it, rs, wide, g, wg, warp,                       \
                                                   kRemat ? int(fresh_tid() & 31u) : lane);                    \
    break;
      if constexpr (kV9) {
        // v9: N up to 192 (chunks of <= 192 rows). Clean items: two partials at NT <= 6 (24 NT + 32 registers), two A
        // sets at NT 7..10 (16 NT + 32), one A set at NT 11 / 12 (16 NT + 16: 208 at N = 192; v13: two,
        // kV13OneAFrom); non-clean items: v3's consumer (spills at large NT; only items with > 11-binade spans over K
        // take it).
        switch (nt) {
          DI_V9_CASE(1) DI_V9_CASE(2) DI_V9_CASE(3) DI_V9_CASE(4) DI_V9_CASE(5) DI_V9_CASE(6) DI_V9_CASE(7)
          DI_V9_CASE(8) DI_V9_CASE(9) DI_V9_CASE(10) DI_V9_CASE(11) DI_V9_CASE(12)
          default: break;
        }
      } else {
        switch (nt) {
          DI_V5_CASE(1) DI_V5_CASE(2) DI_V5_CASE(3) DI_V5_CASE(4) DI_V5_CASE(5) DI_V5_CASE(6) DI_V5_CASE(7)
          DI_V5_CASE(8)
          default: break;
        }
      }
#undef DI_V5_CASE
#undef DI_V9_CASE
      dev::warp_release_stage(item_empty());  // cuda/mbarrier.cuh: the reads before the next bulk copy
    }
  }
}

template <bool kAct32>
__global__ void __launch_bounds__(kThreads, 1)
    mxfp4_prefill_v5_kernel(const __grid_constant__ CUtensorMap qmap, const __grid_constant__ CUtensorMap smap,
                            const Params P) {
  prefill_v5_body<kAct32>(qmap, smap, P);
}
// v8: v7 (v5 with three consumer warpgroups of 64 weight rows, items of 192 rows) with each stage's weight slices
// (one TMA box per warpgroup) and tokens (one box) on barriers of their own, four producer threads (NOTES "v8"). The
// same bits.
template <bool kAct32>
__global__ void __launch_bounds__(kThreads8, 1)
    mxfp4_prefill_v8_kernel(const __grid_constant__ V8Maps maps, const Params P) {
  prefill_v5_body<kAct32, 3, true>(maps.q[0], maps.s[0], P, &maps);
}
// v9 (PrefillKernel::Fp8SwappedV9; bench/gpu/NOTES.md "Grouped MXFP4 prefill v9 (wide groups)"): for groups wider
// than v8's (> 112 rows on average: the 16384-token chunks, ~384 rows per expert), items of 128 weight rows x a
// chunk of up to 192 tokens (build_chunks_kernel<192>), so that each expanded weight serves up to 192 tokens
// (v5: 128, v8: ~96): the expansion's instructions per FLOP fall by 1.5-2x. v8's stage pieces and producers (one
// TMA box per weight slice, one for the tokens, one for their scales, each on its own barriers), with CW = 2
// consumer warpgroups of 64 rows at 240 registers (producer 24: 128 x 24 + 256 x 240 = 64,512) and stages of
// 24 KB tokens + 8 KB nibbles + 3 KB token scales. The consumers are consume_clean / consume_item with MT = 192:
// the same codes, the same 4-wgmma groups from zero and the same FFMAs per element in tile order, so v3's bits.
// The clean consumers recompute the lane's offsets where used (CleanLane's kRemat; why: NOTES "Grouped MXFP4 prefill
// v11").
template <bool kAct32>
__global__ void __launch_bounds__(kThreads, 1)
    mxfp4_prefill_v9_kernel(const __grid_constant__ V9Maps maps, const Params P) {
  prefill_v5_body<kAct32, 2, true, kMaxTokens9, V9Maps>(maps.q[0], maps.s[0], P, &maps);
}
// v13 (PrefillKernel::Fp8SwappedV13; NOTES "Grouped MXFP4 prefill v13"): v9 (act block 128) whose clean items store
// through store_item_lean; everything else is v9's code, so v9's bits. Act block 32 runs v9's kernel.
__global__ void __launch_bounds__(kThreads, 1)
    mxfp4_prefill_v13_kernel(const __grid_constant__ V9Maps maps, const Params P) {
  prefill_v5_body<false, 2, true, kMaxTokens9, V9Maps, true>(maps.q[0], maps.s[0], P, &maps);
}

// Host side: PrefillKernel::Fp8Swapped (v3), Fp8SwappedV5 (v5), Fp8SwappedV8 (v8), Fp8SwappedV9 (v9) and
// Fp8SwappedV13 (v13) over the packed experts. `Auto` resolves through DEEPINFER_PREFILL_KERNEL (read once per
// process): unset -> v8 (the default since session 9: bitwise v5 / v3; run 57 at 4096 tokens: V4 w13 / w2 x1.20 /
// x1.11 of v5 (39.1 / 34.3 % of the dense FP8 rate), V4.1 x1.00 / 0.99; 16 V4-Flash layers at 4K: decode batch 64 /
// 256 -14 / -12 %, prefill +14 %). On groups wider than v8's (> 112 rows on average) v8 hands over to v9 at
// activation block 32 and to v13 at 128 (the note above v3::launch); where neither applies, v5, and where
// v5 does not, v3 (the same bits throughout). swapped -> v3, v5 -> v5, v8 -> v8 (as unset), v9 -> v9 (NOTES "v9
// (wide groups)": 128-row x <= 192-token items on any grouping, bitwise v3; where it does not apply, v5), v13 -> v9
// with store_item_lean on clean items (act block 128; the same bits); anything else (v1, bf16, or the value of a
// removed variant) leaves Auto, i.e. v1. Without packed experts v1 runs whatever this says.
// Removed variants, their designs and measurements in bench/gpu/NOTES.md ("Grouped MXFP4 prefill v2" .. "v9 (wide
// groups)"): v2 (env fp8: FP8 operands expanded by a producer warpgroup, checkpoint layout), the NoExpand probe (v3
// without the e2m1 expansion: wrong results, a timing probe), v4 (v4 / v4x4 / v4x8: v3 in clusters of 2 / 4 / 8
// sharing the token tiles by TMA multicast), v6 (v5 with the act-128 K loop in 4-tile bodies), v7 (v5 with three
// consumer warpgroups: the base v8 keeps) and v9-halves (v9h: v9's N 192 tiles as two 96-token wgmma groups).
PrefillKernel resolve(PrefillKernel k) {
  if (k != PrefillKernel::Auto) return k;
  switch (g_prefill_env.get()) {
    case PrefillEnv::Swapped: return PrefillKernel::Fp8Swapped;
    case PrefillEnv::V5: return PrefillKernel::Fp8SwappedV5;
    case PrefillEnv::V8: return PrefillKernel::Fp8SwappedV8;
    case PrefillEnv::V9: return PrefillKernel::Fp8SwappedV9;
    case PrefillEnv::V13: return PrefillKernel::Fp8SwappedV13;
    case PrefillEnv::Unset: return PrefillKernel::Fp8SwappedV8;
    default: return PrefillKernel::Auto;
  }
}
bool wants_v3(PrefillKernel k) {
  const PrefillKernel r = resolve(k);
  return r == PrefillKernel::Fp8Swapped || r == PrefillKernel::Fp8SwappedV5 || r == PrefillKernel::Fp8SwappedV8 ||
         r == PrefillKernel::Fp8SwappedV9 || r == PrefillKernel::Fp8SwappedV13;
}

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult res{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &res) !=
            cudaSuccess ||
        res != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// The token tensor map: q [rows, k] bytes, boxes of 128 bytes x 16 rows, 128-byte swizzle (the wgmma B layout).
// v8: boxes of box_rows (16..128) rows, the chunk in one box.
bool encode_token_map(CUtensorMap* map, const uint8_t* q, int64_t rows, int64_t k, int box_rows = kTokenStep) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (!encode) return false;
  const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(k)};
  const cuuint32_t box[2] = {128, uint32_t(box_rows)};
  const cuuint32_t estr[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(q), dims, strides, box, estr,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// v5: the token-scale tensor map, xs [rows, xb] floats, boxes of 4 floats (16 bytes) x 16 rows, no swizzle: each
// token's 16-byte row lands at 16 t of the stage's scale block. Needs xb % 4 == 0 (a row stride of 16-byte
// multiples) and a 16-byte-aligned xs. v8: boxes of box_rows (16..128) rows.
bool encode_scale_map(CUtensorMap* map, const float* xs, int64_t rows, int64_t xb, int box_rows = kTokenStep) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (!encode || xb % 4 != 0 || reinterpret_cast<uintptr_t>(xs) % 16 != 0) return false;
  const cuuint64_t dims[2] = {cuuint64_t(xb), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(xb * 4)};
  const cuuint32_t box[2] = {4, uint32_t(box_rows)};
  const cuuint32_t estr[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(xs), dims, strides, box, estr,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// v8's maps (V8Maps; v9: V9Maps, box heights up to 192): the token and token-scale maps for every box height, and
// the packed nibbles (mxfp4_pack: per 16-row tile k / 64 step pairs of 512 bytes, i.e. 8 k bytes) as [experts x n / 16
// tiles][k u64] with boxes of one K tile (128 u64 = 1 KB) x 4 tiles: warpgroup w's slice of a stage, landing as v7's
// (and v5's) four 1 KB bulk copies did.
template <int kBoxes>
bool encode_v8_maps(BoxMaps<kBoxes>* m, const uint8_t* q, const float* xs, int64_t rows, int64_t xb,
                    const Fp4Experts& w) {
  for (int b = 0; b < kBoxes; ++b)
    if (!encode_token_map(&m->q[b], q, rows, w.k, kTokenStep * (b + 1)) ||
        !encode_scale_map(&m->s[b], xs, rows, xb, kTokenStep * (b + 1)))
      return false;
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (!encode || reinterpret_cast<uintptr_t>(w.packed_weight) % 16 != 0) return false;
  const cuuint64_t dims[2] = {cuuint64_t(w.k), cuuint64_t(w.experts * (w.n / 16))};
  const cuuint64_t strides[1] = {cuuint64_t(w.k * 8)};
  const cuuint32_t box[2] = {128, 4};
  const cuuint32_t estr[2] = {1, 1};
  return encode(&m->w, CU_TENSOR_MAP_DATA_TYPE_UINT64, 2, const_cast<uint8_t*>(w.packed_weight), dims, strides, box,
                estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// v8's host-side condition (launch; first v7's): its carve has 3 stages and groups average at most 112 rows
// (N <= 112).
bool v8_applies(const Carve& cv8, int64_t rows, int groups) {
  return cv8.stages >= 3 && rows <= int64_t(kMaxTokens - kTokenStep) * groups;
}

// p with carve c's stage count and shared-memory offsets (v8's and v9's layouts differ from v3 / v5's: carve_for).
Params with_carve(Params p, const Carve& c) {
  p.stages = c.stages;
  p.slots = c.slots;
  p.bars = c.bars;
  return p;
}

// A packed kernel (v3 / v5 / v8 / v9 / v13) on one block per SM with its carve's `bytes` of dynamic shared memory.
template <class Kernel, class... Args>
void launch_packed(Kernel kernel, int sms, int threads, int bytes, cudaStream_t stream, const char* name,
                   const Args&... args) {
  DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  kernel<<<unsigned(sms), threads, size_t(bytes), stream>>>(args...);
  DI_CUDA_CHECK_LAUNCH(name);
}

// Chunk records: sum over groups of ceil(rows / 128) <= rows / 128 + non-empty groups (chunks of <= 192: fewer).
int64_t chunk_cap(int64_t rows, int groups) { return rows / kMaxTokens + std::min<int64_t>(groups, rows) + 1; }

// Wide groups under `Auto` (DEEPINFER_PREFILL_KERNEL unset or v8; v8 does not apply: > 112 rows per group on
// average) run v9 (since session 10's run 3, bench/gpu/NOTES.md "v9 (wide groups)": at 16384 tokens V4 w13 / w2
// 41.1 / 38.6 % of the dense FP8 rate vs v5's 36.0 / 34.3 %, V4.1 x1.01-1.02, bitwise v3 in every GpuMoePrefillGemm
// case), and at activation block 128 v13 (v9 with the lean epilogue, bitwise v9; runs 116 / 117, V4 at 16384 tokens,
// w13 x1.017 / x1.018, w2 x1.030 / x1.049 of v9 in the same run: 45.3 / 46.6 % and 44.1 / 45.0 % of the dense FP8
// rate). An explicit v8 on such groups takes this path too (roofline's v8 row there is v13); v9 and v13 also run
// when asked for explicitly, on any grouping.
bool launch(const uint8_t* q, const float* xs, int64_t rows, int act_block, const Fp4Experts& w,
            const int32_t* expert_ids, const int32_t* row_offsets, int groups, void* y, bool y_bf16,
            void* workspace, cudaStream_t stream) {
  if (!wants_v3(w.prefill)) return false;
  if (!w.packed_weight || !w.packed_scale || (act_block != 128 && act_block != 32)) return false;
  if (reinterpret_cast<uintptr_t>(q) % 16 != 0 || rows >= (int64_t(1) << 31)) return false;
  if (int64_t(w.experts) * w.n >= (int64_t(1) << 31)) return false;
  const Carve cv = carve_for(w.k);
  if (cv.stages < 3) return false;
  const int64_t cap = chunk_cap(rows, groups);
  if (16 + 16 * cap > int64_t(mxfp4_prefill_workspace_bytes(rows, w.k))) return false;
  CUtensorMap map;
  if (!encode_token_map(&map, q, rows, w.k)) return false;
  int dev_id = 0, sms = 0;
  DI_CUDA_CHECK(cudaGetDevice(&dev_id));
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev_id));
  int* tl = static_cast<int*>(workspace);
  Params p{xs, w.packed_weight, w.packed_scale, tl, y, int(w.n), int(w.k), cv.stages, cv.groups8, cv.slots, cv.bars,
           y_bf16};
  const PrefillKernel r = resolve(w.prefill);
  const Carve cv8 = carve_for(w.k, 3, kV8Bars);
  const bool v8_fits = v8_applies(cv8, rows, groups);
  // v9 / v13: asked for, or `Auto` (v8) on groups too wide for v8 (above). Needs 3 stages of its 35 KB layout next to
  // the two 128-row scale slots (every V4 / V4.1 K: 5) and its tensor maps (k / act_block % 4 == 0, xs 16-byte
  // aligned, as v5); else v5 (or v3) runs below, the same bits.
  const bool wide_v8 = r == PrefillKernel::Fp8SwappedV8 && !v8_fits;
  if (r == PrefillKernel::Fp8SwappedV9 || r == PrefillKernel::Fp8SwappedV13 || wide_v8) {
    const Carve cv9 = carve_for(w.k, 2, kV8Bars, kMaxTokens9);
    V9Maps maps;  // 25 tensor maps, 3,200 bytes of kernel parameters (copied at launch)
    // The chunks' scales (chunk_scales_kernel) after the chunk records in the workspace: cap x xb x 192 floats.
    const int64_t xb = w.k / act_block, ts_at = (16 + 16 * cap + 255) / 256 * 256;
    const bool fits =
        act_block == 32 || ts_at + cap * xb * kMaxTokens9 * 4 <= int64_t(mxfp4_prefill_workspace_bytes(rows, w.k));
    if (cv9.stages >= 3 && fits && encode_v8_maps(&maps, q, xs, rows, xb, w)) {
      build_chunks_kernel<kMaxTokens9><<<1, 1024, 0, stream>>>(row_offsets, expert_ids, groups, tl);
      DI_CUDA_CHECK_LAUNCH("build_chunks_kernel<192>");
      Params p9 = with_carve(p, cv9);
      if (act_block == 128) {  // act block 32 keeps v5's TMA rows of xs (the maps' s[])
        float* cs = reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) + ts_at);
        const int64_t cs_floats = cap * xb * kMaxTokens9;  // bound: the chunk count is known on the device only
        chunk_scales_kernel<<<unsigned(std::min<int64_t>((cs_floats + 255) / 256, 4 * sms)), 256, 0, stream>>>(
            tl, xs, int(xb), cs);
        DI_CUDA_CHECK_LAUNCH("chunk_scales_kernel");
        p9.xs = cs;
      }
      auto kernel = act_block == 32                                ? mxfp4_prefill_v9_kernel<true>
                    : r == PrefillKernel::Fp8SwappedV13 || wide_v8 ? mxfp4_prefill_v13_kernel
                                                                   : mxfp4_prefill_v9_kernel<false>;
      launch_packed(kernel, sms, kThreads, cv9.bytes, stream, "mxfp4_prefill_v9_kernel", maps, p9);
      return true;
    }
    // The fallback gives the same bits, so a test would not see it: say it once.
    static std::once_flag said;
    std::call_once(said, [] {
      std::fprintf(stderr, "mxfp4_grouped_gemm_prefill: v9 does not apply (stages, workspace or a tensor map); running "
                           "v5 (or v3)\n");
    });
  }
  build_chunks_kernel<<<1, 1024, 0, stream>>>(row_offsets, expert_ids, groups, tl);
  DI_CUDA_CHECK_LAUNCH("build_chunks_kernel");
  // v8 where its tensor maps apply (as v5's token-scale map: k / act_block % 4 == 0, xs 16-byte aligned), its carve
  // has 3 stages of its 30 KB layout next to its two 192-row scale slots and its larger bar block (every V4 / V4.1 K:
  // 5-6 stages; k up to 11,520) and the groups average at most 112 rows (v7's conditions: most chunks N <= 112; at 160
  // registers the N = 128 loop spills ~25 values per tile, SASS; the few N = 128 chunks v8 still gets run that loop,
  // correct but slower). At 4096 tokens top-6 over 256 / 384 experts (96 / 64 rows per expert) v8 runs; at 16384
  // (~384 per expert) v9 / v13 do (above). Else v5, else v3 (the same bits).
  if (r == PrefillKernel::Fp8SwappedV8) {
    V8Maps maps;  // 17 tensor maps, 2,176 bytes of kernel parameters (copied at launch)
    if (v8_fits) {
      if (encode_v8_maps(&maps, q, xs, rows, w.k / act_block, w)) {
        auto kernel = act_block == 32 ? mxfp4_prefill_v8_kernel<true> : mxfp4_prefill_v8_kernel<false>;
        launch_packed(kernel, sms, kThreads8, cv8.bytes, stream, "mxfp4_prefill_v8_kernel", maps, with_carve(p, cv8));
        return true;
      }
      // The fallback gives the same bits, so a test would not see it: say it once.
      static std::once_flag said;
      std::call_once(said, [] {
        std::fprintf(stderr, "mxfp4_grouped_gemm_prefill: a v8 tensor map was refused; running v5 (or v3)\n");
      });
    }
  }
  // v5 (asked for, or the fallback of v8 / v9 / v13) where the token-scale map applies (k / act_block % 4 == 0, xs
  // 16-byte aligned); else v3 (the same bits).
  if (r == PrefillKernel::Fp8SwappedV5 || r == PrefillKernel::Fp8SwappedV8 || r == PrefillKernel::Fp8SwappedV9 ||
      r == PrefillKernel::Fp8SwappedV13) {
    CUtensorMap smap;
    if (encode_scale_map(&smap, xs, rows, w.k / act_block)) {
      auto kernel = act_block == 32 ? mxfp4_prefill_v5_kernel<true> : mxfp4_prefill_v5_kernel<false>;
      launch_packed(kernel, sms, kThreads, cv.bytes, stream, "mxfp4_prefill_v5_kernel", map, smap, p);
      return true;
    }
  }
  auto kernel = act_block == 32 ? mxfp4_prefill_v3_kernel<true> : mxfp4_prefill_v3_kernel<false>;
  launch_packed(kernel, sms, kThreads, cv.bytes, stream, "mxfp4_prefill_v3_kernel", map, p);
  return true;
}

}  // namespace v3

}  // namespace

bool mxfp4_prefill_reads_packed(const Fp4Experts& w) {
  return v3::wants_v3(w.prefill) && w.packed_weight && w.packed_scale;
}

size_t mxfp4_prefill_workspace_bytes(int64_t rows, int64_t k) { return size_t(rows) * size_t(k) * 2; }

void mxfp4_grouped_gemm_prefill(const uint8_t* q, const float* xs, int64_t rows, int act_block, const Fp4Experts& w,
                                const int32_t* expert_ids, const int32_t* row_offsets, int groups,
                                int max_rows_per_group, void* y, OutType y_type, void* workspace,
                                cudaStream_t stream) {
  DI_CHECK(w.k % 128 == 0 && w.n % 128 == 0, "cuda::mxfp4_grouped_gemm_prefill: k = " + std::to_string(w.k) +
                                                  " and n = " + std::to_string(w.n) + " must be multiples of 128");
  DI_CHECK(act_block >= 32 && act_block % 32 == 0 && w.k % act_block == 0 && (act_block & (act_block - 1)) == 0,
           "cuda::mxfp4_grouped_gemm_prefill: activation block " + std::to_string(act_block) +
               " must be a power of two >= 32 dividing k");
  DI_CHECK(expert_ids && row_offsets && workspace, "cuda::mxfp4_grouped_gemm_prefill: ids, offsets and workspace");
  DI_CHECK(w.n < (int64_t(1) << 31) && w.k < (int64_t(1) << 31), "cuda::mxfp4_grouped_gemm_prefill: n or k too large");
  if (groups == 0 || max_rows_per_group == 0 || rows == 0) return;
  const bool y_bf16 = y_type == OutType::BF16;
  if (v3::launch(q, xs, rows, act_block, w, expert_ids, row_offsets, groups, y, y_bf16, workspace, stream)) return;
  DI_CHECK(w.weight && w.scale, "cuda::mxfp4_grouped_gemm_prefill: v1 reads the checkpoint layout (v3 the packed "
                                "copy: PrefillKernel::Fp8Swapped with packed_weight / packed_scale)");
  int xb = 0;
  while ((1 << xb) < act_block) ++xb;
  bf16* a = static_cast<bf16*>(workspace);
  const int64_t chunks = rows * w.k / 8;
  pf::dequant_bf16_kernel<<<unsigned(std::min<int64_t>((chunks + 255) / 256, 8192)), 256, 0, stream>>>(
      q, xs, a, chunks, int(w.k), xb);
  DI_CUDA_CHECK_LAUNCH("dequant_bf16_kernel");
  DI_CUDA_CHECK(cudaFuncSetAttribute(pf::mxfp4_prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     pf::kSmemBytes));
  const int m_tiles = (max_rows_per_group + pf::kBM - 1) / pf::kBM;
  dim3 grid(unsigned(w.n / pf::kBN), unsigned(groups * m_tiles));
  pf::mxfp4_prefill_kernel<<<grid, pf::kThreads, pf::kSmemBytes, stream>>>(
      a, w.weight, w.scale, expert_ids, row_offsets, m_tiles, y, y_bf16, int(w.n), int(w.k));
  DI_CUDA_CHECK_LAUNCH("mxfp4_prefill_kernel");
}

}  // namespace deepinfer::cuda
