#include "model/v41/v41_model.h"

#include "model/v41/v41_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/linalg.h"
#include "layers/attention/sink_attention.h"
#include "layers/moe/routing.h"
#include "layers/moe/swiglu_expert.h"
#include "layers/norm_rope/rms_norm.h"
#include "layers/quant/fake_quant.h"
#include "model/families.h"

namespace deepinfer {

namespace {
// model-spec §4: window KV is MXFP8 (block 32 over all dims incl. rope); compressed KV is FP4 with e4m3
// scales per 16; the W8A8 activation blocks of V4.1 are 32 wide (model-spec §2).
constexpr int kWindowKvBlock = 32;
constexpr int kCompressedKvBlock = 16;
constexpr int kActQuantBlock = 32;
constexpr float kRouteNormEps = 1e-20f;

void round_bf16_inplace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}
}  // namespace

// Top-k lists and candidate masks are per-step transients (model-spec §6): a Reindex / Reuse layer reads
// the selection that the latest index source published for the same token in the same forward call.
struct V41Model::ChunkSelection {
  std::vector<std::vector<int64_t>> topk;       // [token] compressed positions, ascending
  std::vector<std::vector<uint8_t>> candidates;  // [token] one flag per visible entry
  int topk_owner = -1;                          // kv_source of the group the top-k indexes
  bool has_candidates = false;
};

V41Model::V41Model(ModelConfig config, Checkpoint checkpoint, const ModelOptions& options)
    : config_(std::move(config)),
      checkpoint_(std::move(checkpoint)),
      numerics_(options.numerics),
      loads_(int(config_.layers.size()), config_.n_routed_experts) {
  const ModelConfig& c = config_;
  DI_CHECK(c.is_v41(), "v4.1 model: config is not deepseek_v41");
  DI_CHECK(c.head_dim % kWindowKvBlock == 0 && c.head_dim % kCompressedKvBlock == 0,
           "config: field 'head_dim' must be a multiple of 32 (window KV FP8 blocks)");
  for (const LayerPlan& l : c.layers) {
    // NeMo / the official code mask every index source after the candidate source with its candidates,
    // which only makes sense for Reindex layers that read the candidate source's keys.
    if (c.candidate_source_layer_id >= 0 && l.index > c.candidate_source_layer_id && l.role != Csa2Role::None &&
        l.role != Csa2Role::Reuse) {
      DI_CHECK(l.role == Csa2Role::Reindex && l.kv_source == c.candidate_source_layer_id,
               "config: index source layer " + std::to_string(l.index) +
                   " after the candidate source must be a Reindex layer of the candidate source's group");
    }
    if (l.role != Csa2Role::None)
      DI_CHECK(c.index_n_heads > 0 && c.index_head_dim % 32 == 0 && c.index_head_dim >= c.rope_dim &&
                   c.index_topk > 0,
               "config: CSA2 layers need index_n_heads > 0, index_head_dim a multiple of 32 and >= "
               "qk_rope_head_dim, index_topk > 0");
    ropes_.push_back(Rope::for_layer(c, l));
  }
  decoder_begin_ = bounded_replay_first_layer(c, options.prefill_replay);
  if (decoder_begin_ >= 0) keep_tokens_ = options.prefill_replay.keep_tokens;
  weights_ = load_v41_weights(c, checkpoint_, options.show_progress);
  engram_hashes_ = derive_engram_hashes(c);
  if (!engram_hashes_.empty()) engram_token_map_ = load_engram_token_map(c, checkpoint_.dir());
}

std::unique_ptr<SequenceState> V41Model::new_sequence() const {
  auto seq = std::make_unique<V41Sequence>();
  for (int l = 0; l < config_.num_layers; ++l) {
    V41LayerCache cache;
    cache.window = WindowRing(config_.sliding_window, config_.head_dim);
    seq->layers.push_back(std::move(cache));
  }
  return seq;
}

