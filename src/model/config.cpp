#include "model/config.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace deepinfer {

using nlohmann::json;

namespace {

// Reads config fields with errors that name the field and the file section (`text_config.hidden_size`).
class FieldReader {
 public:
  FieldReader(const json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  bool has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }
  std::string path(const char* key) const { return prefix_ + key; }

  const json& required(const char* key) const {
    DI_CHECK(has(key), "config: missing required field '" + path(key) + "'");
    return obj_.at(key);
  }

  int64_t integer(const char* key) const { return as_integer(required(key), key); }
  int64_t integer(const char* key, int64_t fallback) const {
    return has(key) ? as_integer(obj_.at(key), key) : fallback;
  }
  int positive(const char* key) const {
    int64_t v = integer(key);
    DI_CHECK(v > 0, "config: field '" + path(key) + "' must be positive, got " + std::to_string(v));
    return int(v);
  }
  double number(const char* key) const { return as_number(required(key), key); }
  double number(const char* key, double fallback) const {
    return has(key) ? as_number(obj_.at(key), key) : fallback;
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    DI_CHECK(obj_.at(key).is_boolean(), "config: field '" + path(key) + "' must be a boolean");
    return obj_.at(key).get<bool>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    DI_CHECK(obj_.at(key).is_string(), "config: field '" + path(key) + "' must be a string");
    return obj_.at(key).get<std::string>();
  }
  std::vector<int64_t> int_list(const char* key) const {
    if (!has(key)) return {};
    const json& v = obj_.at(key);
    DI_CHECK(v.is_array(), "config: field '" + path(key) + "' must be a list of integers");
    std::vector<int64_t> out;
    for (size_t i = 0; i < v.size(); ++i) out.push_back(as_integer(v[i], key, int(i)));
    return out;
  }

 private:
  int64_t as_integer(const json& v, const char* key, int index = -1) const {
    std::string where = path(key) + (index >= 0 ? "[" + std::to_string(index) + "]" : "");
    DI_CHECK(v.is_number_integer() || (v.is_number_float() && v.get<double>() == double(int64_t(v.get<double>()))),
             "config: field '" + where + "' must be an integer, got " + v.dump());
    return v.is_number_integer() ? v.get<int64_t>() : int64_t(v.get<double>());
  }
  double as_number(const json& v, const char* key) const {
    DI_CHECK(v.is_number(), "config: field '" + path(key) + "' must be a number, got " + v.dump());
    return v.get<double>();
  }

