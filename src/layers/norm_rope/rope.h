// Partial interleaved RoPE (model-spec §2): adjacent channel pairs of the last `rope_dim` channels of a
// head rotate as complex numbers. Compressed layers use compress_rope_theta with YaRN frequency scaling
// (no attention-factor rescale); window-only layers use rope_theta without YaRN.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace deepinfer {

class Rope {
 public:
  // yarn == nullptr or factor <= 1: plain frequencies theta^(-2i/rope_dim).
  Rope(int rope_dim, float theta, const YarnScaling* yarn);

  // For the layer's plan: compress_rope_theta + YaRN when the layer compresses, rope_theta otherwise.
  static Rope for_layer(const ModelConfig& c, const LayerPlan& l);

  int rope_dim() const { return rope_dim_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }

  // Rotates x[0 .. rope_dim) (the caller points x at the rope slice) by position `pos`;
  // inverse = true rotates by the conjugate (the attention output de-rotation, model-spec §2).
  void apply(float* x, int64_t pos, bool inverse = false) const;

 private:
  int rope_dim_;
  std::vector<float> inv_freq_;
};

}  // namespace deepinfer
