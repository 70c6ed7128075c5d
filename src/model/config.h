// Model configuration for the V4 family (model-spec.md §1): one struct for both the flat `deepseek_v4`
// config and the composite `deepseek_v41` one, plus the per-layer plan derived from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace deepinfer {

enum class ModelFamily { V4, V41 };

// What a layer's attention reads besides its own window (model-spec §1.2, §3, §4).
enum class AttentionKind {
  Window,  // ratio 0: sliding window only
  CSA,     // V4 ratio 4: overlapping compressor + lightning indexer top-k
  HCA,     // V4 ratio > 4: non-overlapping compressor, attends to every visible entry
  CSA2,    // V4.1 ratio 2 or 1: shared compressed KV of the layer's group, two-level top-k
};

// V4.1 CSA2 roles (model-spec §1.2 table).
enum class Csa2Role {
  None,     // not a CSA2 layer
  Full,     // owns a compressor: publishes compressed KV, index keys and a top-k
  Reindex,  // own indexer weights over the group's keys, masked to the candidate blocks
  Reuse,    // attends with the group's compressed KV and the latest published top-k
};

struct LayerPlan {
  int index = 0;
  int compress_ratio = 0;
  AttentionKind attention = AttentionKind::Window;
  Csa2Role role = Csa2Role::None;
  bool hash_moe = false;          // V4 layers < num_hash_layers route by tid2eid[token]
  bool engram = false;            // V4.1: Engram runs before this layer
  bool candidate_source = false;  // V4.1: publishes the candidate-block mask
  int kv_source = -1;             // V4.1: the Full layer whose compressed KV this layer reads
  bool yarn_rope = false;         // ratio > 0 layers rotate with compress_rope_theta + YaRN (model-spec §2)
  float rope_theta = 10000.0f;
};

struct YarnScaling {
  float factor = 1.0f;
  int64_t original_max_position_embeddings = 0;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
};

struct ModelConfig {
  ModelFamily family = ModelFamily::V4;
  std::string model_type;

  int64_t vocab_size = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 1;
  int head_dim = 0;
  int rope_dim = 0;  // qk_rope_head_dim: the trailing rotated channels of each head
  int q_lora_rank = 0;
  int o_lora_rank = 0;
  int o_groups = 0;

  int n_routed_experts = 0;
  int n_experts_per_tok = 0;
  int n_shared_experts = 0;
  int moe_intermediate_size = 0;
  int num_hash_layers = 0;
  std::string scoring_func;
  float gate_temp = 1.0f;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
  float swiglu_limit = 0.0f;

  int hc_mult = 0;
  int hc_sinkhorn_iters = 0;
  float hc_eps = 0.0f;
  float rms_norm_eps = 0.0f;

  int sliding_window = 0;
  float rope_theta = 10000.0f;
  float compress_rope_theta = 10000.0f;
  YarnScaling yarn;
  int64_t max_position_embeddings = 0;

  int index_n_heads = 0;
  int index_head_dim = 0;
  int index_topk = 0;
  std::vector<int> compress_ratios;  // num_layers entries (extra MTP/DSpark tail entries dropped)

  // V4.1 CSA2 schedule (model-spec §1.2).
  std::vector<int> kv_source_layer_ids;
  std::vector<int> index_source_layer_ids;
  int candidate_source_layer_id = -1;
  int candidate_topk_blocks = 0;
  int candidate_block_size = 0;

  // V4.1 Engram (model-spec §4).
  std::vector<int> engram_layer_ids;
  std::vector<int64_t> engram_num_embeddings;
  int engram_max_ngram_size = 0;
  int64_t engram_vocab_size = 0;
  int engram_n_heads = 0;
  int engram_head_dim = 0;
  int engram_pad_token_id = 0;
  int64_t engram_compressed_vocab_size = 0;

  // Draft layers: V4 MTP (nextn) and V4.1 DSpark.
  int num_nextn_predict_layers = 0;
  int dspark_block_size = 0;
  int dspark_noise_token_id = -1;
  std::vector<int> dspark_target_layer_ids;
  int dspark_markov_rank = 0;
  int dspark_n_routed_experts = 0;
  int dspark_num_experts_per_tok = 0;

  // Weight formats (model-spec §5).
  int weight_block_size = 128;  // FP8 block edge: 128 on V4, 32 on V4.1
  std::string expert_dtype = "fp4";

  int bos_token_id = 0;
  int eos_token_id = 1;
  int pad_token_id = -1;
  bool has_vision = false;

  std::vector<LayerPlan> layers;

  bool is_v41() const { return family == ModelFamily::V41; }
};

// Parses config.json text / a parsed object. Throws deepinfer::Error naming the offending field for an
// unknown model_type, a missing required field, a wrong type, or inconsistent values.
ModelConfig parse_model_config(const nlohmann::json& root);
ModelConfig load_model_config(const std::string& path);

const char* attention_kind_name(AttentionKind k);
const char* csa2_role_name(Csa2Role r);

}  // namespace deepinfer
