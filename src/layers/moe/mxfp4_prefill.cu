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
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/kernels.h"
#include "cuda/wgmma.cuh"
#include "cuda/skinny_gemm.cuh"

namespace deepinfer::cuda {

namespace {

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
using wgmma::fence_proxy_async;
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
                         int m_tiles, float* __restrict__ y, int N, int K) {
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
    fence_proxy_async();                // generic-proxy writes (cp.async, st.shared) -> wgmma reads
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
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int col = n0 + 8 * i + 2 * (lane % 4);
    if (r0 < row_end) *reinterpret_cast<float2*>(y + int64_t(r0) * N + col) = make_float2(acc[4 * i], acc[4 * i + 1]);
    if (r1 < row_end)
      *reinterpret_cast<float2*>(y + int64_t(r1) * N + col) = make_float2(acc[4 * i + 2], acc[4 * i + 3]);
  }
}

}  // namespace pf

// =========================================================================================================
// v2: FP8 operands, warp-specialized (bench/gpu/NOTES.md "Grouped MXFP4 prefill v2").
//
// Why FP8: the bf16 ceiling is ~57 % of the FP8 one, so v1 cannot reach 50 % of the dense FP8 rate at all.
// The weights' per-32 scales go into the e4m3 codes (no per-32 promotion on V4): a row's 4 scales of a 128-wide
// K tile are folded relative to their maximum emax, code = e2m1 x 2^(6 - d), d = emax - e_j. The 2^6 headroom
// uses e4m3's range (6 x 2^6 = 384 <= 448); for d <= 11 every nonzero code is an e4m3 normal (0.5 x 2^-5 >=
// 2^-6), so the codes come from one 8-entry table per d (two words, prmt) and the fold is exact. A row with a
// wider span is encoded per 32 (d = 0 everywhere, per-32 scales), and a tile holding such a row is multiplied
// per 32 with per-32 promotion (the "slow" tile: exact, ~4x the promotion cost, rare on real checkpoints).
// The per-128 promotion multiplies by xs[token][kt] x 2^(emax[col] - 133) (both powers of two: exact).
//
// Roles (384 threads, one block per SM, persistent): warpgroup 2 is the producer (setmaxnreg.dec): it streams
// the nibbles + scale bytes (cp.async, 3-slot raw ring, 2 steps ahead) and the FP8 activations (cp.async into
// the MMA stage, 1 step ahead), expands the nibbles into the 128-byte-swizzled e4m3 B tile and arrives on the
// stage's `full` mbarrier. Warpgroups 0 and 1 are consumers (setmaxnreg.inc): wait `full`, 4 x wgmma
// m64n128k32 e4m3, release the stage (`empty`), promote. Each thread expands exactly the chunks it copied, so
// its own cp.async.wait_group is the only wait on the raw data.
//
// Tiles: built on the device from row_offsets (build_tiles_kernel): per group, 128-row tiles while more than 64
// rows remain, then one 64-row tile for the rest. A work item is 128 tokens x 128 columns (consumer warpgroup w
// takes tokens 64w..64w+63) or 64 tokens x 256 columns (warpgroup w takes columns 128w..128w+127): the same
// FLOPs, so a static round-robin over items balances; 128-row items come first. Every output element belongs to
// exactly one item and its K order is fixed: results are the same bits run to run.
namespace v2 {

constexpr int kS = 3;                                  // MMA stages (A tile + expanded B tile + column scales)
constexpr int kR = 3;                                  // raw stages (nibbles + scale words)
constexpr int kThreads = 384;
constexpr int kAStage = 128 * 128;                     // up to 128 token rows x 128 bytes of e4m3
constexpr int kBStage = 256 * 128;                     // up to 256 weight rows x 128 bytes of e4m3
constexpr int kWscBytes = 4 * 256 * 4;                 // float column scale per (32-block j, weight row)
constexpr int kMmaStage = kAStage + kBStage + kWscBytes;
constexpr int kRawNib = 256 * 64;                      // 256 rows x 64 bytes of nibbles
constexpr int kRawStage = kRawNib + 256 * 4;           // + one 4-byte scale word per row
constexpr int kBarOff = kS * kMmaStage + kR * kRawStage;
constexpr int kSmemBytes = kBarOff + 128 + 1024;       // barriers + flags, slack for the 1024-byte alignment
constexpr int kProducerRegs = 56, kConsumerRegs = 224; // 128 x 56 + 256 x 224 = 64512 <= 65536
constexpr int kMaxFold = 11;                           // d <= 11: every code an e4m3 normal (see above)
static_assert(kSmemBytes <= 227 * 1024, "v2 shared memory");
static_assert(kMmaStage % 1024 == 0 && kRawStage % 1024 == 0, "stages keep the 1024-byte swizzle alignment");

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "PF2_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra PF2_WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// OR of `v` over the 128 producer threads (named barrier 1; the consumers never use it).
__device__ __forceinline__ bool producer_any(bool v) {
  uint32_t r;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 q, %1, 0;\nbar.red.or.pred p, 1, 128, q;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(r)
      : "r"(uint32_t(v))
      : "memory");
  return r != 0;
}
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
__device__ __forceinline__ void st_shared_v4(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
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

// 8 nibbles (columns 0..7, even column in the low nibble) -> 8 e4m3 codes, exact. t0 / t1: the codes of the 8
// magnitudes (bytes 0..7) for this row's fold d. Magnitudes through one prmt per 4 codes (the nibbles' 3-bit
// magnitudes are already the prmt selectors; bit 3 of a selector would replicate the sign, so it is masked);
// signs through prmt's sign-replicate mode: byte k of (w << 4) has nibble 2k's sign as its top bit, byte k of w
// nibble 2k + 1's, so selectors 8..15 turn them into 0x00 / 0xFF bytes in column order.
__device__ __forceinline__ void expand8_e4m3(uint32_t w, uint32_t t0, uint32_t t1, uint32_t& lo, uint32_t& hi) {
  const uint32_t wm = w & 0x77777777u;
  const uint32_t ws4 = w << 4;
  const uint32_t mlo = prmt(t0, t1, wm), mhi = prmt(t0, t1, wm >> 16);
  const uint32_t slo = prmt(ws4, w, 0xD9C8u), shi = prmt(ws4, w, 0xFBEAu);
  lo = mlo | (slo & 0x80808080u);
  hi = mhi | (shi & 0x80808080u);
}

struct Item {
  int type;    // 128: 128 tokens x 128 columns; 64: 64 tokens x 256 columns
  int expert, m0, valid, n0;
};

// Work-list header written by build_tiles_kernel: [0] = 128-row tiles, [1] = 64-row tiles; records of 16 bytes
// {expert, first row, valid rows, 0} from int offset 4: cap 128-row records, then cap 64-row records.
__device__ __forceinline__ Item decode_item(const int* tl, int cap, int item, int nb128, int nb256) {
  const int c128 = tl[0] * nb128;
  const int4* rec = reinterpret_cast<const int4*>(tl + 4);
  Item it;
  int4 r;
  if (item < c128) {
    const int t = item / nb128;
    r = rec[t];
    it.type = 128;
    it.n0 = (item - t * nb128) * 128;
  } else {
    const int i = item - c128;
    const int t = i / nb256;
    r = rec[cap + t];
    it.type = 64;
    it.n0 = (i - t * nb256) * 256;
  }
  it.expert = r.x;
  it.m0 = r.y;
  it.valid = r.z;
  return it;
}

// One block: per group, 128-row tiles while more than 64 rows remain, then one 64-row tile; block-wide scans
// over chunks of 1024 groups keep the records in group order (deterministic).
__global__ void __launch_bounds__(1024) build_tiles_kernel(const int32_t* __restrict__ offsets,
                                                           const int32_t* __restrict__ ids, int groups, int cap,
                                                           int* __restrict__ tl) {
  __shared__ int wa[32], wb[32];
  __shared__ int carry[2];
  int4* rec = reinterpret_cast<int4*>(tl + 4);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  if (tid == 0) carry[0] = carry[1] = 0;
  __syncthreads();
  for (int base = 0; base < groups; base += 1024) {
    const int g = base + tid;
    int a = 0, b = 0, o = 0, r = 0, e = 0;
    if (g < groups) {
      o = offsets[g];
      r = offsets[g + 1] - o;
      e = ids[g];
      a = r / 128;
      int rem = r - 128 * a;
      if (rem > 64) {
        ++a;
        rem = 0;
      }
      b = rem > 0 ? 1 : 0;
    }
    int ia = a, ib = b;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int xa = __shfl_up_sync(0xFFFFFFFFu, ia, d), xb = __shfl_up_sync(0xFFFFFFFFu, ib, d);
      if (lane >= d) {
        ia += xa;
        ib += xb;
      }
    }
    if (lane == 31) {
      wa[warp] = ia;
      wb[warp] = ib;
    }
    __syncthreads();
    if (warp == 0) {
      int va = wa[lane], vb = wb[lane];
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int xa = __shfl_up_sync(0xFFFFFFFFu, va, d), xb = __shfl_up_sync(0xFFFFFFFFu, vb, d);
        if (lane >= d) {
          va += xa;
          vb += xb;
        }
      }
      wa[lane] = va;
      wb[lane] = vb;
    }
    __syncthreads();
    const int pa = carry[0] + (warp > 0 ? wa[warp - 1] : 0) + ia - a;
    const int pb = carry[1] + (warp > 0 ? wb[warp - 1] : 0) + ib - b;
    for (int i = 0; i < a; ++i) rec[pa + i] = make_int4(e, o + 128 * i, min(128, r - 128 * i), 0);
    if (b) rec[cap + pb] = make_int4(e, o + 128 * a, r - 128 * a, 0);
    __syncthreads();
    if (tid == 0) {
      carry[0] += wa[31];
      carry[1] += wb[31];
    }
    __syncthreads();
  }
  if (tid == 0) {
    tl[0] = carry[0];
    tl[1] = carry[1];
  }
}

