// Scalar formats of the V4 family (model-spec §2, §5): bf16 activations and dense weights,
// e4m3 FP8 weights/KV, e8m0 power-of-two block scales, e2m1 FP4 expert weights and KV.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace deepinfer {

enum class DType { F32, F64, BF16, F16, F8_E4M3, F8_E8M0, I8, U8, I32, I64, BOOL };

// Name as written in a safetensors header ("BF16", "F8_E4M3", ...).
const char* dtype_name(DType t);
// Parses a safetensors dtype string; returns false for one the engine does not know.
bool parse_dtype(const std::string& name, DType* out);
// Bytes per element (I8 holds two e2m1 values in the packed FP4 layout, still one byte).
size_t dtype_size(DType t);

inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// bf16 is the top half of an IEEE binary32.
inline float bf16_to_float(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }
// Round to nearest even, as torch's .to(bfloat16) does; NaN stays NaN.
inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

// e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; no infinities, max 448, NaN = S.1111.111.
float e4m3_to_float(uint8_t v);
// Round to nearest even with saturation to ±448 (torch's float -> float8_e4m3fn after clamp).
uint8_t float_to_e4m3(float f);
inline float round_e4m3(float f) { return e4m3_to_float(float_to_e4m3(f)); }

// e8m0: an unsigned power-of-two exponent, value 2^(v-127); 0xFF is NaN.
inline float e8m0_to_float(uint8_t v) {
  if (v == 0xFF) return bits_to_float(0x7fc00000u);
  if (v == 0) return bits_to_float(0x00400000u);  // 2^-127, a subnormal in binary32
  return bits_to_float(uint32_t(v) << 23);
}
// The e8m0 code of an exact power of two (as produced by pow2_ceil); 2^-127 maps to 0.
uint8_t float_to_e8m0(float pow2);

// e2m1 (FP4): grid {0, 0.5, 1, 1.5, 2, 3, 4, 6} with a sign bit; code in the low 4 bits.
float e2m1_to_float(uint8_t code);
// Round to the nearest grid point, ties to the even code (torch-style RNE), saturating at ±6.
uint8_t float_to_e2m1(float f);
inline float round_e2m1(float f) { return e2m1_to_float(float_to_e2m1(f)); }

// Smallest power of two >= x (x > 0): the ue8m0 scale rule 2^ceil(log2(x)) of model-spec §2.
float pow2_ceil(float x);

}  // namespace deepinfer
