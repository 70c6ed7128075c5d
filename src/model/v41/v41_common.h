// Pieces of the V4.1 forward that the CPU reference (v41_model.cpp) and the GPU model (gpu/v41_gpu_model.cpp)
// share because they are decisions about the model, not about where it runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/model.h"

namespace deepinfer {

// The Engram token -> compressed id table, computed offline from the tokenizer (model-spec §4 "token_map")
// and stored next to the checkpoint as this JSON file: {"compressed_vocab_size": N, "token_map": [...]}.
inline constexpr const char* kEngramTokenMapFile = "engram_token_map.json";

struct EngramTokenMap {
  std::vector<int32_t> ids;  // [vocab_size] compressed id per token
  int32_t pad_id = 0;        // ids[engram_pad_token_id]: what a missing look-back position hashes as
};

// Reads dir/kEngramTokenMapFile; every problem (missing file, bad JSON, class count or length not matching the
// config, an id out of range) throws deepinfer::Error naming the file.
EngramTokenMap load_engram_token_map(const ModelConfig& c, const std::string& dir);

// SWA bounded replay (model-spec §9): the first layer that runs only on a prefill's last keep_tokens rows (the one
// after the candidate source), or -1 for the exact prefill. Throws when keep_tokens is shorter than the window;
// returns -1 with a notice on stderr when the config does not allow the replay (no candidate source, or a layer
// after it that owns state besides its window: an Engram layer or a KV source).
int bounded_replay_first_layer(const ModelConfig& c, const PrefillReplayOptions& replay);

}  // namespace deepinfer
