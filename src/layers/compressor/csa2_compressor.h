// The V4.1 CSA2 compressor of a KV-source ("Full") layer, model-spec.md §4 "Compressor (KV sources only)".
// Ratio 2: non-overlapping pairs of tokens are pooled with a channelwise softmax gate (no position bias,
// no overlap, unlike V4's CSA). Ratio 1: every token is its own entry, latent = norm(wkv x).
// The latent is returned before RoPE; the caller rotates it at the group's first position and quantizes
// it for the compressed-KV cache, and derives the index key from the same latent (csa2_indexer.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace deepinfer {

struct Csa2CompressorWeights {
  int ratio = 0;      // 1 or 2
  Tensor wkv;         // [head_dim, hidden]
  Tensor wgate;       // [head_dim, hidden], ratio 2 only
  Tensor norm;        // [head_dim]
};

// The tokens of the group that has not closed yet (model-spec §6: ratio-2 sources carry [ratio, head_dim]
// values and gate scores in fp32 across forward calls, so chunk boundaries may fall inside a group).
struct Csa2PartialGroup {
  std::vector<float> kv;     // [filled, head_dim]
  std::vector<float> score;  // [filled, head_dim]
  int filled = 0;
};

// Feeds the attention input `x` [hidden] of the next token. When this token closes a group, writes the
// normalised pre-RoPE latent [head_dim] and returns true. `round_bf16` applies the official reference's
// bf16 cast of the pooled value before the norm (NumericsOptions::bf16_activations).
bool csa2_compress_token(const Csa2CompressorWeights& w, const float* x, Csa2PartialGroup& partial, float norm_eps,
                         bool round_bf16, float* latent);

}  // namespace deepinfer
