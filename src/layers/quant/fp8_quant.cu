// FP8 activation quantization on the GPU (model-spec §2 "Activation quant for FP8/FP4 GEMMs"), the CUDA twin of
// fp8_fake_quant in fake_quant.cpp: the same power-of-two scale and round-to-nearest-even e4m3, but the codes and
// scales are kept (the GEMMs consume them) instead of being dequantized in place.
#include <algorithm>

#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/kernels.h"
#include "cuda/launch.h"
#include "layers/quant/fp8_quant.cuh"
#include "layers/quant/fp8_quant_lanes.cuh"

namespace deepinfer::cuda {

namespace {

// Each thread quantizes 8 consecutive values (one 16-byte load); the `block / 8` threads of a block are
// consecutive lanes of one warp and agree on the block's amax through shuffles (fp8_quant.cuh). kLanes: the block's
// lanes at compile time (for_compiled_lanes), or 0.
template <int kLanes>
__global__ void fp8_quantize_kernel(const bf16* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ scales,
                                    int64_t vecs, int lanes_per_block) {
  pdl_wait();  // PDL (cuda/launch.h): x is the predecessor's output
  pdl_launch_dependents();
  const int lane = threadIdx.x % 32;
  // lanes_per_block is a power of two (the host checks it) and v >= 0: the scale's test and index by a mask and a
  // shift, not by 64-bit % and / (a branch to the 32-bit paths or a rem_s64 / div_s64 call, ~45 dependent
  // instructions between the codes' store and the scale's, the kernel's last; SASS).
  const int block_shift = __ffs(lanes_per_block) - 1;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t v0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) & ~int64_t(31); v0 < vecs; v0 += stride) {
    const int64_t v = v0 + lane;
    const bool valid = v < vecs;
    float f[8] = {};
    if (valid) dev::unpack8(reinterpret_cast<const dev::Bf16x8*>(x)[v], f);
    uint2 codes;
    const float scale = dev::fp8_quantize8_lanes<kLanes>(f, lanes_per_block, codes);
    if (!valid) continue;
    reinterpret_cast<uint2*>(q)[v] = codes;
    if ((v & (lanes_per_block - 1)) == 0) scales[v >> block_shift] = scale;
  }
}

}  // namespace

void fp8_quantize(const bf16* x, uint8_t* q, float* scales, int64_t rows, int k, int block, cudaStream_t stream) {
  DI_CHECK(block >= 8 && block <= 256 && (block & (block - 1)) == 0 && k % block == 0,
           "cuda::fp8_quantize: block " + std::to_string(block) + " must be a power of two in [8, 256] dividing k = " +
               std::to_string(k));
  const int64_t vecs = rows * k / 8;
  if (vecs == 0) return;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((vecs + threads - 1) / threads, 8192);
  const int lanes = block / 8;
  const auto kernel = dev::for_compiled_lanes(lanes, [](auto l) { return fp8_quantize_kernel<decltype(l)::value>; });
  DI_CUDA_CHECK(launch(kernel, dim3(unsigned(blocks)), dim3(threads), 0, stream, x, q, scales, vecs, lanes));
}

}  // namespace deepinfer::cuda
