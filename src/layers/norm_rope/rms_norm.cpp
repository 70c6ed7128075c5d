#include "layers/norm_rope/rms_norm.h"

#include <cmath>

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

}  // namespace deepinfer
