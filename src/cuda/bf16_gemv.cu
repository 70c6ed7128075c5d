// bf16 decode GEMV for a pair of products of one input (bf16_gemv.h): the compressors' kv / gate projections at one
// row. One warp per two weight rows, four warps per block, the pair's two matrices on grid.z: at V4-Flash's HCA
// width (n 512, k 4096) that is 128 blocks streaming 8 MB, where cuBLAS's 8x64 tile without split-K runs 16 (bench/gpu/
// NOTES.md "bf16 GEMV for the compressor pair"). Lane l reads 8 bf16 (16 bytes) at columns 8 l + 256 s of step s, so
// a warp load is 512 contiguous bytes of a row; ten steps of weight and x loads per row are issued before they are
// used (10 KB of weights in flight per warp, over half of the HCA pair's weights in flight over the grid). Each
// weight chunk is applied with fp32 FMAs (bf16 x bf16 products are exact in fp32), in column order within a lane; the
// lanes' accumulators meet in a fixed shuffle tree (dev::warp_sum). Every x row takes its own pass over the weights
// with the same operations in the same order, so a row's result does not depend on the call's row count (batch
// invariance), as in w8a16_gemv.cu.
#include "cuda/bf16_gemv.h"

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/launch.h"

namespace deepinfer::cuda {

namespace {

constexpr int kGemvWarps = 4;
constexpr int kRowsPerWarp = 2;
constexpr int kRowsPerBlock = kGemvWarps * kRowsPerWarp;
constexpr int kChunk = 8;                // bf16 per lane per step (16 bytes)
constexpr int kStepCols = 32 * kChunk;   // columns per warp step
// Steps whose weight loads are in flight together: two batches cover V4's k = 4096 (16 steps) and V4.1's 5120 (20).
constexpr int kUnroll = 10;
// PDL prologue (cuda/launch.h): the first bytes of each of the warp's weight rows are pulled into L2 before the
// wait, while the predecessor drains (as w8a16_gemv.cu).
constexpr int kPrefetchRowBytes = 1024;

struct PairArgs {
  const bf16* x;
  const bf16* w[2];
  void* y[2];
  int64_t ldx, ldw, ldy;
  int n, k;
};

// 8 bf16 in a 16-byte word to fp32 (exact: a bf16 is the high half of its fp32).
__device__ __forceinline__ void bf16x8_to_float(const uint4& raw, float (&f)[8]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(words[i] << 16);
    f[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
  }
}

__device__ __forceinline__ void store(float* y, int64_t i, float v) { y[i] = v; }
__device__ __forceinline__ void store(bf16* y, int64_t i, float v) { y[i] = __float2bfloat16_rn(v); }

// grid (x rows, row blocks, 2 matrices): the x rows of one weight row block are neighbours in launch order, so a
// weight tile read by the first row's block is still in L2 for the others (m > 1 only).
template <class OutT>
__global__ void __launch_bounds__(kGemvWarps * 32) bf16_gemv_pair_kernel(const PairArgs a) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = (int(blockIdx.y) * kGemvWarps + warp) * kRowsPerWarp;
  // Selects, not a.w[blockIdx.z]: a dynamic index into the parameters copies them to local memory.
  const bf16* w = blockIdx.z ? a.w[1] : a.w[0];
  if (r0 < a.n && lane < kRowsPerWarp)  // k % 8 == 0, 16-byte aligned rows: the bulk prefetch's alignment
    prefetch_l2_bulk(w + int64_t(min(r0 + lane, a.n - 1)) * a.ldw, unsigned(min(2 * a.k, kPrefetchRowBytes)));
  pdl_wait();  // x is the predecessor's; y may still be read by an earlier kernel
  if (r0 >= a.n) return;  // warp-uniform, nothing block-wide follows
  // A row past n (odd n) reads the warp's last valid row again; its sums are not stored.
  const bf16* wr[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) wr[rr] = w + int64_t(min(r0 + rr, a.n - 1)) * a.ldw;
  const int64_t t = blockIdx.x;
  const bf16* x = a.x + t * a.ldx;

  float acc[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) acc[rr] = 0.0f;

