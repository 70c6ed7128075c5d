// The V4-Flash KV cache row in its packed FP8 record (model-spec §6 "Decode-time state": "fp8 nope + bf16 rope,
// vLLM record 448+128+8 = 584 B"), one definition for every GPU writer and reader of the window ring and the
// compressed-KV pool (bench/gpu/NOTES.md "Packed FP8 KV record"), and for the host (tests, tools).
//
// A 512-channel KV row (448 "nope" channels, then 64 RoPE channels) in the V4 cache format (model-spec §3
// "Attention", v4_quantize_kv_row) is: each block of 64 nope channels e4m3 codes times one power-of-two scale
// 2^ceil(log2(max(amax, 1e-4) / 448)), the RoPE channels bf16. Until now the GPU stored that row as the 512 bf16
// VALUES (1024 B; exact: every code times a power of two is a bf16 number). The record stores the codes and the
// scales themselves:
//
//   bytes [0, 448)    e4m3 codes of nope channels 0..447 (channel c at byte c)
//   bytes [448, 576)  bf16 RoPE channels 448..511 (channel 448 + j at bytes 448 + 2j)
//   bytes [576, 583)  the 7 block scales as e8m0 bytes (the biased fp32 exponent: scale = 2^(byte - 127))
//   byte  583         zero (pads the 7 scales to 8 bytes: the 584-byte record of model-spec §6)
//   bytes [584, 592)  zero: the row stride is 592 = 37 x 16 bytes, so a row starts 16-byte aligned and moves in
//                     16-byte vectors (cp.async, uint4 copies); 584 is 36.5 vectors.
//
// The order is the one model-spec §6 quotes for vLLM's record (448 + 128 + 8): the bf16 RoPE channels start 16-byte
// aligned (byte 448), so they are copied as whole vectors, and the padding is all at the end.
//
// Decoding gives back exactly the bf16 value the bf16 pool held: code -> float is exact (every e4m3 number is a
// half), times a power of two is exact in fp32 (scales lie in [2^-22, 2^119]: amax >= 1e-4 and a bf16 amax <
// 2^128), and the product is a bf16 number (3 mantissa bits, exponent inside bf16's range), so the bf16
// conversion does not round. Hence attention over records is bitwise attention over the bf16 pool when the
// kernel does the same arithmetic on the decoded values (tests/gpu/test_attention.cpp GpuKvRecord.*).
//
// An all-zero record (a freshly zeroed pool, or cp.async's zero fill of an empty slot) decodes to +0 everywhere:
// e8m0 byte 0 decodes to scale 0 here (not 2^-127; no writer produces it).
//
// V4.1-Flash's two records (MXFP8 window rows, FP4 compressed entries) follow in namespace kvrec41 below.
//
// The helpers are __host__ __device__ under nvcc (the e4m3 conversions of cuda_fp8.h, on the host too); a host
// compiler sees plain inline functions over core/dtype.h's e4m3 rounding (RNE, saturating at 448: the codes of
// __nv_cvt_float_to_fp8(.., __NV_SATFINITE, __NV_E4M3)), so a CPU test checks the same layout and rule.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/dtype.h"  // host: bf16 / e4m3 rounding
#include "core/env_switch.h"
#include "core/error.h"
#include "layers/quant/fp8_scale.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#define DI_KV_HD __host__ __device__ __forceinline__
#else
#define DI_KV_HD inline
#endif

