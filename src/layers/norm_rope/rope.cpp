#include "layers/norm_rope/rope.h"

#include <algorithm>
#include <cmath>

namespace deepinfer {

namespace {
// YaRN correction range (model-spec §2): the pair index whose wavelength spans `rotations` turns over the
// original context.
float yarn_correction_dim(float rotations, int dim, float theta, double original_ctx) {
  return float(dim * std::log(original_ctx / (rotations * 2.0 * M_PI)) / (2.0 * std::log(double(theta))));
}
}  // namespace

Rope::Rope(int rope_dim, float theta, const YarnScaling* yarn) : rope_dim_(rope_dim) {
  int half = rope_dim / 2;
  inv_freq_.resize(size_t(half));
  for (int i = 0; i < half; ++i) inv_freq_[size_t(i)] = float(1.0 / std::pow(double(theta), 2.0 * i / rope_dim));
  if (!yarn || yarn->factor <= 1.0f) return;
  double orig = double(yarn->original_max_position_embeddings);
  float low = std::floor(yarn_correction_dim(yarn->beta_fast, rope_dim, theta, orig));
  float high = std::ceil(yarn_correction_dim(yarn->beta_slow, rope_dim, theta, orig));
  low = std::max(low, 0.0f);
  high = std::min(high, float(rope_dim - 1));
  if (low == high) high += 0.001f;  // avoid a zero-width ramp
  for (int i = 0; i < half; ++i) {
    float ramp = std::clamp((float(i) - low) / (high - low), 0.0f, 1.0f);
    float f = inv_freq_[size_t(i)];
    // Pairs below `low` keep their frequency, pairs above `high` are divided by the factor.
    inv_freq_[size_t(i)] = f / yarn->factor * ramp + f * (1.0f - ramp);
  }
}

Rope Rope::for_layer(const ModelConfig& c, const LayerPlan& l) {
  return l.yarn_rope ? Rope(c.rope_dim, c.compress_rope_theta, &c.yarn) : Rope(c.rope_dim, c.rope_theta, nullptr);
}

void Rope::apply(float* x, int64_t pos, bool inverse) const {
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    float angle = float(pos) * inv_freq_[i];
    float c = std::cos(angle), s = inverse ? -std::sin(angle) : std::sin(angle);
    float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * c - b * s;
    x[2 * i + 1] = a * s + b * c;
  }
}

}  // namespace deepinfer
