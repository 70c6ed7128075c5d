// Partial interleaved RoPE on the GPU (model-spec §2), the CUDA twin of rope.cpp. The frequencies come from the
// CPU Rope object (plain theta^(-2i/d), or YaRN-ramped on compressed layers), so both paths share one table;
// the angle is computed like the reference, float(pos) * inv_freq in fp32, with the accurate sincosf.
#include <algorithm>

#include "cuda/check.h"
#include "cuda/kernels.h"
#include "cuda/launch.h"
#include "layers/norm_rope/rope_gpu_ref.h"
#include "layers/norm_rope/rope.cuh"

namespace deepinfer::cuda {

namespace {

using dev::kRopeHeadsPerThread;

// Items of dev::rope_item (rope.cuh), a thread each.
__global__ void rope_kernel(bf16* x, int64_t token_stride, const int32_t* __restrict__ positions,
                            const float* __restrict__ inv_freq, int64_t tokens, int heads, int head_dim, int rope_dim,
                            bool inverse) {
  pdl_wait();  // PDL (cuda/launch.h): in place on the predecessor's output
  pdl_launch_dependents();
  const int64_t total = dev::rope_items(tokens, heads, rope_dim);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    dev::rope_item(x, token_stride, positions, inv_freq, i, heads, head_dim, rope_dim, inverse);
}

// rope_kernel as it was before issue 4's latency round (a head's store before the next head's load), kept for
// GpuRope.MatchesReferenceBitwise (rope_gpu_ref.h rope_reference).
__global__ void rope_reference_kernel(bf16* x, int64_t token_stride, const int32_t* __restrict__ positions,
                                      const float* __restrict__ inv_freq, int64_t tokens, int heads, int head_dim,
                                      int rope_dim, bool inverse) {
  pdl_wait();
  pdl_launch_dependents();
  const int half = rope_dim / 2;
  const int head_groups = (heads + kRopeHeadsPerThread - 1) / kRopeHeadsPerThread;
  const int64_t total = tokens * head_groups * half;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int pair = int(i % half);
    const int64_t tg = i / half;
    const int group = int(tg % head_groups);
    const int64_t t = tg / head_groups;
    const float angle = float(positions[t]) * inv_freq[pair];
    float s, c;
    sincosf(angle, &s, &c);
    if (inverse) s = -s;
    bf16* base = x + t * token_stride + (head_dim - rope_dim) + 2 * pair;
    const int h_end = min(heads, (group + 1) * kRopeHeadsPerThread);
    for (int h = group * kRopeHeadsPerThread; h < h_end; ++h) {
      auto* p = reinterpret_cast<__nv_bfloat162*>(base + int64_t(h) * head_dim);
      const float2 v = __bfloat1622float2(*p);
      *p = __floats2bfloat162_rn(v.x * c - v.y * s, v.x * s + v.y * c);
    }
  }
}

}  // namespace

namespace {
template <class Kernel>
void launch_rope(Kernel kernel, bf16* x, int64_t token_stride, const int32_t* positions, const float* inv_freq,
                 int64_t tokens, int heads, int head_dim, int rope_dim, bool inverse, cudaStream_t stream) {
  DI_CHECK(rope_dim % 2 == 0 && rope_dim <= head_dim && head_dim % 2 == 0 && token_stride % 2 == 0,
           "cuda::rope: rope_dim " + std::to_string(rope_dim) + " / head_dim " + std::to_string(head_dim) +
               " must be even with rope_dim <= head_dim");
  const int64_t total = dev::rope_items(tokens, heads, rope_dim);
  if (total == 0) return;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 65535);
  DI_CUDA_CHECK(launch(kernel, dim3(unsigned(blocks)), dim3(threads), 0, stream, x, token_stride, positions,
                       inv_freq, tokens, heads, head_dim, rope_dim, inverse));
}
}  // namespace

void rope(bf16* x, int64_t token_stride, const int32_t* positions, const float* inv_freq, int64_t tokens, int heads,
          int head_dim, int rope_dim, bool inverse, cudaStream_t stream) {
  launch_rope(rope_kernel, x, token_stride, positions, inv_freq, tokens, heads, head_dim, rope_dim, inverse, stream);
}

void rope_reference(bf16* x, int64_t token_stride, const int32_t* positions, const float* inv_freq, int64_t tokens,
                    int heads, int head_dim, int rope_dim, bool inverse, cudaStream_t stream) {
  launch_rope(rope_reference_kernel, x, token_stride, positions, inv_freq, tokens, heads, head_dim, rope_dim,
              inverse, stream);
}

}  // namespace deepinfer::cuda
