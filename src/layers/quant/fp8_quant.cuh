// Device-side FP8 activation quantization (model-spec §2 "Activation quant for FP8/FP4 GEMMs"), shared by
// fp8_quantize and the kernels that quantize their own output (a norm's tail: rms_norm.cu, layers/mhc/mhc.cu), so
// that a fused kernel gives bitwise the codes and scales of fp8_quantize on the same bf16 values.
// Only .cu files include this.
#pragma once

#include "cuda/device_util.cuh"
#include "layers/attention/kv_record.h"
#include "layers/quant/fp8_scale.h"

namespace deepinfer::cuda::dev {

// fp8_quantize8's pieces, for callers that interleave several units' shuffles (stream_gemm.cuh's quantizing
// prologue): the unit's own amax, the block scale from the block's amax, and the codes at 1 / scale.
__device__ __forceinline__ float fp8_amax8(const float (&f)[8]) {
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(f[j]));
  return amax;
}
// pow2_ceil(fmaxf(block_amax, 1e-4f) / 448.0f) bit for bit, in four instructions on the amax's bits
// (layers/quant/fp8_scale.h): the IEEE division was FCHK, a Newton step and a branch around a CALL of its slow path.
__device__ __forceinline__ float fp8_block_scale(float block_amax) { return fp8scale::block_scale(block_amax); }
// 1.0f / scale bit for bit for a block scale, from its exponent (fp8_scale.h): the reciprocal was a range check, a
// branch around a CALL of its slow path, MUFU.RCP and a Newton step.
__device__ __forceinline__ float fp8_inv_scale(float scale) { return fp8scale::inverse(scale); }
__device__ __forceinline__ uint2 fp8_codes8(const float (&f)[8], float scale) {
  // Dividing by a power of two is exact, so x * (1 / scale) is x / scale.
  const float inv = fp8_inv_scale(scale);
  uint32_t lo = 0, hi = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    lo |= uint32_t(__nv_cvt_float_to_fp8(f[j] * inv, __NV_SATFINITE, __NV_E4M3)) << (8 * j);
    hi |= uint32_t(__nv_cvt_float_to_fp8(f[4 + j] * inv, __NV_SATFINITE, __NV_E4M3)) << (8 * j);
  }
  return make_uint2(lo, hi);
}
// One thread's 8 consecutive values f of a quantization block of lanes_per_block * 8 values held by
// lanes_per_block consecutive lanes of one warp (lane % lanes_per_block = the vector's place in the block; the
// whole warp calls this, lanes without values pass zeros). The block's scale is 2^ceil(log2(max(amax, 1e-4) /
// 448)); the codes are e4m3(f / scale), round-to-nearest-even with saturation. Returns the scale.
__device__ __forceinline__ float fp8_quantize8(const float (&f)[8], int lanes_per_block, uint2& codes) {
  float amax = fp8_amax8(f);
  for (int o = lanes_per_block / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
  const float scale = fp8_block_scale(amax);
  codes = fp8_codes8(f, scale);
  return scale;
}

// The V4 window-KV cache format of one value (model-spec §3 "Attention", v4_quantize_kv_row): e4m3 of v / scale
// (scale = kv_fp8_scale(amax of its 64-channel block), a power of two), written back as the bf16 value of code
// times scale (exact). One definition for kv_fake_quant (kv_cache.cu) and the fused KV-row norm (rms_norm.cu), in
// terms of the packed record's helpers (layers/attention/kv_record.h), so the bf16 values and the record's codes
// and scales come from the same operations.
__device__ __forceinline__ float kv_fp8_scale(float amax) { return kvrec::block_scale(amax); }

__device__ __forceinline__ bf16 kv_fp8_value(float v, float scale) {
  return __float2bfloat16(kvrec::decode_value(kvrec::encode_code(v, scale), scale));
}

}  // namespace deepinfer::cuda::dev
