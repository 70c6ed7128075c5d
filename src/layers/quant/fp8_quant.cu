// FP8 activation quantization on the GPU (model-spec §2 "Activation quant for FP8/FP4 GEMMs"), the CUDA twin of
// fp8_fake_quant in fake_quant.cpp: the same power-of-two scale and round-to-nearest-even e4m3, but the codes and
// scales are kept (the GEMMs consume them) instead of being dequantized in place.
#include <algorithm>

#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/kernels.h"

namespace deepinfer::cuda {

namespace {

// Each thread quantizes 8 consecutive values (one 16-byte load); the `block / 8` threads of a block are
// consecutive lanes of one warp and agree on the block's amax through shuffles.
__global__ void fp8_quantize_kernel(const bf16* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ scales,
                                    int64_t vecs, int lanes_per_block) {
  const int lane = threadIdx.x % 32;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t v0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) & ~int64_t(31); v0 < vecs; v0 += stride) {
    const int64_t v = v0 + lane;
    const bool valid = v < vecs;
    float f[8] = {};
    if (valid) dev::unpack8(reinterpret_cast<const dev::Bf16x8*>(x)[v], f);
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(f[j]));
    for (int o = lanes_per_block / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    // 2^ceil(log2(max(amax, 1e-4) / 448)); dividing by a power of two is exact, so x * (1 / scale) is x / scale.
    const float scale = dev::pow2_ceil(fmaxf(amax, 1e-4f) / 448.0f);
    const float inv = 1.0f / scale;
    if (!valid) continue;
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      lo |= uint32_t(__nv_cvt_float_to_fp8(f[j] * inv, __NV_SATFINITE, __NV_E4M3)) << (8 * j);
      hi |= uint32_t(__nv_cvt_float_to_fp8(f[4 + j] * inv, __NV_SATFINITE, __NV_E4M3)) << (8 * j);
    }
    reinterpret_cast<uint2*>(q)[v] = make_uint2(lo, hi);
    if (v % lanes_per_block == 0) scales[v / lanes_per_block] = scale;
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
  fp8_quantize_kernel<<<unsigned(blocks), threads, 0, stream>>>(x, q, scales, vecs, block / 8);
  DI_CUDA_CHECK_LAUNCH("fp8_quantize_kernel");
}

}  // namespace deepinfer::cuda
