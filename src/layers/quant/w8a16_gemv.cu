// W8A16 grouped linear (w8a16_gemv.h): V4's wo_a at decode, the FP8 weight streamed once and dequantized in
// registers. One warp per four weight rows; lane l reads 16 codes (16 bytes) at columns 16 l + 512 s of step s, so
// a warp load is 512 contiguous bytes of a row and a 16-code chunk lies inside one scale block. The chunk's 16
// products are summed in fp32, then scaled (a power of two: exact) into the row's fp32 accumulator; the lanes'
// accumulators meet in a fixed shuffle tree. Every token of a tile does the same operations in the same order, so
// a row's result does not depend on the tile size or on the other rows of the call (batch invariance).
#include "layers/quant/w8a16_gemv.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "cuda/blas.h"
#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/fast_div.h"
#include "cuda/l2_policy.cuh"
#include "cuda/launch.h"
#include "cuda/numerics_mode.h"

namespace deepinfer::cuda {

namespace {

constexpr int kGemvWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kRowsPerBlock = kGemvWarps * kRowsPerWarp;
constexpr int kChunk = 16;               // codes per lane per step
constexpr int kStepCols = 32 * kChunk;   // columns per warp step
constexpr int kMaxTokens = 4;            // tokens per pass over the weight
constexpr int kBatch = 2;                // steps whose loads are issued together at one token (the kernel says why)
// PDL prologue (cuda/launch.h): the first bytes of each of the warp's weight rows are pulled into L2 before the
// wait, while the predecessor drains (8 MB over V4's wo_a: about what HBM delivers in a small kernel's tail).
constexpr int kPrefetchRowBytes = 1024;

__device__ __forceinline__ void e4m3x16_to_float(const uint4& raw, float (&f)[16]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw pair =
          __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(words[i] >> (16 * h)), __NV_E4M3);  // exact
      const float2 v = __half22float2(__half2(pair));
      f[4 * i + 2 * h] = v.x;
      f[4 * i + 2 * h + 1] = v.y;
    }
  }
}

struct GemvArgs {
  const bf16* x;
  const uint8_t* w;
  const uint8_t* scale;
  bf16* y;
  int64_t rows;
  int n, k, n_group, ldx;
  int block_log2, scale_cols;
  FastDiv group;  // by n_group: the one-token kernel's group of a row after pdl_wait without a run-time division
};

// grid (token tiles, row blocks): the tiles of one weight row block are neighbours in launch order, so a weight
// tile read by the first tile's block is still in L2 for the others. Each step decodes the warp's 4 rows once and
// applies them to every token of the tile (the activation chunk is read once per step for 4 rows). kEvictFirst: the
// weight codes read evict_first in L2 (cuda/l2_policy.cuh; the same values).
// A step's 16 x values (columns c .. c + 15 of one token's row) from their two bf16x8 chunks.
__device__ __forceinline__ void x_chunk(const dev::Bf16x8& lo8, const dev::Bf16x8& hi8, float (&xv)[16]) {
  float lo[8], hi[8];
  dev::unpack8(lo8, lo);
  dev::unpack8(hi8, hi);
#pragma unroll
  for (int e = 0; e < 8; ++e) xv[e] = lo[e], xv[8 + e] = hi[e];
}

template <int kTokens, bool kEvictFirst>
__global__ void __launch_bounds__(kGemvWarps * 32) w8a16_gemv_kernel(const GemvArgs a) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t0 = int64_t(blockIdx.x) * kTokens;
  const int r0 = (int(blockIdx.y) * kGemvWarps + warp) * kRowsPerWarp;
  if (r0 < a.n && lane < kRowsPerWarp)  // k % 128 == 0: 16-byte aligned rows and sizes
    prefetch_l2_bulk(a.w + int64_t(r0 + lane) * a.k, unsigned(min(a.k, kPrefetchRowBytes)));
  pdl_wait();  // x (the attention output) is the predecessor's; y may still be read by an earlier kernel
  if (r0 >= a.n) return;  // warp-uniform, nothing block-wide follows
  // n_group % kRowsPerWarp == 0 and r0 % kRowsPerWarp == 0: the warp's rows are all in group g. One token: g by
  // FastDiv (0 <= r0 < 2^31), not the ~25 dependent instructions of a run-time division on the path to the first load.
  const bf16* xg = a.x + int64_t(kTokens == 1 ? a.group.div(r0) : r0 / a.n_group) * a.k;
  const uint8_t* w = a.w + int64_t(r0) * a.k;

  float acc[kRowsPerWarp][kTokens];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr)
