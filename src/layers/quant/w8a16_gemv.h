// W8A16 grouped linear for V4's wo_a (model-spec §3 "Attention": the grouped low-rank output z_g = wo_a[g] . o_g
// takes the bf16 attention output, not quantized; the weight is FP8 e4m3 with 128 x 128 e8m0 block scales). An
// e4m3 code times a power-of-two scale is exact in fp32, so dequantizing in registers and accumulating in fp32
// computes the product of the dequantized bf16 weight that cuBLAS ran before, while reading half the bytes.
#pragma once

#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels.h"

namespace deepinfer::cuda {

// Up to this many rows the decode kernel runs (one pass over the weight per 4 rows, the passes of a weight tile
// side by side so that they share it through L2); above it (prefill) the weight is dequantized into the
// workspace and cuBLAS multiplies. In batch-invariant mode (cuda/numerics_mode.h) the decode kernel runs for every
// row count: its per-row arithmetic does not depend on how many rows share the call.
constexpr int64_t kW8A16GemvMaxRows = 32;

// y[t, g * n_g + i] = sum_c x[t, g * w.k + c] * W[g * n_g + i, c] for the `groups` groups of n_g = w.n / groups
// weight rows, W = e4m3 codes times their e8m0 scales (w.block = 128); x [rows, groups * w.k] bf16, y [rows, w.n]
// bf16, fp32 accumulation. w.k % 128 == 0, n_g % 4 == 0. The decode kernel alone (any row count).
void w8a16_grouped_gemv(const bf16* x, int64_t rows, const Fp8Linear& w, int groups, bf16* y, cudaStream_t stream);

// The same product, dispatched by rows (kW8A16GemvMaxRows). `workspace` holds the dequantized bf16 weight of the
// cuBLAS path: w8a16_grouped_workspace_bytes(w, max_rows) bytes (0 when max_rows never leaves the decode kernel).
size_t w8a16_grouped_workspace_bytes(const Fp8Linear& w, int64_t max_rows);
void w8a16_grouped_linear(cublasHandle_t blas, const bf16* x, int64_t rows, const Fp8Linear& w, int groups, bf16* y,
                          void* workspace, cudaStream_t stream);

}  // namespace deepinfer::cuda
