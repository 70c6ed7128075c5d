#include "layers/moe/swiglu_expert.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/linalg.h"
#include "layers/quant/fake_quant.h"

namespace deepinfer {

void swiglu_expert_accumulate(const float* x, int64_t hidden, const ExpertWeights& w, float swiglu_limit,
                              float route_weight, int act_quant_block, bool bf16_gemm_outputs, double* out) {
  auto rounded = [&](float v) { return bf16_gemm_outputs ? round_bf16(v) : v; };
  std::vector<float> a(static_cast<size_t>(w.inter));
  for (int64_t i = 0; i < w.inter; ++i) {
    float g = rounded(float(dot(w.w1 + i * hidden, x, hidden)));
    float u = rounded(float(dot(w.w3 + i * hidden, x, hidden)));
    if (swiglu_limit > 0) {
      g = std::min(g, swiglu_limit);
      u = std::clamp(u, -swiglu_limit, swiglu_limit);
    }
    float silu = g / (1.0f + std::exp(-g));
    a[size_t(i)] = rounded(silu * u * route_weight);
  }
  if (act_quant_block > 0) fp8_fake_quant_ragged(a.data(), w.inter, act_quant_block);
  for (int64_t d = 0; d < hidden; ++d) out[d] += rounded(float(dot(w.w2 + d * w.inter, a.data(), w.inter)));
}

}  // namespace deepinfer
