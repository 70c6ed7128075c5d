// The V4-Flash and V4.1-Flash configs of the GPU benchmarks (v4_decode, multi/v4_ep_decode), at any depth.
#pragma once

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

// V4-Flash (model-spec §1.1) with `layers` layers: [SWA, SWA] then CSA / HCA alternating, as V4-Flash's
// compress_ratios [0, 0] + [4, 128] * 20 + [4]; 43 layers is the full model.
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

// V4.1-Flash (model-spec §1.2) with `layers` layers: encoder layers 0 .. ceil(N/2) - 1 and decoder layers
// 20 .. 20 + floor(N/2) - 1 of the 40-layer pattern, renumbered; the sources keep their roles (40 layers is the full
// backbone; the DSpark draft layers are left out). Without `engram` no Engram layers: each of V4.1-Flash's two tables
// holds ~384M rows of 256 + 8 B (~101 GB); with it, the Engram layers 1 and 14 of the pattern that fall inside the
// first N layers, with the official table sizes and hashing constants.
inline nlohmann::json flash41_config(int layers, bool engram = false) {
  using nlohmann::json;
  const int encoder = (layers + 1) / 2, decoder = layers / 2;
  std::vector<int> original;
  for (int i = 0; i < encoder; ++i) original.push_back(i);
  for (int i = 0; i < decoder; ++i) original.push_back(20 + i);
  auto renumber = [&](const std::vector<int>& ids) {
    std::vector<int> out;
    for (size_t i = 0; i < original.size(); ++i)
      if (std::find(ids.begin(), ids.end(), original[i]) != ids.end()) out.push_back(int(i));
    return out;
  };
  std::vector<int> ratios;
  for (int o : original) ratios.push_back(o < 2 ? 0 : o < 20 ? 2 : 1);
  const std::vector<int> candidate = renumber({20});
  // model-spec §1.2: engram_layer_ids [1, 14], engram_num_embeddings [384006168, 384016682].
  std::vector<int> engram_layers;
  std::vector<int64_t> engram_rows;
  if (engram) {
    engram_layers = renumber({1, 14});
    for (int l : engram_layers) engram_rows.push_back(original[size_t(l)] == 1 ? 384006168 : 384016682);
  }
  json text{
      {"vocab_size", 129280}, {"hidden_size", 5120}, {"num_hidden_layers", layers}, {"num_attention_heads", 64},
      {"num_key_value_heads", 1}, {"head_dim", 512}, {"qk_rope_head_dim", 64}, {"q_lora_rank", 1280},
      {"o_lora_rank", 1024}, {"o_groups", 8}, {"n_routed_experts", 384}, {"num_experts_per_tok", 6},
      {"n_shared_experts", 1}, {"moe_intermediate_size", 2304}, {"scoring_func", "sqrtsoftplus"}, {"gate_temp", 1.0},
      {"topk_method", "noaux_tc"}, {"norm_topk_prob", true}, {"routed_scaling_factor", 1.5}, {"swiglu_limit", 10.0},
      {"rms_norm_eps", 1e-20}, {"hc_mult", 4}, {"hc_sinkhorn_iters", 20}, {"hc_eps", 1e-6}, {"sliding_window", 128},
      {"rope_theta", 10000.0}, {"compress_rope_theta", 160000.0},
      {"rope_scaling", {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 65536},
                        {"beta_fast", 32}, {"beta_slow", 1}}},
      {"max_position_embeddings", 1048576}, {"compress_ratios", ratios},
      {"kv_source_layer_ids", renumber({2, 8, 14, 20})},
      {"index_source_layer_ids", renumber({2, 8, 14, 20, 24, 28, 32, 36})},
      {"candidate_source_layer_id", candidate.empty() ? -1 : candidate[0]}, {"candidate_topk_blocks", 2048},
      {"candidate_block_size", 8}, {"index_n_heads", 32}, {"index_head_dim", 128}, {"index_topk", 512},
      {"engram_layer_ids", engram_layers}, {"engram_num_embeddings", engram_rows}, {"num_nextn_predict_layers", 0}};
  if (engram) {
    text["engram_max_ngram_size"] = 4;
    text["engram_vocab_size"] = 16000000;
    text["engram_n_heads"] = 8;
    text["engram_head_dim"] = 256;
    text["engram_pad_token_id"] = 2;
    text["engram_compressed_vocab_size"] = 99092;
  }
  return json{{"model_type", "deepseek_v41"}, {"bos_token_id", 0}, {"eos_token_id", 1}, {"pad_token_id", 2},
              {"quantization_config", {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {32, 32}},
                                       {"scale_fmt", "ue8m0"}, {"expert_dtype", "fp4"}}},
              {"text_config", text}};
}
