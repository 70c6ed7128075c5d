// RMSNorm on the GPU (model-spec §2), the CUDA twin of rms_norm.cpp: fp32 statistics over bf16 rows, bf16 out.
// Memory-bound: one read and one write of the row. One block per row; each thread keeps its slice in registers
// between the reduction and the scaling, so the row is read from memory once.
#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/kernels.h"

namespace deepinfer::cuda {

namespace {

constexpr int kNormThreads = 128;
constexpr int kNormMaxVecs = 8;  // 16-byte vectors per thread kept in registers: rows up to 8192 wide

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

  __shared__ float partial[kNormThreads / 32];
  ss = dev::warp_sum(ss);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kNormThreads / 32; ++w) total += partial[w];
  const float r = rsqrtf(total / float(n) + eps);

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

}  // namespace deepinfer::cuda