template <bool kAct32>
__global__ void __launch_bounds__(kThreads, 1)
    mxfp4_prefill_v2_kernel(const uint8_t* __restrict__ Q, const float* __restrict__ xs,
                            const uint8_t* __restrict__ W, const uint8_t* __restrict__ WS, const int* __restrict__ tl,
                            int cap, float* __restrict__ y, int N, int K) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t s_base = dev::smem_u32(smem);
  const uint32_t s_raw = s_base + kS * kMmaStage;
  const uint32_t s_full = s_base + kBarOff, s_empty = s_full + 8 * kS;
  int* flags = reinterpret_cast<int*>(smem + kBarOff + 16 * kS);

  const int tid = threadIdx.x;
  const int nb128 = N / 128, nb256 = N / 256, KT = K / 128;
  const int items = tl[0] * nb128 + tl[1] * nb256;
  const int G = int(gridDim.x);
  const int my_items = int(blockIdx.x) < items ? (items - int(blockIdx.x) + G - 1) / G : 0;
  if (my_items == 0) return;  // uniform over the block: before any barrier use
  const int steps = my_items * KT;

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < kS; ++s) {
      mbar_init(s_full + 8 * s, 128);  // every producer thread arrives once per step
      mbar_init(s_empty + 8 * s, 8);   // lane 0 of each consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (tid >= 256) {
    // ------------------------------------------------------------------------------------------- producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    const int pt = tid - 256;
    const int64_t wrow_bytes = K / 2, srow_bytes = K / 32;
    // Three cursors over the block's step sequence: raw loads run 2 steps ahead, A loads 1 step ahead.
    int r_j = 0, r_kt = 0, a_j = 0, a_kt = 0, e_j = 0, e_kt = 0;
    Item r_it = decode_item(tl, cap, blockIdx.x, nb128, nb256);
    Item a_it = r_it;
    int e_type = r_it.type;

    auto load_raw = [&](int step) {
      const uint32_t slot = s_raw + uint32_t(step % kR) * kRawStage;
      const int nrows = r_it.type == 64 ? 2 : 1;
      const int64_t wr = int64_t(r_it.expert) * N + r_it.n0;
      for (int h = 0; h < nrows; ++h) {
        const int r = pt + 128 * h;
        const uint8_t* src = W + (wr + r) * wrow_bytes + r_kt * 64;
        const uint32_t dst = slot + uint32_t(r * 64);
        const int sw = (r >> 1) & 3;  // conflict-free 16-byte reads in expand (8 rows -> 8 bank groups)
#pragma unroll
        for (int c = 0; c < 4; ++c) dev::cp_async16(dst + uint32_t((c ^ sw) << 4), src + 16 * c);
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(slot + kRawNib + uint32_t(r * 4)),
                     "l"(WS + (wr + r) * srow_bytes + r_kt * 4));
      }
    };
    auto load_a = [&](int step) {
      const uint32_t st = s_base + uint32_t(step % kS) * kMmaStage;
      const int chunks = a_it.type == 128 ? 8 : 4;  // 128 or 64 rows x 8 chunks over 128 threads
      for (int i = 0; i < chunks; ++i) {
        const int id = pt + 128 * i;
        const int row = id >> 3, c = id & 7;
        const int src_row = a_it.m0 + min(row, a_it.valid - 1);
        dev::cp_async16(st + uint32_t(row * 128 + ((c ^ (row & 7)) << 4)),
                        Q + int64_t(src_row) * K + a_kt * 128 + c * 16, row < a_it.valid ? 16 : 0);
      }
    };
    auto advance = [&](int& j, int& kt, Item* it) {
      if (++kt == KT) {
        kt = 0;
        ++j;
        if (j < my_items && it) *it = decode_item(tl, cap, int(blockIdx.x) + j * G, nb128, nb256);
      }
    };

    // Prologue: commit group {raw 0, A 0}, then {raw 1}. Iteration s commits {raw s + 2, A s + 1}; waiting
    // for all but the newest group leaves raw s and A s landed.
    load_raw(0);
    load_a(0);  // stage 0 is free: first round
    dev::cp_async_commit();
    advance(r_j, r_kt, &r_it);
    advance(a_j, a_kt, &a_it);
    if (1 < steps) {
      load_raw(1);
      advance(r_j, r_kt, &r_it);
    }
    dev::cp_async_commit();

    for (int s = 0; s < steps; ++s) {
      if (s + 2 < steps) {
        load_raw(s + 2);
        advance(r_j, r_kt, &r_it);
      }
      if (s + 1 < steps) {
        const int s1 = s + 1;
        mbar_wait(s_empty + 8 * (s1 % kS), ((s1 / kS) & 1) ^ 1);  // consumers done with step s1 - kS
        load_a(s1);
        advance(a_j, a_kt, &a_it);
      }
      dev::cp_async_commit();
      dev::cp_async_wait<1>();

      // Expand step s into stage s % kS (freed by the wait above at iteration s - 1).
      const uint32_t st = s_base + uint32_t(s % kS) * kMmaStage;
      const uint32_t sb = st + kAStage, swsc = sb + kBStage;
      const uint32_t slot = s_raw + uint32_t(s % kR) * kRawStage;
      const int nrows = e_type == 64 ? 2 : 1;
      bool slow = false;
      for (int h = 0; h < nrows; ++h) {
        const int r = pt + 128 * h;
        uint32_t sw;
        asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(sw) : "r"(slot + kRawNib + uint32_t(r * 4)));
        const uint32_t e0 = sw & 0xFF, e1 = (sw >> 8) & 0xFF, e2 = (sw >> 16) & 0xFF, e3 = sw >> 24;
        const uint32_t emax = max(max(e0, e1), max(e2, e3));
        const uint32_t emin = min(min(e0, e1), min(e2, e3));
        const bool fold = emax - emin <= uint32_t(kMaxFold);
        slow |= !fold;
        const int rsw = (r >> 1) & 3;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t ej = (sw >> (8 * j)) & 0xFF;
          const uint32_t ref = fold ? emax : ej;
          const uint32_t d8 = (ref - ej) << 3;  // fold d, in units of the exponent field (<< 3)
          const uint32_t t0 = 0x6C686000u - d8 * 0x01010100u;  // codes of 0, .5, 1, 1.5 times 2^(6 - d)
          const uint32_t t1 = 0x7C787470u - d8 * 0x01010101u;  // codes of 2, 3, 4, 6 times 2^(6 - d)
          asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(swsc + uint32_t((j * 256 + r) * 4)), "f"(code_scale(ref))
                       : "memory");
          const uint4 raw = ld_shared_v4(slot + uint32_t(r * 64 + ((j ^ rsw) << 4)));
          uint32_t o[8];
          expand8_e4m3(raw.x, t0, t1, o[0], o[1]);
          expand8_e4m3(raw.y, t0, t1, o[2], o[3]);
          expand8_e4m3(raw.z, t0, t1, o[4], o[5]);
          expand8_e4m3(raw.w, t0, t1, o[6], o[7]);
          const uint32_t rowb = sb + uint32_t(r * 128);
          st_shared_v4(rowb + uint32_t(((2 * j) ^ (r & 7)) << 4), o[0], o[1], o[2], o[3]);
          st_shared_v4(rowb + uint32_t(((2 * j + 1) ^ (r & 7)) << 4), o[4], o[5], o[6], o[7]);
        }
      }
      slow = producer_any(slow);
      if (pt == 0) flags[s % kS] = slow ? 1 : 0;
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // st.shared / cp.async -> wgmma reads
      mbar_arrive(s_full + 8 * (s % kS));
      if (++e_kt == KT) {
        e_kt = 0;
        ++e_j;
        if (e_j < my_items) e_type = decode_item(tl, cap, int(blockIdx.x) + e_j * G, nb128, nb256).type;
      }
    }
  } else {
    // ------------------------------------------------------------------------------------------- consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
    const int wgc = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, q4 = lane % 4;
    const int xb = kAct32 ? K / 32 : K / 128;
    float acc[64], part[64];
    for (int j = 0; j < my_items; ++j) {
      const Item it = decode_item(tl, cap, int(blockIdx.x) + j * G, nb128, nb256);
      const uint32_t a_off = it.type == 128 ? uint32_t(wgc * 64 * 128) : 0u;
      const uint32_t b_off = it.type == 128 ? 0u : uint32_t(wgc * 128 * 128);
      const int wcol0 = it.type == 128 ? 0 : 128 * wgc;  // this warpgroup's first row of the B tile
      const int col0 = it.n0 + wcol0;
      const int rloc = (it.type == 128 ? 64 * wgc : 0) + 16 * warp + lane / 4;
      const int64_t xr0 = int64_t(it.m0 + min(rloc, it.valid - 1)) * xb;
      const int64_t xr1 = int64_t(it.m0 + min(rloc + 8, it.valid - 1)) * xb;
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] = 0.0f;

      for (int kt = 0; kt < KT; ++kt) {
        const int g = j * KT + kt;
        const int stage = g % kS;
        const uint32_t st = s_base + uint32_t(stage) * kMmaStage;
        const uint64_t da = pf::smem_desc(st + a_off);
        const uint64_t db = pf::smem_desc(st + kAStage + b_off);
        const float* wsc = reinterpret_cast<const float*>(smem + size_t(stage) * kMmaStage + kAStage + kBStage);
        // Activation scales: loaded before the wait so that their latency hides behind it.
        float4 x0, x1;
        if constexpr (kAct32) {
          // Scalar loads: the caller's xs need not be 16-byte aligned.
          x0 = make_float4(xs[xr0 + 4 * kt], xs[xr0 + 4 * kt + 1], xs[xr0 + 4 * kt + 2], xs[xr0 + 4 * kt + 3]);
          x1 = make_float4(xs[xr1 + 4 * kt], xs[xr1 + 4 * kt + 1], xs[xr1 + 4 * kt + 2], xs[xr1 + 4 * kt + 3]);
        } else {
          x0.x = xs[xr0 + kt];
          x1.x = xs[xr1 + kt];
        }
        mbar_wait(s_full + 8 * stage, (g / kS) & 1);
        const bool slow = kAct32 || flags[stage] != 0;
        if (!slow) {
          float2 wv[16];
#pragma unroll
          for (int i = 0; i < 16; ++i) wv[i] = *reinterpret_cast<const float2*>(wsc + wcol0 + 8 * i + 2 * q4);
          pf::fence_regs(part);
          wgmma::fence();
#pragma unroll
          for (int k = 0; k < 4; ++k) wgmma::m64n128k32_e4m3(part, da + 2 * k, db + 2 * k, k);
          pf::commit();
          pf::wait_all();
          pf::fence_regs(part);
          __syncwarp();
          if (lane == 0) mbar_arrive(s_empty + 8 * stage);
#pragma unroll
          for (int i = 0; i < 16; ++i) {
            acc[4 * i + 0] = fmaf(part[4 * i + 0], x0.x * wv[i].x, acc[4 * i + 0]);
            acc[4 * i + 1] = fmaf(part[4 * i + 1], x0.x * wv[i].y, acc[4 * i + 1]);
            acc[4 * i + 2] = fmaf(part[4 * i + 2], x1.x * wv[i].x, acc[4 * i + 2]);
            acc[4 * i + 3] = fmaf(part[4 * i + 3], x1.x * wv[i].y, acc[4 * i + 3]);
          }
        } else {
          // Per-32 promotion: every 32-wide K block with its own weight scale (and, on V4.1, activation scale).
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            pf::fence_regs(part);
            wgmma::fence();
            wgmma::m64n128k32_e4m3(part, da + 2 * k, db + 2 * k, 0);
            pf::commit();
            pf::wait_all();
            pf::fence_regs(part);
            float s0, s1;
            if constexpr (kAct32) {
              s0 = k == 0 ? x0.x : k == 1 ? x0.y : k == 2 ? x0.z : x0.w;
              s1 = k == 0 ? x1.x : k == 1 ? x1.y : k == 2 ? x1.z : x1.w;
            } else {
              s0 = x0.x;
              s1 = x1.x;
            }
            const float* wk = wsc + k * 256 + wcol0 + 2 * q4;
#pragma unroll
            for (int i = 0; i < 16; ++i) {
              const float2 w2 = *reinterpret_cast<const float2*>(wk + 8 * i);
              acc[4 * i + 0] = fmaf(part[4 * i + 0], s0 * w2.x, acc[4 * i + 0]);
              acc[4 * i + 1] = fmaf(part[4 * i + 1], s0 * w2.y, acc[4 * i + 1]);
              acc[4 * i + 2] = fmaf(part[4 * i + 2], s1 * w2.x, acc[4 * i + 2]);
              acc[4 * i + 3] = fmaf(part[4 * i + 3], s1 * w2.y, acc[4 * i + 3]);
            }
          }
          __syncwarp();
          if (lane == 0) mbar_arrive(s_empty + 8 * stage);
        }
      }

      // Epilogue straight from the fragments; the producer is already filling the next item's stages.
      const int r0 = rloc, r1 = rloc + 8;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const int col = col0 + 8 * i + 2 * q4;
        if (r0 < it.valid)
          *reinterpret_cast<float2*>(y + int64_t(it.m0 + r0) * N + col) = make_float2(acc[4 * i], acc[4 * i + 1]);
        if (r1 < it.valid)
          *reinterpret_cast<float2*>(y + int64_t(it.m0 + r1) * N + col) =
              make_float2(acc[4 * i + 2], acc[4 * i + 3]);
      }
    }
  }
}

