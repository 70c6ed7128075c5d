#include "layers/attention/sink_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/linalg.h"

namespace deepinfer {

void attend_with_sink(const float* q, int heads, int64_t dim, const float* const* keys, int64_t n_keys,
                      const float* sink, float scale, float* out) {
  std::vector<float> score(static_cast<size_t>(n_keys));
  std::vector<double> acc(static_cast<size_t>(dim));
  for (int h = 0; h < heads; ++h) {
    const float* qh = q + h * dim;
    float mx = sink[h];
    for (int64_t s = 0; s < n_keys; ++s) {
      score[size_t(s)] = float(dot(qh, keys[s], dim)) * scale;
      mx = std::max(mx, score[size_t(s)]);
    }
    // den = sum exp(s - max) + exp(sink - max): the sink only dilutes the weights.
    double den = std::exp(double(sink[h]) - mx);
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t s = 0; s < n_keys; ++s) {
      double p = std::exp(double(score[size_t(s)]) - mx);
      den += p;
      for (int64_t d = 0; d < dim; ++d) acc[size_t(d)] += p * keys[s][d];
    }
    for (int64_t d = 0; d < dim; ++d) out[h * dim + d] = float(acc[size_t(d)] / den);
  }
}

}  // namespace deepinfer
