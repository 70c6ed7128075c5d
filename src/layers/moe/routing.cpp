#include "layers/moe/routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace deepinfer {

std::vector<float> sqrt_softplus_scores(const float* logits, int n_experts, float temp) {
  std::vector<float> s(static_cast<size_t>(n_experts));
  for (int e = 0; e < n_experts; ++e) {
    float x = logits[e] / temp;
    // softplus(x) = log1p(exp(x)), written stably for large x.
    float sp = x > 20.0f ? x : std::log1p(std::exp(x));
    s[size_t(e)] = std::sqrt(sp);
  }
  return s;
}

std::vector<int> select_experts(const std::vector<float>& scores, const float* bias, int top_k) {
  std::vector<int> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  auto key = [&](int e) { return scores[size_t(e)] + (bias ? bias[e] : 0.0f); };
  std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int a, int b) {
    float ka = key(a), kb = key(b);
    return ka > kb || (ka == kb && a < b);
  });
  order.resize(size_t(top_k));
  return order;
}

Routing route_weights(const std::vector<float>& scores, std::vector<int> experts, bool normalize, float eps,
                      float route_scale) {
  Routing r;
  double sum = 0;
  for (int e : experts) sum += scores[size_t(e)];
  for (int e : experts) {
    float w = scores[size_t(e)];
    if (normalize) w = float(w / (sum + eps));
    r.weights.push_back(w * route_scale);
  }
  r.experts = std::move(experts);
  return r;
}

}  // namespace deepinfer
