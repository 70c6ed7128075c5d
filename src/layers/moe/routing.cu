// MoE router on the GPU (model-spec §3 "MoE", §4), the CUDA twin of routing.cpp: sqrt(softplus) scores, top-k
// by score + bias with ties to the lower expert id, and the normalised routing weights (the per-row code is
// routing.cuh's, shared with the MoE's fused decode routing).
#include <algorithm>

#include "cuda/check.h"
#include "cuda/kernels.h"
#include "layers/moe/routing.cuh"

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

}  // namespace

void route_topk(const float* logits, const float* bias, int64_t tokens, int experts, int top_k, float temp,
                bool normalize, float eps, float route_scale, int32_t* expert_ids, float* weights,
                cudaStream_t stream) {
  DI_CHECK(experts > 0 && experts <= 1024 && top_k > 0 && top_k <= kMaxTopK && top_k <= experts,
           "cuda::route_topk: " + std::to_string(experts) + " experts / top " + std::to_string(top_k) +
               " out of range (experts <= 1024, top_k <= 16)");
  if (tokens == 0) return;
  const int warps_per_block = 4;
  const dim3 grid(unsigned((tokens + warps_per_block - 1) / warps_per_block)), block(warps_per_block * 32);
  auto launch = [&](auto kernel) {
    kernel<<<grid, block, 0, stream>>>(logits, bias, tokens, experts, top_k, temp, normalize, eps, route_scale,
                                       expert_ids, weights);
  };
  if (experts <= 128)
    launch(route_topk_kernel<4>);
  else if (experts <= 256)
    launch(route_topk_kernel<8>);  // V4: 256 experts
  else if (experts <= 384)
    launch(route_topk_kernel<12>);  // V4.1: 384 experts
  else
    launch(route_topk_kernel<32>);
  DI_CUDA_CHECK_LAUNCH("route_topk_kernel");
}

}  // namespace deepinfer::cuda
