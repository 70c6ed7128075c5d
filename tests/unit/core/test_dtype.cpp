// Format conversions checked against the formats' definitions (OCP MX spec / IEEE), not our own output.
#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"

using namespace deepinfer;

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to even (1).
  EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even).
  EXPECT_EQ(round_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
}

TEST(DType, E4m3KnownValues) {
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);          // S.1111.110 is the largest finite value
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F)));
  EXPECT_EQ(float_to_e4m3(1000.0f), 0x7E);  // saturates
  // 17 lies halfway between 16 (mantissa 0) and 18 (mantissa 1): ties to even -> 16.
  EXPECT_EQ(round_e4m3(17.0f), 16.0f);
  EXPECT_EQ(round_e4m3(19.0f), 20.0f);  // halfway between 18 (odd) and 20 (even)
  for (int c = 0; c < 0x7F; ++c) EXPECT_EQ(float_to_e4m3(e4m3_to_float(uint8_t(c))), c);
}

TEST(DType, E2m1GridAndTies) {
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(e2m1_to_float(uint8_t(c)), grid[c]);
    EXPECT_EQ(e2m1_to_float(uint8_t(c | 8)), -grid[c]);
  }
  EXPECT_EQ(round_e2m1(0.25f), 0.0f);
  EXPECT_EQ(round_e2m1(2.5f), 2.0f);
  EXPECT_EQ(round_e2m1(5.0f), 4.0f);
  EXPECT_EQ(round_e2m1(1.25f), 1.0f);
  EXPECT_EQ(round_e2m1(-7.0f), -6.0f);
}

TEST(DType, E8m0AndPow2Ceil) {
  EXPECT_EQ(e8m0_to_float(127), 1.0f);
  EXPECT_EQ(e8m0_to_float(130), 8.0f);
  EXPECT_EQ(float_to_e8m0(0.25f), 125);
  EXPECT_EQ(pow2_ceil(1.0f), 1.0f);
  EXPECT_EQ(pow2_ceil(1.0001f), 2.0f);
  EXPECT_EQ(pow2_ceil(0.3f), 0.5f);
}
