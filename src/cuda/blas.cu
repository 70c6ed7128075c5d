// bf16 GEMMs: cuBLAS, or in batch-invariant mode (algorithms.md §4) a tensor-core tile kernel of our own.
//
// The invariant kernel: a 64x64 output tile per block of 4 warps (2 x 2, each 32 x 32), K in steps of 64 through a
// 3-stage cp.async pipeline into shared memory (128-byte rows, 16-byte chunk c of row r stored at chunk c ^ (r % 8)
// so that ldmatrix's 8 rows fall into 8 different bank groups), mma.sync m16n8k16 bf16 with fp32 accumulators.
// Every output element is the same chain of mma accumulations over K in ascending order whatever m, the tile's
// other rows (zero-filled past m) or its place in the grid: no split-K, one instruction shape, one tile shape.
#include "cuda/blas.h"

#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/numerics_mode.h"
#include "cuda/bf16_gemv.h"

namespace deepinfer::cuda {

namespace {

void check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuBLAS error ") + std::to_string(int(st)) + " (" + cublasGetStatusString(st) + ") in " +
                what);
}

namespace inv {

constexpr int kBM = 64, kBN = 64, kBK = 64;  // kBK bf16 = 128 bytes = 8 chunks of 16 bytes per tile row
constexpr int kStages = 3;
constexpr int kThreads = 128;
constexpr int kRowBytes = kBK * 2;
constexpr int kTileBytes = kBM * kRowBytes;  // 8 KB (the A and B tiles are the same size)
constexpr int kSmemBytes = kStages * 2 * kTileBytes;

__device__ __forceinline__ uint32_t swz(int row, int ch) { return uint32_t(row * kRowBytes + ((ch ^ (row & 7)) << 4)); }

__device__ __forceinline__ void store(float* y, int64_t i, float v) { y[i] = v; }
__device__ __forceinline__ void store(bf16* y, int64_t i, float v) { y[i] = __float2bfloat16_rn(v); }

struct Args {
  const bf16* x;
  const bf16* w;
  void* y;
  int64_t ldx, ldw, ldy;
  int64_t stride_x, stride_w, stride_y;
  int m, n, k;
};

template <class OutT>
__global__ void __launch_bounds__(kThreads) gemm_bf16_invariant_kernel(Args a) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* sA = smem;
  uint8_t* sB = smem + kStages * kTileBytes;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp / 2, wn = warp % 2;  // this warp's 32 x 32 quarter of the tile
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int64_t batch = blockIdx.z;
  const bf16* x = a.x + batch * a.stride_x;
  const bf16* w = a.w + batch * a.stride_w;
  OutT* y = static_cast<OutT*>(a.y) + batch * a.stride_y;
  const int k_tiles = (a.k + kBK - 1) / kBK;

  // 512 chunks per tile, 4 per thread; rows past m / n and chunks past k are zero-filled.
  auto load_tile = [&](int kt, int stage) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int id = tid + i * kThreads;
      const int row = id / 8, ch = id % 8;
      const int kc = kt * kBK + ch * 8;
      const bool k_in = kc < a.k;
      const int gm = m0 + row, gn = n0 + row;
      const bool a_in = k_in && gm < a.m, b_in = k_in && gn < a.n;
      dev::cp_async16(dev::smem_u32(sA + stage * kTileBytes + swz(row, ch)), a_in ? x + gm * a.ldx + kc : x,
                      a_in ? 16 : 0);
      dev::cp_async16(dev::smem_u32(sB + stage * kTileBytes + swz(row, ch)), b_in ? w + gn * a.ldw + kc : w,
                      b_in ? 16 : 0);
    }
  };

  float acc[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_tile(s, s);
    dev::cp_async_commit();
  }

  for (int kt = 0; kt < k_tiles; ++kt) {
    dev::cp_async_wait<kStages - 2>();  // tile kt has landed (this thread's copies)
    __syncthreads();                    // ... everyone's; and everyone is done with tile kt - 1's stage
    if (kt + kStages - 1 < k_tiles) load_tile(kt + kStages - 1, (kt + kStages - 1) % kStages);
    dev::cp_async_commit();

    const uint8_t* tA = sA + (kt % kStages) * kTileBytes;
    const uint8_t* tB = sB + (kt % kStages) * kTileBytes;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      const int ch0 = kk * 2;
      uint32_t af[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
        dev::ldmatrix_x4(dev::smem_u32(tA + swz(wm * 32 + i * 16 + lane % 16, ch0 + lane / 16)), af[i][0], af[i][1],
                         af[i][2], af[i][3]);
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        const int col = wn * 32 + np * 16 + (lane % 8) + 8 * (lane / 16);
        uint32_t b0, b1, b2, b3;
        dev::ldmatrix_x4(dev::smem_u32(tB + swz(col, ch0 + (lane / 8) % 2)), b0, b1, b2, b3);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          dev::mma_bf16_m16n8k16(acc[i][2 * np], af[i][0], af[i][1], af[i][2], af[i][3], b0, b1);
          dev::mma_bf16_m16n8k16(acc[i][2 * np + 1], af[i][0], af[i][1], af[i][2], af[i][3], b2, b3);
        }
      }
    }
  }
  dev::cp_async_wait<0>();

  // Accumulator fragment: elements 0, 1 at (row g, columns 2c, 2c + 1), elements 2, 3 at row g + 8.
  const int g = lane / 4, c = lane % 4;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = m0 + wm * 32 + i * 16 + g + (e >= 2 ? 8 : 0);
        const int col = n0 + wn * 32 + j * 8 + 2 * c + (e & 1);
        if (row < a.m && col < a.n) store(y, row * a.ldy + col, acc[i][j][e]);
      }
}

