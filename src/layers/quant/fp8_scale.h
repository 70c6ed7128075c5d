// The FP8 block scale of model-spec §2 / §3 (activations and the V4 KV cache): scale = 2^ceil(log2(max(amax, 1e-4)
// / 448)), and its reciprocal, as a few integer instructions on the amax's bits instead of an IEEE division and a
// power-of-two ceiling. Under nvcc (no fast math) `x / 448.0f` compiled to FCHK, a Newton step and a branch around
// a CALL of the division's slow path, and `1.0f / scale` to a range check, a branch around a CALL of the
// reciprocal's, MUFU.RCP and a Newton step: ~16 dependent instructions with two branches between a block's amax and
// its codes on the batch-1 quantizers (mHC site tails, rms_norm tails, routing's and the SwiGLU's quantizers,
// stream_gemm's quantizing prologues, the KV-row writers); here 6. Plain C++ with host + device qualifiers: the host
// test (tests/unit/core/test_fp8_scale.cpp) checks these very functions against the division and the power-of-two
// ceiling over every float bit pattern.
//
// Why the bits are the division's. x = max(amax, 1e-4) (NaN -> 1e-4, as fmaxf) is a normal number >= 1e-4 or +inf;
// write x = 1.f * 2^e (mantissa field m = f * 2^23). 448 = 1.75 * 2^8, so x / 448 = (1.f / 1.75) * 2^(e - 8).
//  - 1.f < 1.75: the quotient lies in [1/1.75, 1), whose ulp is 2^-24. Its largest, at 1.f = 1.75 - 2^-23, is
//    1 - 2^-23 / 1.75 = 1 - 1.14 * 2^-24: nearer 1 - 2^-24 than 1, so it never rounds up to 1, and no value of
//    [0.57, 1) is a power of two: pow2_ceil gives 2^(e - 8).
//  - 1.f = 1.75 (m = 0x600000): exactly 2^(e - 8), kept.
//  - 1.f > 1.75: the quotient lies in (1, 8/7); its smallest, at 1.75 + 2^-23, is 1 + 0.57 * 2^-23: more than half
//    an ulp (2^-24) above 1, so it rounds above 1 and pow2_ceil gives 2^(e - 7).
// So scale = 2^(e - 8 + [m > 0x600000]). x * 2^-8 is exact (>= 3.9e-7, normal) and keeps m; adding 0x1FFFFF
// carries into the exponent field exactly when m >= 0x600001; masking the mantissa off leaves the power of two.
// +inf stays +inf (its mantissa is 0; the device pow2_ceil keeps an all-zero mantissa) because the 2^-8 is a float
// multiply, not a subtraction from the exponent field, so no select for it is needed.
// The scales are 2^k, k in [-22, 120] (1e-4 / 448 > 2^-23), or +inf.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DI_FP8SCALE_HD __host__ __device__ __forceinline__
#else
#define DI_FP8SCALE_HD inline
#endif

namespace deepinfer::cuda::fp8scale {

DI_FP8SCALE_HD uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
DI_FP8SCALE_HD float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// The block scale of a block whose largest magnitude is amax: the bits of pow2_ceil(max(amax, 1e-4) / 448) for every
// float amax (see above), with one FMNMX, one FMUL, one IADD and one LOP.
DI_FP8SCALE_HD float block_scale(float amax) {
  const float x = amax > 1e-4f ? amax : 1e-4f;  // NaN -> 1e-4, as fmaxf
  return float_of((bits_of(x * 0.00390625f) + 0x001FFFFFu) & 0x7F800000u);  // x * 2^-8, exact
}

// 1 / scale for a block_scale result: 2^-k's bits are (127 - k) << 23 = 0x7F000000 - scale's bits (k in [-22, 120]:
// positive, a normal number), so x * inverse(scale) is x * (1.0f / scale) bit for bit; +inf -> +0 = 1 / inf.
DI_FP8SCALE_HD float inverse(float scale) {
  const uint32_t u = bits_of(scale);
  return float_of(u < 0x7F000000u ? 0x7F000000u - u : 0u);
}

}  // namespace deepinfer::cuda::fp8scale
