// layers/norm_rope/rms_factor.h against what it replaces in the norm kernels' RMS factor (rms_norm.cuh rms_factor_as):
// pow2_inverse(2^k) is 2^-k exactly, and ss * pow2_inverse(n) is RN(ss / n) bit for bit: over every non-negative float
// and NaN at V4's q_lora width 1024 (its decode launch), over a sample and the subnormal quotients at every 2^k;
// eps_normal's floor: with eps >= FLT_MIN every rsqrt argument RN(RN(ss / n) + eps) of a sum of squares ss is
// >= FLT_MIN (every non-negative ss at the weakest accepted eps), while the next float below FLT_MIN is refused; and
// rms_form picks the multiplication only for powers of two and drops the rsqrt guard only for eps >= FLT_MIN.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#include "layers/norm_rope/rms_factor.h"
#include "layers/quant/fp8_scale.h"

namespace deepinfer::cuda {
namespace {

using fp8scale::bits_of;
using fp8scale::float_of;
using rmsf::RmsForm;

TEST(RmsFactor, Pow2InverseIsExact) {
  for (int k = 0; k <= 30; ++k) {
    const int n = 1 << k;
    ASSERT_TRUE(rmsf::pow2(n)) << n;
    EXPECT_EQ(bits_of(rmsf::pow2_inverse(n)), bits_of(std::ldexp(1.0f, -k))) << n;
    EXPECT_EQ(bits_of(rmsf::pow2_inverse(n)), bits_of(1.0f / float(n))) << n;
  }
  for (int n : {0, -4, 3, 5, 1280, 5120, 20480, (1 << 30) + 1}) EXPECT_FALSE(rmsf::pow2(n)) << n;
}

// The mismatches of ss * pow2_inverse(n) against ss / n over the bit patterns [lo, hi] with the given stride.
// n through a volatile: with a known power of two the compiler turns ss / n into ss * 2^-k itself (the same theorem),
// and the loop would compare the product with itself.
uint64_t mismatches(int n, uint32_t lo, uint32_t hi, uint32_t stride) {
  volatile int hidden = n;
  const int m = hidden;
  const float d = float(m), inv = rmsf::pow2_inverse(m);
  uint64_t bad = 0;
  for (uint64_t u = lo; u <= hi; u += stride) {
    const float ss = float_of(uint32_t(u));
    bad += bits_of(ss / d) != bits_of(ss * inv);
  }
  return bad;
}

TEST(RmsFactor, Pow2ScaleIsTheDivision) {
  // V4's query norm at decode (q_lora 1024): every ss from +0 to +inf, then NaN.
  EXPECT_EQ(mismatches(1024, 0u, 0x7F800000u, 1), 0u);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(nan * rmsf::pow2_inverse(1024)));
  for (int k = 0; k <= 30; ++k) {
    const int n = 1 << k;
    EXPECT_EQ(mismatches(n, 0u, 0x7F800000u, 4099), 0u) << n;  // a sample of the whole range
    // Every ss whose quotient is subnormal or the smallest normals (ss < 2^(k - 125)): rounded, not exact.
    const uint32_t top = bits_of(std::ldexp(1.0f, k - 125));
    EXPECT_EQ(mismatches(n, 0u, top, top > (1u << 24) ? 61u : 1u), 0u) << n;
  }
  // A wrong constant is caught: the float next to 2^-10 gives other quotients.
  uint64_t off = 0;
  const float wrong = std::nextafter(std::ldexp(1.0f, -10), 1.0f);
  volatile float divisor = 1024.0f;
  for (uint32_t u = 0x3F800000u; u < 0x3F800000u + 1000u; ++u)
    off += bits_of(float_of(u) / divisor) != bits_of(float_of(u) * wrong);
  EXPECT_GT(off, 0u);
}

TEST(RmsFactor, EpsNormalBoundsTheRsqrtArgument) {
  EXPECT_TRUE(rmsf::eps_normal(FLT_MIN));
  EXPECT_TRUE(rmsf::eps_normal(1e-20f));  // V4.1's rms_norm_eps (model-spec §2)
  EXPECT_TRUE(rmsf::eps_normal(1e-6f));   // V4's
  EXPECT_FALSE(rmsf::eps_normal(std::nextafter(FLT_MIN, 0.0f)));
  EXPECT_FALSE(rmsf::eps_normal(0.0f));
  EXPECT_FALSE(rmsf::eps_normal(-1e-6f));
  EXPECT_FALSE(rmsf::eps_normal(std::numeric_limits<float>::quiet_NaN()));
  // Every non-negative ss (+0 .. +inf) at the weakest accepted eps, the mean both ways (the divide form at a width
  // that is no power of two, V4.1's 1280, and the power-of-two one at 2^30, the smallest quotients): x >= FLT_MIN,
  // so MUFU.RSQ sees no subnormal. The sums are separate statements: no product to fuse.
  volatile float eps_v = FLT_MIN, n_v = 1280.0f;
  const float eps = eps_v, n = n_v, inv = rmsf::pow2_inverse(1 << 30);
  uint32_t bad = 0;
  for (uint32_t u = 0; u <= 0x7F800000u; ++u) {
    const float ss = float_of(u), by_div = ss / n, by_mul = ss * inv;
    const float x_div = by_div + eps, x_mul = by_mul + eps;
    bad += !(x_div >= FLT_MIN) + !(x_mul >= FLT_MIN);
  }
  EXPECT_EQ(bad, 0u);
  // The bound is tight: just below FLT_MIN an eps gives a subnormal argument at ss = 0.
  volatile float zero = 0.0f;
  const float below = std::nextafter(FLT_MIN, 0.0f), mean0 = zero / 1280.0f;
  EXPECT_LT(mean0 + below, FLT_MIN);
  EXPECT_FALSE(rmsf::eps_normal(below));
}

TEST(RmsFactor, FormFollowsWidthAndEps) {
  EXPECT_EQ(rmsf::rms_form(1024, 1e-6f), RmsForm::kPow2NormalEps);  // V4's query norm (model-spec §2)
  EXPECT_EQ(rmsf::rms_form(1280, 1e-20f), RmsForm::kNormalEps);     // V4.1's
  EXPECT_EQ(rmsf::rms_form(512, FLT_MIN), RmsForm::kPow2NormalEps);
  EXPECT_EQ(rmsf::rms_form(1024, std::nextafter(FLT_MIN, 0.0f)), RmsForm::kDivide);
  EXPECT_EQ(rmsf::rms_form(1280, 0.0f), RmsForm::kDivide);
  EXPECT_EQ(rmsf::rms_form(1024, std::numeric_limits<float>::quiet_NaN()), RmsForm::kDivide);
}

}  // namespace
}  // namespace deepinfer::cuda
