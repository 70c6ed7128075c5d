// W8A16 grouped linear for V4's wo_a (model-spec §3 "Attention": the grouped low-rank output z_g = wo_a[g] . o_g
// takes the bf16 attention output, not quantized; the weight is FP8 e4m3 with 128 x 128 e8m0 block scales). An
// e4m3 code times a power-of-two scale is exact in fp32 (and bf16), so dequantizing in registers and accumulating in
// fp32 computes the product of the dequantized bf16 weight that cuBLAS runs, while reading half the bytes.
#pragma once

#include <cublas_v2.h>

#include <cstdint>

#include "cuda/kernels.h"

namespace deepinfer::cuda {

// Up to this many rows the FP8 decode kernel runs; above it cuBLAS on the bf16 copy. Measured on the H200 at V4-Flash's
// wo_a (8 x [1024 x 4096]): 1 row 9.3 us vs cuBLAS 18.6, 2 rows 13.1 vs 18.7, 4 rows 22.0 vs 18.5 (the decode
// kernel's time grows with the rows of a pass: its per-row FMA chains, not the bytes, set it there).
constexpr int64_t kW8A16GemvMaxRows = 2;

// y[t, g * n_g + i] = sum_c x[t, g * w.k + c] * W[g * n_g + i, c] for the `groups` groups of n_g = w.n / groups
// weight rows, W = e4m3 codes times their e8m0 scales (w.block 16 .. 128); x [rows, groups * w.k] bf16, y [rows, w.n]
// bf16, fp32 accumulation. w.k % 128 == 0, n_g % 4 == 0. The decode kernel alone (any row count; a row's bits do not
// depend on the other rows).
void w8a16_grouped_gemv(const bf16* x, int64_t rows, const Fp8Linear& w, int groups, bf16* y, cudaStream_t stream);

// The same product, dispatched by rows: the decode kernel on `w` up to kW8A16GemvMaxRows rows, else gemm_bf16
// (cuda/blas.h) on `w_bf16`, the same weight dequantized (fp8_dequantize_bf16). In batch-invariant mode
// (cuda/numerics_mode.h) every row count takes gemm_bf16, whose batch-invariant kernel then runs: one kernel for
// every row count, so a row's bits do not depend on the batch.
void w8a16_grouped_linear(cublasHandle_t blas, const bf16* x, int64_t rows, const Fp8Linear& w, const bf16* w_bf16,
                          int groups, bf16* y, cudaStream_t stream);

// out [w.n, w.k] = the weight's e4m3 codes times their e8m0 scales, in bf16 (exact): the load-time bf16 copy of a
// weight generated on the device (a checkpoint's copy is dequantized on the host, upload_linear_as_bf16).
void fp8_dequantize_bf16(const Fp8Linear& w, bf16* out, cudaStream_t stream);

}  // namespace deepinfer::cuda
