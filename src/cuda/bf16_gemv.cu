// bf16 decode GEMV for a pair of products of one input (bf16_gemv.h): the compressors' kv / gate projections at 1-4
// rows (gemm_bf16_pair's limit, kBf16GemvMaxRows). One warp per two weight rows, four warps per block, the pair's two matrices on grid.z: at V4-Flash's HCA
// width (n 512, k 4096) that is 128 blocks streaming 8 MB, where cuBLAS's 8x64 tile without split-K runs 16 (bench/gpu/
// NOTES.md "bf16 GEMV for the compressor pair"). Lane l reads 8 bf16 (16 bytes) at columns 8 l + 256 s of step s, so
// a warp load is 512 contiguous bytes of a row; ten steps of weight and x loads per row are issued before they are
// used (10 KB of weights in flight per warp, over half of the HCA pair's weights in flight over the grid). Each
// weight chunk is applied with fp32 FMAs (bf16 x bf16 products are exact in fp32), in column order within a lane; the
// lanes' accumulators meet in a fixed shuffle tree (dev::warp_sum). At one row, one pass over the weights; at 2-8 rows
// per pass the staged form (bf16_gemv_pair_rows_kernel) reads the block's x rows from shared memory. Either way every
// x row takes the same operations in the same order, so a row's result does not depend on the call's row count
// (batch invariance), as in w8a16_gemv.cu.
#include "cuda/bf16_gemv.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <utility>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/l2_policy.cuh"
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

