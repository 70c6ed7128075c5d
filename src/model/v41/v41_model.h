// The DeepSeek-V4.1-Flash CPU reference forward (model-spec.md §4): single-pass mHC, CSA2 attention with
// shared compressed KV (Full / Reindex / Reuse roles), sqrt-softplus MoE and Engram memory.
#pragma once

#include <memory>
#include <vector>

#include "layers/engram/ngram_hash.h"
#include "layers/norm_rope/rope.h"
#include "model/checkpoint.h"
#include "model/expert_load_counter.h"
#include "model/model.h"
#include "model/v41/v41_common.h"
#include "model/v41/v41_state.h"
#include "model/v41/v41_weights.h"

namespace deepinfer {

class V41Model : public Model {
 public:
  V41Model(ModelConfig config, Checkpoint checkpoint, const ModelOptions& options);

  const ModelConfig& config() const override { return config_; }
  std::unique_ptr<SequenceState> new_sequence() const override;
  Tensor forward(SequenceState& state, std::span<const int32_t> tokens) const override;
  void set_expert_load_counting(bool on) const override { loads_.set_enabled(on); }
  std::optional<std::vector<std::vector<int64_t>>> take_expert_loads() const override { return loads_.take(); }

 private:
  struct ChunkSelection;  // per-token top-k and candidate masks published inside one forward call

  // Runs rows [row_begin, n) of the chunk through the layer; rows in [row_begin, full_begin) only update
  // the layer's caches (window ring, compressor), their outputs are left unchanged (nobody reads them).
  void run_layer(int layer, V41Sequence& seq, int64_t first_pos, float* X, float* pre_mix, int64_t n,
                 int64_t row_begin, int64_t full_begin, const std::vector<int64_t>& engram_rows,
                 ChunkSelection& sel) const;
  // The cache writes of one token: window KV into the ring; on a KV source, the compressor (and a closed
  // group's compressed KV and index key).
  void update_caches(int layer, V41Sequence& seq, const float* x, int64_t pos) const;
  void attention(int layer, V41Sequence& seq, const float* x, int64_t pos, int64_t token, ChunkSelection& sel,
                 float* out) const;
  void moe(int layer, const float* x, float* out) const;
  // Engram rows of every token of the chunk for every Engram layer; advances the sequence's history.
  std::vector<int64_t> engram_rows_for(V41Sequence& seq, std::span<const int32_t> tokens) const;

  ModelConfig config_;
  Checkpoint checkpoint_;  // owns the mapped shards the Engram tables read from
  NumericsOptions numerics_;
  // SWA bounded replay (model-spec §9): keep_tokens_ > 0 when DecoderTail mode is on and the config allows
  // it; decoder_begin_ = the first layer after the candidate source.
  int keep_tokens_ = 0;
  int decoder_begin_ = -1;
  V41Weights weights_;
  std::vector<Rope> ropes_;  // per layer (model-spec §2: theta / YaRN depend on the ratio)
  std::vector<EngramLayerHash> engram_hashes_;
  EngramTokenMap engram_token_map_;
  mutable ExpertLoadCounter loads_;  // EPLB statistics (Model::take_expert_loads)
};

}  // namespace deepinfer
