// Greedy sampling on the GPU: the arg-max of each logits row, the lowest index among equal maxima and NaN
// counted as the largest value (torch.argmax semantics). One block per row; at decode batch 1 the row (129280
// fp32 = 517 KB) is a few microseconds of a step that reads gigabytes of weights.
#include <cmath>

#include "cuda/check.h"
#include "cuda/kernels.h"

namespace deepinfer::cuda {

namespace {

constexpr int kArgmaxThreads = 1024;

struct Best {
  float v;
  int64_t i;
};

// Is b a better arg-max candidate than a?
__device__ __forceinline__ bool better(const Best& a, const Best& b) {
  const bool an = isnan(a.v), bn = isnan(b.v);
  if (an != bn) return bn;
  if (!an && b.v != a.v) return b.v > a.v;
  return b.i < a.i;
}

__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const float* __restrict__ logits, int64_t vocab,
                                                                int32_t* __restrict__ out) {
  const float* row = logits + int64_t(blockIdx.x) * vocab;
  Best best{-INFINITY, vocab};
  auto consider = [&](float v, int64_t i) {
    const Best c{v, i};
    if (better(best, c)) best = c;
  };
  if (vocab % 4 == 0) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
    for (int64_t i = threadIdx.x; i < vocab / 4; i += kArgmaxThreads) {
      const float4 v = __ldg(r4 + i);
      consider(v.x, 4 * i);
      consider(v.y, 4 * i + 1);
      consider(v.z, 4 * i + 2);
      consider(v.w, 4 * i + 3);
    }
  } else {
    for (int64_t i = threadIdx.x; i < vocab; i += kArgmaxThreads) consider(__ldg(row + i), i);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Best other{__shfl_xor_sync(0xFFFFFFFFu, best.v, o),
                     static_cast<int64_t>(__shfl_xor_sync(0xFFFFFFFFu, static_cast<long long>(best.i), o))};
    if (better(best, other)) best = other;
  }
  __shared__ Best warp_best[kArgmaxThreads / 32];
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    Best b = warp_best[0];
    for (int w = 1; w < kArgmaxThreads / 32; ++w)
      if (better(b, warp_best[w])) b = warp_best[w];
    out[blockIdx.x] = int32_t(b.i);
  }
}

// One block per masked row; 32-bit words are read once per 32 logits.
__global__ void apply_token_bitmask_kernel(float* logits, int64_t vocab, const int32_t* __restrict__ rows,
                                           const uint32_t* __restrict__ masks, int64_t mask_words,
                                           int64_t mask_vocab) {
  float* row = logits + int64_t(rows[blockIdx.x]) * vocab;
  const uint32_t* mask = masks + int64_t(blockIdx.x) * mask_words;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
    const bool allowed = v < mask_vocab && ((mask[v >> 5] >> (v & 31)) & 1u);
    if (!allowed) row[v] = -INFINITY;
  }
}

}  // namespace

void apply_token_bitmask(float* logits, int64_t vocab, const int32_t* rows, int count, const uint32_t* masks,
                         int64_t mask_words, int64_t mask_vocab, cudaStream_t stream) {
  DI_CHECK(mask_vocab <= mask_words * 32, "cuda::apply_token_bitmask: " + std::to_string(mask_words) +
                                              " words cannot hold a " + std::to_string(mask_vocab) + "-token mask");
  if (count == 0) return;
  apply_token_bitmask_kernel<<<unsigned(count), 256, 0, stream>>>(logits, vocab, rows, masks, mask_words, mask_vocab);
  DI_CUDA_CHECK_LAUNCH("apply_token_bitmask_kernel");
}

void argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* out, cudaStream_t stream) {
  DI_CHECK(vocab > 0 && vocab < (int64_t(1) << 31), "cuda::argmax_rows: vocab " + std::to_string(vocab));
  if (rows == 0) return;
  argmax_kernel<<<unsigned(rows), kArgmaxThreads, 0, stream>>>(logits, vocab, out);
  DI_CUDA_CHECK_LAUNCH("argmax_kernel");
}

}  // namespace deepinfer::cuda
