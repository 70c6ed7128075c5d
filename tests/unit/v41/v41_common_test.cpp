// The V4.1 decisions the CPU and GPU models share (model/v41/v41_common.h): the Engram token map file and the
// bounded-replay preconditions. Every malformed token map must fail with an error naming the file; the replay
// rule follows model-spec §9 (the first layer after the candidate source, or the exact prefill).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "core/error.h"
#include "model/v41/v41_common.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

ModelConfig small_engram_config() {
  ModelConfig c;
  c.vocab_size = 4;
  c.engram_compressed_vocab_size = 3;
  c.engram_pad_token_id = 2;
  return c;
}

class TokenMapFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("deepinfer_token_map_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& text) { std::ofstream(dir_ / kEngramTokenMapFile) << text; }
  // The error of loading the current file ("" when it loads).
  std::string error() {
    try {
      load_engram_token_map(small_engram_config(), dir_.string());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(TokenMapFile, LoadsIdsAndThePadClass) {
  write(R"({"compressed_vocab_size": 3, "token_map": [0, 2, 1, 1]})");
  const EngramTokenMap m = load_engram_token_map(small_engram_config(), dir_.string());
  EXPECT_EQ(m.ids, (std::vector<int32_t>{0, 2, 1, 1}));
  EXPECT_EQ(m.pad_id, 1);  // ids[engram_pad_token_id = 2]
}

TEST_F(TokenMapFile, EveryMalformedFileNamesTheFile) {
  const std::string file = kEngramTokenMapFile;
  EXPECT_NE(error().find(file), std::string::npos) << "missing file";
  for (const char* text : {
           "{not json",                                                   // bad JSON
           R"({"token_map": [0, 1, 2, 0]})",                              // no class count
           R"({"compressed_vocab_size": 4, "token_map": [0, 1, 2, 0]})",  // class count != config
           R"({"compressed_vocab_size": 3, "token_map": [0, 1, 2]})",     // length != vocab_size
           R"({"compressed_vocab_size": 3, "token_map": [0, 1, 3, 0]})",  // id out of range
           R"({"compressed_vocab_size": 3, "token_map": [0, -1, 2, 0]})", // negative id
           R"({"compressed_vocab_size": 3, "token_map": [0, "a", 2, 0]})", // not an integer
       }) {
    write(text);
    const std::string e = error();
    EXPECT_NE(e.find(file), std::string::npos) << text << " -> '" << e << "'";
  }
}

ModelConfig replay_config(int candidate_source, std::vector<LayerPlan> layers) {
  ModelConfig c;
  c.sliding_window = 8;
  c.candidate_source_layer_id = candidate_source;
  c.num_layers = int(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) layers[i].index = int(i);
  c.layers = std::move(layers);
  return c;
}

LayerPlan layer(Csa2Role role, bool engram = false) {
  LayerPlan l;
  l.role = role;
  l.engram = engram;
  return l;
}

TEST(BoundedReplay, FirstLayerAfterTheCandidateSource) {
  PrefillReplayOptions tail{PrefillReplayOptions::Mode::DecoderTail, 16};
  const ModelConfig c = replay_config(1, {layer(Csa2Role::Full), layer(Csa2Role::Full), layer(Csa2Role::Reuse),
                                          layer(Csa2Role::Reindex)});
  EXPECT_EQ(bounded_replay_first_layer(c, tail), 2);
  EXPECT_EQ(bounded_replay_first_layer(c, PrefillReplayOptions{}), -1);  // exact mode
  PrefillReplayOptions short_tail{PrefillReplayOptions::Mode::DecoderTail, 7};  // shorter than the window
  EXPECT_THROW(bounded_replay_first_layer(c, short_tail), Error);
}

TEST(BoundedReplay, StatefulLayersAfterTheCandidateSourceMeanExact) {
  PrefillReplayOptions tail{PrefillReplayOptions::Mode::DecoderTail, 16};
  // A KV source after the candidate source, an Engram layer there, no candidate source, nothing after it.
  EXPECT_EQ(bounded_replay_first_layer(replay_config(0, {layer(Csa2Role::Full), layer(Csa2Role::Full)}), tail), -1);
  EXPECT_EQ(bounded_replay_first_layer(
                replay_config(0, {layer(Csa2Role::Full), layer(Csa2Role::Reuse, /*engram=*/true)}), tail),
            -1);
  EXPECT_EQ(bounded_replay_first_layer(replay_config(-1, {layer(Csa2Role::Full), layer(Csa2Role::Reuse)}), tail), -1);
  EXPECT_EQ(bounded_replay_first_layer(replay_config(1, {layer(Csa2Role::Full), layer(Csa2Role::Full)}), tail), -1);
}

}  // namespace
}  // namespace deepinfer
