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

#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/kernels.h"
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

__device__ __forceinline__ uint64_t smem_desc(uint32_t saddr) {
  uint64_t d = 0;
  d |= uint64_t((saddr & 0x3FFFFu) >> 4);
  d |= uint64_t(1) << 16;
  d |= uint64_t(1024 >> 4) << 32;
  d |= uint64_t(1) << 62;  // 128-byte swizzle
  return d;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void fence_regs(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void cp_async4(uint32_t smem_addr, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr), "l"(gmem));
}

// D (64 x 128 fp32) += A (64 x 16 bf16, smem, K-major) * B (128 x 16 bf16, smem, K-major)^T.
__device__ __forceinline__ void wgmma_m64n128k16_bf16(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},"
      " %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(accumulate));
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
    wgmma_wait_all();                   // this warpgroup's tile kt - 1 is done
    fence_regs(acc);
    __syncthreads();                    // tile kt complete everywhere; stage / buffer of kt - 1 free
    if (kt + kStages - 1 < k_tiles) load_tile(kt + kStages - 1, (kt + kStages - 1) % kStages);
    dev::cp_async_commit();

    const uint32_t a_base = dev::smem_u32(stages + (kt % kStages) * kStageBytes + wg * 64 * 128);
    const uint32_t b_base = dev::smem_u32(bop + (kt % 2) * kOpBytes);
    fence_regs(acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      const uint32_t off = uint32_t((kk / 4) * kPanel + (kk % 4) * 32);
      wgmma_m64n128k16_bf16(acc, smem_desc(a_base + off), smem_desc(b_base + off), (kt > 0 || kk > 0) ? 1 : 0);
    }
    wgmma_commit();
  }
  fence_regs(acc);
  wgmma_wait_all();
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
