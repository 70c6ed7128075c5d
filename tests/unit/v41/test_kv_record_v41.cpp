// The packed KV records of the V4.1 GPU caches (src/layers/attention/kv_record.h, namespace kvrec41; model-spec §6
// V4.1 column) on the host: the byte layouts, the decode of every code against the e2m1 / e4m3 / e8m0 formulas,
// and the round trip of whole rows against the CPU forward's own cache quantization (fake_quant.cpp:
// fp8_fake_quant(row, 512, 32) for the window, fp4_fake_quant(row, 512, 16, E4M3) for the compressed KV: the
// values the bf16 GPU pools hold), so a record decodes to exactly those values. The GPU side (the writers, attention
// over records, the whole forward in both formats) is tests/gpu/test_attention.cpp GpuKvRecordV41.* and
// tests/gpu/model/test_v41_gpu_forward.cpp V41GpuForward.KvFormatsBitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/float_bits.h"
#include "layers/attention/kv_record.h"
#include "layers/quant/fake_quant.h"

using namespace deepinfer;
namespace kvrec = deepinfer::cuda::kvrec;
namespace kvrec41 = deepinfer::cuda::kvrec41;

namespace {

using deepinfer::testing::bits;
using deepinfer::testing::e4m3_formula;

// e2m1 from its fields: 1 sign, 2 exponent (bias 1), 1 mantissa; exponent 0 is subnormal (M x 2^-1).
double e2m1_formula(uint8_t nibble) {
  const int sign = (nibble >> 3) & 1, e = (nibble >> 1) & 3, m = nibble & 1;
  const double mag = e == 0 ? 0.5 * m : std::ldexp(1.0 + m / 2.0, e - 1);
  return sign ? -mag : mag;
}

uint8_t nibble_of(const std::vector<uint8_t>& record, int channel) {
  return uint8_t((record[size_t(kvrec41::kEntryCodes + channel / 2)] >> (4 * (channel % 2))) & 15u);
}

// Random 512-channel rows whose blocks of `block` channels sit at their own magnitudes; every 5th row has zero
// blocks, blocks far below the quantization floors, and blocks with channels 1e-5 of the block's amax (e4m3
// subnormals / e2m1 zeros after the scale, so negative values become -0).
std::vector<float> random_row(std::mt19937& gen, int trial, int block) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 30);
  std::vector<float> row(kvrec41::kDim);
  for (int b = 0; b < kvrec41::kDim / block; ++b) {
    const int kind = trial % 5 == 0 ? b % 4 : 3;
    const float mag = std::ldexp(1.0f, exponent(gen));
    for (int c = 0; c < block; ++c) {
      float v = normal(gen) * mag;
      if (kind == 0) v = 0.0f;
      if (kind == 1) v = normal(gen) * 1e-9f;
      if (kind == 2 && c % 3 == 0) v *= 1e-5f;
      row[size_t(b) * block + size_t(c)] = v;
    }
  }
  if (trial == 1) row[5] = -0.0f;  // -0 keeps its sign through the record
  return row;
}

}  // namespace

TEST(KvRecordV41, LayoutMatchesModelSpec) {
  // model-spec §6: window MXFP8 512 + 16 = 528 B; compressed FP4 256 + 32 = 288 B; both whole 16-byte vectors.
  EXPECT_EQ(kvrec41::kWindowScales, 512);
  EXPECT_EQ(kvrec41::kWindowBlocks, 16);
  EXPECT_EQ(kvrec41::kWindowRowBytes, 528);
  EXPECT_EQ(kvrec41::kEntryScales, 256);
  EXPECT_EQ(kvrec41::kEntryBlocks, 32);
  EXPECT_EQ(kvrec41::kEntryRowBytes, 288);
  EXPECT_EQ(cuda::kv_row_bytes(cuda::KvFormat::Mxfp8, 512), 528);
  EXPECT_EQ(cuda::kv_row_bytes(cuda::KvFormat::Fp4, 512), 288);
  EXPECT_EQ(cuda::kv_row_bytes(cuda::KvFormat::Fp8, 512), 592);
  EXPECT_EQ(cuda::kv_row_bytes(cuda::KvFormat::Bf16, 512), 1024);
  // model-spec §6's growth per token: 3 ratio-2 sources x 288 / 2 + the ratio-1 source's 288 (the KV part of 890).
  EXPECT_EQ(3 * kvrec41::kEntryRowBytes / 2 + kvrec41::kEntryRowBytes, 3 * 144 + 288);
}

