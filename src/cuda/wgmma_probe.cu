#include "cuda/wgmma_probe.h"

#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/mbarrier.cuh"
#include "cuda/wgmma.cuh"

namespace deepinfer::cuda {
namespace {

constexpr int kRows = 64, kCols = 8, kK = 32, kThreads = 128;

// One trial a block (one warpgroup). B goes to shared memory in the no-swizzle K-major layout of
// wgmma::smem_desc_noswizzle: column n's K bytes 16h .. 16h + 15 at 128 h + 16 n (two core matrices along K, 128
// bytes apart: the LBO; one 8-column group, so the SBO is unused). A's register fragment (wgmma.cuh): thread (warp
// w, lane 4g + c) holds rows 16w + g and 16w + g + 8 at K 4c .. 4c + 3 (a0, a1) and 16 + 4c .. 16 + 4c + 3 (a2, a3).
__global__ void __launch_bounds__(kThreads)
    e4m3_block_dots_kernel(const uint8_t* __restrict__ a, const uint8_t* __restrict__ b, float* __restrict__ d) {
  __shared__ __align__(128) uint8_t bs[kCols * kK];
  const uint8_t* at = a + size_t(blockIdx.x) * kRows * kK;
  const uint8_t* bt = b + size_t(blockIdx.x) * kCols * kK;
  for (int i = int(threadIdx.x); i < kCols * kK; i += kThreads) {
    const int n = i / kK, k = i % kK;
    bs[(k / 16) * 128 + n * 16 + k % 16] = bt[i];
  }
  dev::fence_proxy_async_smem();  // the generic stores above, before the wgmma's async-proxy reads
  __syncthreads();

  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, c = lane % 4;
  const int row = 16 * warp + g;
  // K offsets 4c and 16 + 4c of a 32-byte row: 4-byte aligned words.
  auto word = [&](int r, int k0) { return *reinterpret_cast<const uint32_t*>(at + r * kK + k0); };
  const uint32_t frag[4] = {word(row, 4 * c), word(row + 8, 4 * c), word(row, 16 + 4 * c), word(row + 8, 16 + 4 * c)};
  float acc[4];
  const uint64_t desc = wgmma::smem_desc_noswizzle(uint32_t(__cvta_generic_to_shared(bs)), 128, 128);
  wgmma::fence();
  wgmma::m64n8k32_e4m3_rs_first(acc, frag, desc);
  wgmma::commit();
  wgmma::wait_all();
  wgmma::fence_regs_n(acc);

  // D's fragment: rows row and row + 8, columns 2c and 2c + 1.
  float* dt = d + size_t(blockIdx.x) * kRows * kCols;
  dt[row * kCols + 2 * c] = acc[0];
  dt[row * kCols + 2 * c + 1] = acc[1];
  dt[(row + 8) * kCols + 2 * c] = acc[2];
  dt[(row + 8) * kCols + 2 * c + 1] = acc[3];
}

constexpr int kDotRows = 16, kDotCols = 8, kDotK = 128;

// One trial a warp. Fragments of mma.m16n8k16 (PTX ISA "Matrix fragments for mma.m16n8k16"), lane 4g + c: A rows g
// and g + 8 at K 2c, 2c + 1 (a0, a1) and 8 + 2c, 9 + 2c (a2, a3); B column (= b's row) g at K 2c, 2c + 1 (b0) and
// 8 + 2c, 9 + 2c (b1); D rows g, g + 8 at columns 2c, 2c + 1.
__global__ void __launch_bounds__(32)
    bf16_dots128_kernel(const uint16_t* __restrict__ a, const uint16_t* __restrict__ b, float* __restrict__ d) {
  const uint16_t* at = a + size_t(blockIdx.x) * kDotRows * kDotK;
  const uint16_t* bt = b + size_t(blockIdx.x) * kDotCols * kDotK;
  const int g = int(threadIdx.x) / 4, c = int(threadIdx.x) % 4;
  auto pair = [](const uint16_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 16; };
  float acc[4] = {0, 0, 0, 0};
#pragma unroll
  for (int s = 0; s < kDotK / 16; ++s) {
    const int k = 16 * s + 2 * c;
    dev::mma_bf16_m16n8k16(acc, pair(at + g * kDotK + k), pair(at + (g + 8) * kDotK + k),
                           pair(at + g * kDotK + k + 8), pair(at + (g + 8) * kDotK + k + 8), pair(bt + g * kDotK + k),
                           pair(bt + g * kDotK + k + 8));
  }
  float* dt = d + size_t(blockIdx.x) * kDotRows * kDotCols;
  dt[g * kDotCols + 2 * c] = acc[0];
  dt[g * kDotCols + 2 * c + 1] = acc[1];
  dt[(g + 8) * kDotCols + 2 * c] = acc[2];
  dt[(g + 8) * kDotCols + 2 * c + 1] = acc[3];
}

}  // namespace

void mma_bf16_dots128(const uint16_t* a, const uint16_t* b, float* d, int trials, cudaStream_t stream) {
  DI_CHECK(trials > 0, "cuda::mma_bf16_dots128: trials must be positive");
  bf16_dots128_kernel<<<trials, 32, 0, stream>>>(a, b, d);
  DI_CUDA_CHECK_LAUNCH("bf16_dots128_kernel");
}

void wgmma_e4m3_block_dots(const uint8_t* a, const uint8_t* b, float* d, int trials, cudaStream_t stream) {
  DI_CHECK(trials > 0, "cuda::wgmma_e4m3_block_dots: trials must be positive");
  e4m3_block_dots_kernel<<<trials, kThreads, 0, stream>>>(a, b, d);
  DI_CUDA_CHECK_LAUNCH("e4m3_block_dots_kernel");
}

}  // namespace deepinfer::cuda
