// EPLB statistics on the GPU (docs/parallel.md "EPLB", issue 7): the routed (row, k) expert ids of one MoE layer
// (moe_gpu.h moe_routing_view) added into that layer's row of a per-(layer, expert) counter in device memory, which
// the GPU models drain between steps (GpuStepModelBase::take_expert_loads).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda {

// counts[e] += the number of ids among expert_ids[0 .. pairs) equal to e, for e in [0, experts) (other ids are
// skipped). Integer atomics, so the sums are exact in any order (deterministic). One launch whose shape depends only
// on the host-known `pairs` and `experts`, no host synchronization, no allocation: capturable into a CUDA graph.
// pairs == 0 launches nothing. `experts` at most kMaxCountedExperts (the per-block histogram in shared memory).
constexpr int kMaxCountedExperts = 8192;
void count_routed_experts(const int32_t* expert_ids, int64_t pairs, int experts, unsigned long long* counts,
                          cudaStream_t stream);

}  // namespace deepinfer::cuda
