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

// The rotated pair (x_{2i}, x_{2i+1}) of a bf16 row, rounded to bf16.
__device__ __forceinline__ __nv_bfloat162 rope_rotate(__nv_bfloat162 pair, RopeAngle a) {
  const float2 v = __bfloat1622float2(pair);
  return __floats2bfloat162_rn(v.x * a.c - v.y * a.s, v.x * a.s + v.y * a.c);
}

}  // namespace deepinfer::cuda::dev
