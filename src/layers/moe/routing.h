// MoE routing (model-spec.md §3 "MoE", §4 "MoE"): sqrt(softplus) affinity scores, selection by score plus
// a bias that only steers selection (or V4's hash table for the first layers), and normalised weights.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

struct Routing {
  std::vector<int> experts;     // selected expert ids, top_k of them
  std::vector<float> weights;   // routing weight per selected expert (already times routed_scaling_factor)
};

// s_e = sqrt(softplus(logit_e / temp)), computed in fp32.
std::vector<float> sqrt_softplus_scores(const float* logits, int n_experts, float temp = 1.0f);

// top_k experts by score + bias (bias may be null); ties broken towards the lower expert id.
std::vector<int> select_experts(const std::vector<float>& scores, const float* bias, int top_k);

// w = s[idx] / (sum s[idx] + eps) * route_scale when normalising (V4 eps 0, V4.1 1e-20 and only when
// top_k > 1), else s[idx] * route_scale.
Routing route_weights(const std::vector<float>& scores, std::vector<int> experts, bool normalize, float eps,
                      float route_scale);

}  // namespace deepinfer

// cuda::route_topk (cuda/kernels.h) on the per-row code as it was before session 5 (routing.cu), for the bitwise test
// of the current one (tests/gpu/test_router_sampling.cpp). stream: a cudaStream_t.
struct CUstream_st;
namespace deepinfer::cuda {
void route_topk_reference(const float* logits, const float* bias, int64_t tokens, int experts, int top_k, float temp,
                          bool normalize, float eps, float route_scale, int32_t* expert_ids, float* weights,
                          CUstream_st* stream);
}  // namespace deepinfer::cuda
