// The e2m1 -> e4m3 widening and the K order of the MXFP4 decode stream on wgmma (cuda/stream_fp4_wgmma.cuh,
// bench/gpu/NOTES.md "MXFP4 decode stream on wgmma"). Plain C++ with host + device qualifiers, so the host test
// (tests/gpu/test_stream_fp4_wgmma.cpp, FourBitWidening / KOrder) checks the very functions the kernel runs.
//
// Where the nibbles are. The decode pack (kernels.h "Fragment-ordered MXFP4 experts", mxfp4_pack) gives lane
// (g = lane / 4, c = lane % 4) of a 16-row tile, per 32-wide K step, one 32-bit word per row (rows g and g + 8):
// the checkpoint's 4 bytes of physical columns 8c .. 8c + 7, so nibble j (bits 4j .. 4j + 3; the even column in
// the low nibble of each byte) is column 8c + j. (skinny::Format<MXFP4>::widen and widen_fp4_perm pair nibbles j and
// j + 4 into one f16x2 for the m16n8k16 fragment; the columns a thread owns are the same 8.)
//
// What wgmma wants. The register-A fragment of m64nNk32 with 8-bit types (PTX ISA; cuda/wgmma.cuh) gives the same
// thread rows 16w + g and 16w + g + 8 at LOGICAL K 4c .. 4c + 3 (registers a0 / a1, byte i = K 4c + i) and 16 + 4c
// .. 16 + 4c + 3 (a2 / a3). So each thread owns 8 physical columns and 8 logical K slots: any bijection between
// them, the same for every row and thread, is a K permutation, and the dot product does not care as long as the
// activations (B, staged by the kernel in shared memory) follow it. No repack of the weights.
//
// The bijection, chosen for the cheapest widening: a0 / a1 take the EVEN nibbles 0, 2, 4, 6 (byte i = nibble 2i,
// physical column 8c + 2i), a2 / a3 the ODD ones 1, 3, 5, 7 (byte i = nibble 2i + 1, column 8c + 2i + 1):
//   logical K L (0 .. 31) of a 32-wide block  <-  physical column  pi(L) = L < 16 ? 2L : 2(L - 16) + 1,
// i.e. each 32-wide block's columns de-interleaved: the 16 even columns in order, then the 16 odd ones.
// (Per thread: logical 4c + i <- 8c + 2i = 2(4c + i); logical 16 + 4c + i <- 8c + 2i + 1.)
//
// The widening, exact, 7 integer operations per word of 8 values (< 1 per value; the f16 form needs ~1.4 plus the
// HMMA): an e2m1 magnitude m = (E1 E0 M) placed at bits 4..2 of a byte is the e4m3 code with exponent field E and
// mantissa M00, i.e. the e2m1 value times 2^-6 (normal: 2^(E-7) (1 + M/2) vs 2^(E-1) (1 + M/2); subnormal E = 0:
// 2^-6 (M/2) vs M/2); the sign goes to bit 7. Even nibbles sit at byte bits 0..3 (magnitude << 2, sign << 4), odd
// ones at bits 4..7 (magnitude >> 2, sign in place). The kernel folds the 2^6 into the activation scales.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DI_FP4E4_HD __host__ __device__ __forceinline__
#else
#define DI_FP4E4_HD inline
#endif

namespace deepinfer::cuda::fp4e4 {

// The even nibbles of v as 4 e4m3 codes (byte i = nibble 2i) and the odd ones (byte i = nibble 2i + 1), each the
// e2m1 value times 2^-6.
DI_FP4E4_HD void widen(uint32_t v, uint32_t& even, uint32_t& odd) {
  even = ((v << 2) & 0x1C1C1C1Cu) | ((v << 4) & 0x80808080u);
  odd = ((v >> 2) & 0x1C1C1C1Cu) | (v & 0x80808080u);
}

// The physical column (0 .. 31, inside a 32-wide K block) that logical K slot L of the wgmma takes.
DI_FP4E4_HD int k_column(int L) { return L < 16 ? 2 * L : 2 * (L - 16) + 1; }

// The activations' side of the same order: 8 e4m3 bytes of physical columns 8c .. 8c + 7 (word lo = columns
// 8c .. 8c + 3, hi = 8c + 4 .. 8c + 7) split by a byte permute (PRMT selector: result byte i = byte s_i of
// {hi:lo}) into the even columns (logical K 4c .. 4c + 3) and the odd ones (16 + 4c .. 16 + 4c + 3).
constexpr uint32_t kEvenBytes = 0x6420, kOddBytes = 0x7531;

// The power of two the widened codes are too small by (the kernel multiplies the activation scales by it).
constexpr int kUnscaleLog2 = 6;


}  // namespace deepinfer::cuda::fp4e4
