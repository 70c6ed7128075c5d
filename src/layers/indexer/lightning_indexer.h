// The V4 lightning indexer (model-spec.md §3 "Lightning indexer", CSA layers only): it keeps its own
// compressed index keys (one per group of 4 tokens, width index_head_dim) and, for every query token,
// scores the visible entries with sum_h w_h * relu(q_h . k_s) and keeps the top index_topk of them.
// The attention then reads only those compressed KV entries.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "layers/compressor/v4_compressor.h"
#include "layers/norm_rope/rope.h"

namespace deepinfer {

struct LightningIndexerWeights {
  V4CompressorWeights compressor;  // overlapping, ratio 4, dim = index_head_dim
  Tensor wq_b;                     // [heads * dim, q_lora_rank]
  Tensor weights_proj;             // [heads, hidden]
  int heads = 0;
  int64_t dim = 0;
  int topk = 0;
};

// One token's index query: per-head vectors and the per-head weights w_h (scales folded in).
struct IndexQuery {
  std::vector<float> q;             // [heads * dim]
  std::vector<double> head_weight;  // [heads]: (weights_proj . u) * heads^-1/2 * dim^-1/2
};

// q_h = RoPE(wq_b . qr) (the rope slice is the last rope_dim channels of each head), w = weights_proj . u.
// `quantize` adds the official Hadamard rotation + FP4 (ue8m0, block 32) of every head (model-spec §3).
IndexQuery lightning_index_query(const LightningIndexerWeights& w, const float* qr, const float* u, int64_t hidden,
                                 int64_t pos, const Rope& rope, bool quantize);

// Turns a pooled index-compressor entry into a stored index key, in place: RoPE at the entry's first
// token position, then (official numerics) Hadamard + FP4 like the queries.
void lightning_index_key(float* key, int64_t dim, int64_t position, const Rope& rope, bool quantize);

// Scores entries 0 .. n_visible-1 of `index_keys` [n, dim] and returns the ids of the top `w.topk` in
// ascending order (every visible entry when there are no more than topk). Equal scores prefer the lower id.
std::vector<int64_t> lightning_top_entries(const LightningIndexerWeights& w, const IndexQuery& query,
                                           const float* index_keys, int64_t n_visible);

}  // namespace deepinfer
