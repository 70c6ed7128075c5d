// Device side of the partial interleaved RoPE (model-spec §2), shared by rope_kernel (rope.cu) and the kernels
// that rotate their own output (rms_norm.cu: the norm -> RoPE of the query heads and of the KV row), so that a
// fused kernel gives bitwise the values of rope(): the angle float(pos) * inv_freq in fp32, the accurate sincosf,
// the conjugate for the inverse rotation, and the same products on the bf16 pair. Only .cu files include this.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace deepinfer::cuda::dev {

struct RopeAngle {
  float s, c;
};

__device__ __forceinline__ RopeAngle rope_angle(int32_t position, float inv_freq, bool inverse) {
  const float angle = float(position) * inv_freq;
  RopeAngle a;
  sincosf(angle, &a.s, &a.c);
  if (inverse) a.s = -a.s;
  return a;
}

// The rotated pair (x_{2i}, x_{2i+1}) of a bf16 row, rounded to bf16. The contraction is spelled out (one rounded
// product, then one fused multiply-add per output) so that every kernel inlining this rounds alike: left to the
// compiler, a * b - c * d became an FMA around whichever product the call site's schedule chose, and the attention
// merge's de-rotation differed from window_commit_derotate's in 5 of 1.2 M values (H200 run 99).
__device__ __forceinline__ __nv_bfloat162 rope_rotate(__nv_bfloat162 pair, RopeAngle a) {
  const float2 v = __bfloat1622float2(pair);
  return __floats2bfloat162_rn(__fmaf_rn(v.x, a.c, -__fmul_rn(v.y, a.s)), __fmaf_rn(v.x, a.s, __fmul_rn(v.y, a.c)));
}

// rope()'s work split: item i = (token, head group of kRopeHeadsPerThread, pair); one accurate sincosf serves the
// group's heads. The item loads its pair of every head of the group before the first store (x is in place, so the
// compiler may not move a load above the previous head's store): one global round trip instead of one per head
// (issue 4: the query's 64 heads at decode were 8 dependent round trips). rope_kernel and the fused attention
// epilogue (kv_cache.cu window_commit_derotate) run the same items.
constexpr int kRopeHeadsPerThread = 8;

__host__ __device__ __forceinline__ int64_t rope_items(int64_t tokens, int heads, int rope_dim) {
  return tokens * ((heads + kRopeHeadsPerThread - 1) / kRopeHeadsPerThread) * (rope_dim / 2);
}

__device__ __forceinline__ void rope_item(__nv_bfloat16* x, int64_t token_stride, const int32_t* __restrict__ positions,
                                          const float* __restrict__ inv_freq, int64_t i, int heads, int head_dim,
                                          int rope_dim, bool inverse) {
  const int half = rope_dim / 2;
  const int head_groups = (heads + kRopeHeadsPerThread - 1) / kRopeHeadsPerThread;
  const int pair = int(i % half);
  const int64_t tg = i / half;
  const int group = int(tg % head_groups);
  const int64_t t = tg / head_groups;
  const int h0 = group * kRopeHeadsPerThread, n = min(kRopeHeadsPerThread, heads - h0);
  auto* base = reinterpret_cast<__nv_bfloat162*>(x + t * token_stride + (head_dim - rope_dim) + 2 * pair +
                                                 int64_t(h0) * head_dim);
  const int64_t step = head_dim / 2;  // one head, in pairs
  __nv_bfloat162 v[kRopeHeadsPerThread];
#pragma unroll
  for (int k = 0; k < kRopeHeadsPerThread; ++k)
    if (k < n) v[k] = base[k * step];
  const RopeAngle a = rope_angle(positions[t], inv_freq[pair], inverse);
#pragma unroll
  for (int k = 0; k < kRopeHeadsPerThread; ++k)
    if (k < n) base[k * step] = rope_rotate(v[k], a);
}

}  // namespace deepinfer::cuda::dev