template <class OutT>
void launch(const Args& a, int batch, cudaStream_t stream) {
  auto kernel = gemm_bf16_invariant_kernel<OutT>;
  DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const dim3 grid(unsigned((a.n + kBN - 1) / kBN), unsigned((a.m + kBM - 1) / kBM), unsigned(batch));
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(a);
  DI_CUDA_CHECK_LAUNCH("gemm_bf16_invariant_kernel");
}

}  // namespace inv

}  // namespace

BlasHandle::BlasHandle() {
  check(cublasCreate(&handle_), "cublasCreate");
  // bf16 operands: the tensor cores form exact products and accumulate in fp32 (TF32 concerns fp32 operands
  // only), so the default math mode keeps the CPU reference's numerics up to summation order.
  check(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  // A workspace of our own: cuBLAS then never allocates during a CUDA graph capture of a model step.
  if (cudaMalloc(&workspace_, kWorkspaceBytes) != cudaSuccess) throw Error("cuBLAS: cannot allocate its workspace");
  check(cublasSetWorkspace(handle_, workspace_, kWorkspaceBytes), "cublasSetWorkspace");
}

BlasHandle::~BlasHandle() {
  if (handle_) cublasDestroy(handle_);
  if (workspace_) cudaFree(workspace_);
}

void gemm_bf16_invariant(const bf16* x, int64_t ldx, const bf16* w, int64_t ldw, void* y, OutType out, int64_t ldy,
                         int64_t m, int64_t n, int64_t k, cudaStream_t stream, int batch, int64_t stride_x,
                         int64_t stride_w, int64_t stride_y) {
  if (m == 0 || n == 0 || batch == 0) return;
  const std::string shape = "[" + std::to_string(m) + ", " + std::to_string(k) + "] x [" + std::to_string(n) + ", " +
                            std::to_string(k) + "]^T";
  // 16-byte copies of the operand rows: every row start (and batch entry) must be 16-byte aligned.
  DI_CHECK(k > 0 && k % 8 == 0, "cuda::gemm_bf16 (batch-invariant): k of " + shape + " must be a multiple of 8");
  DI_CHECK(ldx % 8 == 0 && ldw % 8 == 0 && ldx >= k && ldw >= k && ldy >= n,
           "cuda::gemm_bf16 (batch-invariant): row strides ldx = " + std::to_string(ldx) + ", ldw = " +
               std::to_string(ldw) + " must be multiples of 8 and >= k, ldy = " + std::to_string(ldy) + " >= n, for " +
               shape);
  DI_CHECK(batch == 1 || (stride_x % 8 == 0 && stride_w % 8 == 0),
           "cuda::gemm_bf16 (batch-invariant): batch strides must be multiples of 8 elements");
  DI_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0,
           "cuda::gemm_bf16 (batch-invariant): x and w must be 16-byte aligned");
  DI_CHECK(m < (int64_t(1) << 31) / 2 && n < (int64_t(1) << 31) && k < (int64_t(1) << 31) && batch <= 65535 &&
               (m + inv::kBM - 1) / inv::kBM <= 65535,
           "cuda::gemm_bf16 (batch-invariant): " + shape + " too large");
  const inv::Args a{x, w, y, ldx, ldw, ldy, stride_x, stride_w, stride_y, int(m), int(n), int(k)};
  if (out == OutType::F32)
    inv::launch<float>(a, batch, stream);
  else
    inv::launch<bf16>(a, batch, stream);
}