#pragma unroll
    for (int t = 0; t < kTokens; ++t) acc[rr][t] = 0.0f;
  uint64_t policy = 0;
  if constexpr (kEvictFirst) policy = dev::l2_evict_first_policy();

  if constexpr (kTokens == 1) {
    // One token (decode at batch 1): a batch of kBatch steps, its weight codes, scale and x chunks loaded in one loop
    // and applied in a second, so that all of a batch's loads are issued before the first instruction that reads one:
    // one round trip per batch. In the loop below (#pragma unroll 2) ptxas issued 12 of an iteration's 20 loads, then
    // the first step's code conversions (F2FP, which wait for the codes), then the other 8: two dependent round trips
    // per two steps (SASS of w8a16_gemv_kernel<1, true>, sm_90a; 13 and 7 in <1, false>). The scale stays a byte
    // until the second loop: converted in the first, step 0's conversion sat before step 1's loads (SASS). One scale
    // per step, not one per row: the warp's 4 rows (r0 % 4 == 0) lie in one scale block (16 to 128 rows,
    // check_grouped), so the 4 loads read the same byte. 14 loads a batch, all before the first F2FP; 86 registers
    // (94 before), no spills, 5 blocks per SM either way. Each accumulator takes the same products in the same order
    // (per step, p over the chunk's 16 columns in order, then acc += p * s): the same bits. wo_a at V4-Flash's shape,
    // one row, 8 weight copies past L2, graph replay (H100): 12.14 -> 11.77 us.
    // The tiles of 2 and 4 tokens keep the loop below: the same batched form (rows decoded one at a time, 128
    // registers at 2 tokens, 4 blocks per SM as before) ran wo_a at 2 rows in 13.26 us, the loop below in 12.55.
    // No `t0 < rows` tests: one token a tile, grid.x = rows, so t0 < rows (they kept a second, all-zero-x copy of
    // the math in SASS; 85 / 82 registers now). Keep this order (a batch's loads, then its math): rotated (weights
    // loaded at the loop's bottom, x at its top: session53_gemv_fastdiv_halves.patch), ptxas waited on the weights'
    // scoreboard at the loop's head before issuing x, two round trips a batch.
    for (int c0 = lane * kChunk; c0 < a.k; c0 += kBatch * kStepCols) {
      uint4 raw[kBatch][kRowsPerWarp];
      uint8_t sraw[kBatch];
      dev::Bf16x8 xraw[kBatch][2];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int c = c0 + u * kStepCols;
        if (c >= a.k) break;
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; ++rr) {
          const uint4* codes = reinterpret_cast<const uint4*>(w + int64_t(rr) * a.k + c);
          if constexpr (kEvictFirst)
            raw[u][rr] = dev::ldg_with_policy(codes, policy);
          else
            raw[u][rr] = __ldg(codes);
        }
        sraw[u] = __ldg(a.scale + (r0 >> a.block_log2) * a.scale_cols + (c >> a.block_log2));
        const auto* src = reinterpret_cast<const dev::Bf16x8*>(xg + t0 * a.ldx + c);
        xraw[u][0] = src[0];
        xraw[u][1] = src[1];
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int c = c0 + u * kStepCols;
        if (c >= a.k) break;
        const float s = dev::e8m0_to_float(sraw[u]);
        float xv[16];
        x_chunk(xraw[u][0], xraw[u][1], xv);
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; ++rr) {
          float wf[16];
          e4m3x16_to_float(raw[u][rr], wf);
          float p = 0.0f;
#pragma unroll
          for (int e = 0; e < 16; ++e) p += wf[e] * xv[e];
          acc[rr][0] += p * s;
        }
      }
    }
  } else {
#pragma unroll 2
    for (int c = lane * kChunk; c < a.k; c += kStepCols) {
      uint4 raw[kRowsPerWarp];
      float s[kRowsPerWarp];
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const uint4* codes = reinterpret_cast<const uint4*>(w + int64_t(rr) * a.k + c);
        if constexpr (kEvictFirst)
          raw[rr] = dev::ldg_with_policy(codes, policy);
        else
          raw[rr] = __ldg(codes);
        s[rr] = dev::e8m0_to_float(__ldg(a.scale + ((r0 + rr) >> a.block_log2) * a.scale_cols + (c >> a.block_log2)));
      }
      float wf[kRowsPerWarp][16];
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) e4m3x16_to_float(raw[rr], wf[rr]);
#pragma unroll
      for (int t = 0; t < kTokens; ++t) {
        float xv[16];
        if (t0 + t < a.rows) {
          const auto* src = reinterpret_cast<const dev::Bf16x8*>(xg + (t0 + t) * a.ldx + c);
          x_chunk(src[0], src[1], xv);
        } else {
#pragma unroll
          for (int e = 0; e < 16; ++e) xv[e] = 0.0f;
        }
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; ++rr) {
          float p = 0.0f;
#pragma unroll
          for (int e = 0; e < 16; ++e) p += wf[rr][e] * xv[e];
          acc[rr][t] += p * s[rr];
        }
      }
    }
  }
  pdl_launch_dependents();  // the weight stream is done; the reductions and stores remain

