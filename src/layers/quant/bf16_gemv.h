// bf16 decode GEMV for a pair of products of one input: the compressors' kv and gate projections at a few rows
// (model-spec §3 / §4: kv = wkv . x, gate = wgate . x, fp32 out of the bf16 weights). At batch-1 decode cuBLAS runs
// them as one strided-batched nvjet 8x64 tile without split-K: n / 64 x 2 blocks stream 8-16 MB of weights, 23 us
// (V4.1: 26.5 us) on the side branch the attention joins (bench/results/gpu_h200_run80_trace_b1_sequence.txt,
// bench/gpu/NOTES.md "bf16 GEMV for the compressor pair"). This kernel spreads the weight rows over every SM.
#pragma once

#include <cstdint>

#include "cuda/kernels.h"

namespace deepinfer::cuda {

// Up to this many rows gemm_bf16_pair (cuda/blas.h) may take the GEMV (DEEPINFER_BF16_GEMV=stream); above it cuBLAS.
constexpr int64_t kBf16GemvMaxRows = 8;

// Which kernel gemm_bf16_pair runs at m <= kBf16GemvMaxRows outside batch-invariant mode: DEEPINFER_BF16_GEMV=
// stream|cublas, read once (default cublas until measured); set_bf16_gemv overrides it (tests, the roofline program).
enum class Bf16Gemv { Cublas, Stream };
Bf16Gemv bf16_gemv();
void set_bf16_gemv(Bf16Gemv mode);

// Whether bf16_gemv_pair takes these operands: 16-byte aligned x / w1 / w2 and row strides, k % 8 == 0, shapes that
// fit its int indexing.
bool bf16_gemv_pair_fits(const bf16* x, int64_t ldx, const bf16* w1, const bf16* w2, int64_t ldw, int64_t m,
                         int64_t n, int64_t k);

// y1 = x . w1^T and y2 = x . w2^T: x [m, k] (row stride ldx), w1 / w2 [n, k] (ldw), y1 / y2 [m, n] (ldy) fp32 or
// bf16 (OutType), fp32 accumulation, one launch for both. Any m (tokens in tiles of 8, each tile re-reading the
// weights: meant for m <= kBf16GemvMaxRows); a row's bits do not depend on m or on the other rows (every token does
// the same operations in the same order). Needs bf16_gemv_pair_fits.
void bf16_gemv_pair(const bf16* x, int64_t ldx, const bf16* w1, const bf16* w2, int64_t ldw, void* y1, void* y2,
                    OutType out, int64_t ldy, int64_t m, int64_t n, int64_t k, cudaStream_t stream);

}  // namespace deepinfer::cuda
