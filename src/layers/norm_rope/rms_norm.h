#pragma once

#include <cstdint>

namespace deepinfer {

// model-spec §2: y = w * x * rsqrt(mean(x^2) + eps), computed in fp32. `weight` may be null (the
// unweighted norms: V4's per-head q norm, the mHC input norm).
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* y);

// rms_norm applied to each of `rows` consecutive rows of width n, in place.
void rms_norm_rows(float* x, int64_t rows, const float* weight, int64_t n, float eps);

}  // namespace deepinfer
