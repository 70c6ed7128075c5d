#include "model/v41/v41_common.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace deepinfer {

EngramTokenMap load_engram_token_map(const ModelConfig& c, const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path path = fs::path(dir) / kEngramTokenMapFile;
  DI_CHECK(fs::exists(path), "engram: '" + path.string() +
                                 "' is missing; the Engram layers need the token -> compressed id table "
                                 "computed offline from the tokenizer (model-spec §4 'token_map')");
  std::ifstream in(path);
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    throw Error("engram: '" + path.string() + "' is not valid JSON: " + e.what());
  }
  DI_CHECK(j.is_object() && j.contains("token_map") && j["token_map"].is_array() &&
               j.contains("compressed_vocab_size") && j["compressed_vocab_size"].is_number_integer(),
           "engram: '" + path.string() + "' needs 'compressed_vocab_size' (integer) and 'token_map' (array)");
  const int64_t classes = j["compressed_vocab_size"].get<int64_t>();
  DI_CHECK(classes == c.engram_compressed_vocab_size,
           "engram: '" + path.string() + "' has " + std::to_string(classes) +
               " classes but config 'engram_compressed_vocab_size' is " +
               std::to_string(c.engram_compressed_vocab_size));
  const auto& map = j["token_map"];
  DI_CHECK(int64_t(map.size()) == c.vocab_size, "engram: '" + path.string() + "' token_map has " +
                                                    std::to_string(map.size()) + " entries, vocab_size is " +
                                                    std::to_string(c.vocab_size));
  EngramTokenMap out;
  out.ids.reserve(map.size());
  for (const auto& v : map) {
    DI_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < classes,
             "engram: '" + path.string() + "' token_map holds a value outside [0, compressed_vocab_size)");
    out.ids.push_back(v.get<int32_t>());
  }
  DI_CHECK(c.engram_pad_token_id >= 0 && c.engram_pad_token_id < c.vocab_size,
           "config: field 'engram_pad_token_id' is outside the vocabulary");
  out.pad_id = out.ids[size_t(c.engram_pad_token_id)];
  return out;
}

int bounded_replay_first_layer(const ModelConfig& c, const PrefillReplayOptions& replay) {
  if (replay.mode != PrefillReplayOptions::Mode::DecoderTail) return -1;
  DI_CHECK(replay.keep_tokens >= c.sliding_window,
           "prefill replay: keep_tokens " + std::to_string(replay.keep_tokens) +
               " is shorter than the sliding window (" + std::to_string(c.sliding_window) + ")");
  // The layers after the candidate source must own no state but their window rings: no Engram layer (its n-gram
  // rows would still be fine, but the spec excludes it) and no KV source there.
  const int cand = c.candidate_source_layer_id;
  std::string why;
  if (cand < 0)
    why = "the config has no candidate source layer";
  else if (cand + 1 >= c.num_layers)
    why = "no layer follows the candidate source";
  for (const LayerPlan& l : c.layers) {
    if (!why.empty() || l.index <= cand) continue;
    if (l.engram)
      why = "layer " + std::to_string(l.index) + " after the candidate source is an Engram layer";
    else if (l.role == Csa2Role::Full)
      why = "layer " + std::to_string(l.index) + " after the candidate source is a KV source";
  }
  if (why.empty()) return cand + 1;
  std::fprintf(stderr, "[deepinfer] v4.1 prefill replay: %s; running the exact prefill\n", why.c_str());
  return -1;
}

}  // namespace deepinfer
