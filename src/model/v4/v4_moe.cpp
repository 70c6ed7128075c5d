#include "model/v4/v4_moe.h"

#include <vector>

#include "core/linalg.h"
#include "layers/moe/routing.h"
#include "layers/moe/swiglu_expert.h"

namespace deepinfer {

namespace {

ExpertWeights expert_view(const V4ExpertWeights& e) { return {e.w1.ptr(), e.w3.ptr(), e.w2.ptr(), e.w1.dim(0)}; }

}  // namespace

void v4_moe_step(const ModelConfig& c, const LayerPlan& plan, const V4MoeWeights& w, const V4Numerics& n,
                 const float* x, int32_t token, float* y, ExpertLoadCounter* loads) {
  const int64_t H = c.hidden_size;
  const int E = c.n_routed_experts, k = c.n_experts_per_tok;

  // The gate is a bf16 GEMM computed in fp32 (model-spec §8).
  std::vector<float> logits(static_cast<size_t>(E));
  matmul_nt(x, 1, H, w.gate.ptr(), E, logits.data());
  std::vector<float> scores = sqrt_softplus_scores(logits.data(), E);
  std::vector<int> experts;
  if (plan.hash_moe) {
    const int32_t* row = w.tid2eid.data() + int64_t(token) * k;
    experts.assign(row, row + k);
  } else {
    experts = select_experts(scores, w.gate_bias.ptr(), k);  // the bias steers selection only
  }
  if (loads) loads->add(plan.index, experts);
  // V4 normalises without an epsilon (model-spec §3).
  Routing routing = route_weights(scores, std::move(experts), c.norm_topk_prob, 0.0f, c.routed_scaling_factor);

  // Expert GEMMs take FP8 activations under W8A8; W2's input is quantized after the routing weight.
  std::vector<float> x_gemm = v4_gemm_input(x, H, n);
  int w2_block = n.quantize_activations ? n.activation_block : 0;
  std::vector<double> acc(size_t(H), 0.0);
  for (size_t i = 0; i < routing.experts.size(); ++i)
    swiglu_expert_accumulate(x_gemm.data(), H, expert_view(w.experts[size_t(routing.experts[i])]), c.swiglu_limit,
                             routing.weights[i], w2_block, n.bf16_activations, acc.data());
  swiglu_expert_accumulate(x_gemm.data(), H, expert_view(w.shared), c.swiglu_limit, 1.0f, w2_block,
                           n.bf16_activations, acc.data());
  for (int64_t d = 0; d < H; ++d) y[d] = float(acc[size_t(d)]);
  v4_maybe_bf16(y, H, n);
}

}  // namespace deepinfer
