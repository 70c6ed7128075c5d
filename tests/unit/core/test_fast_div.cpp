// cuda/fast_div.h against the compiler's division: every divisor's quotients and remainders at the numerators where
// the rounding of the round-up method is tightest (multiples of the divisor and their neighbours, the top of the
// int range) and at pseudo-random numerators; the divisors cover small values, powers of two and their neighbours,
// primes, and the largest int (the CSA2 select's "no candidate blocks" divisor).
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/fast_div.h"

namespace deepinfer::cuda {
namespace {

std::vector<int32_t> divisors() {
  std::vector<int32_t> d;
  for (int32_t v = 1; v <= 300; ++v) d.push_back(v);
  for (int p = 1; p < 31; ++p) {
    const int64_t two = int64_t(1) << p;
    for (int64_t v : {two - 1, two, two + 1})
      if (v >= 1 && v <= INT_MAX) d.push_back(int32_t(v));
  }
  for (int32_t v : {641, 6700417, 65537, 1000003, 2147483629, 1431655765, INT_MAX - 1, INT_MAX}) d.push_back(v);
  return d;
}

void expect_exact(const FastDiv& f, int32_t n) {
  const int32_t d = f.divisor();
  ASSERT_EQ(f.div(n), n / d) << "n " << n << " d " << d;
  ASSERT_EQ(f.mod(n), n % d) << "n " << n << " d " << d;
}

TEST(FastDiv, EdgesOfEveryDivisor) {
  for (const int32_t d : divisors()) {
    const FastDiv f(d);
    for (int32_t n : {0, 1, 2, INT_MAX, INT_MAX - 1, INT_MAX - d + 1}) expect_exact(f, n);
    // Around the first and the last multiples of d: q d - 1, q d, q d + 1.
    for (int64_t q : {int64_t(1), int64_t(2), int64_t(3), int64_t(INT_MAX) / d - 1, int64_t(INT_MAX) / d}) {
      for (int64_t delta = -1; delta <= 1; ++delta) {
        const int64_t n = q * d + delta;
        if (n >= 0 && n <= INT_MAX) expect_exact(f, int32_t(n));
      }
    }
  }
}

TEST(FastDiv, RandomNumerators) {
  std::mt19937 gen(20261204);
  std::uniform_int_distribution<int32_t> num(0, INT_MAX);
  for (const int32_t d : divisors()) {
    const FastDiv f(d);
    for (int i = 0; i < 2000; ++i) expect_exact(f, num(gen));
  }
}

TEST(FastDiv, EveryNumeratorOfSmallDivisors) {
  // The select's divisors in practice (candidate blocks of 8, pages of 64) over every entry index of a 1M context.
  for (const int32_t d : {3, 7, 8, 64, 100}) {
    const FastDiv f(d);
    for (int32_t n = 0; n < (1 << 20); ++n) expect_exact(f, n);
  }
}

}  // namespace
}  // namespace deepinfer::cuda
