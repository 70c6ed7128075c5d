// Block-cooperative device steps that turn a vector held in shared memory into the stored form of a V4 cache
// row (model-spec.md §2 "RoPE", "Fake-quant"; §3 "Compressor", "Lightning indexer"): RoPE on the trailing
// channels, the orthonormal Hadamard rotation, FP4 (e2m1, ue8m0 scale, block 32) and FP8 (e4m3, ue8m0 scale,
// ragged blocks of 64). They are the CUDA twins of Rope::apply, hadamard_transform, fp4_fake_quant and
// fp8_fake_quant_ragged, written so that the same input gives bit-identical output: every step performs the
// same IEEE fp32 operations in the same order (the _rn intrinsics keep nvcc from contracting them into FMAs,
// which the x86 reference build never does). Only sincosf can differ from the host libm by an ulp.
//
// Every function must be called by all threads of the block (blockDim.x a multiple of 32) and ends with a
// barrier, so the next step may read what it wrote. Only .cu files include this.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/device_util.cuh"
#include "layers/attention/kv_record.h"

namespace deepinfer::cuda::finish {

// Sum over the whole block, returned to every thread. `scratch` holds 32 floats. Every thread adds the warp
// partials in the same order, so all of them hold the same value.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = dev::warp_sum(v);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, warps = int(blockDim.x) / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  __syncthreads();  // scratch may be reused after the return
  return total;
}

using dev::round_bf16;  // device_util.cuh's: the one definition of the reference's bf16 rounding

// e4m3fn, round to nearest even, saturating at ±448 (core/dtype.h float_to_e4m3); every e4m3 value is a half.
__device__ __forceinline__ float round_e4m3(float x) {
  const __nv_fp8_storage_t code = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3)));
}

// e2m1 grid {0, .5, 1, 1.5, 2, 3, 4, 6}, nearest with ties to the even code, saturating at 6 (core/dtype.h
// float_to_e2m1). The thresholds are the midpoints; a midpoint goes to the neighbour with the even code
// (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4). The sign is kept, -0 included.
__device__ __forceinline__ float round_e2m1(float x) {
  const float a = fminf(fabsf(x), 6.0f);
  float r;
  if (a <= 0.25f) r = 0.0f;
  else if (a < 0.75f) r = 0.5f;
  else if (a <= 1.25f) r = 1.0f;
  else if (a < 1.75f) r = 1.5f;
  else if (a <= 2.5f) r = 2.0f;
  else if (a < 3.5f) r = 3.0f;
  else if (a <= 5.0f) r = 4.0f;
  else r = 6.0f;
  return copysignf(r, x);
}

// Pair i of an interleaved RoPE (model-spec §2) rotated by float(pos) * freq, like Rope::apply (fp32 angle, accurate
// sincosf, a*c - b*s and a*s + b*c without FMA).
__device__ __forceinline__ void rope_rotate_pair(float* v, int i, int pos, float freq) {
  const float angle = __fmul_rn(float(pos), freq);
  float s, c;
  sincosf(angle, &s, &c);
  const float a = v[2 * i], b = v[2 * i + 1];
  v[2 * i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  v[2 * i + 1] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
}

// Interleaved RoPE on v[0, rope_dim): pair i rotates by float(pos) * inv_freq[i].
__device__ __forceinline__ void rope_slice(float* v, int rope_dim, int pos, const float* __restrict__ inv_freq) {
  for (int i = int(threadIdx.x); i < rope_dim / 2; i += int(blockDim.x)) rope_rotate_pair(v, i, pos, inv_freq[i]);
  __syncthreads();
}

// rope_slice with the thread's first frequency (inv_freq[threadIdx.x], read when threadIdx.x < rope_dim / 2) loaded
// by the caller, which can then issue that load and the position's before its own staging (query_finish_kernel).
// The same operations on the same values.
__device__ __forceinline__ void rope_slice(float* v, int rope_dim, int pos, const float* __restrict__ inv_freq,
                                           float first_freq) {
  for (int i = int(threadIdx.x); i < rope_dim / 2; i += int(blockDim.x))
    rope_rotate_pair(v, i, pos, i == int(threadIdx.x) ? first_freq : inv_freq[i]);
  __syncthreads();
}

// Orthonormal Walsh-Hadamard transform of v[0, n), n a power of two: the Sylvester butterflies of
// hadamard_transform (stage h pairs j with j + h inside blocks of 2h), then the 1/sqrt(n) scale. Each element
// sees the same additions in the same order as on the CPU, so the result is bit-identical.
__device__ __forceinline__ void hadamard(float* v, int n) {
  for (int h = 1; h < n; h *= 2) {
    for (int k = int(threadIdx.x); k < n / 2; k += int(blockDim.x)) {
      const int i = (k / h) * 2 * h + k % h;
      const float a = v[i], b = v[i + h];
      v[i] = __fadd_rn(a, b);
      v[i + h] = __fsub_rn(a, b);
    }
    __syncthreads();
  }
  const float s = __fdiv_rn(1.0f, __fsqrt_rn(float(n)));
  for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) v[i] = __fmul_rn(v[i], s);
  __syncthreads();
}

