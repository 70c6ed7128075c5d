#include "model/v41/gpu/v41_step_kernels.h"

#include <cuda_fp8.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/launch.h"
#include "layers/quant/fp8_quant.cuh"

namespace deepinfer::cuda {

namespace {

// One warp per row; lane i holds channel i of each 32-wide block. The lane's values of a window of kWindow
// blocks are loaded before the first is quantized: as a load -> warp max -> store loop the row's 16 blocks (dim
// 512) were 16 dependent round trips (issue 4). The per-block arithmetic (fp8_quant.cuh kv_fp8_*) is unchanged.
__global__ void mxfp8_window_fake_quant_kernel(const bf16* __restrict__ kv, int rows, int dim, bf16* dst) {
  constexpr int kWindow = 16;
  const int warps = blockDim.x / 32;
  const int row = blockIdx.x * warps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  pdl_wait();  // PDL (cuda/launch.h): kv is the predecessor's output
  pdl_launch_dependents();
  if (row >= rows) return;
  const bf16* x = kv + int64_t(row) * dim;
  bf16* y = dst + int64_t(row) * dim;
  for (int b0 = 0; b0 < dim; b0 += kWindow * kV41WindowKvBlock) {
    float v[kWindow];
#pragma unroll
    for (int w = 0; w < kWindow; ++w) {
      const int c = b0 + w * kV41WindowKvBlock + lane;
      v[w] = c < dim ? __bfloat162float(x[c]) : 0.0f;
    }
#pragma unroll
    for (int w = 0; w < kWindow; ++w) {
      const int b = b0 + w * kV41WindowKvBlock;
      if (b >= dim) break;  // warp-uniform
      const float scale = dev::kv_fp8_scale(dev::warp_max(fabsf(v[w])));
      y[b + lane] = dev::kv_fp8_value(v[w], scale);
    }
  }
}

__global__ void cut_window_rows_kernel(int32_t* __restrict__ lists, const int32_t* __restrict__ slots,
                                       const int32_t* __restrict__ positions, const int32_t* __restrict__ base,
                                       int rows, int window) {
  pdl_wait();  // the lists come from window_rows, the predecessor
  pdl_launch_dependents();
  const int64_t total = int64_t(rows) * window;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int r = int(i / window), w = int(i % window);
    if (positions[r] - (window - 1) + w < base[slots[r]]) lists[i] = -1;
  }
}

}  // namespace

void cut_window_rows(int32_t* lists, const int32_t* slots, const int32_t* positions, const int32_t* base, int rows,
                     int window, cudaStream_t stream) {
  DI_CHECK(rows >= 0 && window > 0, "cuda::cut_window_rows: bad row count or window");
  if (rows == 0) return;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((int64_t(rows) * window + threads - 1) / threads, 65535);
  DI_CUDA_CHECK(launch(cut_window_rows_kernel, dim3(unsigned(blocks)), dim3(threads), 0, stream, lists, slots,
                       positions, base, rows, window));
}

void mxfp8_window_fake_quant(const bf16* kv, int rows, int dim, bf16* dst, cudaStream_t stream) {
  DI_CHECK(dim > 0 && dim % kV41WindowKvBlock == 0,
           "cuda::mxfp8_window_fake_quant: dim " + std::to_string(dim) + " is not a positive multiple of 32");
  if (rows == 0) return;
  const int warps = 4;
  DI_CUDA_CHECK(launch(mxfp8_window_fake_quant_kernel, dim3(unsigned((rows + warps - 1) / warps)), dim3(warps * 32), 0,
                       stream, kv, rows, dim, dst));
}

}  // namespace deepinfer::cuda