std::vector<int64_t> V41Model::engram_rows_for(V41Sequence& seq, std::span<const int32_t> tokens) const {
  const ModelConfig& c = config_;
  if (engram_hashes_.empty()) return {};
  const int order = c.engram_max_ngram_size, heads = c.engram_n_heads;
  const size_t per_layer = size_t(order - 1) * size_t(heads);
  std::vector<int64_t> rows(tokens.size() * engram_hashes_.size() * per_layer);
  std::vector<int64_t> history(static_cast<size_t>(order));
  for (size_t t = 0; t < tokens.size(); ++t) {
    seq.engram_history.push_back(engram_token_map_.ids[size_t(tokens[t])]);
    // Newest first for the hash; a sequence shorter than the n-gram order has fewer entries.
    int len = 0;
    for (auto it = seq.engram_history.rbegin(); it != seq.engram_history.rend() && len < order; ++it)
      history[size_t(len++)] = *it;
    for (size_t li = 0; li < engram_hashes_.size(); ++li)
      engram_row_ids(engram_hashes_[li], history.data(), len, order, heads, engram_token_map_.pad_id,
                     rows.data() + (t * engram_hashes_.size() + li) * per_layer);
    if (int(seq.engram_history.size()) > order - 1)
      seq.engram_history.erase(seq.engram_history.begin());
  }
  return rows;
}

Tensor V41Model::forward(SequenceState& state, std::span<const int32_t> tokens) const {
  auto* seq = dynamic_cast<V41Sequence*>(&state);
  DI_CHECK(seq != nullptr, "v4.1 model: sequence state was not created by this model");
  const ModelConfig& c = config_;
  const int64_t n = int64_t(tokens.size()), H = c.hidden_size, hc = c.hc_mult;
  for (int32_t t : tokens)
    DI_CHECK(t >= 0 && t < c.vocab_size, "v4.1 model: token id " + std::to_string(t) + " outside the vocabulary");
  const int64_t first_pos = seq->length_;
  std::vector<int64_t> engram_rows = engram_rows_for(*seq, tokens);

  // model-spec §4 backbone: X = repeat(embed, hc); pre_mix starts as one-hot stream 0.
  std::vector<float> X(static_cast<size_t>(n * hc * H)), pre_mix(size_t(n * hc), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < hc; ++k)
      std::copy_n(weights_.embed.row(tokens[size_t(i)]), H, X.data() + (i * hc + k) * H);
    pre_mix[size_t(i * hc)] = 1.0f;
  }
  ChunkSelection sel;
  sel.topk.resize(size_t(n));
  sel.candidates.resize(size_t(n));
  // SWA bounded replay (model-spec §9): with more than keep_tokens rows, the decoder layers run only on the
  // last keep_tokens rows and restart their window rings at the tail's first row; the candidate source
  // then only needs its cache writes (window, compressed KV, index keys) for the rows before the tail.
  const int64_t tail = (keep_tokens_ > 0 && n > keep_tokens_) ? n - keep_tokens_ : 0;
  for (int l = 0; l < c.num_layers; ++l) {
    int64_t row_begin = 0, full_begin = 0;
    if (tail > 0 && l >= decoder_begin_) {
      row_begin = full_begin = tail;
      V41LayerCache& cache = seq->layers[size_t(l)];
      cache.window = WindowRing(c.sliding_window, c.head_dim);
      cache.window_base = first_pos + tail;
    } else if (tail > 0 && l == decoder_begin_ - 1) {
      full_begin = tail;
    }
    run_layer(l, *seq, first_pos, X.data(), pre_mix.data(), n, row_begin, full_begin, engram_rows, sel);
  }

  // Final collapse with the last site's pre, norm, fp32 head (no hc_head in V4.1). Rows before the tail of a
  // truncated prefill were not computed: they hold quiet NaN.
  Tensor logits({n, c.vocab_size});
  std::vector<float> y(static_cast<size_t>(H));
  for (int64_t i = 0; i < tail; ++i)
    std::fill_n(logits.row(i), c.vocab_size, std::numeric_limits<float>::quiet_NaN());
  for (int64_t i = tail; i < n; ++i) {
    std::vector<float> pre(pre_mix.begin() + i * hc, pre_mix.begin() + (i + 1) * hc);
    hc_collapse(X.data() + i * hc * H, pre, int(hc), H, y.data());
    rms_norm(y.data(), weights_.norm.ptr(), H, c.rms_norm_eps, y.data());
    if (numerics_.bf16_activations) round_bf16_inplace(y.data(), H);
    matmul_nt(y.data(), 1, H, weights_.head.ptr(), c.vocab_size, logits.row(i));
  }
  seq->length_ += n;
  return logits;
}

