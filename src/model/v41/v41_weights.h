// DeepSeek-V4.1-Flash weights for the CPU reference, decoded to fp32 from the official layout
// (model-spec.md §5 "V4.1-Flash"). Engram tables stay in the mapped checkpoint (EngramTable).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "layers/compressor/csa2_compressor.h"
#include "layers/engram/engram.h"
#include "layers/indexer/csa2_indexer.h"
#include "layers/mhc/mhc.h"
#include "model/checkpoint.h"
#include "model/config.h"

namespace deepinfer {

struct V41HcSite {
  Tensor fn;     // [(2 + hc) * hc, hc * hidden]
  Tensor base;   // [(2 + hc) * hc]
  Tensor scale;  // [3]
  HcSiteParams params() const { return {fn.ptr(), base.ptr(), scale.ptr()}; }
};

struct V41Attention {
  Tensor wq_a, q_norm, wq_b;  // [q_lora, hidden], [q_lora], [heads * head_dim, q_lora]
  Tensor wkv, kv_norm;        // [head_dim, hidden], [head_dim]
  Tensor wo_a;                // [o_groups * o_lora, heads * head_dim / o_groups]
  Tensor wo_b;                // [hidden, o_groups * o_lora]
  Tensor sink;                // [heads]
  std::optional<Csa2CompressorWeights> compressor;  // Full layers
  std::optional<Csa2IndexerWeights> indexer;        // Full and Reindex layers
};

struct V41Expert {
  Tensor w1, w3, w2;  // [inter, hidden], [inter, hidden], [hidden, inter]
};

struct V41Moe {
  Tensor gate;     // [experts, hidden]
  Tensor bias;     // [experts]: selection bias of text tokens
  Tensor bias_vl;  // [experts]: selection bias of image tokens (no image input yet)
  std::vector<V41Expert> experts;
  V41Expert shared;
};

struct V41Layer {
  Tensor attn_norm, ffn_norm;
  V41HcSite hc_attn, hc_ffn;
  V41Attention attn;
  V41Moe ffn;
  std::optional<EngramWeights> engram;
};

struct V41Weights {
  Tensor embed;  // [vocab, hidden]
  Tensor norm;   // [hidden]
  Tensor head;   // [vocab, hidden]
  std::vector<V41Layer> layers;
  // DSpark draft tensors (mtp.*), indexed by name for the speculative-decoding work; not read yet.
  std::vector<std::string> dspark_tensors;
};

// Reads every backbone tensor of `c` from `ck`, validating names, dtypes and shapes (Error names the
// tensor). Vision tensors are skipped with one notice line; `progress` prints a line per layer group.
V41Weights load_v41_weights(const ModelConfig& c, const Checkpoint& ck, bool progress);

}  // namespace deepinfer