// FP4 fake-quant of v[0, n), n % 32 == 0, one ue8m0 scale per 32 values (the MXFP4 index-key / index-query
// format): scale = 2^ceil(log2(max(amax, 6 * 2^-126) / 6)), v = e2m1(v / scale) * scale. One warp per block.
__device__ __forceinline__ void fp4_ue8m0_block32(float* v, int n) {
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, warps = int(blockDim.x) / 32;
  const float floor_amax = 6.0f * __uint_as_float(0x00800000u);  // 6 * 2^-126, exact
  for (int b = warp; b < n / 32; b += warps) {
    const float x = v[b * 32 + lane];
    const float amax = dev::warp_max(fabsf(x));
    const float scale = dev::pow2_ceil(__fdiv_rn(fmaxf(amax, floor_amax), 6.0f));
    v[b * 32 + lane] = __fmul_rn(round_e2m1(__fdiv_rn(x, scale)), scale);
  }
  __syncthreads();
}

// FP8 fake-quant of v[0, n) in blocks of 64 where the last block may be shorter and has its own scale
// (fp8_fake_quant_ragged with block 64: the KV nope channels, model-spec §3): scale =
// 2^ceil(log2(max(amax, 1e-4) / 448)), v = e4m3(v / scale) * scale. One warp per block, two values per lane.
__device__ __forceinline__ void fp8_ragged_block64(float* v, int n) {
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, warps = int(blockDim.x) / 32;
  for (int b = warp; b < (n + 63) / 64; b += warps) {
    const int base = b * 64, width = min(64, n - base);
    const bool has0 = lane < width, has1 = lane + 32 < width;
    const float x0 = has0 ? v[base + lane] : 0.0f, x1 = has1 ? v[base + lane + 32] : 0.0f;
    const float amax = dev::warp_max(fmaxf(fabsf(x0), fabsf(x1)));
    const float scale = kvrec::block_scale(amax);
    // x / scale as x * (1 / scale): the same correctly rounded number (1 / scale is a power of two, or +0 for +inf;
    // layers/quant/fp8_scale.h), without the division's slow path per value.
    const float inv = fp8scale::inverse(scale);
    if (has0) v[base + lane] = __fmul_rn(round_e4m3(__fmul_rn(x0, inv)), scale);
    if (has1) v[base + lane + 32] = __fmul_rn(round_e4m3(__fmul_rn(x1, inv)), scale);
  }
  __syncthreads();
}

// The same FP8 rule on a finished V4 KV entry v[0, kvrec::kDim) (its RoPE already applied), written as the packed
// record (layers/attention/kv_record.h) at rec: fp8_ragged_block64's codes and scales over the 448 nope channels
// (448 = 7 whole blocks), the RoPE channels rounded to bf16 (write_entry's cast), the pad bytes zero. Decoding the
// record gives bitwise fp8_ragged_block64 + write_entry's bf16 row. One warp per block; no barrier (v is only read).
__device__ __forceinline__ void fp8_record_block64(const float* v, uint8_t* rec) {
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, warps = int(blockDim.x) / 32;
  for (int b = warp; b < kvrec::kBlocks; b += warps) {
    const int base = b * kvrec::kBlock;
    const float x0 = v[base + lane], x1 = v[base + lane + 32];
    const float amax = dev::warp_max(fmaxf(fabsf(x0), fabsf(x1)));
    const float scale = kvrec::block_scale(amax);
    rec[kvrec::kCodes + base + lane] = kvrec::encode_code(x0, scale);
    rec[kvrec::kCodes + base + lane + 32] = kvrec::encode_code(x1, scale);
    if (lane == 0) rec[kvrec::kScales + b] = kvrec::encode_scale(scale);
  }
  auto* rope = reinterpret_cast<bf16*>(rec + kvrec::kRope);
  for (int j = int(threadIdx.x); j < kvrec::kRopeDim; j += int(blockDim.x))
    rope[j] = __float2bfloat16_rn(v[kvrec::kNope + j]);
  for (int i = int(threadIdx.x); i < kvrec::kRowBytes - kvrec::kScales - kvrec::kBlocks; i += int(blockDim.x))
    rec[kvrec::kScales + kvrec::kBlocks + i] = 0;
}

}  // namespace deepinfer::cuda::finish