// Host side. Resolves PrefillKernel::Auto (v1 unless DEEPINFER_PREFILL_KERNEL=fp8, read once per process) and
// launches v2 when it applies; returns false (nothing launched) otherwise.
bool wants_v2(PrefillKernel k) {
  if (k != PrefillKernel::Auto) return k == PrefillKernel::Fp8;
  static const bool env = [] {
    const char* v = std::getenv("DEEPINFER_PREFILL_KERNEL");
    return v && std::string(v) == "fp8";
  }();
  return env;
}

// Records capacity: 128-row tiles <= rows / 65 + 1 per group, 64-row tiles <= one per non-empty group.
int64_t tile_cap(int64_t rows, int groups) { return rows / 64 + std::min<int64_t>(groups, rows) + 1; }

bool launch(const uint8_t* q, const float* xs, int64_t rows, int act_block, const Fp4Experts& w,
            const int32_t* expert_ids, const int32_t* row_offsets, int groups, float* y, void* workspace,
            cudaStream_t stream) {
  if (!wants_v2(w.prefill)) return false;
  if (w.n % 256 != 0 || (act_block != 128 && act_block != 32)) return false;
  const int64_t cap = tile_cap(rows, groups);
  // The tile list lives in the caller's workspace (rows x k x 2 bytes, >= 16 + 32 cap for k >= 128).
  if (16 + 32 * cap > int64_t(mxfp4_prefill_workspace_bytes(rows, w.k))) return false;
  if (int64_t(w.experts) * w.n >= (int64_t(1) << 31) || rows >= (int64_t(1) << 31)) return false;
  int dev_id = 0, sms = 0;
  DI_CUDA_CHECK(cudaGetDevice(&dev_id));
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev_id));
  int* tl = static_cast<int*>(workspace);
  build_tiles_kernel<<<1, 1024, 0, stream>>>(row_offsets, expert_ids, groups, int(cap), tl);
  DI_CUDA_CHECK_LAUNCH("build_tiles_kernel");
  auto kernel = act_block == 32 ? mxfp4_prefill_v2_kernel<true> : mxfp4_prefill_v2_kernel<false>;
  DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  kernel<<<unsigned(sms), kThreads, kSmemBytes, stream>>>(q, xs, w.weight, w.scale, tl, int(cap), y, int(w.n),
                                                          int(w.k));
  DI_CUDA_CHECK_LAUNCH("mxfp4_prefill_v2_kernel");
  return true;
}

}  // namespace v2

}  // namespace

