// The DeepSeek-V4-Flash weights (model-spec.md §5) decoded to fp32 for the CPU reference forward.
// Names and shapes are the official ones; every tensor is checked while loading and a missing or
// misshaped one is reported by name. The MTP layer (`mtp.0.*`) is not part of the forward and is skipped.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "layers/compressor/v4_compressor.h"
#include "layers/indexer/lightning_indexer.h"
#include "layers/mhc/mhc.h"
#include "model/checkpoint.h"
#include "model/config.h"

namespace deepinfer {

// One mHC site: hc_{attn,ffn}_{fn,base,scale} (model-spec §3 "mHC site").
struct V4HcSiteWeights {
  Tensor fn;     // [(2 + hc) * hc, hc * hidden]
  Tensor base;   // [(2 + hc) * hc]
  Tensor scale;  // [3]
  HcSiteParams params() const { return {fn.ptr(), base.ptr(), scale.ptr()}; }
};

struct V4AttentionWeights {
  Tensor wq_a;       // [q_lora, hidden]
  Tensor q_norm;     // [q_lora]
  Tensor wq_b;       // [heads * head_dim, q_lora]
  Tensor wkv;        // [head_dim, hidden]
  Tensor kv_norm;    // [head_dim]
  Tensor wo_a;       // [o_groups * o_lora, heads * head_dim / o_groups]
  Tensor wo_b;       // [hidden, o_groups * o_lora]
  Tensor attn_sink;  // [heads]
  std::optional<V4CompressorWeights> compressor;   // CSA and HCA layers
  std::optional<LightningIndexerWeights> indexer;  // CSA layers
};

struct V4ExpertWeights {
  Tensor w1, w3;  // [inter, hidden]
  Tensor w2;      // [hidden, inter]
};

struct V4MoeWeights {
  Tensor gate;                  // [n_routed_experts, hidden]
  Tensor gate_bias;             // [n_routed_experts], selection only (non-hash layers)
  std::vector<int32_t> tid2eid; // [vocab * top_k] (hash layers)
  std::vector<V4ExpertWeights> experts;
  V4ExpertWeights shared;       // n_shared_experts * moe_intermediate_size wide
};

struct V4LayerWeights {
  Tensor attn_norm, ffn_norm;  // [hidden]
  V4HcSiteWeights hc_attn, hc_ffn;
  V4AttentionWeights attn;
  V4MoeWeights ffn;
};

struct V4Weights {
  Tensor embed;  // [vocab, hidden]
  Tensor head;   // [vocab, hidden]
  Tensor norm;   // [hidden]
  Tensor hc_head_fn;     // [hc, hc * hidden]
  Tensor hc_head_base;   // [hc]
  Tensor hc_head_scale;  // [1]
  std::vector<V4LayerWeights> layers;
};

// Reads every tensor the forward needs. Throws deepinfer::Error naming the tensor for a missing one, a
// wrong dtype or shape, or an out-of-range hash-routing entry. `show_progress` prints one line per layer.
V4Weights load_v4_weights(const ModelConfig& config, const Checkpoint& checkpoint, bool show_progress);

}  // namespace deepinfer
