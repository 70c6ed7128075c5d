// The decode-shaped block-scaled GEMM shared by the FP8 linears (layers/quant/fp8_gemm.cu) and the MXFP4 experts
// (layers/moe/mxfp4_experts.cu). With a handful of tokens the weight read is the whole cost (algorithms.md §3.6:
// decode is memory-bound), so the kernel streams each weight byte once and lets the tensor cores do the
// arithmetic with the operands swapped: 16 weight rows are the M side of mma.sync m16n8k16, 8 tokens its N side,
// so no tile is padded to 64 tokens.
//
// Arithmetic: Hopper has no FP8 mma.sync of its own (the e4m3 form is lowered to f16 HMMA plus conversions, and
// the conversions are then repeated for every token group), so the kernel widens each weight fragment to f16
// once and reuses it for all token groups. FP8 weights go through cvt.f16x2.e4m3x2; MXFP4 nibbles are widened
// with integer bit moves (no lookup, no conversion instruction): an e2m1 nibble's 3 magnitude bits shifted
// into an f16's exponent / mantissa fields are the value times 2^-14 (normal and subnormal alike), and that
// power of two goes into the weight scale.
// f16 products are exact in the fp32 accumulators, and each 32-wide K step is scaled by its power-of-two weight
// and activation scales before it joins the fp32 sum, so the result is the exact fp32 sum up to ordering.
//
// K order inside one step: the reduction over K does not care which physical column sits in which logical
// slot, as long as the weight (A) and activation (B) fragments agree. Thread (g = lane / 4, c = lane % 4)
// takes the 8 contiguous physical columns k0 + 8c .. k0 + 8c + 7 of its rows and tokens and pairs them the way
// its widening produces them (FP8: (0,1) (2,3) (4,5) (6,7); MXFP4: (0,4) (1,5) (2,6) (3,7), the nibbles 16 bits
// apart); the activation bytes are permuted into the same pairs. The two k16 mmas of a step then cover exactly
// k0 .. k0 + 31, the unit of every FP8 (32 / 128) and MXFP4 (32) scale.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/launch.h"

namespace deepinfer::cuda::skinny {

enum class WeightFormat { FP8, MXFP4 };

struct Args {
  const uint8_t* q = nullptr;   // activations [rows, k] e4m3
  const float* xs = nullptr;    // activation scales [rows, k / act_block]
  int act_block_log2 = 7;
  const uint8_t* w = nullptr;   // FP8: [n, k]; MXFP4: [experts, n, k / 2]
  const uint8_t* ws = nullptr;  // FP8: [ceil(n / w_block), ceil(k / w_block)] e8m0; MXFP4: [experts, n, k / 32]
  int w_block_log2 = 7;         // FP8 block (128 or 32); MXFP4: 5
  int n = 0, k = 0;
  const int32_t* expert_ids = nullptr;   // null: one group, rows [0, rows)
  const int32_t* row_offsets = nullptr;  // [groups + 1]
  int rows = 0;
  void* y = nullptr;                     // [rows, n]
  // Null: row r of the product reads row r of q / xs. Else row_index[r]: the rows are gathered on the fly (the MoE
  // reads x's FP8 rows in expert order without copying them there first); y keeps the product's row order.
  const int32_t* row_index = nullptr;
};

// The q / xs row that row r of the product reads.
__device__ __forceinline__ int64_t act_row(const Args& a, int r) { return a.row_index ? a.row_index[r] : r; }

constexpr int kWarps = 8;  // the K range is split across the warps of a block, reduced through shared memory
constexpr int kRowsPerBlock = 16;

// Four e4m3 bytes to two f16x2 words (byte 0 -> low half of the first word), exact.
__device__ __forceinline__ void e4m3x4_to_f16x4(uint32_t v, uint32_t& lo, uint32_t& hi) {
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\ncvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(v));
}

// d = A * B (+ d when accumulate): f16 operands, fp32 accumulators (PTX ISA "mma.m16n8k16" fragments).
template <bool kAccumulate>
__device__ __forceinline__ void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
  if constexpr (kAccumulate) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %10, %10, %10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
  }
}

