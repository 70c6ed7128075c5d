// The MoE combine's per-vector sum, device side (layers/moe/moe_combine.h): one definition for combine_kernel
// (moe_gpu.cu, through route_fused.cuh's combine_vec4) and the mHC sites that read the parts (layers/mhc/mhc.cu), so
// both produce the same bits. Only .cu files include this.
#pragma once

#include <cstdint>

#include "cuda/device_util.cuh"
#include "layers/moe/moe_combine.h"

namespace deepinfer::cuda::moe_dev {

// Four consecutive outputs of a GEMM as the reference returns them, in bf16 (bench/gpu/NOTES.md "Session 57"):
// fp32 ones rounded, bf16 ones widened (both exact to the same values).
__device__ __forceinline__ float4 output4(const float* __restrict__ p, int64_t v) {
  return dev::round_bf16(reinterpret_cast<const float4*>(p)[v]);
}
__device__ __forceinline__ float4 output4(const __nv_bfloat16* __restrict__ p, int64_t v) {
  const uint2 u = reinterpret_cast<const uint2*>(p)[v];
  return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xFFFF0000u), __uint_as_float(u.y << 16),
                     __uint_as_float(u.y & 0xFFFF0000u));
}

// Columns 4v .. 4v + 3 of row r: the routed outputs of rows slots[k] of expert_y (fp32 or bf16) summed in order of k
// from +0.0, then row r of shared_y, each in bf16 (output4), summed in fp32. kMax >= top_k bounds the loads, all
// issued before the sum (session 5, H8).
template <int kMax, class T>
__device__ __forceinline__ float4 combine_sum4(const T* __restrict__ expert_y, const float* __restrict__ shared_y,
                                               const int32_t* slots, int top_k, int64_t hidden, int64_t r, int64_t v) {
  float4 e[kMax];
#pragma unroll
  for (int k = 0; k < kMax; ++k)
    if (k < top_k) e[k] = output4(expert_y + int64_t(slots[k]) * hidden, v);
  const float4 s = output4(shared_y + r * hidden, v);
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int k = 0; k < kMax; ++k) {
    if (k < top_k) {
      acc.x += e[k].x;
      acc.y += e[k].y;
      acc.z += e[k].z;
      acc.w += e[k].w;
    }
  }
  acc.x += s.x;
  acc.y += s.y;
  acc.z += s.z;
  acc.w += s.w;
  return acc;
}

// The same four columns of the parts' combine rounded to bf16 as combine_kernel stores them (two packed pairs).
template <int kMax>
__device__ __forceinline__ uint2 combine_bf16x4(const MoeCombineParts& parts, const int32_t* slots, int64_t hidden,
                                                int64_t r, int64_t v) {
  const float4 acc =
      parts.expert_y_bf16
          ? combine_sum4<kMax>(parts.expert_y_bf16, parts.shared_y, slots, parts.top_k, hidden, r, v)
          : combine_sum4<kMax>(parts.expert_y, parts.shared_y, slots, parts.top_k, hidden, r, v);
  return make_uint2(dev::pack_bf16x2(acc.x, acc.y), dev::pack_bf16x2(acc.z, acc.w));
}

}  // namespace deepinfer::cuda::moe_dev
