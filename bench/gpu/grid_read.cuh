// The plain-load read rate of the stream probes (stream_probe, lane_probe): a grid-stride read of a buffer, every
// thread 4 x 16 bytes a round, one word per block written so the loads cannot be dropped. The reference the probes'
// bulk-copy rings are compared with in the same run.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::bench {

// kStreaming: ld.global.cs (evict-first, as the weight streams' copies are); else ld.global.nc.
template <bool kStreaming>
__global__ void __launch_bounds__(512) grid_read_kernel(const uint4* __restrict__ src, size_t n16, uint32_t* sink) {
  auto load = [](const uint4* p) { return kStreaming ? __ldcs(p) : __ldg(p); };
  uint32_t acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    const uint4 a = load(src + i), b = load(src + i + stride), c = load(src + i + 2 * stride),
                d = load(src + i + 3 * stride);
    acc ^= a.x ^ b.y ^ c.z ^ d.w;
  }
  for (; i < n16; i += stride) acc ^= load(src + i).x;
  if (acc == 0x12345678u) sink[blockIdx.x] = acc;
}

}  // namespace deepinfer::bench
