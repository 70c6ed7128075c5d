#include "core/dtype.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace deepinfer {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::F8_E8M0: return "F8_E8M0";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::BOOL: return "BOOL";
  }
  return "?";
}

bool parse_dtype(const std::string& name, DType* out) {
  static const std::pair<const char*, DType> table[] = {
      {"F32", DType::F32},         {"F64", DType::F64},         {"BF16", DType::BF16},
      {"F16", DType::F16},         {"F8_E4M3", DType::F8_E4M3}, {"F8_E8M0", DType::F8_E8M0},
      {"I8", DType::I8},           {"U8", DType::U8},           {"I32", DType::I32},
      {"I64", DType::I64},         {"BOOL", DType::BOOL}};
  for (auto& [n, t] : table)
    if (name == n) { *out = t; return true; }
  return false;
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::BF16: case DType::F16: return 2;
    default: return 1;
  }
}

namespace {
// All 127 non-negative finite e4m3fn values in code order (code 0x7F is NaN); monotone in the code.
const std::array<float, 127>& e4m3_positive_table() {
  static const std::array<float, 127> table = [] {
    std::array<float, 127> t{};
    for (int c = 0; c < 127; ++c) {
      int exp = c >> 3, man = c & 7;
      t[c] = exp == 0 ? std::ldexp(float(man), -9) : std::ldexp(1.0f + man / 8.0f, exp - 7);
    }
    return t;
  }();
  return table;
}

constexpr std::array<float, 8> kE2m1Grid = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// Index of the nearest grid value to a (a >= 0, grid ascending), ties to the even index.
template <size_t N>
int nearest_even(const std::array<float, N>& grid, float a) {
  auto it = std::lower_bound(grid.begin(), grid.end(), a);
  if (it == grid.end()) return int(N) - 1;
  int hi = int(it - grid.begin());
  if (hi == 0 || grid[hi] == a) return hi;
  int lo = hi - 1;
  float dlo = a - grid[lo], dhi = grid[hi] - a;
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo % 2 == 0) ? lo : hi;
}
}  // namespace

float e4m3_to_float(uint8_t v) {
  int code = v & 0x7F;
  if (code == 0x7F) return bits_to_float(0x7fc00000u);
  float a = e4m3_positive_table()[code];
  return (v & 0x80) ? -a : a;
}

uint8_t float_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7F;
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::min(std::fabs(f), 448.0f);
  return uint8_t(sign | nearest_even(e4m3_positive_table(), a));
}

uint8_t float_to_e8m0(float pow2) {
  int e;
  std::frexp(pow2, &e);  // pow2 = 0.5 * 2^e
  int code = (e - 1) + 127;
  return uint8_t(std::clamp(code, 0, 254));
}

float e2m1_to_float(uint8_t code) {
  float a = kE2m1Grid[code & 7];
  return (code & 8) ? -a : a;
}

uint8_t float_to_e2m1(float f) {
  uint8_t sign = std::signbit(f) ? 8 : 0;
  float a = std::min(std::fabs(f), 6.0f);
  return uint8_t(sign | nearest_even(kE2m1Grid, a));
}

float pow2_ceil(float x) {
  int e;
  float m = std::frexp(x, &e);  // x = m * 2^e, m in [0.5, 1)
  return m == 0.5f ? x : std::ldexp(1.0f, e);
}

}  // namespace deepinfer