void V41Model::run_layer(int layer, V41Sequence& seq, int64_t first_pos, float* X, float* pre_mix, int64_t n,
                         int64_t row_begin, int64_t full_begin, const std::vector<int64_t>& engram_rows,
                         ChunkSelection& sel) const {
  const ModelConfig& c = config_;
  const V41Layer& L = weights_.layers[size_t(layer)];
  const int hc = c.hc_mult;
  const int64_t H = c.hidden_size;
  size_t engram_slot = 0;
  const int hash_heads = (c.engram_max_ngram_size - 1) * c.engram_n_heads;
  if (L.engram) {
    for (size_t li = 0; li < engram_hashes_.size(); ++li)
      if (engram_hashes_[li].layer_id == layer) engram_slot = li;
  }
  std::vector<float> u(static_cast<size_t>(H)), x(static_cast<size_t>(H)), y(static_cast<size_t>(H)), X_mid(static_cast<size_t>(hc * H));
  for (int64_t i = row_begin; i < n; ++i) {
    float* Xi = X + i * hc * H;
    std::vector<float> pre(pre_mix + i * hc, pre_mix + (i + 1) * hc);
    // Engram writes into the streams before the block (model-spec §4 backbone loop).
    if (L.engram) {
      const int64_t* rows = engram_rows.data() + (size_t(i) * engram_hashes_.size() + engram_slot) * size_t(hash_heads);
      engram_apply(*L.engram, rows, hash_heads, hc, H, c.rms_norm_eps, Xi);
      if (numerics_.bf16_activations) round_bf16_inplace(Xi, hc * H);
    }
    if (i < full_begin) {
      // Cache writes only (the candidate source before a bounded-replay tail): the attention input x.
      hc_collapse(Xi, pre, hc, H, u.data());
      if (numerics_.bf16_activations) round_bf16_inplace(u.data(), H);
      rms_norm(u.data(), L.attn_norm.ptr(), H, c.rms_norm_eps, x.data());
      if (numerics_.bf16_activations) round_bf16_inplace(x.data(), H);
      update_caches(layer, seq, x.data(), first_pos + i);
      continue;
    }
    // Single-pass mHC (model-spec §4): the collapse uses the pre of the previous site.
    HcMix attn_mix = hc_mix(Xi, hc, H, L.hc_attn.params(), c.rms_norm_eps, c.hc_eps, c.hc_sinkhorn_iters);
    hc_collapse(Xi, pre, hc, H, u.data());
    if (numerics_.bf16_activations) round_bf16_inplace(u.data(), H);
    rms_norm(u.data(), L.attn_norm.ptr(), H, c.rms_norm_eps, x.data());
    if (numerics_.bf16_activations) round_bf16_inplace(x.data(), H);
    attention(layer, seq, x.data(), first_pos + i, i, sel, y.data());
    hc_expand(Xi, y.data(), attn_mix, H, X_mid.data());
    if (numerics_.bf16_activations) round_bf16_inplace(X_mid.data(), hc * H);

    HcMix ffn_mix = hc_mix(X_mid.data(), hc, H, L.hc_ffn.params(), c.rms_norm_eps, c.hc_eps, c.hc_sinkhorn_iters);
    hc_collapse(X_mid.data(), attn_mix.pre, hc, H, u.data());
    if (numerics_.bf16_activations) round_bf16_inplace(u.data(), H);
    rms_norm(u.data(), L.ffn_norm.ptr(), H, c.rms_norm_eps, x.data());
    if (numerics_.bf16_activations) round_bf16_inplace(x.data(), H);
    moe(layer, x.data(), y.data());
    hc_expand(X_mid.data(), y.data(), ffn_mix, H, Xi);
    if (numerics_.bf16_activations) round_bf16_inplace(Xi, hc * H);
    std::copy(ffn_mix.pre.begin(), ffn_mix.pre.end(), pre_mix + i * hc);
  }
}

