// The V4-Flash config of the GPU benchmarks (model-spec §1.1) with `layers` layers: [SWA, SWA] then CSA / HCA
// alternating, as V4-Flash's compress_ratios [0, 0] + [4, 128] * 20 + [4]; 43 layers is the full model.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

inline nlohmann::json flash_config(int layers) {
  using nlohmann::json;
  std::vector<int> ratios{0, 0};
  while (int(ratios.size()) < layers) ratios.push_back(ratios.size() % 2 == 0 ? 4 : 128);
  ratios.resize(size_t(layers));
  return json{
      {"model_type", "deepseek_v4"}, {"vocab_size", 129280}, {"hidden_size", 4096}, {"num_hidden_layers", layers},
      {"num_attention_heads", 64}, {"num_key_value_heads", 1}, {"head_dim", 512}, {"qk_rope_head_dim", 64},
      {"q_lora_rank", 1024}, {"o_lora_rank", 1024}, {"o_groups", 8}, {"n_routed_experts", 256},
      {"num_experts_per_tok", 6}, {"n_shared_experts", 1}, {"moe_intermediate_size", 2048}, {"num_hash_layers", 3},
      {"scoring_func", "sqrtsoftplus"}, {"topk_method", "noaux_tc"}, {"norm_topk_prob", true},
      {"routed_scaling_factor", 1.5}, {"swiglu_limit", 10.0}, {"hc_mult", 4}, {"hc_sinkhorn_iters", 20},
      {"hc_eps", 1e-6}, {"rms_norm_eps", 1e-6}, {"sliding_window", 128}, {"rope_theta", 10000.0},
      {"compress_rope_theta", 160000.0},
      {"rope_scaling", {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 65536},
                        {"beta_fast", 32}, {"beta_slow", 1}}},
      {"compress_ratios", ratios}, {"index_n_heads", 64}, {"index_head_dim", 128}, {"index_topk", 512},
      {"max_position_embeddings", 1048576}, {"num_nextn_predict_layers", 0}, {"bos_token_id", 0},
      {"eos_token_id", 1}, {"tie_word_embeddings", false}, {"torch_dtype", "bfloat16"}, {"expert_dtype", "fp4"},
      {"quantization_config", {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}}}}};
}