TEST(KvRecordV41, EveryE2m1CodeIsItsFormulaAndRoundTrips) {
  for (int n = 0; n < 16; ++n) {
    const uint8_t nibble = uint8_t(n);
    const float v = kvrec41::e2m1_value(nibble);
    EXPECT_EQ(double(v), e2m1_formula(nibble)) << "nibble " << n;
    EXPECT_EQ(std::signbit(v), n >= 8) << "nibble " << n;  // code 8 is -0
    // The e4m3 code it rides on in the attention's decode is worth the value x 2^-6.
    EXPECT_EQ(e4m3_formula(kvrec41::e2m1_e4m3_code(nibble)), e2m1_formula(nibble) / 64.0) << "nibble " << n;
    EXPECT_EQ(int(kvrec41::e2m1_code(v)), n) << "nibble " << n;
  }
  // The grid in code order (model-spec §2: {0, .5, 1, 1.5, 2, 3, 4, 6}).
  const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int n = 0; n < 8; ++n) EXPECT_EQ(kvrec41::e2m1_value(uint8_t(n)), grid[n]);
}

TEST(KvRecordV41, EntryValuesAreE2m1TimesTheE4m3ScaleExactly) {
  // Every nibble times every positive finite e4m3 scale (codes 1..126): the formula's product, a bf16 number.
  for (int s = 1; s < 127; ++s) {
    for (int n = 0; n < 16; ++n) {
      const float got = kvrec41::decode_entry_value(uint8_t(n), uint8_t(s));
      EXPECT_EQ(double(got), e2m1_formula(uint8_t(n)) * e4m3_formula(uint8_t(s))) << "nibble " << n << " scale " << s;
      EXPECT_EQ(bits(got) & 0xFFFFu, 0u) << "nibble " << n << " scale " << s;
    }
  }
  // A zeroed record decodes to +0 in both formats (empty pool rows, cp.async's zero fill).
  EXPECT_EQ(bits(kvrec41::decode_entry_value(0, 0)), 0u);
  EXPECT_EQ(bits(kvrec::decode_value(0, kvrec::decode_scale(0))), 0u);
}

TEST(KvRecordV41, WindowRowRoundTripEqualsTheCpuMxfp8) {
  std::mt19937 gen(20261201);
  std::vector<uint8_t> record(kvrec41::kWindowRowBytes);
  std::vector<float> decoded(kvrec41::kDim);
  for (int trial = 0; trial < 400; ++trial) {
    const std::vector<float> row = random_row(gen, trial, kvrec41::kWindowBlock);
    kvrec41::encode_window_row(row.data(), record.data());
    kvrec41::decode_window_row(record.data(), decoded.data());
    std::vector<float> want = row;
    fp8_fake_quant(want.data(), kvrec41::kDim, kvrec41::kWindowBlock);  // V41Model's window cache quantization
    for (int d = 0; d < kvrec41::kDim; ++d) {
      ASSERT_EQ(bits(decoded[size_t(d)]), bits(want[size_t(d)])) << "trial " << trial << " channel " << d;
      ASSERT_EQ(bits(want[size_t(d)]) & 0xFFFFu, 0u) << "the bf16 pool holds this value exactly";
    }
    // The bytes where the layout says: channel d's code at byte d, block b's e8m0 scale at 512 + b.
    for (int b = 0; b < kvrec41::kWindowBlocks; ++b) {
      float amax = 0.0f;
      for (int c = 0; c < kvrec41::kWindowBlock; ++c) amax = std::max(amax, std::fabs(row[size_t(b * 32 + c)]));
      ASSERT_EQ(record[size_t(kvrec41::kWindowScales + b)], kvrec::encode_scale(kvrec::block_scale(amax)));
      ASSERT_NE(record[size_t(kvrec41::kWindowScales + b)], 0) << "scales >= 2^-22: never the zero record's byte";
    }
  }
}

TEST(KvRecordV41, EntryRoundTripEqualsTheCpuFp4) {
  std::mt19937 gen(20261202);
  std::vector<uint8_t> record(kvrec41::kEntryRowBytes);
  std::vector<float> decoded(kvrec41::kDim);
  for (int trial = 0; trial < 400; ++trial) {
    const std::vector<float> row = random_row(gen, trial, kvrec41::kEntryBlock);
    kvrec41::encode_entry(row.data(), record.data());
    kvrec41::decode_entry(record.data(), decoded.data());
    std::vector<float> want = row;
    fp4_fake_quant(want.data(), kvrec41::kDim, kvrec41::kEntryBlock, Fp4Scale::E4M3);  // V41Model's entry format
    for (int d = 0; d < kvrec41::kDim; ++d) {
      ASSERT_EQ(bits(decoded[size_t(d)]), bits(want[size_t(d)])) << "trial " << trial << " channel " << d;
      ASSERT_EQ(bits(want[size_t(d)]) & 0xFFFFu, 0u) << "the bf16 pool holds this value exactly";
    }
    for (int b = 0; b < kvrec41::kEntryBlocks; ++b) ASSERT_NE(record[size_t(kvrec41::kEntryScales + b)], 0);
  }
}

