// bf16 decode GEMV for a pair of products of one input: the compressors' kv and gate projections at a few rows
// (model-spec §3 / §4: kv = wkv . x, gate = wgate . x, fp32 out of the bf16 weights). At batch-1 decode cuBLAS runs
// them as one strided-batched nvjet 8x64 tile without split-K: n / 64 x 2 blocks stream 8-16 MB of weights, 23 us
// (V4.1: 26.5 us) on the side branch the attention joins (bench/results/gpu_h200_run80_trace_b1_sequence.txt,
// bench/gpu/NOTES.md "bf16 GEMV for the compressor pair"). This kernel spreads the weight rows over every SM.
#pragma once

#include <cstdint>

#include "cuda/kernels.h"

namespace deepinfer::cuda {

// gemm_bf16_pair (cuda/blas.h) takes the GEMV up to kBf16GemvMaxRows rows outside batch-invariant mode, cuBLAS
// above. Measured in session 14 (run 86, `roofline --bf16-gemv-only`, V4 HCA pair n 512 k 4096): 4.2 us against
// cuBLAS's 22.4 us at one row, and V4-Flash batch-1 decode 2.938 -> 2.762 ms (-6 %); at 8 rows the token-tiled form
// of the kernel took 30.7 us against cuBLAS's 9.8 (its x loads were one dependent L1 round trip per step), so that
// form went (bench/gpu/NOTES.md "bf16 GEMV for the compressor pair"). Its successor, the staged form below, measured
// in session 15 (run 92, same tool; us, bf16_gemv_pair / cuBLAS gemm_bf16_pair):
//            m = 1          m = 2          m = 4          m = 8
//   V4 hca   4.43 / 22.08   4.61 / 17.07   5.50 / 16.29   9.49 / 9.11
//   V4 csa   6.91 / 10.40   7.73 / 10.40   9.47 / 9.88    12.73 / 9.82
//   V4.1 hca 4.52 / 24.70   5.12 / 18.17   6.04 / 21.82   10.84 / 10.60
//   V4.1 csa 8.07 / 12.02   9.45 / 12.03   10.86 / 11.46  13.15 / 11.36
// faster at 2 and 4 rows on every shape, slower at 8 (decode with the limit at 8 vs 1 was neutral): the limit is the
// crossover, 4 (bench/gpu/NOTES.md "bf16 GEMV at 2-8 rows: x staged in shared memory").
constexpr int64_t kBf16GemvMaxRows = 4;
// The rows one pass over the weights carries in the staged form (bf16_gemv_pair at m >= 2): the block's x rows in
// shared memory once, read from there at each step (no global round trip per step and row).
constexpr int64_t kBf16GemvRowsPerPass = 8;
// gemm_bf16 (one product, batch 1) takes the GEMV up to kBf16GemvMaxRows rows for weights up to this many
// elements (64 MB): the indexers' head-weight projections (64 x 4096: a cuBLAS split-K pair of ~4.6 + 1.5 us on the
// batch-1 critical path, run 86's trace) and V4.1's CSA2 compressor kv projection, not the LM head (1 GB, where
// cuBLAS streams at the copy rate).
constexpr int64_t kBf16GemvMaxWeights = int64_t(32) << 20;

// DEEPINFER_BF16_GEMV=0 turns the GEMV off (gemm_bf16 and gemm_bf16_pair run cuBLAS at every row count); read once.
bool bf16_gemv_enabled();

// Whether bf16_gemv_pair takes these operands: 16-byte aligned x / w1 / w2 and row strides, k % 8 == 0, shapes that
// fit its int indexing.
bool bf16_gemv_pair_fits(const bf16* x, int64_t ldx, const bf16* w1, const bf16* w2, int64_t ldw, int64_t m,
                         int64_t n, int64_t k);

// y = x . w^T: bf16_gemv_pair's kernel on one matrix (the same bits as the pair's y1). Needs
// bf16_gemv_pair_fits(x, ldx, w, w, ldw, m, n, k).
void bf16_gemv(const bf16* x, int64_t ldx, const bf16* w, int64_t ldw, void* y, OutType out, int64_t ldy, int64_t m,
               int64_t n, int64_t k, cudaStream_t stream);

// y1 = x . w1^T and y2 = x . w2^T: x [m, k] (row stride ldx), w1 / w2 [n, k] (ldw), y1 / y2 [m, n] (ldy) fp32 or
// bf16 (OutType), fp32 accumulation, one launch for both (two where m is not a multiple of the rows per pass). Any
// m: one row, one pass over the weights; m >= 2, up to kBf16GemvRowsPerPass rows per pass, their x staged in shared
// memory (fewer where k is wide: <= 96 KB per block; one row per pass past that). A row's bits do not depend on m or
// on the other rows (every row does the same operations in the same order in both forms). Needs
// bf16_gemv_pair_fits.
void bf16_gemv_pair(const bf16* x, int64_t ldx, const bf16* w1, const bf16* w2, int64_t ldw, void* y1, void* y2,
                    OutType out, int64_t ldy, int64_t m, int64_t n, int64_t k, cudaStream_t stream);

}  // namespace deepinfer::cuda