namespace deepinfer::cuda {

// How a pool stores its KV rows (window ring or compressed pool): bf16 values (1024 B per 512-channel row) or a
// packed record: V4-Flash's FP8 record below (592 B, window and compressed alike), V4.1-Flash's MXFP8 window record
// (528 B) and FP4 compressed-entry record (288 B) of kv_record_v41.h. The process switch DEEPINFER_KV_FORMAT
// (kv_format() below) says bf16 or packed; each model maps "packed" to its records.
enum class KvFormat : uint8_t { Bf16 = 0, Fp8 = 1, Mxfp8 = 2, Fp4 = 3 };

namespace kvrec {

constexpr int kDim = 512;                    // model-spec §1: head_dim
constexpr int kRopeDim = 64;                 // the RoPE channels, last
constexpr int kNope = kDim - kRopeDim;       // 448
constexpr int kBlock = 64;                   // model-spec §3: one scale per 64 nope channels
constexpr int kBlocks = kNope / kBlock;      // 7
constexpr int kCodes = 0;                    // byte offsets in the record
constexpr int kRope = kNope;                 // 448
constexpr int kScales = kRope + 2 * kRopeDim;  // 576
constexpr int kPackedBytes = kScales + 8;    // 584: the record as model-spec §6 / memory_plan.cpp count it
constexpr int kRowBytes = 592;               // the row stride: kPackedBytes rounded up to 16 bytes
static_assert(kNope % kBlock == 0 && kBlocks <= 8, "7 scales in 8 bytes");
static_assert(kRope % 16 == 0 && kRowBytes % 16 == 0 && kRowBytes >= kPackedBytes, "16-byte vectors");

// The block scale of a block whose largest magnitude is amax: 2^ceil(log2(max(amax, 1e-4) / 448)) (model-spec §3;
// fp8_fake_quant's rule): the bits of the IEEE division (no fast math in this project) and power-of-two ceiling,
// from amax's exponent and mantissa (layers/quant/fp8_scale.h says why; the division was a CALL of its slow path).
DI_KV_HD float block_scale(float amax) { return fp8scale::block_scale(amax); }

// e8m0 byte of a power-of-two scale (its biased exponent) and back; byte 0 (a zeroed record) decodes to 0.
DI_KV_HD uint8_t encode_scale(float scale) { return uint8_t(fp8scale::bits_of(scale) >> 23); }
DI_KV_HD float decode_scale(uint8_t e) { return fp8scale::float_of(uint32_t(e) << 23); }

// The e4m3 code of x (round to nearest even, saturating at 448; exact when x is an e4m3 number).
DI_KV_HD uint8_t e4m3_code(float x) {
#if defined(__CUDACC__)
  return uint8_t(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
#else
  return float_to_e4m3(x);
#endif
}

// The e4m3 code of v / scale, for a block_scale scale: v * (1 / scale) is the same correctly rounded number (1 / scale
// is a normal power of two, or +0 for +inf), without a division's slow path per value.
DI_KV_HD uint8_t encode_code(float v, float scale) { return e4m3_code(v * fp8scale::inverse(scale)); }

// The e4m3 number of a code, exactly (as a float).
DI_KV_HD float code_value(uint8_t code) {
#if defined(__CUDACC__)
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(code), __NV_E4M3)));
#else
  return e4m3_to_float(code);
#endif
}

// The cache value of a channel: code times scale (exact, a bf16 number).
DI_KV_HD float decode_value(uint8_t code, float scale) { return code_value(code) * scale; }

#if !defined(__CUDA_ARCH__)
// Host: a whole row [kDim] floats -> record [kRowBytes] (the nope channels quantized by the rule above, the RoPE
// channels rounded to bf16, the padding zero), and back to the kDim cache values.
inline void encode_row(const float* row, uint8_t* record) {
  std::memset(record, 0, kRowBytes);
  for (int b = 0; b < kBlocks; ++b) {
    float amax = 0.0f;
    for (int c = 0; c < kBlock; ++c) amax = std::max(amax, std::fabs(row[b * kBlock + c]));
    const float scale = block_scale(amax);
    record[kScales + b] = encode_scale(scale);
    for (int c = 0; c < kBlock; ++c) record[kCodes + b * kBlock + c] = encode_code(row[b * kBlock + c], scale);
  }
  for (int j = 0; j < kRopeDim; ++j) {
    const uint16_t h = float_to_bf16(row[kNope + j]);  // round to nearest even
    std::memcpy(record + kRope + 2 * j, &h, 2);
  }
}
inline void decode_row(const uint8_t* record, float* row) {
  for (int c = 0; c < kNope; ++c) row[c] = decode_value(record[kCodes + c], decode_scale(record[kScales + c / kBlock]));
  for (int j = 0; j < kRopeDim; ++j) {
    uint16_t h;
    std::memcpy(&h, record + kRope + 2 * j, 2);
    row[kNope + j] = bf16_to_float(h);
  }
}
#endif

}  // namespace kvrec

