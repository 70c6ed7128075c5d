// The packed FP8 KV record of the V4 GPU caches (src/layers/attention/kv_record.h, model-spec §6) on the host: its
// byte layout, the decode of every e4m3 code against the e4m3 formula, and the round trip of whole rows against the
// CPU forward's own cache format (v4_quantize_kv_row: the values the bf16 GPU pools hold), so a record decodes to
// exactly those values. The GPU side (the kernels' encode / decode, attention and the whole forward in both
// formats) is tests/gpu/test_attention.cpp GpuKvRecord.* and tests/gpu/model/test_v4_gpu_forward.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/float_bits.h"
#include "core/error.h"
#include "layers/attention/kv_record.h"
#include "model/v4/v4_numerics.h"

using namespace deepinfer;
namespace kvrec = deepinfer::cuda::kvrec;

namespace {

using deepinfer::testing::bits;
using deepinfer::testing::e4m3_formula;

// The CPU forward's stored row (FP8 nope blocks of 64, bf16 rope channels).
std::vector<float> cpu_cache_row(std::vector<float> row) {
  V4Numerics n;
  n.quantize_cache = true;
  v4_quantize_kv_row(row.data(), kvrec::kDim, kvrec::kRopeDim, n);
  return row;
}

}  // namespace

TEST(KvRecord, LayoutMatchesModelSpec) {
  EXPECT_EQ(kvrec::kNope, 448);
  EXPECT_EQ(kvrec::kBlocks, 7);
  EXPECT_EQ(kvrec::kRope, 448);          // codes [0, 448), then the bf16 rope channels
  EXPECT_EQ(kvrec::kScales, 448 + 128);  // then the 7 scales in 8 bytes
  EXPECT_EQ(kvrec::kPackedBytes, 584);   // model-spec §6 / memory_plan.cpp
  EXPECT_EQ(kvrec::kRowBytes % 16, 0);
  EXPECT_EQ(kvrec::kRowBytes, 592);
  EXPECT_EQ(cuda::kv_row_bytes(cuda::KvFormat::Fp8, 512), 592);
  EXPECT_EQ(cuda::kv_row_bytes(cuda::KvFormat::Bf16, 512), 1024);
}

TEST(KvRecord, EveryCodeDecodesToItsE4m3NumberTimesTheScale) {
  for (int s : {-22, -9, 0, 1, 17, 119}) {  // the scale range of bf16 rows (kv_record.h)
    const float scale = std::ldexp(1.0f, s);
    const uint8_t e = kvrec::encode_scale(scale);
    EXPECT_EQ(int(e), s + 127);
    EXPECT_EQ(kvrec::decode_scale(e), scale);
    for (int c = 0; c < 256; ++c) {
      if ((c & 0x7F) == 0x7F) continue;  // the two NaN codes: no writer makes them (saturating conversion)
      const double want = e4m3_formula(uint8_t(c)) * std::ldexp(1.0, s);
      const float got = kvrec::decode_value(uint8_t(c), kvrec::decode_scale(e));
      EXPECT_EQ(double(got), want) << "code " << c << " scale 2^" << s;
      EXPECT_EQ(std::signbit(got), c >= 0x80) << "code " << c;
      // The decoded value is a bf16 number (the GPU kernels convert it to bf16 without rounding).
      EXPECT_EQ(bits(got) & 0xFFFFu, 0u) << "code " << c << " scale 2^" << s;
    }
  }
  // A zeroed record (empty pool row, cp.async zero fill) decodes to +0.
  EXPECT_EQ(bits(kvrec::decode_value(0, kvrec::decode_scale(0))), 0u);
}

TEST(KvRecord, BlockScaleIsTheFakeQuantRule) {
  // 2^ceil(log2(max(amax, 1e-4) / 448)): exact powers of two stay, anything above takes the next exponent.
  EXPECT_EQ(kvrec::block_scale(448.0f), 1.0f);
  EXPECT_EQ(kvrec::block_scale(448.5f), 2.0f);
  EXPECT_EQ(kvrec::block_scale(0.0f), std::ldexp(1.0f, -22));  // 1e-4 / 448 = 2.23e-7 in (2^-23, 2^-22]
  EXPECT_EQ(kvrec::block_scale(1e30f), std::ldexp(1.0f, int(std::ceil(std::log2(1e30 / 448.0)))));
}

TEST(KvRecord, RowRoundTripEqualsTheCpuCacheFormat) {
  std::mt19937 gen(20261130);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 30);
  std::vector<uint8_t> record(kvrec::kRowBytes);
  std::vector<float> row(kvrec::kDim), decoded(kvrec::kDim);
  for (int trial = 0; trial < 400; ++trial) {
    // Each 64-channel block at its own magnitude; some blocks all zero or below the 1e-4 floor, some with channels
    // 1e-5 of the block's amax (e4m3 subnormals after the scale).
    for (int b = 0; b < kvrec::kDim / 64; ++b) {
      const int kind = trial % 5 == 0 ? b % 4 : 3;
      const float mag = std::ldexp(1.0f, exponent(gen));
      for (int c = 0; c < 64; ++c) {
        float v = normal(gen) * mag;
        if (kind == 0) v = 0.0f;
        if (kind == 1) v = normal(gen) * 1e-6f;
        if (kind == 2 && c % 3 == 0) v *= 1e-5f;
        row[size_t(b) * 64 + size_t(c)] = v;
      }
    }
    if (trial == 1) row[5] = -0.0f;  // -0 keeps its sign through the record
    kvrec::encode_row(row.data(), record.data());
    kvrec::decode_row(record.data(), decoded.data());
    const std::vector<float> want = cpu_cache_row(row);
    for (int d = 0; d < kvrec::kDim; ++d)
      ASSERT_EQ(bits(decoded[size_t(d)]), bits(want[size_t(d)])) << "trial " << trial << " channel " << d;
    // The bytes the layout says: the rope channels' bf16 at 448 + 2j, the scale bytes, zero padding.
    for (int j = 0; j < kvrec::kRopeDim; ++j) {
      uint16_t h;
      std::memcpy(&h, record.data() + kvrec::kRope + 2 * j, 2);
      ASSERT_EQ(uint32_t(h) << 16, bits(want[size_t(kvrec::kNope + j)])) << "rope channel " << j;
    }
    for (int i = kvrec::kScales + kvrec::kBlocks; i < kvrec::kRowBytes; ++i)
      ASSERT_EQ(record[size_t(i)], 0) << "pad byte " << i;
  }
}

TEST(KvRecord, FormatSwitchParsesBf16AndFp8Only) {
  EXPECT_EQ(cuda::parse_kv_format(nullptr), cuda::KvFormat::Bf16);
  EXPECT_EQ(cuda::parse_kv_format(""), cuda::KvFormat::Bf16);
  EXPECT_EQ(cuda::parse_kv_format("bf16"), cuda::KvFormat::Bf16);
  EXPECT_EQ(cuda::parse_kv_format("fp8"), cuda::KvFormat::Fp8);
  EXPECT_THROW(cuda::parse_kv_format("FP8"), Error);
  EXPECT_THROW(cuda::parse_kv_format("e4m3"), Error);
}
