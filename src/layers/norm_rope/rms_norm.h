#pragma once

#include <cstdint>

namespace deepinfer {

// model-spec §2: y = w * x * rsqrt(mean(x^2) + eps), computed in fp32. `weight` may be null (the
// unweighted norms: V4's per-head q norm, the mHC input norm).
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* y);

// rms_norm applied to each of `rows` consecutive rows of width n, in place.
void rms_norm_rows(float* x, int64_t rows, const float* weight, int64_t n, float eps);

// V4's per-head query norm as the official reference computes it on its bf16 query (model-spec §3: `q *
// rsqrt(q.square().mean(-1) + eps)` in torch bf16 ops, each op's result rounded to bf16; the mean's sum accumulates
// wider): x * r with the squares, their mean, mean + eps, r and each product rounded to bf16, in place, rows of width
// n. x holds bf16 values (the GEMM's bf16 output).
void head_rms_norm_bf16(float* x, int64_t rows, int64_t n, float eps);

}  // namespace deepinfer
