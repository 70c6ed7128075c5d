// Per-sequence state of the V4.1 reference forward (model-spec.md §6, V4.1 column): what one sequence
// carries between forward calls so that chunked prefill and decode reproduce one-shot prefill exactly.
#pragma once

#include <cstdint>
#include <vector>

#include "layers/attention/window_ring.h"
#include "layers/compressor/csa2_compressor.h"
#include "model/model.h"

namespace deepinfer {

struct V41LayerCache {
  WindowRing window;  // every layer: the last `sliding_window` KV latents (after RoPE and cache quant)
  // Position of the ring's slot 0. 0 unless a truncated prefill (SWA bounded replay) skipped this decoder
  // layer's earlier rows; the ring then restarts at the tail's first row and holds positions
  // [window_base, ...), so windows that reach before window_base are cut there.
  int64_t window_base = 0;
  // Full (KV-source) layers only; Reuse / Reindex layers read their source's cache.
  Csa2PartialGroup partial;           // tokens of the ratio-2 group that has not closed yet
  std::vector<float> compressed_kv;   // [entries, head_dim]: rotated at the group start, cache-quantized
  std::vector<float> index_keys;      // [entries, index_head_dim]: the owner's running key cache
  int64_t entries = 0;
};

class V41Sequence : public SequenceState {
 public:
  int64_t length() const override { return length_; }

  int64_t length_ = 0;
  std::vector<V41LayerCache> layers;
  // Engram n-gram history: compressed ids of the last (max_ngram - 1) tokens, oldest first; -1 marks a
  // dead position (model-spec §6 "Engram n-gram history").
  std::vector<int64_t> engram_history;
};

}  // namespace deepinfer
