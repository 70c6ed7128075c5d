#include "cuda/random_fill.h"

#include <cuda_fp8.h>

#include "cuda/check.h"

namespace deepinfer::cuda {

namespace {

// splitmix64 of (seed, index): independent streams per seed, any order of generation.
__device__ __forceinline__ uint64_t mix(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1).
__device__ __forceinline__ float unit(uint64_t seed, uint64_t i) {
  return float(mix(seed, i) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

constexpr float kUniformToStd = 1.7320508f;  // sqrt(3): uniform [-1, 1) has standard deviation 1/sqrt(3)

template <class F>
__global__ void fill_kernel(size_t n, F f) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) f(i);
}

template <class F>
void launch(size_t n, cudaStream_t stream, F f) {
  if (n == 0) return;
  const int threads = 256;
  const size_t blocks = (n + threads - 1) / threads;
  fill_kernel<<<unsigned(blocks < 65536 ? blocks : 65536), threads, 0, stream>>>(n, f);
  DI_CUDA_CHECK_LAUNCH("fill_random");
}

}  // namespace

void fill_random_bf16(__nv_bfloat16* x, size_t n, float mean, float std, uint64_t seed, cudaStream_t stream) {
  launch(n, stream, [=] __device__(size_t i) { x[i] = __float2bfloat16(mean + std * kUniformToStd * unit(seed, i)); });
}

void fill_random_f32(float* x, size_t n, float mean, float std, uint64_t seed, cudaStream_t stream) {
  launch(n, stream, [=] __device__(size_t i) { x[i] = mean + std * kUniformToStd * unit(seed, i); });
}

void fill_random_e4m3(uint8_t* x, size_t n, uint64_t seed, cudaStream_t stream) {
  launch(n, stream, [=] __device__(size_t i) {
    x[i] = __nv_cvt_float_to_fp8(unit(seed, i), __NV_SATFINITE, __NV_E4M3);
  });
}

void fill_random_e8m0(uint8_t* x, size_t n, int min_exp, int max_exp, uint64_t seed, cudaStream_t stream) {
  const uint32_t span = uint32_t(max_exp - min_exp + 1);
  launch(n, stream, [=] __device__(size_t i) { x[i] = uint8_t(127 + min_exp + int(mix(seed, i) % span)); });
}

void fill_random_e2m1_pairs(uint8_t* x, size_t n, uint64_t seed, cudaStream_t stream) {
  launch(n, stream, [=] __device__(size_t i) { x[i] = uint8_t(mix(seed, i)); });
}

void fill_random_int(int32_t* x, size_t n, int32_t high, uint64_t seed, cudaStream_t stream) {
  launch(n, stream, [=] __device__(size_t i) { x[i] = int32_t(mix(seed, i) % uint64_t(high)); });
}

}  // namespace deepinfer::cuda