#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr)
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      const float v = dev::warp_sum(acc[rr][t]);
      if (lane == 0 && (kTokens == 1 || t0 + t < a.rows)) a.y[(t0 + t) * a.n + r0 + rr] = __float2bfloat16(v);
    }
}

// fp8_dequantize_bf16: out[r, c] = e4m3(w[r, c]) * scale (exact in bf16), 16 codes per thread; grid (column
// blocks, rows).
__global__ void fp8_dequantize_bf16_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ scale, int k,
                                           int block_log2, int scale_cols, bf16* __restrict__ out) {
  const int c = (int(blockIdx.x) * blockDim.x + threadIdx.x) * kChunk;
  if (c >= k) return;
  const int64_t i = int64_t(blockIdx.y) * k + c;
  const float s = dev::e8m0_to_float(scale[(int(blockIdx.y) >> block_log2) * scale_cols + (c >> block_log2)]);
  float f[16];
  e4m3x16_to_float(*reinterpret_cast<const uint4*>(w + i), f);
  float lo[8], hi[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) lo[e] = f[e] * s, hi[e] = f[8 + e] * s;
  reinterpret_cast<dev::Bf16x8*>(out + i)[0] = dev::pack8(lo);
  reinterpret_cast<dev::Bf16x8*>(out + i)[1] = dev::pack8(hi);
}

int log2_exact(int v) {
  int l = 0;
  while ((1 << l) < v) ++l;
  return l;
}

void check_grouped(const Fp8Linear& w, int groups, const char* what) {
  DI_CHECK(w.weight && w.scale, std::string("cuda::") + what + ": the weight has no checkpoint-layout codes / scales");
  DI_CHECK(groups > 0 && w.n % groups == 0 && (w.n / groups) % kRowsPerWarp == 0,
           std::string("cuda::") + what + ": " + std::to_string(w.n) + " weight rows do not split into " +
               std::to_string(groups) + " groups of a multiple of " + std::to_string(kRowsPerWarp));
  DI_CHECK(w.k % 128 == 0, std::string("cuda::") + what + ": k = " + std::to_string(w.k) + " is not a multiple of 128");
  DI_CHECK(w.n * groups < (int64_t(1) << 31) && w.n * w.k < (int64_t(1) << 40) && w.k * groups < (int64_t(1) << 31),
           std::string("cuda::") + what + ": shape too large");
  DI_CHECK(w.block == 16 || w.block == 32 || w.block == 64 || w.block == 128,
           std::string("cuda::") + what + ": scale block " + std::to_string(w.block) + " is not 16, 32, 64 or 128");
}

}  // namespace

