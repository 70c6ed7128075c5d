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
// The helpers are __host__ __device__ under nvcc (the e4m3 conversions of cuda_fp8.h, on the host too); a host
// compiler sees plain inline functions over core/dtype.h's e4m3 rounding (RNE, saturating at 448: the codes of
// __nv_cvt_float_to_fp8(.., __NV_SATFINITE, __NV_E4M3)), so a CPU test checks the same layout and rule.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/dtype.h"  // host: bf16 / e4m3 rounding
#include "core/error.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#define DI_KV_HD __host__ __device__ __forceinline__
#else
#define DI_KV_HD inline
#endif

namespace deepinfer::cuda {

// How a model stores its KV rows (window ring and compressed pool): bf16 values (1024 B per 512-channel row) or
// the packed record below (592 B). V4-Flash only: V4.1's caches keep their own formats (MXFP8 window values,
// FP4 compressed values, both as bf16; bench/gpu/NOTES.md "Packed FP8 KV record" for what their records would need).
enum class KvFormat : uint8_t { Bf16 = 0, Fp8 = 1 };

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

DI_KV_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
DI_KV_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// The block scale of a block whose largest magnitude is amax: 2^ceil(log2(max(amax, 1e-4) / 448)) (model-spec §3;
// fp8_fake_quant's rule). The division is IEEE (no fast math in this project); the power-of-two ceiling keeps an
// exact power of two and otherwise takes the next exponent.
DI_KV_HD float block_scale(float amax) {
  const float x = (amax > 1e-4f ? amax : 1e-4f) / 448.0f;
  const uint32_t u = float_bits(x);
  return (u & 0x007FFFFFu) == 0 ? x : bits_float((u & 0x7F800000u) + 0x00800000u);
}

// e8m0 byte of a power-of-two scale (its biased exponent) and back; byte 0 (a zeroed record) decodes to 0.
DI_KV_HD uint8_t encode_scale(float scale) { return uint8_t(float_bits(scale) >> 23); }
DI_KV_HD float decode_scale(uint8_t e) { return bits_float(uint32_t(e) << 23); }

// The e4m3 code of v / scale (round to nearest even, saturating at 448).
DI_KV_HD uint8_t encode_code(float v, float scale) {
#if defined(__CUDACC__)
  return uint8_t(__nv_cvt_float_to_fp8(v / scale, __NV_SATFINITE, __NV_E4M3));
#else
  return float_to_e4m3(v / scale);
#endif
}

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

// Bytes per KV row of a dim-channel cache in `format` (the record needs dim == kvrec::kDim).
inline int kv_row_bytes(KvFormat format, int dim) { return format == KvFormat::Fp8 ? kvrec::kRowBytes : 2 * dim; }

#if !defined(__CUDA_ARCH__)
// The format the V4 GPU model allocates its caches in: DEEPINFER_KV_FORMAT=bf16 (default) or fp8, read once at the
// first query (an unknown value is an error); set_kv_format overrides it (tests, before a model is built: a model
// keeps the format of its allocation, and its graphs replay the kernels of that format).
inline KvFormat parse_kv_format(const char* v) {
  if (!v || !*v || std::strcmp(v, "bf16") == 0) return KvFormat::Bf16;
  DI_CHECK(std::strcmp(v, "fp8") == 0, std::string("DEEPINFER_KV_FORMAT=") + v + ": expected bf16 or fp8");
  return KvFormat::Fp8;
}
inline std::atomic<KvFormat>& kv_format_flag() {
  static std::atomic<KvFormat> format{parse_kv_format(std::getenv("DEEPINFER_KV_FORMAT"))};
  return format;
}
inline KvFormat kv_format() { return kv_format_flag().load(std::memory_order_relaxed); }
inline void set_kv_format(KvFormat format) { kv_format_flag().store(format, std::memory_order_relaxed); }
inline const char* kv_format_name(KvFormat format) { return format == KvFormat::Fp8 ? "fp8" : "bf16"; }
#endif

}  // namespace deepinfer::cuda
