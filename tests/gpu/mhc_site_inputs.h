// Host inputs of one mHC site call of the shape the model sees (model-spec §3 "mHC"), shared by the site tests
// (test_mhc.cpp, test_hc_site_spread.cpp, test_hc_mix_mma.cpp, test_hc_lagged_site.cpp): hc = 4 bf16 residual streams
// of a per-token magnitude e^U(-3, 3), fn ~ N(0, 4 / sqrt(width)) (the mix logits at unit scale), base ~ N(0, 1), the
// three mix scales in (0.5, 2), a bf16 norm weight around 1. And the MoE's output before its combine, as a site
// reads it in place of y (CombinePartsInputs).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/device.h"
#include "gpu_test_util.h"
#include "layers/moe/moe_combine.h"

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

// The MoE's parts of `tokens` rows (layers/moe/moe_combine.h): routed rows ~ N(0, 0.3) with 3 rows nobody reads,
// each row's top_k expert rows distinct and in a shuffled order, a shared row per token; on the device as fp32 routed
// rows (the decode kernels' form, parts32) and as their bf16 values (the prefill kernel's, parts16).
struct CombinePartsInputs {
  std::vector<float> expert_y, shared_y;
  std::vector<int32_t> slot;  // [tokens, top_k]: the expert_y row of pair (r, k)
  cuda::DeviceBuffer d_expert, d_shared, d_slot, d_expert16;
  cuda::MoeCombineParts parts32, parts16;

  CombinePartsInputs(Rng& rng, int64_t tokens, int64_t hidden, int top_k) {
    const int64_t pairs = tokens * top_k;
    expert_y = rng.normals(size_t((pairs + 3) * hidden), 0.0f, 0.3f);
    shared_y = rng.normals(size_t(tokens * hidden), 0.0f, 0.3f);
    slot.resize(size_t(pairs));
    for (int64_t p = 0; p < pairs; ++p) slot[size_t(p)] = int32_t((p * 5 + 2) % (pairs + 3));  // distinct rows
    d_expert = cuda::to_device(expert_y);
    d_shared = cuda::to_device(shared_y);
    d_slot = cuda::to_device(slot);
    d_expert16 = cuda::to_device(to_bf16(expert_y));
    parts32 = {d_expert.as<float>(), d_shared.as<float>(), d_slot.as<int32_t>(), top_k};
    parts16 = parts32;
    parts16.expert_y = nullptr;
    parts16.expert_y_bf16 = d_expert16.as<__nv_bfloat16>();
  }
  const cuda::MoeCombineParts& parts(bool bf16_routed_rows) const { return bf16_routed_rows ? parts16 : parts32; }
};

}  // namespace deepinfer::gputest