namespace {
// y = W x, with the W8A8 input quantization of FP8 / FP4 weight GEMMs when enabled (model-spec §2).
void project(const Tensor& w, const float* x, bool quantize_input, float* y) {
  const int64_t in = w.dim(1);
  if (quantize_input) {
    std::vector<float> xq(x, x + in);
    fp8_fake_quant_ragged(xq.data(), in, kActQuantBlock);
    matmul_nt(xq.data(), 1, in, w.ptr(), w.dim(0), y);
  } else {
    matmul_nt(x, 1, in, w.ptr(), w.dim(0), y);
  }
}
}  // namespace

void V41Model::update_caches(int layer, V41Sequence& seq, const float* x, int64_t pos) const {
  const ModelConfig& c = config_;
  const LayerPlan& plan = c.layers[size_t(layer)];
  const V41Attention& A = weights_.layers[size_t(layer)].attn;
  const Rope& rope = ropes_[size_t(layer)];
  const int64_t D = c.head_dim, R = c.rope_dim;
  const bool cache_q = numerics_.quantize_cache;
  V41LayerCache& cache = seq.layers[size_t(layer)];

  // Window KV: norm(wkv x) -> RoPE -> MXFP8 cache quant over all dims.
  std::vector<float> kv(static_cast<size_t>(D));
  project(A.wkv, x, numerics_.quantize_activations, kv.data());
  if (numerics_.bf16_activations) round_bf16_inplace(kv.data(), D);  // the GEMM's bf16 output (as V4's)
  rms_norm(kv.data(), A.kv_norm.ptr(), D, c.rms_norm_eps, kv.data());
  if (numerics_.bf16_activations) round_bf16_inplace(kv.data(), D);
  rope.apply(kv.data() + D - R, pos);
  if (cache_q) fp8_fake_quant(kv.data(), D, kWindowKvBlock);
  cache.window.push(pos - cache.window_base, kv.data());

  if (plan.attention == AttentionKind::CSA2 && plan.role == Csa2Role::Full) {
    // Publish the closed group (model-spec §4 "Compressor"): the latent is rotated at the group's
    // first position; the index key is derived from the same unrotated latent.
    std::vector<float> latent(static_cast<size_t>(D));
    if (csa2_compress_token(*A.compressor, x, cache.partial, c.rms_norm_eps, numerics_.bf16_activations,
                            latent.data())) {
      const int64_t group_start = pos - plan.compress_ratio + 1;
      const int64_t idim = A.indexer->head_dim;
      std::vector<float> key(static_cast<size_t>(idim));
      csa2_index_key(*A.indexer, latent.data(), rope, group_start, c.rms_norm_eps, cache_q, key.data());
      rope.apply(latent.data() + D - R, group_start);
      if (cache_q) fp4_fake_quant(latent.data(), D, kCompressedKvBlock, Fp4Scale::E4M3);
      cache.compressed_kv.insert(cache.compressed_kv.end(), latent.begin(), latent.end());
      cache.index_keys.insert(cache.index_keys.end(), key.begin(), key.end());
      ++cache.entries;
    }
  }
}

