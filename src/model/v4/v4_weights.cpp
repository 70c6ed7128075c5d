#include "model/v4/v4_weights.h"

#include <cstdio>

#include "core/error.h"
#include "model/weight_formats.h"

namespace deepinfer {

namespace {

// Reads the tensors of one model part; keeps the config and the name prefix of the part together.
struct Reader {
  const ModelConfig& c;
  const Checkpoint& ck;

  Tensor dense(const std::string& name, std::vector<int64_t> shape) const { return read_dense(ck, name, shape); }
  // Linear weights may be FP8 (block-scaled), FP4 (experts) or BF16 on disk (model-spec §5).
  Tensor linear(const std::string& prefix, int64_t out, int64_t in) const {
    return read_linear_weight(ck, prefix, out, in, c.weight_block_size);
  }

  V4HcSiteWeights hc_site(const std::string& p, const std::string& site) const {
    int64_t hc = c.hc_mult, mix = (2 + hc) * hc;
    return {dense(p + "hc_" + site + "_fn", {mix, hc * c.hidden_size}), dense(p + "hc_" + site + "_base", {mix}),
            dense(p + "hc_" + site + "_scale", {3})};
  }

  // attn.compressor.* or attn.indexer.compressor.* (model-spec §3 "Compressor"): `dim` wide entries,
  // two series per token when the layout overlaps (CSA and its indexer; HCA does not overlap).
  V4CompressorWeights compressor(const std::string& p, int ratio, int64_t dim, bool overlap) const {
    V4CompressorWeights w;
    w.ratio = ratio;
    w.dim = dim;
    w.overlap = overlap;
    int64_t width = w.series() * dim;
    w.wkv = linear(p + "wkv", width, c.hidden_size);
    w.wgate = linear(p + "wgate", width, c.hidden_size);
    w.ape = dense(p + "ape", {ratio, width});
    w.norm = dense(p + "norm.weight", {dim});
    return w;
  }

  V4AttentionWeights attention(const std::string& p, const LayerPlan& plan) const {
    int64_t H = c.hidden_size, D = c.head_dim, heads = c.num_heads;
    V4AttentionWeights a;
    a.wq_a = linear(p + "wq_a", c.q_lora_rank, H);
    a.q_norm = dense(p + "q_norm.weight", {c.q_lora_rank});
    a.wq_b = linear(p + "wq_b", heads * D, c.q_lora_rank);
    a.wkv = linear(p + "wkv", D, H);
    a.kv_norm = dense(p + "kv_norm.weight", {D});
    a.wo_a = linear(p + "wo_a", int64_t(c.o_groups) * c.o_lora_rank, heads * D / c.o_groups);
    a.wo_b = linear(p + "wo_b", H, int64_t(c.o_groups) * c.o_lora_rank);
    a.attn_sink = dense(p + "attn_sink", {heads});
    if (plan.attention != AttentionKind::Window)
      a.compressor = compressor(p + "compressor.", plan.compress_ratio, D, plan.attention == AttentionKind::CSA);
    if (plan.attention == AttentionKind::CSA) {
      LightningIndexerWeights ix;
      ix.heads = c.index_n_heads;
      ix.dim = c.index_head_dim;
      ix.topk = c.index_topk;
      ix.compressor = compressor(p + "indexer.compressor.", plan.compress_ratio, ix.dim, true);
      ix.wq_b = linear(p + "indexer.wq_b", int64_t(ix.heads) * ix.dim, c.q_lora_rank);
      ix.weights_proj = linear(p + "indexer.weights_proj", ix.heads, H);
      a.indexer = std::move(ix);
    }
    return a;
  }

  V4ExpertWeights expert(const std::string& p, int64_t inter) const {
    return {linear(p + "w1", inter, c.hidden_size), linear(p + "w3", inter, c.hidden_size),
            linear(p + "w2", c.hidden_size, inter)};
  }

