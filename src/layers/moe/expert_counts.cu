// The device expert-load counter of the GPU models (expert_counts.h).
#include "layers/moe/expert_counts.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "cuda/check.h"

namespace deepinfer::cuda {

namespace {

constexpr int kCountThreads = 256;
constexpr int kMaxCountBlocks = 32;  // a prefill step's pairs (2048 rows x top 6) in 2 passes per thread

// A block's histogram in shared memory (32-bit: a block sees at most `pairs` < 2^31 ids), then one 64-bit global
// atomic per expert the block saw.
__global__ void count_routed_experts_kernel(const int32_t* __restrict__ ids, int64_t pairs, int experts,
                                            unsigned long long* __restrict__ counts) {
  extern __shared__ unsigned int hist[];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) hist[e] = 0u;
  __syncthreads();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs; i += int64_t(gridDim.x) * blockDim.x) {
    const int e = ids[i];
    if (e >= 0 && e < experts) atomicAdd(&hist[e], 1u);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x)
    if (hist[e]) atomicAdd(&counts[e], (unsigned long long)hist[e]);
}

// A block's count of this rank's pairs (warp sums, then one atomic per warp into shared memory, one global atomic).
__global__ void count_rank_pairs_kernel(const int32_t* __restrict__ ids, int64_t pairs, parallel::PairOwner owner,
                                        unsigned long long* __restrict__ served) {
  __shared__ unsigned int block_sum;
  if (threadIdx.x == 0) block_sum = 0u;
  __syncthreads();
  unsigned int mine = 0u;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs; i += int64_t(gridDim.x) * blockDim.x)
    if (owner.slot(i, ids[i]) >= 0) ++mine;
  for (int off = 16; off > 0; off >>= 1) mine += __shfl_down_sync(0xffffffffu, mine, off);
  if (threadIdx.x % 32 == 0 && mine) atomicAdd(&block_sum, mine);
  __syncthreads();
  if (threadIdx.x == 0 && block_sum) atomicAdd(served, (unsigned long long)block_sum);
}

}  // namespace

void count_rank_pairs(const int32_t* group_ids, int64_t pairs, const parallel::PairOwner& owner,
                      unsigned long long* served, cudaStream_t stream) {
  DI_CHECK(pairs >= 0 && pairs < (int64_t(1) << 31) && owner.top_k >= 1,
           "cuda::count_rank_pairs: " + std::to_string(pairs) + " pairs");
  if (pairs == 0) return;
  DI_CHECK(group_ids && served, "cuda::count_rank_pairs: ids and the counter are required");
  const int64_t blocks = std::min<int64_t>(kMaxCountBlocks, (pairs + kCountThreads - 1) / kCountThreads);
  count_rank_pairs_kernel<<<unsigned(blocks), kCountThreads, 0, stream>>>(group_ids, pairs, owner, served);
  DI_CUDA_CHECK_LAUNCH("count_rank_pairs_kernel");
}

void count_routed_experts(const int32_t* expert_ids, int64_t pairs, int experts, unsigned long long* counts,
                          cudaStream_t stream) {
  DI_CHECK(pairs >= 0 && pairs < (int64_t(1) << 31) && experts > 0 && experts <= kMaxCountedExperts,
           "cuda::count_routed_experts: " + std::to_string(pairs) + " pairs over " + std::to_string(experts) +
               " experts (at most " + std::to_string(kMaxCountedExperts) + ")");
  if (pairs == 0) return;
  DI_CHECK(expert_ids && counts, "cuda::count_routed_experts: ids and counts are required");
  const int64_t blocks = std::min<int64_t>(kMaxCountBlocks, (pairs + kCountThreads - 1) / kCountThreads);
  count_routed_experts_kernel<<<unsigned(blocks), kCountThreads, sizeof(unsigned int) * size_t(experts), stream>>>(
      expert_ids, pairs, experts, counts);
  DI_CUDA_CHECK_LAUNCH("count_routed_experts_kernel");
}

}  // namespace deepinfer::cuda