void V41Model::attention(int layer, V41Sequence& seq, const float* x, int64_t pos, int64_t token,
                         ChunkSelection& sel, float* out) const {
  const ModelConfig& c = config_;
  const LayerPlan& plan = c.layers[size_t(layer)];
  const V41Attention& A = weights_.layers[size_t(layer)].attn;
  const Rope& rope = ropes_[size_t(layer)];
  const int heads = c.num_heads;
  const int64_t D = c.head_dim, R = c.rope_dim;
  const bool act_q = numerics_.quantize_activations, cache_q = numerics_.quantize_cache;
  V41LayerCache& cache = seq.layers[size_t(layer)];

  // Queries: q latent -> q_norm -> wq_b; V4.1 has no per-head q norm (model-spec §4 "Attention").
  std::vector<float> q_latent(static_cast<size_t>(c.q_lora_rank)), q(static_cast<size_t>(heads * D));
  project(A.wq_a, x, act_q, q_latent.data());
  if (numerics_.bf16_activations) round_bf16_inplace(q_latent.data(), c.q_lora_rank);  // the GEMM's bf16 output
  rms_norm(q_latent.data(), A.q_norm.ptr(), c.q_lora_rank, c.rms_norm_eps, q_latent.data());
  if (numerics_.bf16_activations) round_bf16_inplace(q_latent.data(), c.q_lora_rank);
  project(A.wq_b, q_latent.data(), act_q, q.data());
  if (numerics_.bf16_activations) round_bf16_inplace(q.data(), heads * D);
  for (int h = 0; h < heads; ++h) rope.apply(q.data() + h * D + D - R, pos);

  update_caches(layer, seq, x, pos);

  // The window: the last sliding_window positions, cut at window_base after a bounded-replay restart.
  std::vector<const float*> keys;
  const int64_t base = cache.window_base;
  for (int64_t p = std::max(base, pos - c.sliding_window + 1); p <= pos; ++p)
    keys.push_back(cache.window.at(p - base));

  if (plan.attention == AttentionKind::CSA2) {
    V41LayerCache& group = seq.layers[size_t(plan.kv_source)];
    const int ratio = plan.compress_ratio;
    // Entry w is visible to the query at pos iff w < (pos + 1) / ratio: the groups closed so far. The
    // source layer may already hold later entries of this chunk (layers run over the whole chunk in turn).
    const int64_t n_visible = (pos + 1) / ratio;
    DI_CHECK(group.entries >= n_visible, "v4.1 model: layer " + std::to_string(layer) + " expects " +
                                             std::to_string(n_visible) + " compressed entries from layer " +
                                             std::to_string(plan.kv_source) + ", found " +
                                             std::to_string(group.entries));
    if (A.indexer) {
      // The corrected index-key behaviour (model-spec §4 "Known reference bug"): always score against
      // the owner's running key cache.
      // The indexer's wq_b is an FP8 GEMM like the attention's: W8A8 on the q latent (model-spec §2).
      std::vector<float> index_latent(q_latent);
      if (act_q) fp8_fake_quant_ragged(index_latent.data(), c.q_lora_rank, kActQuantBlock);
      std::vector<float> scores = csa2_index_scores(*A.indexer, index_latent.data(), x, pos, rope, cache_q,
                                                    group.index_keys.data(), n_visible);
      const std::vector<uint8_t>* allowed = nullptr;
      if (plan.candidate_source) {
        sel.candidates[size_t(token)] = select_candidate_blocks(scores, c.candidate_block_size, c.candidate_topk_blocks);
        sel.has_candidates = true;
      } else if (c.candidate_source_layer_id >= 0 && layer > c.candidate_source_layer_id) {
        DI_CHECK(sel.has_candidates, "v4.1 model: Reindex layer " + std::to_string(layer) +
                                         " runs before its candidate source published candidates");
        allowed = &sel.candidates[size_t(token)];
      }
      sel.topk[size_t(token)] = select_index_topk(scores, allowed, c.index_topk);
      sel.topk_owner = plan.kv_source;
    }
    DI_CHECK(sel.topk_owner == plan.kv_source, "v4.1 model: Reuse layer " + std::to_string(layer) +
                                                   " has no top-k published for the group of layer " +
                                                   std::to_string(plan.kv_source));
    for (int64_t s : sel.topk[size_t(token)]) keys.push_back(group.compressed_kv.data() + s * D);
  }

  // Window and selected compressed entries in one softmax with the per-head sink.
  std::vector<float> o(static_cast<size_t>(heads * D));
  attend_with_sink(q.data(), heads, D, keys.data(), int64_t(keys.size()), A.sink.ptr(),
                   float(1.0 / std::sqrt(double(D))), o.data());
  // K = V carries RoPE, so the output's rope slice is rotated back to the query position (model-spec §2).
  for (int h = 0; h < heads; ++h) rope.apply(o.data() + h * D + D - R, pos, /*inverse=*/true);
  if (numerics_.bf16_activations) round_bf16_inplace(o.data(), heads * D);

  // Grouped low-rank output: group g's heads go through rows [g*o_lora, (g+1)*o_lora) of wo_a.
  const int64_t group_in = heads * D / c.o_groups, o_lora = c.o_lora_rank;
  std::vector<float> z(static_cast<size_t>(c.o_groups * o_lora));
  for (int g = 0; g < c.o_groups; ++g)
    matmul_nt(o.data() + g * group_in, 1, group_in, A.wo_a.row(g * o_lora), o_lora, z.data() + g * o_lora);
  if (numerics_.bf16_activations) round_bf16_inplace(z.data(), int64_t(z.size()));
  project(A.wo_b, z.data(), act_q, out);
  if (numerics_.bf16_activations) round_bf16_inplace(out, c.hidden_size);
}

