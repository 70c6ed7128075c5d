// layers/quant/fp8_scale.h against the arithmetic it replaces: the block scale over every float bit pattern against
// the IEEE division and power-of-two ceiling the kernels ran (pow2_ceil(fmaxf(amax, 1e-4f) / 448.0f), with
// device_util.cuh's pow2_ceil, and core/dtype.h's on every finite quotient), the reciprocal over every power-of-two
// scale the rule gives and +inf, and x * reciprocal against x / scale (the KV encoders' division) over a sweep of x.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "layers/quant/fp8_scale.h"

namespace deepinfer::cuda {
namespace {

using fp8scale::bits_of;
using fp8scale::float_of;

// The device expression the kernels had: fmaxf(amax, 1e-4f) (every NaN, signalling ones too, -> 1e-4: CUDA's fmaxf
// returns the other argument; glibc's fmax keeps a signalling NaN, so the clamp is written out: a comparison with a
// NaN is false), the IEEE division, device_util.cuh's pow2_ceil (an all-zero mantissa kept, +inf included;
// otherwise the next exponent).
float division_scale(float amax) {
  const float x = (amax >= 1e-4f ? amax : 1e-4f) / 448.0f;
  const uint32_t u = bits_of(x);
  return (u & 0x007FFFFFu) == 0 ? x : float_of((u & 0x7F800000u) + 0x00800000u);
}

// How many of the floats with bits [lo, lo + n) give other bits than the division (branch-free: vectorized).
uint32_t block_scale_mismatches(uint32_t lo, uint32_t n) {
  uint32_t bad = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const float amax = float_of(lo + i);
    bad += bits_of(fp8scale::block_scale(amax)) != bits_of(division_scale(amax));
  }
  return bad;
}

// Every float: the same bits as the division, for negatives, zeros, subnormals, NaN payloads and infinities too.
TEST(Fp8Scale, BlockScaleIsTheDivisionForEveryFloat) {
  constexpr uint32_t kChunk = 1u << 16;
  uint64_t bad = 0;
  uint32_t first_bad_chunk = 0;
  for (uint64_t lo = 0; lo <= 0xFFFFFFFFull; lo += kChunk) {
    const uint32_t b = block_scale_mismatches(uint32_t(lo), kChunk);
    if (b != 0 && bad == 0) first_bad_chunk = uint32_t(lo);
    bad += b;
  }
  EXPECT_EQ(bad, 0u) << "first in the chunk at bits 0x" << std::hex << first_bad_chunk;
  // The ends by name: the clamp (every NaN payload, negatives with -0, subnormals, amax <= 1e-4) gives 2^-22, +inf
  // stays +inf, the largest float gives 2^120.
  const float floor_scale = std::ldexp(1.0f, -22);
  for (uint32_t u : {0x00000000u, 0x80000000u, 0x00000001u, 0x007FFFFFu, 0x80000001u, 0xBF800000u, 0xFF800000u,
                     0x7F800001u, 0x7FBFFFFFu, 0x7FC00000u, 0x7FFFFFFFu, 0xFF800001u, 0xFFC00000u, 0xFFFFFFFFu,
                     bits_of(1e-4f) - 1, bits_of(1e-4f), bits_of(1e-4f) + 1})
    EXPECT_EQ(fp8scale::block_scale(float_of(u)), floor_scale) << std::hex << u;
  EXPECT_TRUE(std::isinf(fp8scale::block_scale(std::numeric_limits<float>::infinity())));
  EXPECT_EQ(fp8scale::block_scale(std::numeric_limits<float>::max()), std::ldexp(1.0f, 120));
}

// device_util.cuh's pow2_ceil (the reference above) is core/dtype.h's (frexp based) on every quotient of an amax
// above the floor: every exponent, every 61st mantissa and the mantissas around 1.75 (0x600000) and the ends.
TEST(Fp8Scale, DivisionIsHostPow2Ceil) {
  uint64_t bad = 0;
  for (uint32_t e = 1; e < 255; ++e) {
    auto check = [&](uint32_t m) {
      const float amax = float_of((e << 23) | m);
      if (amax > 1e-4f && bits_of(division_scale(amax)) != bits_of(pow2_ceil(amax / 448.0f))) ++bad;
    };
    for (uint32_t m = 0; m < 0x00800000u; m += 61) check(m);
    for (uint32_t m = 0x5FFF00u; m <= 0x600100u; ++m) check(m);
    for (uint32_t m : {0x000001u, 0x7FFFFEu, 0x7FFFFFu}) check(m);
  }
  EXPECT_EQ(bad, 0u);
}

// The carry boundary, named: mantissa 0x600000 (1.75 * 2^e, a quotient of exactly 2^(e - 8)) and its neighbours,
// at every exponent (covered by the sweep above; here so that a failure names the case).
TEST(Fp8Scale, BlockScaleAtSevenQuarters) {
  for (uint32_t e = 1; e < 255; ++e)
    for (uint32_t m : {0x000000u, 0x000001u, 0x5FFFFFu, 0x600000u, 0x600001u, 0x7FFFFFu}) {
      const float amax = float_of((e << 23) | m);
      EXPECT_EQ(bits_of(fp8scale::block_scale(amax)), bits_of(division_scale(amax))) << "e " << e << " m " << m;
    }
}

// The reciprocal of every scale the rule gives (2^k, k in [-22, 120]) and of +inf, bit for bit.
TEST(Fp8Scale, InverseIsTheReciprocal) {
  for (int k = -22; k <= 120; ++k) {
    const float scale = std::ldexp(1.0f, k);
    EXPECT_EQ(bits_of(fp8scale::inverse(scale)), bits_of(1.0f / scale)) << "k " << k;
  }
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bits_of(fp8scale::inverse(inf)), bits_of(1.0f / inf));  // +0
}

// x * inverse(scale) is x / scale (the KV encoders' v / scale) for every scale and x over a sweep of bit patterns:
// every 65537th float, all specials, and x whose quotient is subnormal or overflows for some scale.
TEST(Fp8Scale, TimesInverseIsDivision) {
  std::vector<float> scales;
  for (int k = -22; k <= 120; ++k) scales.push_back(std::ldexp(1.0f, k));
  scales.push_back(std::numeric_limits<float>::infinity());
  std::vector<float> xs;
  for (uint64_t i = 0; i <= 0xFFFFFFFFull; i += 65537) xs.push_back(float_of(uint32_t(i)));
  for (uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t u = 0; u < 0x01000000u; u += 4099) xs.push_back(float_of(sign | u));  // subnormal, tiny
    for (uint32_t u = 0x7E000000u; u < 0x7F800000u; u += 4099) xs.push_back(float_of(sign | u));  // near overflow
    for (uint32_t u : {0x00000001u, 0x007FFFFFu, 0x00800000u, 0x7F7FFFFFu, 0x7F800000u, 0x7FC00000u, 0x7F800001u})
      xs.push_back(float_of(sign | u));
  }
  uint64_t bad = 0;
  for (float s : scales) {
    const float inv = fp8scale::inverse(s);
    for (float x : xs) {
      const float a = x * inv, b = x / s;
      bad += bits_of(a) != bits_of(b) && !(std::isnan(a) && std::isnan(b));
    }
  }
  EXPECT_EQ(bad, 0u);
}

}  // namespace
}  // namespace deepinfer::cuda
