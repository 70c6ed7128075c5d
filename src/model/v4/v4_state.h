// Per-sequence state of the V4 forward (model-spec.md §6): for every layer the window ring of the last
// sliding_window KV rows, and for compressing layers the compressor's partial groups and the compressed KV
// entries; CSA layers also keep the indexer's partial groups and its index keys.
#pragma once

#include <cstdint>
#include <vector>

#include "layers/attention/window_ring.h"
#include "layers/compressor/v4_compressor.h"
#include "model/model.h"
#include "model/v4/v4_weights.h"

namespace deepinfer {

struct V4LayerState {
  WindowRing window_ring;               // [sliding_window, head_dim]: KV rows after RoPE (and FP8)
  V4CompressorState compressor;         // CSA / HCA
  std::vector<float> compressed_kv;     // [entries, head_dim]: after norm, RoPE at the group start, FP8
  V4CompressorState index_compressor;   // CSA
  std::vector<float> index_keys;        // [entries, index_head_dim]
};

class V4SequenceState : public SequenceState {
 public:
  V4SequenceState(const ModelConfig& config, const V4Weights& weights);
  int64_t length() const override { return length_; }

  int64_t length_ = 0;
  std::vector<V4LayerState> layers;
};

}  // namespace deepinfer