// ---- V4.1-Flash (model-spec §6 "Decode-time state", V4.1 column; bench/gpu/NOTES.md "V4.1 packed KV records")
// Two records, one per pool; the V4.1 GPU caches held both as bf16 VALUES until now (1024 B a row):
//
// Window ring row (KvFormat::Mxfp8), 528 B = 33 x 16: MXFP8 over all 512 channels, the RoPE channels included
// (model-spec §4 "Attention"; V41Model: fp8_fake_quant(kv, 512, 32)): per block of 32 channels the power-of-two
// scale kvrec::block_scale (the V4 rule) and the e4m3 codes kvrec::encode_code:
//   bytes [0, 512)    e4m3 codes of channels 0..511 (channel c at byte c)
//   bytes [512, 528)  the 16 block scales as e8m0 bytes (kvrec::encode_scale; byte 0 decodes to 0)
// Decoding is exact for V4's reason (kvrec above): code x 2^k is a bf16 number.
//
// Compressed-KV entry (KvFormat::Fp4), 288 B = 18 x 16: FP4 e2m1 with one e4m3 scale per 16 channels over all 512
// channels, after the RoPE of the last 64 (model-spec §4 "Compressor" (b); V41Model: fp4_fake_quant(latent, 512,
// 16, Fp4Scale::E4M3): scale = e4m3(max(amax, 6 * 2^-9) / 6), value = e2m1(v / scale) x scale):
//   bytes [0, 256)    e2m1 codes, two a byte: channel 2j in the low nibble of byte j, channel 2j + 1 in the high
//   bytes [256, 288)  the 32 block scales as e4m3 codes (every scale is an e4m3 number >= 2^-9: a nonzero code)
// Decoding is exact too: an e2m1 number (2 significant bits) times an e4m3 number (<= 4) has <= 6 significant bits
// and lies in [2^-10, 6 x 448], so the fp32 product is exact and a bf16 number. An all-zero record decodes to +0.
//
// e2m1 <-> e4m3: the e2m1 code s.EE.M (value 2^(E-1)(1 + M/2), or M/2 for E = 0) read as the e4m3 code
// s.00EE.M00 (value 2^(E-7)(1 + M/2), or M 2^-7 for E = 0: the e4m3 subnormal M00 x 2^-9) is its value x 2^-6 in
// both cases. So the attention's e4m3 -> half conversion decodes FP4 too (times scale x 64), and the encoder gets
// the code of an e2m1 number q from the e4m3 code of q x 2^-6 (exact).
namespace kvrec41 {

constexpr int kDim = 512;  // model-spec §1.2: head_dim
// Window record (MXFP8).
constexpr int kWindowBlock = 32;
constexpr int kWindowBlocks = kDim / kWindowBlock;       // 16
constexpr int kWindowCodes = 0;
constexpr int kWindowScales = kDim;                      // 512
constexpr int kWindowRowBytes = kWindowScales + kWindowBlocks;  // 528
// Compressed-entry record (FP4).
constexpr int kEntryBlock = 16;
constexpr int kEntryBlocks = kDim / kEntryBlock;         // 32
constexpr int kEntryCodes = 0;
constexpr int kEntryScales = kDim / 2;                   // 256
constexpr int kEntryRowBytes = kEntryScales + kEntryBlocks;  // 288
static_assert(kWindowRowBytes % 16 == 0 && kEntryRowBytes % 16 == 0, "rows move as 16-byte vectors");

constexpr float kE2m1InE4m3 = 64.0f;  // e2m1 value = e4m3 value of e2m1_e4m3_code x 2^6

// The e4m3 code whose value is the e2m1 code's value x 2^-6 (see above).
DI_KV_HD uint8_t e2m1_e4m3_code(uint8_t nibble) { return uint8_t(((nibble & 8u) << 4) | ((nibble & 7u) << 2)); }
// The e2m1 code of an e2m1 number q (an output of round_e2m1: -0 gives code 8).
DI_KV_HD uint8_t e2m1_code(float q) {
  const uint8_t c = kvrec::e4m3_code(q * (1.0f / kE2m1InE4m3));
  return uint8_t(((c >> 4) & 8u) | ((c >> 2) & 7u));
}
// Eight e2m1 codes (a little-endian word: channel 2j in the low nibble of byte j, 2j + 1 in the high) as eight
// e2m1_e4m3_code bytes in channel order (channel k at byte k of the result): the entry record's chunk of 8
// channels in the form the e4m3 -> half conversion takes.
DI_KV_HD uint64_t e2m1x8_e4m3_codes(uint32_t w) {
  const uint32_t even = ((w & 0x07070707u) << 2) | ((w & 0x08080808u) << 4);  // byte j: channel 2j
  const uint32_t odd = ((w >> 2) & 0x1C1C1C1Cu) | (w & 0x80808080u);         // byte j: channel 2j + 1
#if defined(__CUDA_ARCH__)
  return uint64_t(__byte_perm(even, odd, 0x5140)) | (uint64_t(__byte_perm(even, odd, 0x7362)) << 32);
#else
  uint64_t r = 0;
  for (int j = 0; j < 4; ++j)
    r |= (uint64_t((even >> (8 * j)) & 0xFFu) << (16 * j)) | (uint64_t((odd >> (8 * j)) & 0xFFu) << (16 * j + 8));
  return r;
#endif
}
// The e2m1 code's value, exactly.
DI_KV_HD float e2m1_value(uint8_t nibble) { return kvrec::code_value(e2m1_e4m3_code(nibble)) * kE2m1InE4m3; }
// The cache value of an entry channel: e2m1 code times its block's e4m3 scale (exact, a bf16 number).
DI_KV_HD float decode_entry_value(uint8_t nibble, uint8_t scale_code) {
  return e2m1_value(nibble) * kvrec::code_value(scale_code);
}

#if !defined(__CUDA_ARCH__)
// Host: a window row [kDim] floats -> record [kWindowRowBytes] by the MXFP8 rule, and back to the cache values.
inline void encode_window_row(const float* row, uint8_t* record) {
  for (int b = 0; b < kWindowBlocks; ++b) {
    float amax = 0.0f;
    for (int c = 0; c < kWindowBlock; ++c) amax = std::max(amax, std::fabs(row[b * kWindowBlock + c]));
    const float scale = kvrec::block_scale(amax);
    record[kWindowScales + b] = kvrec::encode_scale(scale);
    for (int c = 0; c < kWindowBlock; ++c)
      record[kWindowCodes + b * kWindowBlock + c] = kvrec::encode_code(row[b * kWindowBlock + c], scale);
  }
}
inline void decode_window_row(const uint8_t* record, float* row) {
  for (int c = 0; c < kDim; ++c)
    row[c] = kvrec::decode_value(record[kWindowCodes + c],
                                 kvrec::decode_scale(record[kWindowScales + c / kWindowBlock]));
}
// Host: a compressed entry [kDim] floats -> record [kEntryRowBytes] by the FP4 / e4m3 / 16 rule (core/dtype.h's
// e4m3 and e2m1 rounding), and back.
inline void encode_entry(const float* row, uint8_t* record) {
  std::memset(record, 0, kEntryRowBytes);
  for (int b = 0; b < kEntryBlocks; ++b) {
    float amax = 0.0f;
    for (int c = 0; c < kEntryBlock; ++c) amax = std::max(amax, std::fabs(row[b * kEntryBlock + c]));
    const float scale = round_e4m3(std::max(amax, 6.0f / 512.0f) / 6.0f);
    record[kEntryScales + b] = kvrec::e4m3_code(scale);
    for (int c = 0; c < kEntryBlock; ++c) {
      const int ch = b * kEntryBlock + c;
      record[kEntryCodes + ch / 2] |= uint8_t(e2m1_code(round_e2m1(row[ch] / scale)) << (4 * (ch % 2)));
    }
  }
}
inline void decode_entry(const uint8_t* record, float* row) {
  for (int c = 0; c < kDim; ++c)
    row[c] = decode_entry_value(uint8_t((record[kEntryCodes + c / 2] >> (4 * (c % 2))) & 15u),
                                record[kEntryScales + c / kEntryBlock]);
}
#endif

}  // namespace kvrec41