  V4MoeWeights moe(const std::string& p, const LayerPlan& plan) const {
    V4MoeWeights m;
    int64_t E = c.n_routed_experts;
    m.gate = linear(p + "gate", E, c.hidden_size);
    if (plan.hash_moe) {
      // model-spec §3: the first num_hash_layers layers route by a fixed token -> experts table.
      std::vector<int64_t> table = read_int_table(ck, p + "gate.tid2eid", {c.vocab_size, c.n_experts_per_tok});
      m.tid2eid.reserve(table.size());
      for (size_t i = 0; i < table.size(); ++i) {
        DI_CHECK(table[i] >= 0 && table[i] < E, "checkpoint: tensor '" + p + "gate.tid2eid' routes token " +
                                                    std::to_string(i / size_t(c.n_experts_per_tok)) +
                                                    " to expert " + std::to_string(table[i]) + ", outside [0, " +
                                                    std::to_string(E) + ")");
        m.tid2eid.push_back(int32_t(table[i]));
      }
    } else {
      m.gate_bias = dense(p + "gate.bias", {E});
    }
    m.experts.reserve(size_t(E));
    for (int64_t e = 0; e < E; ++e) m.experts.push_back(expert(p + "experts." + std::to_string(e) + ".", c.moe_intermediate_size));
    m.shared = expert(p + "shared_experts.", int64_t(c.n_shared_experts) * c.moe_intermediate_size);
    return m;
  }
};

void check_v4_config(const ModelConfig& c) {
  DI_CHECK(c.family == ModelFamily::V4, "v4 model: config model_type '" + c.model_type + "' is not deepseek_v4");
  DI_CHECK(c.num_layers > 0 && int(c.layers.size()) == c.num_layers, "v4 model: config has no layer plan");
  DI_CHECK(c.hidden_size > 0 && c.num_heads > 0 && c.head_dim > 0 && c.vocab_size > 0,
           "v4 model: config needs positive hidden_size, num_attention_heads, head_dim and vocab_size");
  DI_CHECK(c.rope_dim > 0 && c.rope_dim % 2 == 0 && c.rope_dim <= c.head_dim,
           "v4 model: qk_rope_head_dim " + std::to_string(c.rope_dim) + " must be even and at most head_dim");
  DI_CHECK(c.o_groups > 0 && c.num_heads % c.o_groups == 0,
           "v4 model: num_attention_heads " + std::to_string(c.num_heads) + " is not divisible by o_groups " +
               std::to_string(c.o_groups));
  DI_CHECK(c.hc_mult > 0 && c.hc_sinkhorn_iters > 0, "v4 model: hc_mult and hc_sinkhorn_iters must be positive");
  DI_CHECK(c.sliding_window > 0, "v4 model: sliding_window must be positive");
  DI_CHECK(c.n_experts_per_tok > 0 && c.n_experts_per_tok <= c.n_routed_experts,
           "v4 model: num_experts_per_tok must be in [1, n_routed_experts]");
  for (const LayerPlan& l : c.layers) {
    if (l.attention == AttentionKind::CSA) {
      DI_CHECK(c.index_n_heads > 0 && c.index_head_dim >= c.rope_dim && c.index_topk > 0,
               "v4 model: layer " + std::to_string(l.index) +
                   " is CSA but index_n_heads / index_head_dim / index_topk are not set");
    }
  }
}

}  // namespace

V4Weights load_v4_weights(const ModelConfig& c, const Checkpoint& ck, bool show_progress) {
  check_v4_config(c);
  Reader r{c, ck};
  V4Weights w;
  w.embed = r.dense("embed.weight", {c.vocab_size, c.hidden_size});
  w.head = r.dense("head.weight", {c.vocab_size, c.hidden_size});
  w.norm = r.dense("norm.weight", {c.hidden_size});
  w.hc_head_fn = r.dense("hc_head_fn", {c.hc_mult, int64_t(c.hc_mult) * c.hidden_size});
  w.hc_head_base = r.dense("hc_head_base", {c.hc_mult});
  w.hc_head_scale = r.dense("hc_head_scale", {1});
  w.layers.reserve(size_t(c.num_layers));
  for (const LayerPlan& plan : c.layers) {
    std::string p = "layers." + std::to_string(plan.index) + ".";
    if (show_progress)
      std::fprintf(stderr, "[load] v4 layer %d/%d (%s, ratio %d%s)\n", plan.index + 1, c.num_layers,
                   attention_kind_name(plan.attention), plan.compress_ratio, plan.hash_moe ? ", hash moe" : "");
    V4LayerWeights L;
    L.attn_norm = r.dense(p + "attn_norm.weight", {c.hidden_size});
    L.ffn_norm = r.dense(p + "ffn_norm.weight", {c.hidden_size});
    L.hc_attn = r.hc_site(p, "attn");
    L.hc_ffn = r.hc_site(p, "ffn");
    L.attn = r.attention(p + "attn.", plan);
    L.ffn = r.moe(p + "ffn.", plan);
    w.layers.push_back(std::move(L));
  }
  return w;
}

}  // namespace deepinfer