void w8a16_grouped_gemv(const bf16* x, int64_t rows, const Fp8Linear& w, int groups, bf16* y, cudaStream_t stream) {
  check_grouped(w, groups, "w8a16_grouped_gemv");
  if (rows == 0) return;
  const GemvArgs a{x,
                   w.weight,
                   w.scale,
                   y,
                   rows,
                   int(w.n),
                   int(w.k),
                   int(w.n / groups),
                   int(groups * w.k),
                   log2_exact(w.block),
                   int((w.k + w.block - 1) / w.block),
                   FastDiv(int(std::max<int64_t>(w.n / groups, 1)))};  // FastDiv needs >= 1; n may be 0
  const int tokens = rows <= 1 ? 1 : rows <= 2 ? 2 : kMaxTokens;
  const dim3 grid{unsigned((rows + tokens - 1) / tokens), unsigned((w.n + kRowsPerBlock - 1) / kRowsPerBlock)};
  DI_CHECK(grid.y <= 65535, "cuda::w8a16_grouped_gemv: " + std::to_string(w.n) + " weight rows are too many");
  const unsigned threads = kGemvWarps * 32;
  auto pick = [tokens](auto evict_first) {
    constexpr bool kEvict = decltype(evict_first)::value;
    return tokens == 1   ? w8a16_gemv_kernel<1, kEvict>
           : tokens == 2 ? w8a16_gemv_kernel<2, kEvict>
                         : w8a16_gemv_kernel<kMaxTokens, kEvict>;
  };
  // evict_first (cuda/l2_policy.h) where one token tile reads each weight byte once (more tiles read a weight tile
  // again from L2).
  auto kernel = dense_weights_evict_first() && grid.x == 1 ? pick(std::true_type{}) : pick(std::false_type{});
  DI_CUDA_CHECK(launch(kernel, grid, dim3(threads), 0, stream, a));
}

void w8a16_grouped_linear(cublasHandle_t blas, const bf16* x, int64_t rows, const Fp8Linear& w, const bf16* w_bf16,
                          int groups, bf16* y, cudaStream_t stream) {
  if (rows <= kW8A16GemvMaxRows && !batch_invariant()) {
    w8a16_grouped_gemv(x, rows, w, groups, y, stream);
    return;
  }
  DI_CHECK(w_bf16 != nullptr && groups > 0 && w.n % groups == 0,
           "cuda::w8a16_grouped_linear: " + std::to_string(rows) + " rows take gemm_bf16, which needs the bf16 weight");
  const int64_t n_group = w.n / groups;
  gemm_bf16(blas, x, groups * w.k, w_bf16, w.k, y, OutType::BF16, w.n, rows, n_group, w.k, stream, groups, w.k,
            n_group * w.k, n_group);
}

void fp8_dequantize_bf16(const Fp8Linear& w, bf16* out, cudaStream_t stream) {
  DI_CHECK(w.weight && w.scale && w.k % kChunk == 0 && w.n <= 65535 &&
               (w.block == 16 || w.block == 32 || w.block == 64 || w.block == 128),
           "cuda::fp8_dequantize_bf16: needs codes and scales, k % 16 == 0, n <= 65535 and a block of 16 .. 128");
  if (w.n == 0) return;
  const dim3 grid{unsigned((w.k / kChunk + 255) / 256), unsigned(w.n)};
  fp8_dequantize_bf16_kernel<<<grid, 256, 0, stream>>>(w.weight, w.scale, int(w.k), log2_exact(w.block),
                                                      int((w.k + w.block - 1) / w.block), out);
  DI_CUDA_CHECK_LAUNCH("fp8_dequantize_bf16_kernel");
}

}  // namespace deepinfer::cuda
