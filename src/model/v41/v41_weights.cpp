#include "model/v41/v41_weights.h"

#include <cstdio>
#include <set>

#include "layers/engram/ngram_hash.h"
#include "model/weight_formats.h"

namespace deepinfer {

namespace {

// Records which checkpoint tensors the loader consumed, so leftovers can be reported.
class TensorReader {
 public:
  TensorReader(const Checkpoint& ck, int fp8_block) : ck_(ck), block_(fp8_block) {}

  Tensor dense(const std::string& name, std::vector<int64_t> shape) {
    used_.insert(name);
    return read_dense(ck_, name, shape);
  }
  // `prefix`.weight in any stored format (FP8 + scale, MXFP4 + scale, BF16, F32).
  Tensor linear(const std::string& prefix, int64_t out, int64_t in) {
    used_.insert(prefix + ".weight");
    if (ck_.has(prefix + ".scale")) used_.insert(prefix + ".scale");
    return read_linear_weight(ck_, prefix, out, in, block_);
  }
  void mark_used(const std::string& name) { used_.insert(name); }
  bool used(const std::string& name) const { return used_.count(name) != 0; }
  const Checkpoint& checkpoint() const { return ck_; }

 private:
  const Checkpoint& ck_;
  int block_;
  std::set<std::string> used_;
};

V41HcSite read_hc_site(TensorReader& r, const std::string& prefix, const ModelConfig& c) {
  const int64_t hc = c.hc_mult, rows = (2 + hc) * hc;
  return {r.dense(prefix + "_fn", {rows, hc * c.hidden_size}), r.dense(prefix + "_base", {rows}),
          r.dense(prefix + "_scale", {3})};
}

V41Attention read_attention(TensorReader& r, const std::string& p, const ModelConfig& c, const LayerPlan& plan) {
  const int64_t H = c.hidden_size, D = c.head_dim, heads = c.num_heads, q_lora = c.q_lora_rank;
  V41Attention a;
  a.wq_a = r.linear(p + "wq_a", q_lora, H);
  a.q_norm = r.dense(p + "q_norm.weight", {q_lora});
  a.wq_b = r.linear(p + "wq_b", heads * D, q_lora);
  a.wkv = r.linear(p + "wkv", D, H);
  a.kv_norm = r.dense(p + "kv_norm.weight", {D});
  a.wo_a = r.linear(p + "wo_a", int64_t(c.o_groups) * c.o_lora_rank, heads * D / c.o_groups);
  a.wo_b = r.linear(p + "wo_b", H, int64_t(c.o_groups) * c.o_lora_rank);
  a.sink = r.dense(p + "attn_sink", {heads});
  if (plan.role == Csa2Role::Full) {
    Csa2CompressorWeights cw;
    cw.ratio = plan.compress_ratio;
    cw.wkv = r.linear(p + "compressor.wkv", D, H);
    if (cw.ratio > 1) cw.wgate = r.linear(p + "compressor.wgate", D, H);
    cw.norm = r.dense(p + "compressor.norm.weight", {D});
    a.compressor = std::move(cw);
  }
  if (plan.role == Csa2Role::Full || plan.role == Csa2Role::Reindex) {
    Csa2IndexerWeights iw;
    iw.heads = c.index_n_heads;
    iw.head_dim = c.index_head_dim;
    iw.wq_b = r.linear(p + "indexer.wq_b", int64_t(iw.heads) * iw.head_dim, q_lora);
    iw.weights_proj = r.linear(p + "indexer.weights_proj", iw.heads, H);
    if (plan.role == Csa2Role::Full) {
      iw.wk = r.linear(p + "indexer.wk", iw.head_dim, D);
      iw.k_norm = r.dense(p + "indexer.k_norm.weight", {iw.head_dim});
    }
    a.indexer = std::move(iw);
  }
  return a;
}

V41Expert read_expert(TensorReader& r, const std::string& p, const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.moe_intermediate_size;
  return {r.linear(p + "w1", I, H), r.linear(p + "w3", I, H), r.linear(p + "w2", H, I)};
}

V41Moe read_moe(TensorReader& r, const std::string& p, const ModelConfig& c) {
  const int64_t E = c.n_routed_experts;
  V41Moe m;
  m.gate = r.linear(p + "gate", E, c.hidden_size);
  m.bias = r.dense(p + "gate.bias", {E});
  if (r.checkpoint().has(p + "gate.bias_vl")) m.bias_vl = r.dense(p + "gate.bias_vl", {E});
  for (int64_t e = 0; e < E; ++e) m.experts.push_back(read_expert(r, p + "experts." + std::to_string(e) + ".", c));
  m.shared = read_expert(r, p + "shared_experts.", c);
  return m;
}

EngramWeights read_engram(TensorReader& r, const std::string& p, const ModelConfig& c, const EngramLayerHash& hash) {
  const int64_t H = c.hidden_size, hc = c.hc_mult;
  const int64_t hash_heads = int64_t(c.engram_max_ngram_size - 1) * c.engram_n_heads;
  EngramWeights e;
  e.table = EngramTable(r.checkpoint(), p + "embed", hash.table_rows, c.engram_head_dim);
  r.mark_used(p + "embed.weight");
  if (r.checkpoint().has(p + "embed.scale")) r.mark_used(p + "embed.scale");
  e.wkv = r.linear(p + "wkv", H * (hc + 1), hash_heads * c.engram_head_dim);
  e.q_weight = r.dense(p + "q_weight", {hc, H});
  e.k_weight = r.dense(p + "k_weight", {hc, H});
  return e;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

V41Weights load_v41_weights(const ModelConfig& c, const Checkpoint& ck, bool progress) {
  TensorReader r(ck, c.weight_block_size);
  V41Weights w;
  w.embed = r.dense("embed.weight", {c.vocab_size, c.hidden_size});
  w.norm = r.dense("norm.weight", {c.hidden_size});
  w.head = r.dense("head.weight", {c.vocab_size, c.hidden_size});
  std::vector<EngramLayerHash> hashes = derive_engram_hashes(c);
  const int group = 8;
  for (const LayerPlan& plan : c.layers) {
    const std::string p = "layers." + std::to_string(plan.index) + ".";
    if (progress && plan.index % group == 0)
      std::fprintf(stderr, "[load] v4.1 layers %d-%d of %d\n", plan.index,
                   std::min(plan.index + group, c.num_layers) - 1, c.num_layers);
    V41Layer L;
    L.attn_norm = r.dense(p + "attn_norm.weight", {c.hidden_size});
    L.ffn_norm = r.dense(p + "ffn_norm.weight", {c.hidden_size});
    L.hc_attn = read_hc_site(r, p + "hc_attn", c);
    L.hc_ffn = read_hc_site(r, p + "hc_ffn", c);
    L.attn = read_attention(r, p + "attn.", c, plan);
    L.ffn = read_moe(r, p + "ffn.", c);
    if (plan.engram) {
      for (const EngramLayerHash& h : hashes)
        if (h.layer_id == plan.index) L.engram = read_engram(r, p + "engram.", c, h);
    }
    w.layers.push_back(std::move(L));
  }

  // Everything else: DSpark draft layers are indexed for later; the vision tower is not run by the text
  // path; any other leftover is named so a layout mismatch does not go unnoticed.
  int vision = 0;
  std::vector<std::string> unknown;
  for (const auto& [name, entry] : ck.tensors()) {
    if (r.used(name)) continue;
    if (starts_with(name, "mtp.")) {
      w.dspark_tensors.push_back(name);
    } else if (starts_with(name, "vision.") || starts_with(name, "aligner.") || starts_with(name, "image_")) {
      ++vision;
    } else {
      unknown.push_back(name);
    }
  }
  if (progress && vision > 0)
    std::fprintf(stderr, "[load] skipping %d vision tensors (vision.*, aligner.*, image_*): text-only forward\n",
                 vision);
  if (progress && !w.dspark_tensors.empty())
    std::fprintf(stderr, "[load] indexed %zu DSpark tensors (mtp.*) for speculative decoding\n",
                 w.dspark_tensors.size());
  DI_CHECK(unknown.empty(), "checkpoint: " + std::to_string(unknown.size()) +
                                " tensor(s) that a deepseek_v41 model with this config does not have, e.g. '" +
                                (unknown.empty() ? std::string() : unknown.front()) + "'");
  return w;
}

}  // namespace deepinfer
