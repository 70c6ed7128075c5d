// The grouped MXFP4 prefill's code tables (mxfp4_prefill.cu, fp4_step_codes): a K step's e2m1 magnitudes 0..3 / 4..7
// as e4m3 bytes, d binades below the row's largest scale (d = R - e of the 32-block, model-spec's MXFP4 weights folded
// into the codes): table0(d) = 0x6C686000 - d x 0x08080800, table1(d) = 0x7C787470 - d x 0x08080808 (one binade is 8
// in an e4m3 byte's exponent field).
// The same words from d8 = 8 d in byte j of a distance word (v13's NT 11 / 12 loop: without the two multiplier
// constants, two registers fewer, which its two A sets need): one byte permute broadcasts byte j to bytes 1..3 with a
// zero byte 0 (selector j j j 4, byte 4 being b = 0), or to all four bytes (j j j j), and 8 d x 0x01010100 =
// d x 0x08080800, 8 d x 0x01010101 = d x 0x08080808. Exact for d < 32 (8 d fits its byte, and a distance word shifted
// left by 3 carries nothing into the next byte); a clean item's d <= kMaxFold = 11. Plain C++ with host + device
// qualifiers: tests/unit/core/test_fp4_tables.cpp checks table*_d8 against table* for every d < 32 and every j, with
// PTX prmt.b32's byte selection written out on the host.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DI_FP4TAB_HD __host__ __device__ __forceinline__
#else
#define DI_FP4TAB_HD inline
#endif

namespace deepinfer::fp4tab {

constexpr int kD8Shift = 3;            // d8 = d << kD8Shift
constexpr uint32_t kD8MaxDistance = 31;  // the largest d the d8 form is exact for

DI_FP4TAB_HD constexpr uint32_t table0(uint32_t d) { return 0x6C686000u - d * 0x08080800u; }
DI_FP4TAB_HD constexpr uint32_t table1(uint32_t d) { return 0x7C787470u - d * 0x08080808u; }

// Byte-permute selectors (prmt.b32, default mode) of byte j: j j j 4 (byte 0 from b = 0) and j j j j.
DI_FP4TAB_HD constexpr uint32_t sel_d8_0(int j) { return 0x4u | uint32_t(j) * 0x1110u; }
DI_FP4TAB_HD constexpr uint32_t sel_d8_1(int j) { return uint32_t(j) * 0x1111u; }

// table0 / table1 of the distance in byte j of d8w (every byte of d8w = 8 x a distance < 32); perm(a, b, sel) is
// prmt.b32.
template <class Perm>
DI_FP4TAB_HD uint32_t table0_d8(uint32_t d8w, int j, Perm perm) {
  return 0x6C686000u - perm(d8w, 0u, sel_d8_0(j));
}
template <class Perm>
DI_FP4TAB_HD uint32_t table1_d8(uint32_t d8w, int j, Perm perm) {
  return 0x7C787470u - perm(d8w, 0u, sel_d8_1(j));
}

}  // namespace deepinfer::fp4tab
