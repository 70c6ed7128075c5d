// layers/moe/fp4_tables.h: the grouped MXFP4 prefill's code tables from a byte broadcast (v13's NT 11 / 12 loop,
// fp4_step_codes_d8) against the multiply form every other path runs (fp4_step_codes), for every distance the
// broadcast form is claimed exact for (d < 32) in every byte j of a distance word, with the other bytes at their
// extremes; and the words themselves at d = 0 / 11 (a wrong table constant or selector fails here).
#include <gtest/gtest.h>

#include <cstdint>

#include "layers/moe/fp4_tables.h"

namespace deepinfer::fp4tab {
namespace {

// PTX prmt.b32, default mode: result byte i is byte (sel >> 4 i) & 7 of {b, a} (a: bytes 0..3, b: 4..7), its sign
// replicated when bit 3 of that nibble is set.
uint32_t prmt_host(uint32_t a, uint32_t b, uint32_t sel) {
  const uint64_t ab = uint64_t(b) << 32 | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t n = (sel >> (4 * i)) & 0xF;
    uint32_t byte = uint32_t(ab >> (8 * (n & 7))) & 0xFF;
    if (n & 8) byte = (byte & 0x80) ? 0xFF : 0x00;
    r |= byte << (8 * i);
  }
  return r;
}

TEST(Fp4Tables, BroadcastFormIsTheMultiplyForEveryDistance) {
  ASSERT_LT(kD8MaxDistance << kD8Shift, 256u);
  for (int j = 0; j < 4; ++j) {
    for (uint32_t d = 0; d <= kD8MaxDistance; ++d) {
      for (uint32_t other : {0u, kD8MaxDistance, 11u}) {
        // A distance word as expand_clean builds it (byte k = the distance of block k), shifted as kD8 shifts it.
        uint32_t w = 0;
        for (int k = 0; k < 4; ++k) w |= (k == j ? d : other) << (8 * k);
        const uint32_t w8 = w << kD8Shift;
        // fp4_step_codes' argument: byte j of the unshifted word.
        const uint32_t dj = (w >> (8 * j)) & 0xFF;
        ASSERT_EQ(dj, d);
        EXPECT_EQ(table0_d8(w8, j, prmt_host), table0(dj)) << "j " << j << " d " << d << " other " << other;
        EXPECT_EQ(table1_d8(w8, j, prmt_host), table1(dj)) << "j " << j << " d " << d << " other " << other;
      }
    }
  }
}

// The table words themselves (e4m3 bytes of e2m1 magnitudes 0, 0.5, 1, 1.5 / 2, 3, 4, 6; one binade is 8).
TEST(Fp4Tables, Words) {
  EXPECT_EQ(table0(0), 0x6C686000u);
  EXPECT_EQ(table1(0), 0x7C787470u);
  EXPECT_EQ(table0(11), 0x14100800u);
  EXPECT_EQ(table1(11), 0x24201C18u);
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(sel_d8_0(j) & 0xF, 4u);  // byte 0 from b = 0
    for (int i = 1; i < 4; ++i) EXPECT_EQ((sel_d8_0(j) >> (4 * i)) & 0xF, uint32_t(j));
    for (int i = 0; i < 4; ++i) EXPECT_EQ((sel_d8_1(j) >> (4 * i)) & 0xF, uint32_t(j));
  }
}

}  // namespace
}  // namespace deepinfer::fp4tab
