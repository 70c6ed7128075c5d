// EPLB statistics on the GPU (docs/parallel.md "EPLB", issue 7): the routed (row, k) expert ids of one MoE layer
// (moe_gpu.h moe_routing_view) added into that layer's row of a per-(layer, expert) counter in device memory, which
// the GPU models drain between steps (GpuStepModelBase::take_expert_loads).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "parallel/replica_choice.h"

namespace deepinfer::cuda {

// counts[e] += the number of ids among expert_ids[0 .. pairs) equal to e, for e in [0, experts) (other ids are
// skipped). Integer atomics, so the sums are exact in any order (deterministic). One launch whose shape depends only
// on the host-known `pairs` and `experts`, no host synchronization, no allocation: capturable into a CUDA graph.
// pairs == 0 launches nothing. `experts` at most kMaxCountedExperts (the per-block histogram in shared memory).
constexpr int kMaxCountedExperts = 8192;
void count_routed_experts(const int32_t* expert_ids, int64_t pairs, int experts, unsigned long long* counts,
                          cudaStream_t stream);

// *served += the number of pairs p in [0, pairs) of the group's gathered routing (ids [world * M * top_k], every
// rank's rows: MoeRoutingView::group_experts) that this rank computes, as the MoE's dispatch decides it
// (owner.slot(p, ids[p]) >= 0: the same parallel::PairOwner): the live per-rank load behind moe_lb (slowest rank's
// pairs / mean, docs/parallel.md "EPLB"). Integer atomics, one launch of a shape fixed by `pairs`: capturable.
void count_rank_pairs(const int32_t* group_ids, int64_t pairs, const parallel::PairOwner& owner,
                      unsigned long long* served, cudaStream_t stream);

}  // namespace deepinfer::cuda
