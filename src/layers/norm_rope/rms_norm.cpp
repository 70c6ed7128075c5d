#include "layers/norm_rope/rms_norm.h"

#include <cmath>

#include "core/dtype.h"

namespace deepinfer {

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* y) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  float r = 1.0f / std::sqrt(float(ss / double(n)) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = weight ? weight[i] * (x[i] * r) : x[i] * r;
}

void rms_norm_rows(float* x, int64_t rows, const float* weight, int64_t n, float eps) {
  for (int64_t r = 0; r < rows; ++r) rms_norm(x + r * n, weight, n, eps, x + r * n);
}

void head_rms_norm_bf16(float* x, int64_t rows, int64_t n, float eps) {
  for (int64_t row = 0; row < rows; ++row) {
    float* q = x + row * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += round_bf16(q[i] * q[i]);
    const float mean = round_bf16(float(ss / double(n)));
    const float r = round_bf16(1.0f / std::sqrt(round_bf16(mean + eps)));
    for (int64_t i = 0; i < n; ++i) q[i] = round_bf16(q[i] * r);
  }
}

}  // namespace deepinfer