  // The batch's x chunks load with its weights, not one L1 round trip per step.
  for (int c0 = lane * kChunk; c0 < a.k; c0 += kUnroll * kStepCols) {
    uint4 raw[kUnroll][kRowsPerWarp];
    uint4 xraw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kStepCols;
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr)
        raw[u][rr] = c < a.k ? __ldg(reinterpret_cast<const uint4*>(wr[rr] + c)) : make_uint4(0, 0, 0, 0);
      xraw[u] = c < a.k ? *reinterpret_cast<const uint4*>(x + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kStepCols;
      if (c >= a.k) break;  // warp-uniform where k % 256 == 0 (every V4 / V4.1 width); depends on k and the lane only
      float xv[kChunk];
      bf16x8_to_float(xraw[u], xv);
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        float wf[kChunk];
        bf16x8_to_float(raw[u][rr], wf);
#pragma unroll
        for (int e = 0; e < kChunk; ++e) acc[rr] = fmaf(wf[e], xv[e], acc[rr]);
      }
    }
  }
  pdl_launch_dependents();  // the weight stream is done; the reductions and stores remain

  OutT* y = static_cast<OutT*>(blockIdx.z ? a.y[1] : a.y[0]);
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const float v = dev::warp_sum(acc[rr]);
    if (lane == 0 && r0 + rr < a.n) store(y, t * a.ldy + r0 + rr, v);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool bf16_gemv_pair_fits(const bf16* x, int64_t ldx, const bf16* w1, const bf16* w2, int64_t ldw, int64_t m,
                         int64_t n, int64_t k) {
  return aligned16(x) && aligned16(w1) && aligned16(w2) && k > 0 && k % kChunk == 0 && ldx % kChunk == 0 &&
         ldw % kChunk == 0 && ldx >= k && ldw >= k && m >= 0 && m < (int64_t(1) << 31) && n >= 0 &&
         (n + kRowsPerBlock - 1) / kRowsPerBlock <= 65535 && k < (int64_t(1) << 30);
}

namespace {

// One launch over `products` (1 or 2) matrices on grid.z; w2 / y2 unused when 1.
void launch_gemv(const char* name, const bf16* x, int64_t ldx, const bf16* w1, const bf16* w2, int64_t ldw, void* y1,
                 void* y2, OutType out, int64_t ldy, int64_t m, int64_t n, int64_t k, unsigned products,
                 cudaStream_t stream) {
  const std::string shape = "[" + std::to_string(m) + ", " + std::to_string(k) + "] x " + std::to_string(products) +
                            " x [" + std::to_string(n) + ", " + std::to_string(k) + "]^T";
  DI_CHECK(bf16_gemv_pair_fits(x, ldx, w1, w2, ldw, m, n, k) && ldy >= n,
           std::string("cuda::") + name + ": " + shape + " needs 16-byte aligned x and weights, k, ldx and ldw "
           "multiples of 8, ldx, ldw >= k, ldy >= n (ldx " + std::to_string(ldx) + ", ldw " + std::to_string(ldw) +
           ", ldy " + std::to_string(ldy) + ")");
  if (m == 0 || n == 0) return;
  const PairArgs a{x, {w1, w2}, {y1, y2}, ldx, ldw, ldy, int(n), int(k)};
  const dim3 grid{unsigned(m), unsigned((n + kRowsPerBlock - 1) / kRowsPerBlock), products};
  auto kernel = out == OutType::F32 ? bf16_gemv_pair_kernel<float> : bf16_gemv_pair_kernel<bf16>;
  DI_CUDA_CHECK(launch(kernel, grid, dim3(kGemvWarps * 32), 0, stream, a));
}

}  // namespace

bool bf16_gemv_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("DEEPINFER_BF16_GEMV");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

void bf16_gemv(const bf16* x, int64_t ldx, const bf16* w, int64_t ldw, void* y, OutType out, int64_t ldy, int64_t m,
               int64_t n, int64_t k, cudaStream_t stream) {
  launch_gemv("bf16_gemv", x, ldx, w, w, ldw, y, y, out, ldy, m, n, k, 1, stream);
}

void bf16_gemv_pair(const bf16* x, int64_t ldx, const bf16* w1, const bf16* w2, int64_t ldw, void* y1, void* y2,
                    OutType out, int64_t ldy, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  launch_gemv("bf16_gemv_pair", x, ldx, w1, w2, ldw, y1, y2, out, ldy, m, n, k, 2, stream);
}

}  // namespace deepinfer::cuda
