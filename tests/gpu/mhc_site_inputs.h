// Host inputs of one mHC site call of the shape the model sees (model-spec §3 "mHC"), shared by the site tests
// (test_mhc.cpp, test_hc_site_spread.cpp, test_hc_mix_mma.cpp): hc = 4 bf16 residual streams of a per-token magnitude
// e^U(-3, 3), fn ~ N(0, 4 / sqrt(width)) (the mix logits at unit scale), base ~ N(0, 1), the three mix scales in
// (0.5, 2), a bf16 norm weight around 1.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "gpu_test_util.h"

namespace deepinfer::gputest {

struct SiteInputs {
  std::vector<float> X, fn, base, scale, norm_weight;
};

inline SiteInputs site_inputs(Rng& rng, int64_t tokens, int64_t hidden) {
  const int hc = 4, rows = (2 + hc) * hc;
  const int64_t width = hc * hidden;
  SiteInputs in;
  in.X.resize(size_t(tokens * width));
  for (int64_t t = 0; t < tokens; ++t) {
    const float s = std::exp(rng.uniform(-3.0f, 3.0f));
    for (int64_t i = 0; i < width; ++i) in.X[size_t(t * width + i)] = rng.normal(0.0f, s);
  }
  round_to_bf16(in.X);
  in.fn = rng.normals(size_t(rows * width), 0.0f, 4.0f / std::sqrt(float(width)));
  in.base = rng.normals(size_t(rows), 0.0f, 1.0f);
  in.scale = {rng.uniform(0.5f, 2.0f), rng.uniform(0.5f, 2.0f), rng.uniform(0.5f, 2.0f)};
  in.norm_weight = rng.normals(size_t(hidden), 1.0f, 0.3f);
  round_to_bf16(in.norm_weight);
  return in;
}

}  // namespace deepinfer::gputest
