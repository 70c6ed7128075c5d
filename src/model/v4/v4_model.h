// The DeepSeek-V4-Flash CPU reference model (model-spec.md §3): embedding into hc_mult streams, per layer
// an attention mHC site and an FFN mHC site, then the hc_head collapse, the final norm and the fp32 head.
// Tokens are processed one at a time through all layers, so a prefill, a chunked prefill and decode steps
// run exactly the same arithmetic (model-spec §6 "Exactness").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "layers/norm_rope/rope.h"
#include "model/expert_load_counter.h"
#include "model/model.h"
#include "model/v4/v4_numerics.h"
#include "model/v4/v4_state.h"
#include "model/v4/v4_weights.h"

namespace deepinfer {

class V4Model : public Model {
 public:
  V4Model(ModelConfig config, V4Weights weights, const NumericsOptions& numerics);

  const ModelConfig& config() const override { return config_; }
  std::unique_ptr<SequenceState> new_sequence() const override;
  Tensor forward(SequenceState& state, std::span<const int32_t> tokens) const override;
  void set_expert_load_counting(bool on) const override { loads_.set_enabled(on); }
  std::optional<std::vector<std::vector<int64_t>>> take_expert_loads() const override { return loads_.take(); }

 private:
  // Runs token `token` at position state.length_ through every layer and writes its logits [vocab].
  void step(V4SequenceState& state, int32_t token, float* logits) const;
  // One mHC site around a sublayer: collapse -> norm -> sublayer -> expand, on the streams X in place.
  template <class Sublayer>
  void hc_site(std::vector<float>& X, const V4HcSiteWeights& site, const Tensor& norm, Sublayer&& sublayer) const;

  ModelConfig config_;
  V4Weights weights_;
  V4Numerics numerics_;
  std::vector<Rope> ropes_;  // per layer (model-spec §2: theta and YaRN depend on the layer's ratio)
  mutable ExpertLoadCounter loads_;  // EPLB statistics (Model::take_expert_loads)
};

}  // namespace deepinfer
