// Exact division of a non-negative int by a divisor fixed at launch, with one 32 x 32 -> 64-bit multiply and a shift
// instead of the ~25 instructions of a division by a run-time int (the decode selects run one per key in their last
// block: bench/gpu/NOTES.md "Session 34"). Plain C++ with host + device qualifiers: the host test
// (tests/unit/core/test_fast_div.cpp) checks the very arithmetic the kernels run.
//
// The round-up method. For a divisor d >= 1 let l = ceil(log2 d) (so 2^(l-1) < d <= 2^l), s = 31 + l and
// m = ceil(2^s / d). Then m < 2^32 (d > 2^(l-1), or m = 2^31 when d = 1), and for every 0 <= n < 2^31,
// floor(n * m / 2^s) = floor(n / d): with m = 2^s / d + e, 0 <= e < 1, n * m / 2^s = n / d + n e / 2^s where
// n e / 2^s < 2^31 / 2^s = 2^-l <= 1 / d; the fraction of n / d is at most (d - 1) / d, so adding less than 1 / d
// never reaches the next integer.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DI_FASTDIV_HD __host__ __device__ __forceinline__
#else
#define DI_FASTDIV_HD inline
#endif

namespace deepinfer::cuda {

class FastDiv {
 public:
  // divisor >= 1 (the caller checks).
  DI_FASTDIV_HD constexpr explicit FastDiv(int32_t divisor) : d_(uint32_t(divisor)), m_(0), s_(31) {
    int l = 0;
    while ((uint64_t(1) << l) < d_) ++l;
    s_ = 31 + l;
    m_ = uint32_t(((uint64_t(1) << s_) + d_ - 1) / d_);
  }
  DI_FASTDIV_HD int32_t divisor() const { return int32_t(d_); }
  // n / divisor for 0 <= n < 2^31.
  DI_FASTDIV_HD int32_t div(int32_t n) const { return int32_t((uint64_t(uint32_t(n)) * m_) >> s_); }
  // n % divisor for 0 <= n < 2^31.
  DI_FASTDIV_HD int32_t mod(int32_t n) const { return n - div(n) * int32_t(d_); }

 private:
  uint32_t d_, m_;
  int s_;
};

}  // namespace deepinfer::cuda
