// Manifold-constrained hyper-connections (mHC), model-spec.md §3 "mHC site": the residual stream is
// hc_mult parallel copies X [hc, hidden]; each site collapses them into one sublayer input with `pre`
// weights and expands the sublayer output back with `post` weights and a doubly-stochastic `comb` matrix
// (Sinkhorn-normalised). The same site math serves V4 (coefficients used at their own site) and V4.1
// (single-pass: a site's `pre` is used by the next site, model-spec §4); the lag lives in the model loop.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

struct HcSiteParams {
  const float* fn = nullptr;     // [(2 + hc) * hc, hc * hidden] f32: rows pre(hc) | post(hc) | comb(hc*hc)
  const float* base = nullptr;   // [(2 + hc) * hc] f32
  const float* scale = nullptr;  // [3] f32: pre, post, comb multipliers
};

struct HcMix {
  int hc = 0;
  std::vector<float> pre;   // [hc]
  std::vector<float> post;  // [hc]
  std::vector<float> comb;  // [hc * hc], comb[j * hc + k]: weight of input stream j in output stream k
};

// Computes a site's coefficients from the streams X [hc * hidden] (model-spec §3 steps 1-2).
HcMix hc_mix(const float* X, int hc, int64_t hidden, const HcSiteParams& p, float norm_eps, float hc_eps,
             int sinkhorn_iters);

// u = sum_j pre[j] * X_j (model-spec §3 step 3).
void hc_collapse(const float* X, const std::vector<float>& pre, int hc, int64_t hidden, float* u);

// X'_k = post_k * y + sum_j comb[j, k] * X_j (model-spec §3 step 4; note the sum over the FIRST index).
void hc_expand(const float* X, const float* y, const HcMix& mix, int64_t hidden, float* X_out);

// The V4 head collapse: pre = sigmoid((fn . x) * rsqrt(mean x^2 + eps) * scale + base) + hc_eps
// (fn [hc, hc*hidden], base [hc], scale [1]).
std::vector<float> hc_head_pre(const float* X, int hc, int64_t hidden, const float* fn, const float* base,
                               const float* scale, float norm_eps, float hc_eps);

}  // namespace deepinfer