// One weight row's 8 columns of a K step as four f16x2 words, in the format's column pairing, and the power of
// two by which the widened values are too small (folded into the weight scale).
template <WeightFormat F>
struct Format;
template <>
struct Format<WeightFormat::FP8> {
  static constexpr int kUnroll = 4;  // 4 K steps x 32 bytes: 128 contiguous bytes of each weight row per pass
  static constexpr float kUnscale = 1.0f;
  using Raw = uint2;
  static __device__ __forceinline__ Raw load(const uint8_t* row, int k) {
    return __ldg(reinterpret_cast<const uint2*>(row + k));
  }
  // e4m3 -> f16 through the conversion unit here: measured faster than the bit moves for one byte per value
  // (bench/gpu/NOTES.md, runs 3 and 4). Columns in natural pairs (0,1) (2,3) (4,5) (6,7).
  static __device__ __forceinline__ void widen(Raw v, uint32_t (&h)[4]) {
    e4m3x4_to_f16x4(v.x, h[0], h[1]);
    e4m3x4_to_f16x4(v.y, h[2], h[3]);
  }
  static __device__ __forceinline__ void widen_x(uint2 x, uint32_t (&h)[4]) { widen(x, h); }
};
template <>
struct Format<WeightFormat::MXFP4> {
  static constexpr int kUnroll = 8;  // 8 K steps x 16 bytes: 128 contiguous bytes of each weight row per pass
  static constexpr float kUnscale = 16384.0f;  // 2^14
  using Raw = uint32_t;
  static __device__ __forceinline__ Raw load(const uint8_t* row, int k) {
    return __ldg(reinterpret_cast<const uint32_t*>(row + k / 2));
  }
  // Nibbles j and j + 4 (16 bits apart) into one f16x2: magnitude << 9, sign to bit 15 of its half.
  static __device__ __forceinline__ void widen(Raw v, uint32_t (&h)[4]) {
    h[0] = ((v << 9) & 0x0E000E00u) | ((v << 12) & 0x80008000u);
    h[1] = ((v << 5) & 0x0E000E00u) | ((v << 8) & 0x80008000u);
    h[2] = ((v << 1) & 0x0E000E00u) | ((v << 4) & 0x80008000u);
    h[3] = ((v >> 3) & 0x0E000E00u) | (v & 0x80008000u);
  }
  static __device__ __forceinline__ void widen_x(uint2 x, uint32_t (&h)[4]) {
    e4m3x4_to_f16x4(__byte_perm(x.x, x.y, 0x5140), h[0], h[1]);  // columns (0,4) (1,5)
    e4m3x4_to_f16x4(__byte_perm(x.x, x.y, 0x7362), h[2], h[3]);  // columns (2,6) (3,7)
  }
};

__device__ __forceinline__ void store_out(float* y, int64_t i, float v) { y[i] = v; }
__device__ __forceinline__ void store_out(__nv_bfloat16* y, int64_t i, float v) { y[i] = __float2bfloat16_rn(v); }

