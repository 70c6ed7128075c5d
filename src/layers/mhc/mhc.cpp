#include "layers/mhc/mhc.h"

#include <algorithm>
#include <cmath>

#include "core/linalg.h"

namespace deepinfer {

namespace {
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// m = (fn . x) * rsqrt(mean(x^2) + eps): an unweighted RMSNorm of the flattened streams before the linear.
std::vector<float> site_logits(const float* X, int64_t width, const float* fn, int rows, float norm_eps) {
  double ss = 0;
  for (int64_t i = 0; i < width; ++i) ss += double(X[i]) * X[i];
  float r = 1.0f / std::sqrt(float(ss / double(width)) + norm_eps);
  std::vector<float> m(static_cast<size_t>(rows));
  for (int j = 0; j < rows; ++j) m[size_t(j)] = float(dot(fn + j * width, X, width)) * r;
  return m;
}
}  // namespace

HcMix hc_mix(const float* X, int hc, int64_t hidden, const HcSiteParams& p, float norm_eps, float hc_eps,
             int sinkhorn_iters) {
  int rows = (2 + hc) * hc;
  std::vector<float> m = site_logits(X, hc * hidden, p.fn, rows, norm_eps);
  HcMix mix;
  mix.hc = hc;
  mix.pre.resize(size_t(hc));
  mix.post.resize(size_t(hc));
  mix.comb.resize(size_t(hc * hc));
  for (int j = 0; j < hc; ++j) {
    mix.pre[size_t(j)] = sigmoid(m[size_t(j)] * p.scale[0] + p.base[j]) + hc_eps;
    mix.post[size_t(j)] = 2.0f * sigmoid(m[size_t(hc + j)] * p.scale[1] + p.base[hc + j]);
  }
  // comb logits reshape to [hc, hc] row-major; softmax over the last index, then + eps.
  float* C = mix.comb.data();
  for (int j = 0; j < hc; ++j) {
    float* row = C + j * hc;
    float mx = -INFINITY;
    for (int k = 0; k < hc; ++k) {
      row[k] = m[size_t(2 * hc + j * hc + k)] * p.scale[2] + p.base[2 * hc + j * hc + k];
      mx = std::max(mx, row[k]);
    }
    float sum = 0;
    for (int k = 0; k < hc; ++k) sum += (row[k] = std::exp(row[k] - mx));
    for (int k = 0; k < hc; ++k) row[k] = row[k] / sum + hc_eps;
  }
  auto normalize_cols = [&] {
    for (int k = 0; k < hc; ++k) {
      float s = 0;
      for (int j = 0; j < hc; ++j) s += C[j * hc + k];
      for (int j = 0; j < hc; ++j) C[j * hc + k] /= (s + hc_eps);
    }
  };
  auto normalize_rows = [&] {
    for (int j = 0; j < hc; ++j) {
      float s = 0;
      for (int k = 0; k < hc; ++k) s += C[j * hc + k];
      for (int k = 0; k < hc; ++k) C[j * hc + k] /= (s + hc_eps);
    }
  };
  // Sinkhorn (model-spec §3): one column normalisation, then (iters - 1) x (rows, columns).
  normalize_cols();
  for (int it = 1; it < sinkhorn_iters; ++it) {
    normalize_rows();
    normalize_cols();
  }
  return mix;
}

void hc_collapse(const float* X, const std::vector<float>& pre, int hc, int64_t hidden, float* u) {
  for (int64_t d = 0; d < hidden; ++d) {
    double s = 0;
    for (int j = 0; j < hc; ++j) s += double(pre[size_t(j)]) * X[j * hidden + d];
    u[d] = float(s);
  }
}

void hc_expand(const float* X, const float* y, const HcMix& mix, int64_t hidden, float* X_out) {
  int hc = mix.hc;
  for (int k = 0; k < hc; ++k) {
    for (int64_t d = 0; d < hidden; ++d) {
      double s = double(mix.post[size_t(k)]) * y[d];
      for (int j = 0; j < hc; ++j) s += double(mix.comb[size_t(j * hc + k)]) * X[j * hidden + d];
      X_out[k * hidden + d] = float(s);
    }
  }
}

std::vector<float> hc_head_pre(const float* X, int hc, int64_t hidden, const float* fn, const float* base,
                               const float* scale, float norm_eps, float hc_eps) {
  std::vector<float> m = site_logits(X, hc * hidden, fn, hc, norm_eps);
  std::vector<float> pre(static_cast<size_t>(hc));
  for (int j = 0; j < hc; ++j) pre[size_t(j)] = sigmoid(m[size_t(j)] * scale[0] + base[j]) + hc_eps;
  return pre;
}

}  // namespace deepinfer