// 16 bytes of x by an ordinary global load (ld.global.v4.u32, the load the compiler emitted), issued where it stands
// (asm volatile, as kv_cache.cu's load_here). Loaded in C++, the batch's x chunks left ptxas free to issue only 4 of
// the batch's 30 loads in <float, true> (the first step's 3 and one more; 8 in <float, false>), then the first step's
// FFMAs, which wait for them, and only then the other 26 (22): two dependent round trips per batch instead of one
// (SASS of sm_90a). Loading the weights through asm volatile instead changed nothing.
// With x loaded through this, all 30 loads of a batch are issued before the first instruction that reads one (132 ->
// 149 registers in <float, true>, no spills: 3 blocks per SM either way). The weights' loads are as they were, and so
// are the FMAs: the same bits. One row, weights cold in L2, graph replay (H100): the HCA pair (n 512, k 4096) 4.88 ->
// 4.50 us, the CSA pair (n 1024) 6.80 -> 6.22, V4.1's k 5120 5.58 -> 5.36.
__device__ __forceinline__ uint4 load_x_here(const bf16* p) {
  uint4 v;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__device__ __forceinline__ void store(float* y, int64_t i, float v) { y[i] = v; }
__device__ __forceinline__ void store(bf16* y, int64_t i, float v) { y[i] = __float2bfloat16_rn(v); }

// grid (x rows, row blocks, 2 matrices): the x rows of one weight row block are neighbours in launch order, so a
// weight tile read by the first row's block is still in L2 for the others (m > 1 only). kEvictFirst: the weights
// read evict_first in L2 (cuda/l2_policy.cuh; the same values).
template <class OutT, bool kEvictFirst>
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
  uint64_t policy = 0;
  if constexpr (kEvictFirst) policy = dev::l2_evict_first_policy();
  auto load_weights = [&](const bf16* p) {
    const uint4* q = reinterpret_cast<const uint4*>(p);
    if constexpr (kEvictFirst)
      return dev::ldg_with_policy(q, policy);
    else
      return __ldg(q);
  };

  // The batch's x chunks load with its weights, not one L1 round trip per step (load_x_here: all of them before the
  // batch's first FFMA).
  for (int c0 = lane * kChunk; c0 < a.k; c0 += kUnroll * kStepCols) {
    uint4 raw[kUnroll][kRowsPerWarp];
    uint4 xraw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kStepCols;
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr)
        raw[u][rr] = c < a.k ? load_weights(wr[rr] + c) : make_uint4(0, 0, 0, 0);
      xraw[u] = c < a.k ? load_x_here(x + c) : make_uint4(0, 0, 0, 0);
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

// The staged form, kRows (2..kBf16GemvRowsPerPass) x rows per pass over the weights: the one-row kernel's warps,
// steps and weight loads, but the block's x rows are copied into shared memory once (cp.async, all in flight) and
// each step reads its x chunks from there. The token-tiled form of session 13 loaded them from global memory inside
// the step loop, one dependent L1 round trip per step and row, and lost to cuBLAS at 8 rows (bench/gpu/NOTES.md
// "bf16 GEMV: measured, the default at one row"). The first batch of weight loads is issued before the staging's
// barrier. Per x row and weight row, a lane applies the same chunks in the same column order with the same fmaf
// operands as the one-row kernel, and the lanes meet in the same dev::warp_sum tree: a row's bits are the one-row
// kernel's. grid (row groups of kRows, row blocks, 2 matrices); dynamic shared memory kRows x k bf16.
template <class OutT, int kRows>
__global__ void __launch_bounds__(kGemvWarps * 32) bf16_gemv_pair_rows_kernel(const PairArgs a) {
  extern __shared__ uint4 xs[];  // [kRows][k / 8] chunks of 8 bf16
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = (int(blockIdx.y) * kGemvWarps + warp) * kRowsPerWarp;
  const bf16* w = blockIdx.z ? a.w[1] : a.w[0];
  if (r0 < a.n && lane < kRowsPerWarp)
    prefetch_l2_bulk(w + int64_t(min(r0 + lane, a.n - 1)) * a.ldw, unsigned(min(2 * a.k, kPrefetchRowBytes)));
  pdl_wait();  // x is the predecessor's; w may be too (gemm_bf16 is generic), so its loads follow as well
  const int row_chunks = a.k / kChunk;
  const int64_t t0 = int64_t(blockIdx.x) * kRows;
#pragma unroll
  for (int t = 0; t < kRows; ++t) {
    const bf16* x = a.x + (t0 + t) * a.ldx;
    for (int c = threadIdx.x; c < row_chunks; c += kGemvWarps * 32)
      dev::cp_async16(dev::smem_u32(xs + t * row_chunks + c), x + c * kChunk);
  }
  dev::cp_async_commit();
  // A warp past n (odd n) reads the last valid row, stores nothing and leaves after the barrier.
  const bf16* wr[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) wr[rr] = w + int64_t(min(r0 + rr, a.n - 1)) * a.ldw;
  uint4 raw[kUnroll][kRowsPerWarp];
  auto load_steps = [&](int c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kStepCols;
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr)
        raw[u][rr] = c < a.k ? *reinterpret_cast<const uint4*>(wr[rr] + c) : make_uint4(0, 0, 0, 0);
    }
  };
  // The first ten steps' weights are in flight while the x rows land: the staging's L2 round trip is not serial
  // with the weight stream's first one. Plain loads, not __ldg: ptxas sank the read-only (.nc) loads below the
  // barrier (SASS of sm_90a), a plain load stays above it.
  load_steps(lane * kChunk);
  dev::cp_async_wait<0>();
  __syncthreads();
  if (r0 >= a.n) return;  // warp-uniform, after the block's one barrier

  float acc[kRows][kRowsPerWarp];
#pragma unroll
  for (int t = 0; t < kRows; ++t)
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) acc[t][rr] = 0.0f;

  // The one-row kernel's loop with its loads rotated: apply a batch, then load the next. A lane whose first column
  // is past k (k < 256) applies nothing, as there.
  for (int c0 = lane * kChunk;;) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kStepCols;
      if (c >= a.k) break;  // as the one-row kernel
      float wf[kRowsPerWarp][kChunk];
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) bf16x8_to_float(raw[u][rr], wf[rr]);
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
        float xv[kChunk];
        bf16x8_to_float(xs[t * row_chunks + c / kChunk], xv);  // 512 contiguous bytes per warp: no bank conflict
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; ++rr)
#pragma unroll
          for (int e = 0; e < kChunk; ++e) acc[t][rr] = fmaf(wf[rr][e], xv[e], acc[t][rr]);
      }
    }
    c0 += kUnroll * kStepCols;
    if (c0 >= a.k) break;
    load_steps(c0);
  }
  pdl_launch_dependents();  // the weight stream is done; the reductions and stores remain

  OutT* y = static_cast<OutT*>(blockIdx.z ? a.y[1] : a.y[0]);
