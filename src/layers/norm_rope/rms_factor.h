// The RMS factor r = rsqrt(RN(ss / n) + eps) of the norm kernels (model-spec §2: rms_norm) in cheaper forms with the
// same bits, host + device so that tests/unit/core/test_rms_factor.cpp checks these very functions:
//  - pow2_inverse: for n = 2^k, 2^-k as bits ((127 - k) << 23: exact and normal for k <= 30). RN(ss / 2^k) and
//    RN(ss * 2^-k) are the correctly rounded values of the same real ss * 2^-k (the build's `/` and `*` on floats are
//    div.rn.f32 / mul.rn.f32, IEEE, no ftz), so the same float for every ss: subnormal quotients are rounded, but
//    rounded alike; +0, +inf and NaN stay so (a NaN ss leaves r NaN in both forms).
//  - eps_normal: the rsqrt argument x = RN(mean + eps) of a mean >= +0 (ss a sum of squares: >= +0, +inf or NaN) is
//    >= RN(0 + eps) = eps (RN is monotonic, eps a float), so eps >= FLT_MIN makes every x >= FLT_MIN, +inf or NaN,
//    where rsqrtf's subnormal guard never fires and rsqrt_normal (rms_norm.cuh) runs the same MUFU.RSQ.
//  - rms_form: the form a launch of n, eps may use.
#pragma once

#include <cfloat>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DI_RMSF_HD __host__ __device__ __forceinline__
#else
#define DI_RMSF_HD inline
#endif

namespace deepinfer::cuda::rmsf {

enum class RmsForm {
  kDivide,         // ss / n, rsqrtf: any n and eps
  kNormalEps,      // ss / n, rsqrt without the subnormal guard: eps >= FLT_MIN
  kPow2NormalEps,  // ss * pow2_inverse(n), rsqrt without the guard: n a power of two, eps >= FLT_MIN
};

DI_RMSF_HD bool pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

// 2^-k for n = 2^k, 0 <= k <= 30 (pow2(n)).
DI_RMSF_HD float pow2_inverse(int n) {
#if defined(__CUDA_ARCH__)
  const int k = __ffs(n) - 1;
#else
  const int k = __builtin_ctz(unsigned(n));
#endif
  const uint32_t bits = uint32_t(127 - k) << 23;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

// eps >= FLT_MIN (false for NaN): RN(mean + eps) is then never subnormal (above).
DI_RMSF_HD bool eps_normal(float eps) { return eps >= FLT_MIN; }

inline RmsForm rms_form(int n, float eps) {
  if (!eps_normal(eps)) return RmsForm::kDivide;
  return pow2(n) ? RmsForm::kPow2NormalEps : RmsForm::kNormalEps;
}

}  // namespace deepinfer::cuda::rmsf
