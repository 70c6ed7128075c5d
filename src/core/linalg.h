// Dense fp32 linear algebra for the CPU reference path. Accumulation is in double so the reference's
// own rounding stays far below the tolerances it is tested with (DESIGN.md principle 2).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace deepinfer {

// y[r, o] = sum_i x[r, i] * w[o, i]: x [rows, in], w [out, in] (the checkpoint's [out, in] layout).
void matmul_nt(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y);

// x [..., in] times w [out, in]^T -> [..., out].
Tensor linear(const Tensor& x, const Tensor& w);

// Dot product of two fp32 vectors, double accumulation.
double dot(const float* a, const float* b, int64_t n);

}  // namespace deepinfer
