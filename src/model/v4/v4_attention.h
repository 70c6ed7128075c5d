// One V4 attention sublayer for one token (model-spec.md §3 "Attention"): low-rank q with the per-head
// unweighted RMS norm, the shared K=V latent, partial RoPE, the window ring plus the layer's compressed
// entries (HCA: all visible, CSA: the lightning indexer's top-k), sink softmax, output de-rotation and the
// grouped output projection.
#pragma once

#include <cstdint>

#include "layers/norm_rope/rope.h"
#include "model/config.h"
#include "model/v4/v4_numerics.h"
#include "model/v4/v4_state.h"
#include "model/v4/v4_weights.h"

namespace deepinfer {

// Consumes the normalised attention input u [hidden] of the token at `pos` (= every earlier position of
// this sequence has been fed already), updates the layer's state and writes the sublayer output y [hidden].
void v4_attention_step(const ModelConfig& c, const V4AttentionWeights& w, const Rope& rope, const V4Numerics& n,
                       V4LayerState& state, const float* u, int64_t pos, float* y);

}  // namespace deepinfer
