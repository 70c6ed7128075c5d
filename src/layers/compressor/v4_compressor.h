// The V4 KV compressor (model-spec.md §3 "Compressor"): every `ratio` consecutive tokens of a layer are
// pooled into one compressed entry by a channelwise softmax over learned gates. Two variants:
//   - HCA (ratio > 4, non-overlapping): entry w pools the `ratio` rows of group w.
//   - CSA (ratio 4, overlapping): every token projects two series Ca | Cb; entry w pools Ca of group w-1
//     and Cb of group w (2 * ratio rows). The lightning indexer runs its own overlapping compressor too.
// The state is per sequence and per layer, fed one token at a time, so chunked prefill and decode close
// exactly the same groups as a one-shot prefill (model-spec §6 "Exactness").
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace deepinfer {

struct V4CompressorWeights {
  int ratio = 0;          // m: tokens per compressed entry
  int64_t dim = 0;        // width of one entry (head_dim for attention, index_head_dim for the indexer)
  bool overlap = false;   // CSA layout: two series per token, entry pools the previous group's Ca rows
  Tensor wkv;             // [series * dim, hidden], series = 2 when overlapping else 1
  Tensor wgate;           // [series * dim, hidden]
  Tensor ape;             // [ratio, series * dim]: gate bias by position inside the group
  Tensor norm;            // [dim]: RMSNorm weight of the pooled entry

  int series() const { return overlap ? 2 : 1; }
};

// The partial groups of one sequence (model-spec §6 "compressor partial state").
struct V4CompressorState {
  std::vector<float> open_kv;    // [ratio, series * dim]: projected rows of the group still open
  std::vector<float> open_gate;  // [ratio, series * dim]: gates of those rows, ape included
  int open_rows = 0;
  // Overlap only: the Ca half (first dim channels) of the last closed group, which entry w+1 pools.
  std::vector<float> prev_kv;    // [ratio, dim]
  std::vector<float> prev_gate;  // [ratio, dim]
  bool has_prev = false;
  int64_t entries = 0;  // groups closed so far

  void reset(const V4CompressorWeights& w);
};

// Feeds the attention input `x` [hidden] of the token at position `pos` (positions arrive in order).
// When the token closes its group, writes the pooled, RMS-normalised entry [dim] (before RoPE) to `entry`
// and returns true; the entry's index is state.entries - 1 and its position (first token) entries-1 * ratio.
// `bf16_pooled` rounds the pooled vector to bf16 before the norm, as the official code casts there.
bool v4_compressor_push(const V4CompressorWeights& w, V4CompressorState& state, const float* x, int64_t hidden,
                        int64_t pos, float norm_eps, bool bf16_pooled, float* entry);

}  // namespace deepinfer
