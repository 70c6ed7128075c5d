// The V4 MoE sublayer for one token (model-spec.md §3 "MoE"): sqrt-softplus scores, selection by score +
// bias (or the tid2eid table in the hash layers), normalised weights times routed_scaling_factor, clamped
// SwiGLU routed experts plus the shared expert.
#pragma once

#include <cstdint>

#include "model/config.h"
#include "model/expert_load_counter.h"
#include "model/v4/v4_numerics.h"
#include "model/v4/v4_weights.h"

namespace deepinfer {

// x [hidden] is the normalised FFN input of token id `token`; writes y [hidden]. `loads` (optional) counts the
// routed experts at layer plan.index (EPLB statistics).
void v4_moe_step(const ModelConfig& c, const LayerPlan& plan, const V4MoeWeights& w, const V4Numerics& n,
                 const float* x, int32_t token, float* y, ExpertLoadCounter* loads = nullptr);

}  // namespace deepinfer