TEST(KvRecordV41, EntryBoundaryValues) {
  // One entry whose block 0 has amax 6 (scale e4m3(1) = 1): its channels sit on the e2m1 grid and on the midpoints,
  // which go to the even code (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4).
  std::vector<float> row(kvrec41::kDim, 0.0f);
  const float block0[16] = {6.0f, -6.0f, 0.25f, -0.25f, 0.75f, 1.25f, 1.75f, 2.5f,
                            3.5f, 5.0f,  -5.0f, 0.5f,   -0.0f, 0.1f,  -0.1f, 4.0f};
  const double want0[16] = {6, -6, 0, -0.0, 1, 1, 2, 2, 4, 4, -4, 0.5, -0.0, 0, -0.0, 4};
  for (int c = 0; c < 16; ++c) row[size_t(c)] = block0[c];
  // Block 1: a zero block: scale e4m3(6 * 2^-9 / 6) = 2^-9 (the smallest e4m3 subnormal, code 1), every code +0.
  // Block 2: amax 6 * 448 * 2: the scale saturates at 448 and the values at 6 x 448.
  for (int c = 0; c < 16; ++c) row[size_t(32 + c)] = c % 2 ? 5376.0f : -5376.0f;
  // Block 3: amax just below the floor 6 x 2^-9: the floor's scale 2^-9, the channels round to 0 / 0.5 x 2^-9.
  for (int c = 0; c < 16; ++c) row[size_t(48 + c)] = (c % 2 ? 1.0f : -1.0f) * std::ldexp(float(c), -14);
  std::vector<uint8_t> record(kvrec41::kEntryRowBytes);
  std::vector<float> decoded(kvrec41::kDim);
  kvrec41::encode_entry(row.data(), record.data());
  kvrec41::decode_entry(record.data(), decoded.data());

  EXPECT_EQ(record[size_t(kvrec41::kEntryScales + 0)], 0x38);  // e4m3 1.0
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(double(decoded[size_t(c)]), want0[c]) << "channel " << c;
    EXPECT_EQ(std::signbit(decoded[size_t(c)]), std::signbit(want0[c])) << "channel " << c;
  }
  EXPECT_EQ(nibble_of(record, 3), 8) << "-0.25 -> the code of -0";
  EXPECT_EQ(record[0], uint8_t(0xF7)) << "6 in the low nibble (7), -6 in the high nibble (15)";
  EXPECT_EQ(record[size_t(kvrec41::kEntryScales + 1)], 0x01);  // 2^-9
  for (int c = 16; c < 32; ++c) EXPECT_EQ(bits(decoded[size_t(c)]), 0u) << "channel " << c;
  EXPECT_EQ(record[size_t(kvrec41::kEntryScales + 2)], 0x7E);  // 448, the largest e4m3
  for (int c = 32; c < 48; ++c) EXPECT_EQ(decoded[size_t(c)], (c % 2 ? 1.0f : -1.0f) * 6.0f * 448.0f);
  EXPECT_EQ(record[size_t(kvrec41::kEntryScales + 3)], 0x01);
  for (int c = 48; c < 64; ++c) {
    std::vector<float> one(row.begin() + 48, row.begin() + 64);
    fp4_fake_quant(one.data(), 16, 16, Fp4Scale::E4M3);
    EXPECT_EQ(bits(decoded[size_t(c)]), bits(one[size_t(c - 48)])) << "channel " << c;
  }
}

TEST(KvRecordV41, EightFp4CodesSpreadToTheirE4m3Bytes) {
  // The attention's chunk decode (sink_attention.cu): every nibble position of the word, every code, lands as
  // e2m1_e4m3_code at the byte of its channel; the other bytes stay those of the other nibbles.
  for (int pos = 0; pos < 8; ++pos) {
    for (int n = 0; n < 16; ++n) {
      const uint32_t fill = 0x5u;  // every other nibble holds code 5 (3.0)
      uint32_t w = 0;
      for (int k = 0; k < 8; ++k) w |= (k == pos ? uint32_t(n) : fill) << (4 * k);
      const uint64_t codes = kvrec41::e2m1x8_e4m3_codes(w);
      for (int k = 0; k < 8; ++k) {
        const uint8_t want = kvrec41::e2m1_e4m3_code(uint8_t(k == pos ? n : int(fill)));
        ASSERT_EQ(int((codes >> (8 * k)) & 0xFFu), int(want)) << "nibble " << pos << " code " << n << " byte " << k;
      }
    }
  }
}
