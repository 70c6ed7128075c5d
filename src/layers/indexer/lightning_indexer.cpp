#include "layers/indexer/lightning_indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/linalg.h"
#include "layers/quant/fake_quant.h"

namespace deepinfer {

namespace {

// model-spec §3: the official indexer rotates keys and queries with a Hadamard transform before the FP4
// cache format, so that outliers spread over the block; without quantization the rotation is orthogonal
// and changes no score, which is why it is tied to the quantization switch.
constexpr int kIndexFp4Block = 32;

void rotate_and_quantize(float* v, int64_t dim) {
  hadamard_transform(v, dim);
  fp4_fake_quant(v, dim, kIndexFp4Block, Fp4Scale::UE8M0);
}

}  // namespace

IndexQuery lightning_index_query(const LightningIndexerWeights& w, const float* qr, const float* u, int64_t hidden,
                                 int64_t pos, const Rope& rope, bool quantize) {
  IndexQuery out;
  out.q.resize(size_t(w.heads) * size_t(w.dim));
  matmul_nt(qr, 1, w.wq_b.dim(1), w.wq_b.ptr(), w.wq_b.dim(0), out.q.data());
  for (int h = 0; h < w.heads; ++h) {
    float* qh = out.q.data() + h * w.dim;
    rope.apply(qh + w.dim - rope.rope_dim(), pos);
    if (quantize) rotate_and_quantize(qh, w.dim);
  }
  std::vector<float> proj(static_cast<size_t>(w.heads));
  matmul_nt(u, 1, hidden, w.weights_proj.ptr(), w.heads, proj.data());
  double scale = 1.0 / std::sqrt(double(w.heads)) / std::sqrt(double(w.dim));
  out.head_weight.resize(size_t(w.heads));
  for (int h = 0; h < w.heads; ++h) out.head_weight[size_t(h)] = double(proj[size_t(h)]) * scale;
  return out;
}

void lightning_index_key(float* key, int64_t dim, int64_t position, const Rope& rope, bool quantize) {
  rope.apply(key + dim - rope.rope_dim(), position);
  if (quantize) rotate_and_quantize(key, dim);
}

std::vector<int64_t> lightning_top_entries(const LightningIndexerWeights& w, const IndexQuery& query,
                                           const float* index_keys, int64_t n_visible) {
  std::vector<int64_t> ids(static_cast<size_t>(n_visible));
  std::iota(ids.begin(), ids.end(), int64_t(0));
  if (n_visible <= w.topk) return ids;
  std::vector<double> score(static_cast<size_t>(n_visible));
  for (int64_t s = 0; s < n_visible; ++s) {
    double total = 0;
    for (int h = 0; h < w.heads; ++h) {
      double qk = dot(query.q.data() + h * w.dim, index_keys + s * w.dim, w.dim);
      total += query.head_weight[size_t(h)] * std::max(qk, 0.0);
    }
    score[size_t(s)] = total;
  }
  std::partial_sort(ids.begin(), ids.begin() + w.topk, ids.end(), [&](int64_t a, int64_t b) {
    return score[size_t(a)] > score[size_t(b)] || (score[size_t(a)] == score[size_t(b)] && a < b);
  });
  ids.resize(size_t(w.topk));
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace deepinfer