size_t mxfp4_prefill_workspace_bytes(int64_t rows, int64_t k) { return size_t(rows) * size_t(k) * 2; }

void mxfp4_grouped_gemm_prefill(const uint8_t* q, const float* xs, int64_t rows, int act_block, const Fp4Experts& w,
                                const int32_t* expert_ids, const int32_t* row_offsets, int groups,
                                int max_rows_per_group, float* y, void* workspace, cudaStream_t stream) {
  DI_CHECK(w.k % 128 == 0 && w.n % 128 == 0, "cuda::mxfp4_grouped_gemm_prefill: k = " + std::to_string(w.k) +
                                                  " and n = " + std::to_string(w.n) + " must be multiples of 128");
  DI_CHECK(act_block >= 32 && act_block % 32 == 0 && w.k % act_block == 0 && (act_block & (act_block - 1)) == 0,
           "cuda::mxfp4_grouped_gemm_prefill: activation block " + std::to_string(act_block) +
               " must be a power of two >= 32 dividing k");
  DI_CHECK(expert_ids && row_offsets && workspace, "cuda::mxfp4_grouped_gemm_prefill: ids, offsets and workspace");
  DI_CHECK(w.n < (int64_t(1) << 31) && w.k < (int64_t(1) << 31), "cuda::mxfp4_grouped_gemm_prefill: n or k too large");
  if (groups == 0 || max_rows_per_group == 0 || rows == 0) return;
  if (v2::launch(q, xs, rows, act_block, w, expert_ids, row_offsets, groups, y, workspace, stream)) return;
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
      a, w.weight, w.scale, expert_ids, row_offsets, m_tiles, y, int(w.n), int(w.k));
  DI_CUDA_CHECK_LAUNCH("mxfp4_prefill_kernel");
}

}  // namespace deepinfer::cuda
