// RMSNorm on the GPU (model-spec §2), the CUDA twin of rms_norm.cpp: fp32 statistics over bf16 rows, bf16 out.
// Memory-bound: one read and one write of the row. One block per row; each thread keeps its slice in registers
// between the reduction and the scaling, so the row is read from memory once.
#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/kernels.h"
#include "cuda/step_kernels.h"

namespace deepinfer::cuda {

namespace {

constexpr int kNormThreads = 128;
constexpr int kNormMaxVecs = 8;  // 16-byte vectors per thread kept in registers: rows up to 8192 wide

// The block's sum of v in a fixed order (lanes, then warps in index order), returned to every thread.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[kNormThreads / 32];
  v = dev::warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kNormThreads / 32; ++w) total += partial[w];
  return total;
}

__global__ void __launch_bounds__(kNormThreads) rms_norm_kernel(const bf16* __restrict__ x,
                                                                const bf16* __restrict__ weight, bf16* y, int n,
                                                                float eps) {
  const int64_t row = blockIdx.x;
  const int vecs = n / 8;
  const auto* xr = reinterpret_cast<const dev::Bf16x8*>(x + row * n);
  auto* yr = reinterpret_cast<dev::Bf16x8*>(y + row * n);
  const auto* wr = reinterpret_cast<const dev::Bf16x8*>(weight);

  float v[kNormMaxVecs][8];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kNormMaxVecs; ++i) {
    int idx = threadIdx.x + i * kNormThreads;
    if (idx < vecs) {
      dev::unpack8(xr[idx], v[i]);
#pragma unroll
      for (int j = 0; j < 8; ++j) ss += v[i][j] * v[i][j];
    }
  }
  // Rows wider than the register slice: the rest is read twice (L1 / L2 hits).
  for (int idx = threadIdx.x + kNormMaxVecs * kNormThreads; idx < vecs; idx += kNormThreads) {
    float t[8];
    dev::unpack8(xr[idx], t);
#pragma unroll
    for (int j = 0; j < 8; ++j) ss += t[j] * t[j];
  }

  const float r = rsqrtf(block_sum(ss) / float(n) + eps);

  auto scale_store = [&](int idx, float (&t)[8]) {
    float o[8];
    if (wr) {
      float w8[8];
      dev::unpack8(wr[idx], w8);
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = w8[j] * (t[j] * r);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = t[j] * r;
    }
    yr[idx] = dev::pack8(o);
  };
#pragma unroll
  for (int i = 0; i < kNormMaxVecs; ++i) {
    int idx = threadIdx.x + i * kNormThreads;
    if (idx < vecs) scale_store(idx, v[i]);
  }
  for (int idx = threadIdx.x + kNormMaxVecs * kNormThreads; idx < vecs; idx += kNormThreads) {
    float t[8];
    dev::unpack8(xr[idx], t);
    scale_store(idx, t);
  }
}

}  // namespace

void rms_norm(const bf16* x, const bf16* weight, bf16* y, int64_t rows, int n, float eps, cudaStream_t stream) {
  DI_CHECK(n % 8 == 0, "cuda::rms_norm: width " + std::to_string(n) + " is not a multiple of 8");
  if (rows == 0) return;
  rms_norm_kernel<<<dim3(unsigned(rows)), kNormThreads, 0, stream>>>(x, weight, y, n, eps);
  DI_CUDA_CHECK_LAUNCH("rms_norm_kernel");
}


namespace {

// fp32 rows (GEMM outputs): one block per row, the row read twice (the second pass from L1 / L2).
__global__ void __launch_bounds__(kNormThreads) rms_norm_f32_kernel(const float* __restrict__ x,
                                                                    const bf16* __restrict__ weight, bf16* y, int n,
                                                                    float eps) {
  const int64_t row = blockIdx.x;
  const auto* xr = reinterpret_cast<const float4*>(x + row * n);
  float ss = 0.0f;
  for (int i = threadIdx.x; i < n / 4; i += kNormThreads) {
    const float4 v = xr[i];
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  const float r = rsqrtf(block_sum(ss) / float(n) + eps);
  bf16* yr = y + row * n;
  for (int i = threadIdx.x; i < n / 4; i += kNormThreads) {
    const float4 v = xr[i];
    const float t[4] = {v.x * r, v.y * r, v.z * r, v.w * r};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float w = weight ? __bfloat162float(weight[4 * i + j]) : 1.0f;
      yr[4 * i + j] = __float2bfloat16(weight ? w * t[j] : t[j]);
    }
  }
}

}  // namespace

void rms_norm_f32(const float* x, const bf16* weight, bf16* y, int64_t rows, int n, float eps, cudaStream_t stream) {
  DI_CHECK(n % 4 == 0, "cuda::rms_norm_f32: width " + std::to_string(n) + " is not a multiple of 4");
  if (rows == 0) return;
  rms_norm_f32_kernel<<<dim3(unsigned(rows)), kNormThreads, 0, stream>>>(x, weight, y, n, eps);
  DI_CUDA_CHECK_LAUNCH("rms_norm_f32_kernel");
}

}  // namespace deepinfer::cuda