  const json& obj_;
  std::string prefix_;
};

std::vector<int> to_int_vector(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

void read_common(const FieldReader& f, ModelConfig& c) {
  c.vocab_size = f.positive("vocab_size");
  c.hidden_size = f.positive("hidden_size");
  c.num_layers = f.positive("num_hidden_layers");
  c.num_heads = f.positive("num_attention_heads");
  c.num_kv_heads = int(f.integer("num_key_value_heads", 1));
  c.head_dim = f.positive("head_dim");
  c.rope_dim = f.positive("qk_rope_head_dim");
  c.q_lora_rank = f.positive("q_lora_rank");
  c.o_lora_rank = f.positive("o_lora_rank");
  c.o_groups = f.positive("o_groups");
  c.n_routed_experts = f.positive("n_routed_experts");
  c.n_experts_per_tok = f.positive("num_experts_per_tok");
  c.n_shared_experts = int(f.integer("n_shared_experts", 1));
  c.moe_intermediate_size = f.positive("moe_intermediate_size");
  c.scoring_func = f.string("scoring_func", "sqrtsoftplus");
  c.gate_temp = float(f.number("gate_temp", 1.0));
  c.norm_topk_prob = f.boolean("norm_topk_prob", true);
  c.routed_scaling_factor = float(f.number("routed_scaling_factor"));
  c.swiglu_limit = float(f.number("swiglu_limit", 0.0));
  c.hc_mult = f.positive("hc_mult");
  c.hc_sinkhorn_iters = f.positive("hc_sinkhorn_iters");
  c.hc_eps = float(f.number("hc_eps"));
  c.rms_norm_eps = float(f.number("rms_norm_eps"));
  c.sliding_window = f.positive("sliding_window");
  c.rope_theta = float(f.number("rope_theta"));
  c.compress_rope_theta = float(f.number("compress_rope_theta", c.rope_theta));
  c.max_position_embeddings = f.integer("max_position_embeddings", 0);
  c.index_n_heads = int(f.integer("index_n_heads", 0));
  c.index_head_dim = int(f.integer("index_head_dim", 0));
  c.index_topk = int(f.integer("index_topk", 0));
  c.num_nextn_predict_layers = int(f.integer("num_nextn_predict_layers", 0));
  c.dspark_block_size = int(f.integer("dspark_block_size", 0));
  c.dspark_noise_token_id = int(f.integer("dspark_noise_token_id", -1));
  c.dspark_target_layer_ids = to_int_vector(f.int_list("dspark_target_layer_ids"));
  c.dspark_markov_rank = int(f.integer("dspark_markov_rank", 0));
  c.dspark_n_routed_experts = int(f.integer("dspark_n_routed_experts", 0));
  c.dspark_num_experts_per_tok = int(f.integer("dspark_num_experts_per_tok", 0));

  std::vector<int64_t> ratios = f.int_list("compress_ratios");
  DI_CHECK(!ratios.empty(), "config: missing required field '" + f.path("compress_ratios") + "'");
  DI_CHECK(int(ratios.size()) >= c.num_layers,
           "config: field '" + f.path("compress_ratios") + "' has " + std::to_string(ratios.size()) +
               " entries but num_hidden_layers is " + std::to_string(c.num_layers));
  // Entries past num_hidden_layers describe MTP / DSpark draft layers (model-spec §1.1); they are ratio 0.
  ratios.resize(size_t(c.num_layers));
  c.compress_ratios = to_int_vector(ratios);

  if (f.has("rope_scaling")) {
    FieldReader rs(f.required("rope_scaling"), f.path("rope_scaling") + ".");
    std::string type = rs.string("type", rs.string("rope_type", "yarn"));
    DI_CHECK(type == "yarn", "config: field '" + rs.path("type") + "' must be 'yarn', got '" + type + "'");
    c.yarn.factor = float(rs.number("factor"));
    c.yarn.original_max_position_embeddings = rs.integer("original_max_position_embeddings");
    c.yarn.beta_fast = float(rs.number("beta_fast", 32.0));
    c.yarn.beta_slow = float(rs.number("beta_slow", 1.0));
  }
}

void read_quantization(const FieldReader& f, ModelConfig& c, int default_block) {
  c.weight_block_size = default_block;
  if (!f.has("quantization_config")) return;
  FieldReader q(f.required("quantization_config"), f.path("quantization_config") + ".");
  std::vector<int64_t> block = q.int_list("weight_block_size");
  if (!block.empty()) {
    DI_CHECK(block.size() == 2 && block[0] == block[1] && block[0] > 0,
             "config: field '" + q.path("weight_block_size") + "' must be a square block [B, B]");
    c.weight_block_size = int(block[0]);
  }
  std::string scale_fmt = q.string("scale_fmt", "ue8m0");
  DI_CHECK(scale_fmt == "ue8m0",
           "config: field '" + q.path("scale_fmt") + "' must be 'ue8m0', got '" + scale_fmt + "'");
  c.expert_dtype = q.string("expert_dtype", c.expert_dtype);
}

void validate_common(const ModelConfig& c, const std::string& prefix) {
  auto field = [&](const char* k) { return "config: field '" + prefix + k + "'"; };
  DI_CHECK(c.num_kv_heads == 1, field("num_key_value_heads") + " must be 1 (shared K=V latent, model-spec §0)");
  DI_CHECK(c.rope_dim % 2 == 0 && c.rope_dim <= c.head_dim,
           field("qk_rope_head_dim") + " must be even and at most head_dim");
  DI_CHECK(c.num_heads % c.o_groups == 0, field("o_groups") + " must divide num_attention_heads");
  DI_CHECK(c.n_experts_per_tok <= c.n_routed_experts,
           field("num_experts_per_tok") + " must not exceed n_routed_experts");
  DI_CHECK(c.n_shared_experts == 1, field("n_shared_experts") + " must be 1");
  DI_CHECK(c.scoring_func == "sqrtsoftplus",
           field("scoring_func") + " must be 'sqrtsoftplus', got '" + c.scoring_func + "'");
  DI_CHECK(c.hidden_size % 32 == 0, field("hidden_size") + " must be a multiple of 32 (FP4/FP8 blocks)");
  DI_CHECK(c.moe_intermediate_size % 32 == 0, field("moe_intermediate_size") + " must be a multiple of 32");
  for (size_t i = 0; i < c.compress_ratios.size(); ++i)
    DI_CHECK(c.compress_ratios[i] >= 0, field("compress_ratios") + "[" + std::to_string(i) + "] is negative");
  bool any_compressed = std::any_of(c.compress_ratios.begin(), c.compress_ratios.end(), [](int r) { return r > 0; });
  if (any_compressed) {
    DI_CHECK(c.yarn.original_max_position_embeddings > 0,
             field("rope_scaling") + " is required: compressed layers rotate with YaRN (model-spec §2)");
  }
}

// V4: ratio 0 = window only, 4 = CSA (overlapping compressor + indexer), larger = HCA (model-spec §1.1, §3).
void plan_v4_layers(ModelConfig& c) {
  c.layers.clear();
  for (int i = 0; i < c.num_layers; ++i) {
    LayerPlan l;
    l.index = i;
    l.compress_ratio = c.compress_ratios[size_t(i)];
    l.attention = l.compress_ratio == 0   ? AttentionKind::Window
                  : l.compress_ratio == 4 ? AttentionKind::CSA
                                          : AttentionKind::HCA;
    l.hash_moe = i < c.num_hash_layers;
    l.yarn_rope = l.compress_ratio > 0;
    l.rope_theta = l.yarn_rope ? c.compress_rope_theta : c.rope_theta;
    c.layers.push_back(l);
  }
  bool has_csa = std::any_of(c.layers.begin(), c.layers.end(), [](const LayerPlan& l) {
    return l.attention == AttentionKind::CSA;
  });
  if (has_csa) {
    DI_CHECK(c.index_n_heads > 0 && c.index_head_dim > 0 && c.index_topk > 0,
             "config: CSA layers need positive 'index_n_heads', 'index_head_dim' and 'index_topk'");
    DI_CHECK(c.rope_dim <= c.index_head_dim, "config: field 'qk_rope_head_dim' exceeds 'index_head_dim'");
  }
}

// V4.1 CSA2 roles (model-spec §1.2): a KV source is Full; an index source that is not a KV source is
// Reindex; any other compressed layer is Reuse of the latest preceding KV source with the same ratio.
void plan_v41_layers(ModelConfig& c, const std::string& prefix) {
  auto field = [&](const char* k) { return "config: field '" + prefix + k + "'"; };
  for (auto* ids : {&c.kv_source_layer_ids, &c.index_source_layer_ids, &c.engram_layer_ids}) {
    for (size_t i = 0; i < ids->size(); ++i) {
      int id = (*ids)[i];
      DI_CHECK(id >= 0 && id < c.num_layers, "config: layer id " + std::to_string(id) + " in " +
                                                  (ids == &c.kv_source_layer_ids       ? field("kv_source_layer_ids")
                                                   : ids == &c.index_source_layer_ids ? field("index_source_layer_ids")
                                                                                      : field("engram_layer_ids")) +
                                                  " is outside [0, num_hidden_layers)");
      DI_CHECK(i == 0 || (*ids)[i - 1] < id, "config: layer ids in a source list must be strictly increasing");
    }
  }
  for (int id : c.kv_source_layer_ids)
    DI_CHECK(contains(c.index_source_layer_ids, id), field("kv_source_layer_ids") + ": KV source " +
                                                         std::to_string(id) + " must also be an index source");
  c.layers.clear();
  int owner = -1, owner_ratio = 0;
  for (int i = 0; i < c.num_layers; ++i) {
    LayerPlan l;
    l.index = i;
    l.compress_ratio = c.compress_ratios[size_t(i)];
    l.engram = contains(c.engram_layer_ids, i);
    l.yarn_rope = l.compress_ratio > 0;
    l.rope_theta = l.yarn_rope ? c.compress_rope_theta : c.rope_theta;
    bool kv_src = contains(c.kv_source_layer_ids, i), idx_src = contains(c.index_source_layer_ids, i);
    if (l.compress_ratio == 0) {
      DI_CHECK(!kv_src && !idx_src, "config: window-only layer " + std::to_string(i) +
                                        " cannot be a KV or index source (" + field("compress_ratios") + ")");
    } else {
      DI_CHECK(l.compress_ratio <= 2, field("compress_ratios") + "[" + std::to_string(i) +
                                          "]: V4.1 CSA2 layers use ratio 1 or 2");
      if (kv_src) owner = i, owner_ratio = l.compress_ratio;
      DI_CHECK(owner >= 0 && owner_ratio == l.compress_ratio,
               "config: compressed layer " + std::to_string(i) +
                   " needs a preceding KV source with the same compression ratio (" + field("kv_source_layer_ids") +
                   ")");
      l.attention = AttentionKind::CSA2;
      l.kv_source = owner;
      l.role = kv_src ? Csa2Role::Full : idx_src ? Csa2Role::Reindex : Csa2Role::Reuse;
      l.candidate_source = (i == c.candidate_source_layer_id);
    }
    c.layers.push_back(l);
  }
  if (c.candidate_source_layer_id >= 0) {
    DI_CHECK(contains(c.kv_source_layer_ids, c.candidate_source_layer_id),
             field("candidate_source_layer_id") + " must name a KV source layer");
    DI_CHECK(c.candidate_block_size > 0 && c.candidate_topk_blocks > 0,
             field("candidate_block_size") + " and 'candidate_topk_blocks' must be positive");
  }
  DI_CHECK(c.engram_num_embeddings.size() == c.engram_layer_ids.size(),
           field("engram_num_embeddings") + " needs one entry per engram layer");
  if (!c.engram_layer_ids.empty()) {
    DI_CHECK(c.engram_n_heads > 0 && c.engram_head_dim > 0 && c.engram_max_ngram_size >= 2,
             "config: Engram layers need positive 'engram_n_heads', 'engram_head_dim' and engram_max_ngram_size >= 2");
  }
}

ModelConfig parse_v4(const json& root) {
  ModelConfig c;
  c.family = ModelFamily::V4;
  c.model_type = "deepseek_v4";
  FieldReader f(root, "");
  read_common(f, c);
  c.num_hash_layers = int(f.integer("num_hash_layers", 0));
  c.bos_token_id = int(f.integer("bos_token_id", 0));
  c.eos_token_id = int(f.integer("eos_token_id", 1));
  read_quantization(f, c, 128);
  validate_common(c, "");
  DI_CHECK(c.num_hash_layers >= 0 && c.num_hash_layers <= c.num_layers,
           "config: field 'num_hash_layers' must lie in [0, num_hidden_layers]");
  plan_v4_layers(c);
  return c;
}

ModelConfig parse_v41(const json& root) {
  ModelConfig c;
  c.family = ModelFamily::V41;
  c.model_type = "deepseek_v41";
  FieldReader top(root, "");
  DI_CHECK(top.has("text_config") && root.at("text_config").is_object(),
           "config: 'deepseek_v41' needs an object field 'text_config' (composite config, model-spec §1.2)");
  const json& text = root.at("text_config");
  FieldReader f(text, "text_config.");
  read_common(f, c);
  c.kv_source_layer_ids = to_int_vector(f.int_list("kv_source_layer_ids"));
  c.index_source_layer_ids = to_int_vector(f.int_list("index_source_layer_ids"));
  c.candidate_source_layer_id = int(f.integer("candidate_source_layer_id", -1));
  c.candidate_topk_blocks = int(f.integer("candidate_topk_blocks", 0));
  c.candidate_block_size = int(f.integer("candidate_block_size", 0));
  c.engram_layer_ids = to_int_vector(f.int_list("engram_layer_ids"));
  c.engram_num_embeddings = f.int_list("engram_num_embeddings");
  c.engram_max_ngram_size = int(f.integer("engram_max_ngram_size", 0));
  c.engram_vocab_size = f.integer("engram_vocab_size", 0);
  c.engram_n_heads = int(f.integer("engram_n_heads", 0));
  c.engram_head_dim = int(f.integer("engram_head_dim", 0));
  c.engram_pad_token_id = int(f.integer("engram_pad_token_id", 2));
  c.engram_compressed_vocab_size = f.integer("engram_compressed_vocab_size", 0);
  // Token ids live at the top level of the composite config, falling back to text_config.
  c.bos_token_id = int(top.integer("bos_token_id", f.integer("bos_token_id", 0)));
  c.eos_token_id = int(top.integer("eos_token_id", f.integer("eos_token_id", 1)));
  c.pad_token_id = int(top.integer("pad_token_id", f.integer("pad_token_id", 2)));
  c.has_vision = top.has("vision_config");
  read_quantization(top.has("quantization_config") ? top : f, c, 32);
  validate_common(c, "text_config.");
  plan_v41_layers(c, "text_config.");
  return c;
}

}  // namespace

ModelConfig parse_model_config(const json& root) {
  DI_CHECK(root.is_object(), "config: the top level of config.json must be a JSON object");
  DI_CHECK(root.contains("model_type") && root.at("model_type").is_string(),
           "config: missing required field 'model_type'");
  std::string type = root.at("model_type").get<std::string>();
  if (type == "deepseek_v4") return parse_v4(root);
  if (type == "deepseek_v41") return parse_v41(root);
  throw Error("config: unsupported model_type '" + type + "' (expected 'deepseek_v4' or 'deepseek_v41')");
}

ModelConfig load_model_config(const std::string& path) {
  std::ifstream in(path);
  DI_CHECK(in.good(), "config: cannot open '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  json root;
  try {
    root = json::parse(ss.str());
  } catch (const json::parse_error& e) {
    throw Error("config: '" + path + "' is not valid JSON: " + e.what());
  }
  try {
    return parse_model_config(root);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (in " + path + ")");
  }
}

const char* attention_kind_name(AttentionKind k) {
  switch (k) {
    case AttentionKind::Window: return "window";
    case AttentionKind::CSA: return "csa";
    case AttentionKind::HCA: return "hca";
    case AttentionKind::CSA2: return "csa2";
  }
  return "?";
}

const char* csa2_role_name(Csa2Role r) {
  switch (r) {
    case Csa2Role::None: return "none";
    case Csa2Role::Full: return "full";
    case Csa2Role::Reindex: return "reindex";
    case Csa2Role::Reuse: return "reuse";
  }
  return "?";
}

}  // namespace deepinfer
