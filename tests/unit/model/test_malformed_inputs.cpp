// Malformed configs and checkpoints must give a clear error that names the problem (issue 2: at least 10 cases),
// never a crash. Each case builds its broken input in a temporary directory.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/weight_formats.h"

namespace fs = std::filesystem;
using deepinfer::Checkpoint;
using deepinfer::DType;
using nlohmann::json;

namespace {

struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// Writes a safetensors file: u64 header length, JSON header, data. `extra_header` lets a case corrupt it.
std::string safetensors_bytes(const std::vector<RawTensor>& tensors) {
  json header = json::object();
  std::string data;
  for (auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string h = header.dump();
  uint64_t n = h.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + h + data;
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

class Malformed : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("deepinfer_malformed_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A valid one-tensor shard: "w" BF16 [2, 2].
  RawTensor bf16_2x2() { return {"w", "BF16", {2, 2}, std::string(8, '\x01')}; }

  std::string open_error() {
    try {
      Checkpoint::open(dir_.string());
    } catch (const deepinfer::Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

#define EXPECT_ERROR_MENTIONS(msg, ...)                                          \
  do {                                                                           \
    std::string m_ = (msg);                                                      \
    EXPECT_FALSE(m_.empty()) << "no error was raised";                           \
    for (const char* part : {__VA_ARGS__}) EXPECT_NE(m_.find(part), std::string::npos) << m_; \
  } while (0)

TEST_F(Malformed, NoCheckpointFiles) { EXPECT_ERROR_MENTIONS(open_error(), "neither", "model.safetensors"); }

TEST_F(Malformed, ShardShorterThanHeaderLength) {
  write_file(dir_ / "model.safetensors", "abc");
  EXPECT_ERROR_MENTIONS(open_error(), "truncated", "model.safetensors");
}

TEST_F(Malformed, HeaderLengthPastEndOfFile) {
  std::string bytes = safetensors_bytes({bf16_2x2()});
  write_file(dir_ / "model.safetensors", bytes.substr(0, 20));
  EXPECT_ERROR_MENTIONS(open_error(), "truncated", "header");
}

TEST_F(Malformed, TruncatedTensorData) {
  std::string bytes = safetensors_bytes({bf16_2x2()});
  write_file(dir_ / "model.safetensors", bytes.substr(0, bytes.size() - 3));
  EXPECT_ERROR_MENTIONS(open_error(), "tensor 'w'", "truncated");
}

TEST_F(Malformed, CorruptHeaderJson) {
  std::string h = "{not json";
  uint64_t n = h.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  write_file(dir_ / "model.safetensors", out + h);
  EXPECT_ERROR_MENTIONS(open_error(), "corrupt header");
}

TEST_F(Malformed, UnknownDtype) {
  write_file(dir_ / "model.safetensors", safetensors_bytes({{"w", "F4_WEIRD", {2}, std::string(2, '\0')}}));
  EXPECT_ERROR_MENTIONS(open_error(), "tensor 'w'", "unsupported dtype 'F4_WEIRD'");
}

TEST_F(Malformed, ByteCountDisagreesWithShape) {
  write_file(dir_ / "model.safetensors", safetensors_bytes({{"w", "F32", {3}, std::string(8, '\0')}}));
  EXPECT_ERROR_MENTIONS(open_error(), "tensor 'w'", "needs 12");
}

TEST_F(Malformed, IndexPointsToMissingShard) {
  write_file(dir_ / "model.safetensors.index.json", json{{"weight_map", {{"w", "model-00001-of-00002.safetensors"}}}}.dump());
  EXPECT_ERROR_MENTIONS(open_error(), "missing shard", "model-00001-of-00002.safetensors");
}

TEST_F(Malformed, IndexIsNotJson) {
  write_file(dir_ / "model.safetensors.index.json", "{\"weight_map\": ");
  EXPECT_ERROR_MENTIONS(open_error(), "index", "not valid JSON");
}

TEST_F(Malformed, IndexNamesTensorAbsentFromShard) {
  write_file(dir_ / "a.safetensors", safetensors_bytes({bf16_2x2()}));
  write_file(dir_ / "model.safetensors.index.json", json{{"weight_map", {{"w", "a.safetensors"}, {"v", "a.safetensors"}}}}.dump());
  EXPECT_ERROR_MENTIONS(open_error(), "tensor 'v'", "does not contain");
}

TEST_F(Malformed, TensorInTwoShards) {
  write_file(dir_ / "a.safetensors", safetensors_bytes({bf16_2x2()}));
  write_file(dir_ / "b.safetensors", safetensors_bytes({bf16_2x2()}));
  write_file(dir_ / "model.safetensors.index.json", json{{"weight_map", {{"w", "a.safetensors"}}}}.dump());
  // b.safetensors is not in the index, so it is not opened: only index-listed shards count.
  EXPECT_EQ(open_error(), "");
  write_file(dir_ / "model.safetensors.index.json",
             json{{"weight_map", {{"w", "a.safetensors"}, {"x", "b.safetensors"}}}}.dump());
  EXPECT_ERROR_MENTIONS(open_error(), "tensor 'x'");
}

TEST_F(Malformed, MissingTensorWrongDtypeWrongShape) {
  write_file(dir_ / "model.safetensors", safetensors_bytes({bf16_2x2()}));
  Checkpoint ck = Checkpoint::open(dir_.string());
  auto error_of = [&](auto&& f) {
    try {
      f();
    } catch (const deepinfer::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_ERROR_MENTIONS(error_of([&] { ck.get("layers.0.attn.wq_a.weight"); }), "missing tensor",
                        "layers.0.attn.wq_a.weight");
  EXPECT_ERROR_MENTIONS(error_of([&] { ck.expect("w", DType::F32, {2, 2}); }), "tensor 'w'", "dtype BF16",
                        "expected F32");
  EXPECT_ERROR_MENTIONS(error_of([&] { ck.expect("w", DType::BF16, {4}); }), "tensor 'w'", "shape [2, 2]",
                        "expected [4]");
  // An FP8 weight whose block-scale tensor is absent.
  EXPECT_ERROR_MENTIONS(error_of([&] { deepinfer::read_fp8_weight(ck, "w", 2, 2, 128); }), "tensor 'w.weight'");
}

// --- config.json ---------------------------------------------------------------------------------------------

json tiny_v4_config() {
  return json::parse(R"({
    "model_type": "deepseek_v4", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64, "qk_rope_head_dim": 16,
    "q_lora_rank": 32, "o_lora_rank": 16, "o_groups": 2, "n_routed_experts": 8, "num_experts_per_tok": 2,
    "n_shared_experts": 1, "moe_intermediate_size": 32, "num_hash_layers": 1, "scoring_func": "sqrtsoftplus",
    "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6,
    "rms_norm_eps": 1e-6, "sliding_window": 8, "rope_theta": 10000, "compress_rope_theta": 160000,
    "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1},
    "index_n_heads": 2, "index_head_dim": 32, "index_topk": 64, "compress_ratios": [0, 4, 8, 4, 0],
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128], "scale_fmt": "ue8m0"}})");
}

std::string config_error(const json& j) {
  try {
    deepinfer::parse_model_config(j);
  } catch (const deepinfer::Error& e) {
    return e.what();
  }
  return "";
}

TEST(MalformedConfig, ValidTinyV4ParsesWithLayerPlan) {
  auto c = deepinfer::parse_model_config(tiny_v4_config());
  ASSERT_EQ(c.layers.size(), 4u);  // the fifth ratio belongs to the MTP layer (model-spec §1.1)
  EXPECT_EQ(c.layers[0].attention, deepinfer::AttentionKind::Window);
  EXPECT_EQ(c.layers[1].attention, deepinfer::AttentionKind::CSA);
  EXPECT_EQ(c.layers[2].attention, deepinfer::AttentionKind::HCA);
  EXPECT_TRUE(c.layers[0].hash_moe);
  EXPECT_FALSE(c.layers[1].hash_moe);
  EXPECT_FALSE(c.layers[0].yarn_rope);
  EXPECT_TRUE(c.layers[1].yarn_rope);
}

TEST(MalformedConfig, UnknownModelType) {
  json j = tiny_v4_config();
  j["model_type"] = "llama";
  EXPECT_ERROR_MENTIONS(config_error(j), "unsupported model_type 'llama'");
}

TEST(MalformedConfig, MissingField) {
  json j = tiny_v4_config();
  j.erase("hidden_size");
  EXPECT_ERROR_MENTIONS(config_error(j), "missing required field 'hidden_size'");
}

TEST(MalformedConfig, WrongType) {
  json j = tiny_v4_config();
  j["num_attention_heads"] = "four";
  EXPECT_ERROR_MENTIONS(config_error(j), "'num_attention_heads'", "integer");
}

TEST(MalformedConfig, TooFewCompressRatios) {
  json j = tiny_v4_config();
  j["compress_ratios"] = {0, 4};
  EXPECT_ERROR_MENTIONS(config_error(j), "'compress_ratios'", "num_hidden_layers is 4");
}

TEST(MalformedConfig, GroupsDoNotDivideHeads) {
  json j = tiny_v4_config();
  j["o_groups"] = 3;
  EXPECT_ERROR_MENTIONS(config_error(j), "'o_groups'");
}

TEST(MalformedConfig, V41NeedsTextConfig) {
  EXPECT_ERROR_MENTIONS(config_error(json{{"model_type", "deepseek_v41"}}), "'text_config'");
}

TEST(MalformedConfig, V41ReuseLayerWithoutSource) {
  json text = tiny_v4_config();
  text.erase("model_type");
  text["compress_ratios"] = {0, 0, 2, 2};
  text["kv_source_layer_ids"] = json::array();
  text["index_source_layer_ids"] = json::array();
  json j{{"model_type", "deepseek_v41"}, {"text_config", text}};
  EXPECT_ERROR_MENTIONS(config_error(j), "compressed layer 2", "preceding KV source");
}

TEST(MalformedConfig, V41RolesFromSourceLists) {
  json text = tiny_v4_config();
  text.erase("model_type");
  text["compress_ratios"] = {0, 0, 2, 2, 1, 1};
  text["num_hidden_layers"] = 6;
  text["kv_source_layer_ids"] = {2, 4};
  text["index_source_layer_ids"] = {2, 4, 5};
  text["candidate_source_layer_id"] = 4;
  text["candidate_topk_blocks"] = 2;
  text["candidate_block_size"] = 2;
  auto c = deepinfer::parse_model_config(json{{"model_type", "deepseek_v41"}, {"text_config", text}});
  using deepinfer::Csa2Role;
  // model-spec §1.3 tiny V4.1 schedule.
  EXPECT_EQ(c.layers[2].role, Csa2Role::Full);
  EXPECT_EQ(c.layers[3].role, Csa2Role::Reuse);
  EXPECT_EQ(c.layers[3].kv_source, 2);
  EXPECT_EQ(c.layers[4].role, Csa2Role::Full);
  EXPECT_TRUE(c.layers[4].candidate_source);
  EXPECT_EQ(c.layers[5].role, Csa2Role::Reindex);
  EXPECT_EQ(c.layers[5].kv_source, 4);
  EXPECT_EQ(c.weight_block_size, 128);  // quantization_config sits in text_config here
}

TEST(MalformedConfig, ConfigFileNotJson) {
  fs::path p = fs::temp_directory_path() / ("deepinfer_bad_config_" + std::to_string(::getpid()) + ".json");
  std::ofstream(p) << "{\"model_type\": ";
  try {
    deepinfer::load_model_config(p.string());
    ADD_FAILURE() << "no error";
  } catch (const deepinfer::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
  fs::remove(p);
}

}  // namespace