// Bytes per KV row of a dim-channel pool in `format` (a record needs dim == 512).
inline int kv_row_bytes(KvFormat format, int dim) {
  switch (format) {
    case KvFormat::Fp8: return kvrec::kRowBytes;
    case KvFormat::Mxfp8: return kvrec41::kWindowRowBytes;
    case KvFormat::Fp4: return kvrec41::kEntryRowBytes;
    default: return 2 * dim;
  }
}
inline const char* kv_format_name(KvFormat format) {
  switch (format) {
    case KvFormat::Fp8: return "fp8";
    case KvFormat::Mxfp8: return "mxfp8";
    case KvFormat::Fp4: return "fp4";
    default: return "bf16";
  }
}

#if !defined(__CUDA_ARCH__)
// The process's KV cache switch, read by the V4 / V4.1 GPU models when they allocate their caches:
// DEEPINFER_KV_FORMAT=bf16 (default) or fp8 (packed records: V4's Fp8 record; V4.1's Mxfp8 window and Fp4 entry
// records), read once at the first query or set (core/env_switch.h; an unknown value is an error); set_kv_format
// overrides it (tests, before a model is built: a model keeps the format of its allocation, and its graphs replay
// the kernels of that format).
inline KvFormat parse_kv_format(const char* v) {
  if (!v || !*v || std::strcmp(v, "bf16") == 0) return KvFormat::Bf16;
  DI_CHECK(std::strcmp(v, "fp8") == 0, std::string("DEEPINFER_KV_FORMAT=") + v + ": expected bf16 or fp8");
  return KvFormat::Fp8;
}
inline EnvSwitch<KvFormat>& kv_format_switch() {
  static EnvSwitch<KvFormat> format{"DEEPINFER_KV_FORMAT", parse_kv_format};
  return format;
}
inline KvFormat kv_format() { return kv_format_switch().get(); }
inline void set_kv_format(KvFormat format) { kv_format_switch().set(format); }
#endif

}  // namespace deepinfer::cuda