void V41Model::moe(int layer, const float* x, float* out) const {
  const ModelConfig& c = config_;
  const V41Moe& M = weights_.layers[size_t(layer)].ffn;
  const int64_t H = c.hidden_size, E = c.n_routed_experts;
  std::vector<float> logits(static_cast<size_t>(E));
  matmul_nt(x, 1, H, M.gate.ptr(), E, logits.data());
  // model-spec §4 "MoE": sqrt(softplus(logit / gate_temp)); the bias steers selection only (text tokens;
  // bias_vl would apply to image tokens); weights normalised (+1e-20) only when top_k > 1.
  std::vector<float> scores = sqrt_softplus_scores(logits.data(), int(E), c.gate_temp);
  std::vector<int> chosen = select_experts(scores, M.bias.ptr(), c.n_experts_per_tok);
  loads_.add(layer, chosen);
  Routing routing = route_weights(scores, std::move(chosen), c.norm_topk_prob && c.n_experts_per_tok > 1,
                                  kRouteNormEps, c.routed_scaling_factor);

  std::vector<float> xin(x, x + H);
  if (numerics_.quantize_activations) fp8_fake_quant_ragged(xin.data(), H, kActQuantBlock);
  const int w2_block = numerics_.quantize_activations ? kActQuantBlock : 0;
  std::vector<double> acc(size_t(H), 0.0);
  auto run = [&](const V41Expert& e, float weight) {
    ExpertWeights ew{e.w1.ptr(), e.w3.ptr(), e.w2.ptr(), e.w1.dim(0)};
    swiglu_expert_accumulate(xin.data(), H, ew, c.swiglu_limit, weight, w2_block, numerics_.bf16_activations,
                             acc.data());
  };
  for (size_t k = 0; k < routing.experts.size(); ++k)
    run(M.experts[size_t(routing.experts[k])], routing.weights[k]);
  run(M.shared, 1.0f);
  for (int64_t d = 0; d < H; ++d) out[d] = float(acc[size_t(d)]);
  if (numerics_.bf16_activations) round_bf16_inplace(out, H);
}

std::unique_ptr<Model> load_v41_model(ModelConfig config, Checkpoint checkpoint, const ModelOptions& options) {
  return std::make_unique<V41Model>(std::move(config), std::move(checkpoint), options);
}

}  // namespace deepinfer
