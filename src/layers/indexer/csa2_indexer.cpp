#include "layers/indexer/csa2_indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/linalg.h"
#include "layers/norm_rope/rms_norm.h"
#include "layers/quant/fake_quant.h"

namespace deepinfer {

namespace {
constexpr int kIndexQuantBlock = 32;  // model-spec §4: index keys and queries are MXFP4 with block 32

// Rotates the trailing rope channels of one index head (model-spec §2: RoPE on the last rope_dim).
void rotate_head(const Rope& rope, float* head, int head_dim, int64_t pos) {
  rope.apply(head + head_dim - rope.rope_dim(), pos);
}
}  // namespace

void csa2_index_key(const Csa2IndexerWeights& w, const float* latent, const Rope& rope, int64_t group_start,
                    float norm_eps, bool quantize, float* key) {
  DI_CHECK(!w.wk.data.empty(), "csa2 indexer: index keys need 'indexer.wk' (a Full layer's weights)");
  const int64_t latent_dim = w.wk.dim(1);
  matmul_nt(latent, 1, latent_dim, w.wk.ptr(), w.head_dim, key);
  rms_norm(key, w.k_norm.ptr(), w.head_dim, norm_eps, key);
  rotate_head(rope, key, w.head_dim, group_start);
  if (quantize) fp4_fake_quant(key, w.head_dim, kIndexQuantBlock, Fp4Scale::UE8M0);
}

std::vector<float> csa2_index_scores(const Csa2IndexerWeights& w, const float* q_latent, const float* x, int64_t pos,
                                     const Rope& rope, bool quantize, const float* keys, int64_t n_visible) {
  const int64_t q_lora = w.wq_b.dim(1), hidden = w.weights_proj.dim(1);
  std::vector<float> q(size_t(w.heads) * size_t(w.head_dim));
  matmul_nt(q_latent, 1, q_lora, w.wq_b.ptr(), int64_t(q.size()), q.data());
  for (int h = 0; h < w.heads; ++h) rotate_head(rope, q.data() + size_t(h) * size_t(w.head_dim), w.head_dim, pos);
  if (quantize) fp4_fake_quant(q.data(), int64_t(q.size()), kIndexQuantBlock, Fp4Scale::UE8M0);

  // Head weights carry the 1/sqrt(index_head_dim * index_heads) scale (model-spec §4).
  std::vector<float> head_weight(static_cast<size_t>(w.heads));
  matmul_nt(x, 1, hidden, w.weights_proj.ptr(), w.heads, head_weight.data());
  const float scale = float(1.0 / std::sqrt(double(w.head_dim) * double(w.heads)));
  for (float& hw : head_weight) hw *= scale;

  std::vector<float> scores(static_cast<size_t>(n_visible));
  for (int64_t s = 0; s < n_visible; ++s) {
    double total = 0;
    for (int h = 0; h < w.heads; ++h) {
      float qk = float(dot(q.data() + size_t(h) * size_t(w.head_dim), keys + s * w.head_dim, w.head_dim));
      total += double(std::max(qk, 0.0f) * head_weight[size_t(h)]);
    }
    scores[size_t(s)] = float(total);
  }
  return scores;
}

std::vector<uint8_t> select_candidate_blocks(const std::vector<float>& scores, int block_size, int topk_blocks) {
  const int64_t n = int64_t(scores.size());
  std::vector<uint8_t> mask(size_t(n), 0);
  if (n == 0) return mask;
  const int64_t n_blocks = (n + block_size - 1) / block_size;
  std::vector<float> block_score(size_t(n_blocks), -INFINITY);
  for (int64_t s = 0; s < n; ++s) {
    float& b = block_score[size_t(s / block_size)];
    b = std::max(b, scores[size_t(s)]);
  }
  // The newest visible entry's block is always a candidate, so recent context cannot be filtered out.
  block_score[size_t(n_blocks - 1)] = INFINITY;
  std::vector<int64_t> order(static_cast<size_t>(n_blocks));
  std::iota(order.begin(), order.end(), 0);
  const int64_t keep = std::min<int64_t>(topk_blocks, n_blocks);
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int64_t a, int64_t b) {
    return block_score[size_t(a)] > block_score[size_t(b)] || (block_score[size_t(a)] == block_score[size_t(b)] && a < b);
  });
  for (int64_t i = 0; i < keep; ++i) {
    int64_t b = order[size_t(i)];
    if (block_score[size_t(b)] == -INFINITY) continue;  // a block with no finite score is never a candidate
    for (int64_t s = b * block_size; s < std::min(n, (b + 1) * block_size); ++s) mask[size_t(s)] = 1;
  }
  return mask;
}

std::vector<int64_t> select_index_topk(const std::vector<float>& scores, const std::vector<uint8_t>* allowed,
                                       int topk) {
  std::vector<int64_t> eligible;
  for (size_t s = 0; s < scores.size(); ++s) {
    bool ok = scores[s] != -INFINITY && (!allowed || (*allowed)[s]);
    if (ok) eligible.push_back(int64_t(s));
  }
  const size_t keep = std::min(eligible.size(), size_t(std::max(topk, 0)));
  std::partial_sort(eligible.begin(), eligible.begin() + keep, eligible.end(), [&](int64_t a, int64_t b) {
    return scores[size_t(a)] > scores[size_t(b)] || (scores[size_t(a)] == scores[size_t(b)] && a < b);
  });
  eligible.resize(keep);
  std::sort(eligible.begin(), eligible.end());
  return eligible;
}

}  // namespace deepinfer
