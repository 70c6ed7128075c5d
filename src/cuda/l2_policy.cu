// The weight streams' L2 policy switch (cuda/l2_policy.h).
#include "cuda/l2_policy.h"

#include "core/env_switch.h"

namespace deepinfer::cuda {

namespace {

// All unless set (run 116: batch 1 -4.2 % on V4, -4.0 % on V4.1, every stream evict_first; run 117: the dense streams
// alone gain nothing measurable, the expert streams carry it).
EnvSwitch<WeightEvictFirst> g_weight_evict_first{"DEEPINFER_WEIGHT_L2_EVICT_FIRST", [](const char* v) {
  if (!v || env_equals(v, "1") || env_equals(v, "all")) return WeightEvictFirst::All;
  if (env_equals(v, "dense")) return WeightEvictFirst::Dense;
  return WeightEvictFirst::Off;
}};

}  // namespace

WeightEvictFirst weight_l2_evict_first() { return g_weight_evict_first.get(); }
void set_weight_l2_evict_first(WeightEvictFirst mode) { g_weight_evict_first.set(mode); }

}  // namespace deepinfer::cuda
