#include "model/v4/v4_attention.h"

#include <cmath>
#include <vector>

#include "core/linalg.h"
#include "layers/attention/sink_attention.h"
#include "layers/indexer/lightning_indexer.h"
#include "layers/norm_rope/rms_norm.h"

namespace deepinfer {

namespace {

// Rotates the rope slice (last rope_dim channels) of each of `heads` rows of width `dim`.
void rope_heads(const Rope& rope, float* x, int heads, int64_t dim, int64_t pos, bool inverse) {
  for (int h = 0; h < heads; ++h) rope.apply(x + h * dim + dim - rope.rope_dim(), pos, inverse);
}

// Feeds the token to the layer's compressor (and the indexer's); stores the entries that close.
void update_compressed_caches(const ModelConfig& c, const V4AttentionWeights& w, const Rope& rope,
                              const V4Numerics& n, V4LayerState& s, const float* u, int64_t pos) {
  std::vector<float> entry(static_cast<size_t>(c.head_dim));
  if (v4_compressor_push(*w.compressor, s.compressor, u, c.hidden_size, pos, c.rms_norm_eps, n.bf16_activations,
                         entry.data())) {
    // model-spec §2/§3: an entry is rotated at the position of its group's first token.
    int64_t first_token = (s.compressor.entries - 1) * w.compressor->ratio;
    rope.apply(entry.data() + c.head_dim - c.rope_dim, first_token);
    v4_quantize_kv_row(entry.data(), c.head_dim, c.rope_dim, n);
    s.compressed_kv.insert(s.compressed_kv.end(), entry.begin(), entry.end());
  }
  if (!w.indexer) return;
  const LightningIndexerWeights& ix = *w.indexer;
  std::vector<float> key(static_cast<size_t>(ix.dim));
  if (v4_compressor_push(ix.compressor, s.index_compressor, u, c.hidden_size, pos, c.rms_norm_eps,
                         n.bf16_activations, key.data())) {
    int64_t first_token = (s.index_compressor.entries - 1) * ix.compressor.ratio;
    lightning_index_key(key.data(), ix.dim, first_token, rope, n.quantize_cache);
    s.index_keys.insert(s.index_keys.end(), key.begin(), key.end());
  }
}

}  // namespace

void v4_attention_step(const ModelConfig& c, const V4AttentionWeights& w, const Rope& rope, const V4Numerics& n,
                       V4LayerState& s, const float* u, int64_t pos, float* y) {
  const int heads = c.num_heads;
  const int64_t D = c.head_dim, H = c.hidden_size;

  // q = wq_b . q_norm(wq_a . u), per-head unweighted RMS norm, RoPE (model-spec §3). qr also feeds the indexer.
  // Under the official numerics each GEMM output is bf16 before its norm, as the reference's FP8 GEMMs return it
  // (bench/gpu/NOTES.md "Session 59").
  std::vector<float> u_gemm = v4_gemm_input(u, H, n);
  std::vector<float> qr(static_cast<size_t>(c.q_lora_rank));
  matmul_nt(u_gemm.data(), 1, H, w.wq_a.ptr(), c.q_lora_rank, qr.data());
  v4_maybe_bf16(qr.data(), c.q_lora_rank, n);
  rms_norm(qr.data(), w.q_norm.ptr(), c.q_lora_rank, c.rms_norm_eps, qr.data());
  v4_maybe_bf16(qr.data(), c.q_lora_rank, n);
  std::vector<float> qr_gemm = v4_gemm_input(qr.data(), c.q_lora_rank, n);
  std::vector<float> q(size_t(heads) * size_t(D));
  matmul_nt(qr_gemm.data(), 1, c.q_lora_rank, w.wq_b.ptr(), heads * D, q.data());
  v4_maybe_bf16(q.data(), heads * D, n);
  if (n.bf16_activations)
    head_rms_norm_bf16(q.data(), heads, D, c.rms_norm_eps);  // in the reference's bf16 ops (model-spec §3)
  else
    rms_norm_rows(q.data(), heads, nullptr, D, c.rms_norm_eps);
  rope_heads(rope, q.data(), heads, D, pos, false);

  // kv = kv_norm(wkv . u), RoPE, cache format; it joins the window ring (the window includes the token).
  std::vector<float> kv(static_cast<size_t>(D));
  matmul_nt(u_gemm.data(), 1, H, w.wkv.ptr(), D, kv.data());
  v4_maybe_bf16(kv.data(), D, n);
  rms_norm(kv.data(), w.kv_norm.ptr(), D, c.rms_norm_eps, kv.data());
  v4_maybe_bf16(kv.data(), D, n);
  rope.apply(kv.data() + D - c.rope_dim, pos);
  v4_quantize_kv_row(kv.data(), D, c.rope_dim, n);
  s.window_ring.push(pos, kv.data());

  // Keys = values: the window, then the compressed entries this query may read.
  std::vector<const float*> keys;
  for (int64_t p = s.window_ring.oldest(pos); p <= pos; ++p) keys.push_back(s.window_ring.at(p));
  if (w.compressor) {
    update_compressed_caches(c, w, rope, n, s, u, pos);
    // Entry w is visible iff w < (t+1) div m: after feeding token t exactly those entries exist.
    int64_t visible = (pos + 1) / w.compressor->ratio;
    DI_CHECK(s.compressor.entries == visible, "v4 attention: compressor holds " +
                                                  std::to_string(s.compressor.entries) + " entries at position " +
                                                  std::to_string(pos) + ", expected " + std::to_string(visible));
    if (w.indexer) {
      IndexQuery iq = lightning_index_query(*w.indexer, qr_gemm.data(), u, H, pos, rope, n.quantize_cache);
      for (int64_t e : lightning_top_entries(*w.indexer, iq, s.index_keys.data(), visible))
        keys.push_back(s.compressed_kv.data() + e * D);
    } else {
      for (int64_t e = 0; e < visible; ++e) keys.push_back(s.compressed_kv.data() + e * D);
    }
  }

  std::vector<float> o(size_t(heads) * size_t(D));
  attend_with_sink(q.data(), heads, D, keys.data(), int64_t(keys.size()), w.attn_sink.ptr(),
                   float(1.0 / std::sqrt(double(D))), o.data());
  // V = K carries RoPE: rotate the output's rope slice back by the query position (model-spec §2).
  rope_heads(rope, o.data(), heads, D, pos, true);
  v4_maybe_bf16(o.data(), heads * D, n);

  // Grouped low-rank output: z_g = wo_a[g] . o_g over contiguous head groups, out = wo_b . concat(z).
  const int G = c.o_groups;
  const int64_t group_in = heads * D / G;
  std::vector<float> z(size_t(G) * size_t(c.o_lora_rank));
  for (int g = 0; g < G; ++g)
    matmul_nt(o.data() + g * group_in, 1, group_in, w.wo_a.row(int64_t(g) * c.o_lora_rank), c.o_lora_rank,
              z.data() + g * c.o_lora_rank);
  v4_maybe_bf16(z.data(), int64_t(z.size()), n);
  std::vector<float> z_gemm = v4_gemm_input(z.data(), int64_t(z.size()), n);
  matmul_nt(z_gemm.data(), 1, int64_t(z.size()), w.wo_b.ptr(), H, y);
  v4_maybe_bf16(y, H, n);
}

}  // namespace deepinfer
