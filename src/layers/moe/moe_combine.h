// The MoE's output before its combine (model-spec §3 "MoE"): y[r] = bf16(sum over k < top_k of
// bf16(expert_y[pair_slot[r top_k + k]]) + bf16(shared_y[r])), summed in fp32 in that order. Each output enters the
// sum in bf16, as the reference's GEMMs return it (bench/gpu/NOTES.md "Session 57"); the routing weights are already
// in expert_y (w2's SwiGLU input carries them). combine_kernel (moe_gpu.cu) writes y from these parts; at batch 1 the
// next mHC site can read the sum where it would read y instead (moe_forward's `defer`, hc_expand_site_pre's `parts`;
// bench/gpu/NOTES.md "Session 24": one launch and one dependent hop fewer per layer), the same bits either way.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda {

struct MoeCombineParts {
  const float* expert_y = nullptr;     // [pairs, hidden] fp32: the routed experts' outputs, in dispatch order
  const float* shared_y = nullptr;     // [rows, hidden] fp32: the shared expert's
  const int32_t* pair_slot = nullptr;  // [rows, top_k]: the expert_y row of pair (r, k)
  int top_k = 0;
  // Or the routed outputs in bf16 instead of expert_y (the prefill kernel's y_type BF16): the combine rounds fp32
  // outputs to bf16 first, so either form gives the same sum. Exactly one of the two is set.
  const __nv_bfloat16* expert_y_bf16 = nullptr;
  __host__ __device__ bool set() const { return expert_y != nullptr || expert_y_bf16 != nullptr; }
};

// The most experts a row the sites read combined (hc_expand_site_pre's parts; their loads are held in registers):
// moe_forward defers only calls within it, V4's and V4.1's 6 included.
constexpr int kSiteCombineMaxTopK = 8;

// y [rows, hidden] bf16 = the combine of `parts` (combine_kernel); pdl: launched with programmatic dependent launch
// (cuda/launch.h; the kernel waits before its first read).
void moe_combine(const MoeCombineParts& parts, int64_t rows, int64_t hidden, __nv_bfloat16* y, cudaStream_t stream,
                 bool pdl);

}  // namespace deepinfer::cuda
