#include "model/v4/v4_model.h"

#include <algorithm>

#include "core/linalg.h"
#include "layers/mhc/mhc.h"
#include "layers/norm_rope/rms_norm.h"
#include "model/families.h"
#include "model/v4/v4_attention.h"
#include "model/v4/v4_moe.h"

namespace deepinfer {

V4Model::V4Model(ModelConfig config, V4Weights weights, const NumericsOptions& numerics)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      numerics_(V4Numerics::from(numerics, config_.weight_block_size)),
      loads_(int(config_.layers.size()), config_.n_routed_experts) {
  for (const LayerPlan& plan : config_.layers) ropes_.push_back(Rope::for_layer(config_, plan));
}

std::unique_ptr<SequenceState> V4Model::new_sequence() const {
  return std::make_unique<V4SequenceState>(config_, weights_);
}

template <class Sublayer>
void V4Model::hc_site(std::vector<float>& X, const V4HcSiteWeights& site, const Tensor& norm,
                      Sublayer&& sublayer) const {
  const int hc = config_.hc_mult;
  const int64_t H = config_.hidden_size;
  // model-spec §3 "mHC site": the coefficients of a site are computed from and used at that site.
  HcMix mix = hc_mix(X.data(), hc, H, site.params(), config_.rms_norm_eps, config_.hc_eps, config_.hc_sinkhorn_iters);
  std::vector<float> u(static_cast<size_t>(H)), y(static_cast<size_t>(H));
  hc_collapse(X.data(), mix.pre, hc, H, u.data());
  v4_maybe_bf16(u.data(), H, numerics_);
  rms_norm(u.data(), norm.ptr(), H, config_.rms_norm_eps, u.data());
  v4_maybe_bf16(u.data(), H, numerics_);
  sublayer(u.data(), y.data());
  std::vector<float> X_out(X.size());
  hc_expand(X.data(), y.data(), mix, H, X_out.data());
  v4_maybe_bf16(X_out.data(), int64_t(X_out.size()), numerics_);
  X.swap(X_out);
}

void V4Model::step(V4SequenceState& state, int32_t token, float* logits) const {
  const ModelConfig& c = config_;
  const int hc = c.hc_mult;
  const int64_t H = c.hidden_size, pos = state.length_;

  // The embedding is copied into every residual stream.
  std::vector<float> X(size_t(hc) * size_t(H));
  for (int j = 0; j < hc; ++j) std::copy_n(weights_.embed.row(token), H, X.data() + j * H);

  for (const LayerPlan& plan : c.layers) {
    const V4LayerWeights& L = weights_.layers[size_t(plan.index)];
    V4LayerState& S = state.layers[size_t(plan.index)];
    const Rope& rope = ropes_[size_t(plan.index)];
    hc_site(X, L.hc_attn, L.attn_norm, [&](const float* u, float* y) {
      v4_attention_step(c, L.attn, rope, numerics_, S, u, pos, y);
    });
    hc_site(X, L.hc_ffn, L.ffn_norm, [&](const float* u, float* y) {
      v4_moe_step(c, plan, L.ffn, numerics_, u, token, y, loads_.enabled() ? &loads_ : nullptr);
    });
  }

  // hc_head collapse -> norm -> head, logits in fp32 (model-spec §3 "Head").
  std::vector<float> pre = hc_head_pre(X.data(), hc, H, weights_.hc_head_fn.ptr(), weights_.hc_head_base.ptr(),
                                       weights_.hc_head_scale.ptr(), c.rms_norm_eps, c.hc_eps);
  std::vector<float> h(static_cast<size_t>(H));
  hc_collapse(X.data(), pre, hc, H, h.data());
  v4_maybe_bf16(h.data(), H, numerics_);
  rms_norm(h.data(), weights_.norm.ptr(), H, c.rms_norm_eps, h.data());
  v4_maybe_bf16(h.data(), H, numerics_);
  matmul_nt(h.data(), 1, H, weights_.head.ptr(), c.vocab_size, logits);
  ++state.length_;
}

Tensor V4Model::forward(SequenceState& state, std::span<const int32_t> tokens) const {
  auto* v4_state = dynamic_cast<V4SequenceState*>(&state);
  DI_CHECK(v4_state != nullptr, "v4 forward: the sequence state was not created by this V4 model");
  // Validate the whole request first so that a bad id leaves the sequence untouched.
  for (size_t i = 0; i < tokens.size(); ++i)
    DI_CHECK(tokens[i] >= 0 && tokens[i] < config_.vocab_size,
             "v4 forward: token " + std::to_string(i) + " has id " + std::to_string(tokens[i]) + ", outside [0, " +
                 std::to_string(config_.vocab_size) + ")");
  Tensor logits({int64_t(tokens.size()), config_.vocab_size});
  for (size_t i = 0; i < tokens.size(); ++i) step(*v4_state, tokens[i], logits.row(int64_t(i)));
  return logits;
}

std::unique_ptr<Model> load_v4_model(ModelConfig config, Checkpoint checkpoint, const ModelOptions& options) {
  V4Weights weights = load_v4_weights(config, checkpoint, options.show_progress);
  return std::make_unique<V4Model>(std::move(config), std::move(weights), options.numerics);
}

}  // namespace deepinfer
