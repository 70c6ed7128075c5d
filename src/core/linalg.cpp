#include "core/linalg.h"

namespace deepinfer {

double dot(const float* a, const float* b, int64_t n) {
  // Four partial sums keep the loop vectorisable without -ffast-math.
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += double(a[i]) * b[i];
    s1 += double(a[i + 1]) * b[i + 1];
    s2 += double(a[i + 2]) * b[i + 2];
    s3 += double(a[i + 3]) * b[i + 3];
  }
  for (; i < n; ++i) s0 += double(a[i]) * b[i];
  return (s0 + s1) + (s2 + s3);
}

void matmul_nt(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) y[r * out + o] = float(dot(x + r * in, w + o * in, in));
}

Tensor linear(const Tensor& x, const Tensor& w) {
  DI_CHECK(w.rank() == 2 && x.rank() >= 1 && x.shape.back() == w.shape[1],
           "linear: input " + shape_string(x.shape) + " does not match weight " + shape_string(w.shape));
  std::vector<int64_t> shape = x.shape;
  shape.back() = w.shape[0];
  Tensor y(shape);
  matmul_nt(x.ptr(), x.numel() / w.shape[1], w.shape[1], w.ptr(), w.shape[0], y.ptr());
  return y;
}

}  // namespace deepinfer
