// MoE router on the GPU (model-spec §3 "MoE", §4), the CUDA twin of routing.cpp: sqrt(softplus) scores, top-k
// by score + bias with ties to the lower expert id, and the normalised routing weights (the per-row code is
// routing.cuh's, shared with the MoE's fused decode routing).
#include <algorithm>
#include <string>
#include <type_traits>

#include "cuda/check.h"
#include "cuda/kernels.h"
#include "layers/moe/routing.cuh"
#include "layers/moe/routing.h"

namespace deepinfer::cuda {

namespace {

constexpr int kMaxTopK = moe_dev::kMaxTopK;

// One warp per token (moe_dev::route_row_topk); kPerLane: experts per lane (experts <= 32 * kPerLane), a
// compile-time count keeps the scan short and in registers.
template <int kPerLane>
__global__ void route_topk_kernel(const float* __restrict__ logits, const float* __restrict__ bias, int64_t tokens,
                                  int experts, int top_k, float temp, bool normalize, float eps, float route_scale,
                                  int32_t* __restrict__ expert_ids, float* __restrict__ weights) {
  const int64_t t = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (t >= tokens) return;  // warp-uniform
  moe_dev::route_row_topk<kPerLane>(logits + t * experts, bias, experts, top_k, temp, normalize, eps, route_scale,
                                    expert_ids + t * top_k, weights + t * top_k);
}

// route_row_topk as it was before session 5 (H8): lane 0 stored the picks' raw scores, then lanes < top_k read
// them back to normalise. Kept for GpuRouter.TopKMatchesReferenceBitwise (routing.h route_topk_reference).
template <int kPerLane>
__device__ __forceinline__ void route_row_topk_reference(const float* logits_row, const float* bias, int experts, int top_k,
                                               float temp, bool normalize, float eps, float route_scale,
                                               int32_t* ids_row, float* weights_row) {
  const int lane = threadIdx.x % 32;
  float score[kPerLane], key[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = i * 32 + lane;
    score[i] = 0.0f;
    key[i] = -INFINITY;
    if (e < experts) {
      score[i] = moe_dev::route_score(__ldcg(logits_row + e), temp);
      key[i] = score[i] + (bias ? bias[e] : 0.0f);
    }
  }
  uint32_t taken = 0;  // bit i: expert i * 32 + lane already selected
  float sum = 0.0f;
  for (int j = 0; j < top_k; ++j) {
    moe_dev::Pick best{-INFINITY, 0.0f, 0x7FFFFFFF};
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const moe_dev::Pick cand{key[i], score[i], i * 32 + lane};
      if (i * 32 + lane < experts && !((taken >> i) & 1u) && moe_dev::better(cand, best)) best = cand;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      moe_dev::Pick other{__shfl_xor_sync(0xFFFFFFFFu, best.key, o), __shfl_xor_sync(0xFFFFFFFFu, best.score, o),
                 __shfl_xor_sync(0xFFFFFFFFu, best.id, o)};
      if (moe_dev::better(other, best)) best = other;
    }
    if (best.id % 32 == lane) taken |= 1u << (best.id / 32);
    sum += best.score;
    if (lane == 0) {
      ids_row[j] = best.id;
      weights_row[j] = best.score;
    }
  }
  __syncwarp();
  if (lane < top_k) {
    float w = weights_row[lane];
    if (normalize) w = w / (sum + eps);
    weights_row[lane] = w * route_scale;
  }
}


template <int kPerLane>
__global__ void route_topk_reference_kernel(const float* __restrict__ logits, const float* __restrict__ bias,
                                            int64_t tokens, int experts, int top_k, float temp, bool normalize,
                                            float eps, float route_scale, int32_t* __restrict__ expert_ids,
                                            float* __restrict__ weights) {
  const int64_t t = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (t >= tokens) return;  // warp-uniform
  route_row_topk_reference<kPerLane>(logits + t * experts, bias, experts, top_k, temp, normalize, eps, route_scale,
                                     expert_ids + t * top_k, weights + t * top_k);
}

}  // namespace

namespace {

// One launch of a top-k routing kernel template: `pick(std::integral_constant<int, P>{})` names its instantiation
// for P experts per lane (experts <= 32 P), chosen here from the expert count; one warp per token.
template <class PickKernel>
void launch_route_topk(PickKernel pick, const char* who, const float* logits, const float* bias, int64_t tokens,
                       int experts, int top_k, float temp, bool normalize, float eps, float route_scale,
                       int32_t* expert_ids, float* weights, cudaStream_t stream) {
  DI_CHECK(experts > 0 && experts <= 1024 && top_k > 0 && top_k <= kMaxTopK && top_k <= experts,
           std::string("cuda::") + who + ": " + std::to_string(experts) + " experts / top " + std::to_string(top_k) +
               " out of range (experts <= 1024, top_k <= 16)");
  if (tokens == 0) return;
  const int warps_per_block = 4;
  const dim3 grid(unsigned((tokens + warps_per_block - 1) / warps_per_block)), block(warps_per_block * 32);
  auto launch = [&](auto kernel) {
    kernel<<<grid, block, 0, stream>>>(logits, bias, tokens, experts, top_k, temp, normalize, eps, route_scale,
                                       expert_ids, weights);
  };
  if (experts <= 128)
    launch(pick(std::integral_constant<int, 4>{}));
  else if (experts <= 256)
    launch(pick(std::integral_constant<int, 8>{}));  // V4: 256 experts
  else if (experts <= 384)
    launch(pick(std::integral_constant<int, 12>{}));  // V4.1: 384 experts
  else
    launch(pick(std::integral_constant<int, 32>{}));
  DI_CUDA_CHECK_LAUNCH(who);
}

}  // namespace

void route_topk(const float* logits, const float* bias, int64_t tokens, int experts, int top_k, float temp,
                bool normalize, float eps, float route_scale, int32_t* expert_ids, float* weights,
                cudaStream_t stream) {
  launch_route_topk([](auto per_lane) { return route_topk_kernel<decltype(per_lane)::value>; }, "route_topk", logits,
                    bias, tokens, experts, top_k, temp, normalize, eps, route_scale, expert_ids, weights, stream);
}

void route_topk_reference(const float* logits, const float* bias, int64_t tokens, int experts, int top_k, float temp,
                          bool normalize, float eps, float route_scale, int32_t* expert_ids, float* weights,
                          cudaStream_t stream) {
  launch_route_topk([](auto per_lane) { return route_topk_reference_kernel<decltype(per_lane)::value>; },
                    "route_topk_reference", logits, bias, tokens, experts, top_k, temp, normalize, eps, route_scale,
                    expert_ids, weights, stream);
}

}  // namespace deepinfer::cuda