// Grid: x = ceil(n / 16) weight row tiles, y = groups. TG = token groups of 8 that share one pass over the
// weights; a group with more rows makes more passes (the weight tile is then an L2 hit).
template <WeightFormat F, int TG, class OutT>
__global__ void __launch_bounds__(kWarps * 32) skinny_gemm_kernel(Args a) {
  using Fmt = Format<F>;
  // K steps per pass; MXFP4's 8 are halved for wide token groups, whose accumulators need the registers.
  constexpr int U = TG >= 4 && Fmt::kUnroll > 4 ? Fmt::kUnroll / 2 : Fmt::kUnroll;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int N = a.n, K = a.k;
  const int n0 = blockIdx.x * kRowsPerBlock;

  int row_begin = 0, row_end = a.rows;
  const uint8_t* w = a.w;
  const uint8_t* ws = a.ws;
  pdl_wait();  // PDL (cuda/launch.h): groups, activations and the output are the predecessors'
  if (a.expert_ids) {
    row_begin = a.row_offsets[blockIdx.y];
    row_end = a.row_offsets[blockIdx.y + 1];
    const int64_t e = a.expert_ids[blockIdx.y];
    w += e * N * (K / 2);
    ws += e * N * (K / 32);
  }
  if (row_begin >= row_end) return;  // the whole block leaves together

  // This thread's two weight rows (clamped for the loads; rows past n are never stored) and their scale rows.
  const int r0 = min(n0 + g, N - 1), r1 = min(n0 + g + 8, N - 1);
  const int64_t row_bytes = F == WeightFormat::FP8 ? K : K / 2;
  const uint8_t* w0 = w + r0 * row_bytes;
  const uint8_t* w1 = w + r1 * row_bytes;
  const int sb = a.w_block_log2;
  const int64_t scale_row = F == WeightFormat::FP8 ? int64_t((K + (1 << sb) - 1) >> sb) : int64_t(K / 32);
  const uint8_t* ws0 = ws + (F == WeightFormat::FP8 ? int64_t(r0 >> sb) : int64_t(r0)) * scale_row;
  const uint8_t* ws1 = ws + (F == WeightFormat::FP8 ? int64_t(r1 >> sb) : int64_t(r1)) * scale_row;
  const int steps = K / 32;
  const int s_begin = steps * warp / kWarps, s_end = steps * (warp + 1) / kWarps;
  const int xb = a.act_block_log2;
  const int x_blocks = K >> xb;

  __shared__ float partial[kWarps][TG * 4][32];

  for (int m0 = row_begin; m0 < row_end; m0 += 8 * TG) {
    // Per token group: the row this thread feeds into the B fragment, and the two rows of its accumulators
    // (clamped to a real row: their codes are finite, and a zero scale removes them).
    const uint8_t* xrow[TG];
    const float* xs0[TG];
    const float* xs1[TG];
    float live0[TG], live1[TG];
#pragma unroll
    for (int t = 0; t < TG; ++t) {
      const int mb = m0 + t * 8 + g, mo = m0 + t * 8 + 2 * c;
      xrow[t] = a.q + act_row(a, min(mb, row_end - 1)) * K + 8 * c;
      xs0[t] = a.xs + act_row(a, min(mo, row_end - 1)) * x_blocks;
      xs1[t] = a.xs + act_row(a, min(mo + 1, row_end - 1)) * x_blocks;
      live0[t] = mo < row_end ? 1.0f : 0.0f;
      live1[t] = mo + 1 < row_end ? 1.0f : 0.0f;
    }
    float acc[TG][4];
#pragma unroll
    for (int t = 0; t < TG; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;

    for (int s = s_begin; s < s_end; s += U) {
      // All weight loads of the pass first: U x 2 independent loads per thread in flight.
      typename Fmt::Raw raw0[U], raw1[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (s + u < s_end) {
          const int k = (s + u) * 32 + 8 * c;
          raw0[u] = Fmt::load(w0, k);
          raw1[u] = Fmt::load(w1, k);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (s + u < s_end) {
          const int k0 = (s + u) * 32;
          const float sw0 = dev::e8m0_to_float(__ldg(ws0 + (k0 >> sb))) * Fmt::kUnscale;
          const float sw1 = dev::e8m0_to_float(__ldg(ws1 + (k0 >> sb))) * Fmt::kUnscale;
          uint32_t h0[4], h1[4];  // rows g and g + 8 as f16 pairs, widened once for all token groups
          Fmt::widen(raw0[u], h0);
          Fmt::widen(raw1[u], h1);
#pragma unroll
          for (int t = 0; t < TG; ++t) {
            uint32_t x[4];
            Fmt::widen_x(__ldg(reinterpret_cast<const uint2*>(xrow[t] + k0)), x);
            float d[4];
            // Logical k 0-15 <- column pairs 0 and 1 of every thread, k 16-31 <- pairs 2 and 3.
            mma_f16<false>(d, h0[0], h1[0], h0[1], h1[1], x[0], x[1]);
            mma_f16<true>(d, h0[2], h1[2], h0[3], h1[3], x[2], x[3]);
            const float sx0 = __ldg(xs0[t] + (k0 >> xb)) * live0[t];
            const float sx1 = __ldg(xs1[t] + (k0 >> xb)) * live1[t];
            acc[t][0] += d[0] * (sw0 * sx0);
            acc[t][1] += d[1] * (sw0 * sx1);
            acc[t][2] += d[2] * (sw1 * sx0);
            acc[t][3] += d[3] * (sw1 * sx1);
          }
        }
      }
    }
    pdl_launch_dependents();  // this pass's weight stream is done (a hint: dependents still wait for the grid)

#pragma unroll
    for (int t = 0; t < TG; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[warp][t * 4 + i][lane] = acc[t][i];
    __syncthreads();
    // Fixed summation order over the warps: the result does not depend on scheduling (batch invariance).
    auto* y = static_cast<OutT*>(a.y);
    for (int o = warp; o < TG * 4; o += kWarps) {
      float sum = 0.0f;
#pragma unroll
      for (int w2 = 0; w2 < kWarps; ++w2) sum += partial[w2][o][lane];
      const int t = o / 4, i = o % 4;
      const int n = n0 + g + (i >= 2 ? 8 : 0);
      const int m = m0 + t * 8 + 2 * c + (i & 1);
      if (n < N && m < row_end) store_out(y, int64_t(m) * N + n, sum);
    }
    __syncthreads();
  }
}

inline int log2_exact(int v) {
  int l = 0;
  while ((1 << l) < v) ++l;
  return l;
}

// Host-side launch; TG from the largest group. pdl: programmatic dependent launch (cuda/launch.h; fp8_gemm), off
// for the MoE's launches.
template <WeightFormat F, class OutT>
inline void launch_skinny(const Args& a, int groups, int64_t max_rows, cudaStream_t stream, bool pdl = false) {
  LaunchSpec spec;
  spec.grid = dim3(unsigned((a.n + kRowsPerBlock - 1) / kRowsPerBlock), unsigned(groups));
  spec.block = dim3(kWarps * 32);
  spec.stream = stream;
  spec.pdl = pdl;
  auto kernel = max_rows <= 8    ? skinny_gemm_kernel<F, 1, OutT>
                : max_rows <= 16 ? skinny_gemm_kernel<F, 2, OutT>
                : max_rows <= 32 ? skinny_gemm_kernel<F, 4, OutT>
                                 : skinny_gemm_kernel<F, 8, OutT>;
  DI_CUDA_CHECK(launch(spec, kernel, a));
}

}  // namespace deepinfer::cuda::skinny
