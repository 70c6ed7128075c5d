// The attention core shared by every V4 / V4.1 layer (model-spec.md §3 "Attention"): one shared K=V
// latent per position (MQA), a per-head learned sink that joins the softmax denominator but carries no
// value, and scores q.k * scale in fp32.
#pragma once

#include <cstdint>

namespace deepinfer {

// q [heads, dim]; keys[s] points at the latent of selected position s (dim floats, used as key and value);
// sink [heads]; out [heads, dim]. n_keys may be 0 (then the output is 0: only the sink is attended).
void attend_with_sink(const float* q, int heads, int64_t dim, const float* const* keys, int64_t n_keys,
                      const float* sink, float scale, float* out);

}  // namespace deepinfer