void gemm_bf16(cublasHandle_t blas, const bf16* x, int64_t ldx, const bf16* w, int64_t ldw, void* y, OutType out,
               int64_t ldy, int64_t m, int64_t n, int64_t k, cudaStream_t stream, int batch, int64_t stride_x,
               int64_t stride_w, int64_t stride_y) {
  if (m == 0 || n == 0) return;
  if (batch_invariant()) {
    gemm_bf16_invariant(x, ldx, w, ldw, y, out, ldy, m, n, k, stream, batch, stride_x, stride_w, stride_y);
    return;
  }
  // Up to kBf16GemvMaxRows rows, one product, weights up to kBf16GemvMaxWeights: the decode GEMV (cuda/bf16_gemv.h),
  // which spreads the weight rows over the SMs where cuBLAS's small-m tiles need a split-K pair of launches.
  if (batch == 1 && m <= kBf16GemvMaxRows && n * k <= kBf16GemvMaxWeights && bf16_gemv_enabled() &&
      bf16_gemv_pair_fits(x, ldx, w, w, ldw, m, n, k)) {
    bf16_gemv(x, ldx, w, ldw, y, out, ldy, m, n, k, stream);
    return;
  }
  check(cublasSetStream(blas, stream), "cublasSetStream");
  const float one = 1.0f, zero = 0.0f;
  const cudaDataType_t ytype = out == OutType::F32 ? CUDA_R_32F : CUDA_R_16BF;
  // Column-major view: Y^T [n, m] = W [n, k] (W^T stored as k x n with ld ldw, transposed) . X^T [k, m].
  check(cublasGemmStridedBatchedEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &one, w, CUDA_R_16BF,
                                   int(ldw), stride_w, x, CUDA_R_16BF, int(ldx), stride_x, &zero, y, ytype, int(ldy),
                                   stride_y, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx (bf16)");
}

void gemm_bf16_pair(cublasHandle_t blas, const bf16* x, int64_t ldx, const bf16* w1, const bf16* w2, int64_t ldw,
                    void* y1, void* y2, OutType out, int64_t ldy, int64_t m, int64_t n, int64_t k,
                    cudaStream_t stream) {
  static const bool paired = [] {
    const char* v = std::getenv("DEEPINFER_GEMM_PAIR");
    return !(v && std::string(v) == "0");
  }();
  // The decode GEMV up to kBf16GemvMaxRows rows (cuda/bf16_gemv.h: faster than cuBLAS at 1, 2 and 4 rows on the
  // compressors' shapes, slower at 8, run 92; bench/gpu/NOTES.md "bf16 GEMV for the compressor pair"): cuBLAS's tile
  // there streams the pair's weights through n / 64 x 2 blocks. Not in batch-invariant mode, where gemm_bf16's
  // invariant kernel runs for every row count.
  if (m <= kBf16GemvMaxRows && !batch_invariant() && bf16_gemv_enabled() &&
      bf16_gemv_pair_fits(x, ldx, w1, w2, ldw, m, n, k)) {
    bf16_gemv_pair(x, ldx, w1, w2, ldw, y1, y2, out, ldy, m, n, k, stream);
    return;
  }
  const size_t y_bytes = out == OutType::F32 ? sizeof(float) : sizeof(bf16);
  const auto w_gap = reinterpret_cast<intptr_t>(w2) - reinterpret_cast<intptr_t>(w1);
  const auto y_gap = reinterpret_cast<intptr_t>(y2) - reinterpret_cast<intptr_t>(y1);
  if (paired && w_gap > 0 && y_gap > 0 && w_gap % 16 == 0 && y_gap % 16 == 0) {
    gemm_bf16(blas, x, ldx, w1, ldw, y1, out, ldy, m, n, k, stream, 2, 0, int64_t(w_gap / intptr_t(sizeof(bf16))),
              int64_t(y_gap / intptr_t(y_bytes)));
    return;
  }
  gemm_bf16(blas, x, ldx, w1, ldw, y1, out, ldy, m, n, k, stream);
  gemm_bf16(blas, x, ldx, w2, ldw, y2, out, ldy, m, n, k, stream);
}

}  // namespace deepinfer::cuda
