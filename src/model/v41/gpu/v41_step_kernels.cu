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
// kFormat Mxfp8 writes the same codes and scales as the record (kv_record.h kvrec41; dim == kvrec41::kDim).
template <KvFormat kFormat>
__global__ void mxfp8_window_fake_quant_kernel(const bf16* __restrict__ kv, int rows, int dim, void* dst) {
  constexpr int kWindow = 16;
  const int warps = blockDim.x / 32;
  const int row = blockIdx.x * warps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  pdl_wait();  // PDL (cuda/launch.h): kv is the predecessor's output
  pdl_launch_dependents();
  if (row >= rows) return;
  const bf16* x = kv + int64_t(row) * dim;
  bf16* y = static_cast<bf16*>(dst) + int64_t(row) * dim;                                // bf16 rows
  uint8_t* rec = static_cast<uint8_t*>(dst) + int64_t(row) * kvrec41::kWindowRowBytes;   // records
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
      if constexpr (kFormat == KvFormat::Mxfp8) {
        rec[kvrec41::kWindowCodes + b + lane] = kvrec::encode_code(v[w], scale);
        if (lane == 0) rec[kvrec41::kWindowScales + b / kV41WindowKvBlock] = kvrec::encode_scale(scale);
      } else {
        y[b + lane] = dev::kv_fp8_value(v[w], scale);
      }
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

void mxfp8_window_fake_quant(const bf16* kv, int rows, int dim, void* dst, cudaStream_t stream, KvFormat format) {
  DI_CHECK(dim > 0 && dim % kV41WindowKvBlock == 0,
           "cuda::mxfp8_window_fake_quant: dim " + std::to_string(dim) + " is not a positive multiple of 32");
  DI_CHECK(format == KvFormat::Bf16 || (format == KvFormat::Mxfp8 && dim == kvrec41::kDim),
           std::string("cuda::mxfp8_window_fake_quant: rows of ") + kv_format_name(format) + " / dim " +
               std::to_string(dim) + " (bf16 rows, or MXFP8 records of " + std::to_string(kvrec41::kDim) + ")");
  if (rows == 0) return;
  const int warps = 4;
  const dim3 grid(unsigned((rows + warps - 1) / warps)), block(warps * 32);
  if (format == KvFormat::Mxfp8)
    DI_CUDA_CHECK(launch(mxfp8_window_fake_quant_kernel<KvFormat::Mxfp8>, grid, block, 0, stream, kv, rows, dim, dst));
  else
    DI_CUDA_CHECK(launch(mxfp8_window_fake_quant_kernel<KvFormat::Bf16>, grid, block, 0, stream, kv, rows, dim, dst));
}

}  // namespace deepinfer::cuda