#pragma unroll
  for (int t = 0; t < kRows; ++t)
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const float v = dev::warp_sum(acc[t][rr]);
      if (lane == 0 && r0 + rr < a.n) store(y, (t0 + t) * a.ldy + r0 + rr, v);
    }
}

// Shared memory the staged form may take per block: 2 blocks per SM (of 228 KB); 8 rows of V4.1's 5120 columns
// are 80 KB.
constexpr int64_t kMaxStagedBytes = 96 << 10;

// Rows per pass for an m-row call at width k: 1 (the one-row kernel) at m = 1 or where two rows do not fit.
int rows_per_pass(int64_t m, int64_t k) {
  return int(std::min({m, kBf16GemvRowsPerPass, kMaxStagedBytes / (k * int64_t(sizeof(bf16)))}));
}

using GemvKernel = void (*)(const PairArgs);

// The staged form's kernel for `rows` (2..kBf16GemvRowsPerPass) rows per pass. Their shared memory limit is raised
// to kMaxStagedBytes once per device (a function attribute is per device; the engine drives each GPU from its own
// host thread): `raised` holds one bit per device.
template <class OutT, int... kRows>
GemvKernel rows_kernel(int rows, std::integer_sequence<int, kRows...>) {
  static const GemvKernel table[] = {bf16_gemv_pair_rows_kernel<OutT, kRows + 2>...};
  static std::atomic<uint64_t> raised{0};
  int device = 0;
  DI_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t(1) << (device % 64);
  if (!(raised.load(std::memory_order_acquire) & bit)) {
    for (GemvKernel k : table)
      DI_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxStagedBytes)));
    raised.fetch_or(bit, std::memory_order_release);
  }
  return table[rows - 2];
}

GemvKernel rows_kernel(OutType out, int rows) {
  constexpr auto kForms = std::make_integer_sequence<int, int(kBf16GemvRowsPerPass) - 1>{};  // 2..8
  return out == OutType::F32 ? rows_kernel<float>(rows, kForms) : rows_kernel<bf16>(rows, kForms);
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
  const unsigned row_blocks = unsigned((n + kRowsPerBlock - 1) / kRowsPerBlock);
  const size_t y_elem = out == OutType::F32 ? sizeof(float) : sizeof(bf16);
  // Rows [t0, t0 + groups x rows) in one launch: the one-row kernel at rows = 1, the staged form above.
  auto run = [&](int64_t t0, int64_t groups, int rows) {
    const int64_t y_off = t0 * ldy * int64_t(y_elem);
    const PairArgs a{x + t0 * ldx,
                     {w1, w2},
                     {static_cast<char*>(y1) + y_off, static_cast<char*>(y2) + y_off},
                     ldx, ldw, ldy, int(n), int(k)};
    if (rows == 1) {
      // evict_first (cuda/l2_policy.h) where one x row reads each weight byte once.
      const bool evict_first = dense_weights_evict_first() && groups == 1;
      auto kernel = out == OutType::F32 ? (evict_first ? bf16_gemv_pair_kernel<float, true>
                                                       : bf16_gemv_pair_kernel<float, false>)
                                        : (evict_first ? bf16_gemv_pair_kernel<bf16, true>
                                                       : bf16_gemv_pair_kernel<bf16, false>);
      DI_CUDA_CHECK(launch(kernel, dim3(unsigned(groups), row_blocks, products), dim3(kGemvWarps * 32), 0, stream, a));
    } else {
      DI_CUDA_CHECK(launch(rows_kernel(out, rows), dim3(unsigned(groups), row_blocks, products), dim3(kGemvWarps * 32),
                           size_t(rows) * size_t(k) * sizeof(bf16), stream, a));
    }
  };
  const int rows = rows_per_pass(m, k);
  if (rows <= 1) {
    run(0, m, 1);
    return;
  }
  const int64_t groups = m / rows, rest = m - groups * rows;
  run(0, groups, rows);
  if (rest > 0) run(groups * rows, 1, int(rest));
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
