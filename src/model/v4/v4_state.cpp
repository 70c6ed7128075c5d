#include "model/v4/v4_state.h"

namespace deepinfer {

V4SequenceState::V4SequenceState(const ModelConfig& c, const V4Weights& w) {
  layers.resize(size_t(c.num_layers));
  for (int i = 0; i < c.num_layers; ++i) {
    V4LayerState& s = layers[size_t(i)];
    const V4AttentionWeights& a = w.layers[size_t(i)].attn;
    s.window_ring = WindowRing(c.sliding_window, c.head_dim);
    if (a.compressor) s.compressor.reset(*a.compressor);
    if (a.indexer) s.index_compressor.reset(a.indexer->compressor);
  }
}

}  // namespace deepinfer
