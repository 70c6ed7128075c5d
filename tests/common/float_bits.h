// Shared by the host tests that compare floats bit for bit (tests/unit/v4, v41, parallel): a float's bit pattern,
// and the e4m3fn number of a code computed from its fields, the formula the KV record decoders are checked against.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace deepinfer::testing {

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// e4m3fn from its fields (1 sign, 4 exponent with bias 7, 3 mantissa; exponent 0 subnormal M x 2^-9).
inline double e4m3_formula(uint8_t code) {
  const int sign = code >> 7, e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return sign ? -mag : mag;
}

}  // namespace deepinfer::testing
