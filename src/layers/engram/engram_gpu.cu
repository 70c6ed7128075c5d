// The V4.1 Engram memory on the GPU (model-spec.md §4 "Engram"), next to its CPU reference engram.cpp. Three
// stream-ordered steps:
//   1. gather: every 16-byte piece of a token's hash_heads table rows is copied into the FP8 activation rows of
//      the wkv GEMM, and every e8m0 row scale becomes its fp32 activation scale (the table's per-32 blocks are
//      exactly the GEMM's block-32 activation blocks);
//   2. kv = wkv . rows (the W8A8 FP8 GEMM, fp32 out): the hc keys, then the value;
//   3. one block per (token, stream): the three sums in double, the gate in fp32, the stream update and its bf16
//      rounding. Blocks own disjoint streams, so the update is in place.
// All three launch with PDL (cuda/launch.h), each waiting at its top.
#include <algorithm>
#include <cmath>
#include <string>

#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/launch.h"
#include "layers/engram/engram_gpu.h"

namespace deepinfer::cuda {

namespace {

constexpr int kRowScaleBlock = 32;  // model-spec §5: one e8m0 scale per 32 columns of a table row
constexpr int kGatherThreads = 256;
constexpr int kGateThreads = 256;

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// 16 table bytes at p. kAligned16: one 16-byte load; otherwise (a table read in place from a checkpoint shard,
// DEEPINFER_ENGRAM_TABLES=mapped: safetensors aligns a tensor to 8 bytes at best) four 4-byte pieces assembled
// from byte loads. The same bytes either way.
template <bool kAligned16>
__device__ __forceinline__ uint4 load_table_piece(const uint8_t* p) {
  if constexpr (kAligned16) {
    return *reinterpret_cast<const uint4*>(p);
  } else {
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      w[j] = uint32_t(p[4 * j]) | uint32_t(p[4 * j + 1]) << 8 | uint32_t(p[4 * j + 2]) << 16 |
             uint32_t(p[4 * j + 3]) << 24;
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// One thread per 16 bytes of the gathered activation [rows, hash_heads * dim]; the thread holding the first 16
// bytes of a 32-block also writes that block's scale.
template <bool kAligned16>
__global__ void engram_gather_kernel(const uint8_t* __restrict__ table, const uint8_t* __restrict__ table_scale,
                                     int64_t table_rows, int dim, int hash_heads, const int64_t* __restrict__ row_ids,
                                     int rows, uint8_t* __restrict__ q, float* __restrict__ xs) {
  pdl_wait();  // row_ids may be a predecessor's output; q / xs are still read by the previous layer's GEMM
  pdl_launch_dependents();
  const int pieces = dim / 16;
  const int64_t total = int64_t(rows) * hash_heads * pieces;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int piece = int(i % pieces);
    const int64_t rh = i / pieces;  // token * hash_heads + head: the head's slot in the concatenation
    const int64_t id = row_ids[rh];
    const bool valid = id >= 0 && id < table_rows;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (valid) v = load_table_piece<kAligned16>(table + id * dim + 16 * piece);
    reinterpret_cast<uint4*>(q + rh * dim)[piece] = v;
    if (piece % 2 == 0) {
      const int block = piece * 16 / kRowScaleBlock;
      xs[rh * (dim / kRowScaleBlock) + block] =
          valid ? dev::e8m0_to_float(table_scale[id * (dim / kRowScaleBlock) + block]) : __uint_as_float(0x7fc00000u);
    }
  }
}

struct Sums {
  double sim, xx, kk;
};

// Block-wide sums of the three, returned to every thread (fixed order: warp tree, then the warps in order).
__device__ __forceinline__ Sums block_sums(Sums v, Sums* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    v.sim += __shfl_xor_sync(0xFFFFFFFFu, v.sim, o);
    v.xx += __shfl_xor_sync(0xFFFFFFFFu, v.xx, o);
    v.kk += __shfl_xor_sync(0xFFFFFFFFu, v.kk, o);
  }
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, warps = int(blockDim.x) / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  Sums total{0.0, 0.0, 0.0};
  for (int w = 0; w < warps; ++w) {
    total.sim += scratch[w].sim;
    total.xx += scratch[w].xx;
    total.kk += scratch[w].kk;
  }
  return total;
}

// Block (token t, stream k): engram_apply's per-stream loop, operation by operation.
__global__ void __launch_bounds__(kGateThreads)
    engram_gate_kernel(bf16* __restrict__ X, const float* __restrict__ kv, const float* __restrict__ q_weight,
                       const float* __restrict__ k_weight, int hc, int64_t hidden, float eps) {
  __shared__ Sums scratch[kGateThreads / 32];
  pdl_wait();  // kv is the GEMM's output, X the residual streams
  const int64_t t = blockIdx.x / hc;
  const int k = int(blockIdx.x % hc);
  bf16* x = X + (t * hc + k) * hidden;
  const float* key = kv + t * (hc + 1) * hidden + int64_t(k) * hidden;
  const float* value = kv + t * (hc + 1) * hidden + int64_t(hc) * hidden;
  const float* qw = q_weight + int64_t(k) * hidden;
  const float* kw = k_weight + int64_t(k) * hidden;

  // sim += x * (qw * kw) * key with the fp32 weight product and two rounded double products (no FMA), like the
  // CPU; the squares of fp32 values are exact in double.
  Sums s{0.0, 0.0, 0.0};
  for (int64_t d = threadIdx.x; d < hidden; d += blockDim.x) {
    const double xd = double(__bfloat162float(x[d])), kd = double(key[d]);
    s.sim = __dadd_rn(s.sim, __dmul_rn(__dmul_rn(xd, double(__fmul_rn(qw[d], kw[d]))), kd));
    s.xx = __dadd_rn(s.xx, __dmul_rn(xd, xd));
    s.kk = __dadd_rn(s.kk, __dmul_rn(kd, kd));
  }
  s = block_sums(s, scratch);  // every thread has read its x values before any is written below
  pdl_launch_dependents();

  // Similarity of the stream and its key, both RMS-normalised, over sqrt(hidden) (model-spec §4).
  const double n = double(hidden), e = double(eps);
  const float rstd = __fmul_rn(float(__ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(__ddiv_rn(s.xx, n), e)))),
                               float(__ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(__ddiv_rn(s.kk, n), e)))));
  const float dv = __fdiv_rn(__fmul_rn(float(s.sim), rstd), __fsqrt_rn(float(hidden)));
  // Signed square root keeps the gate sensitive near zero; the 1e-6 floor keeps it finite. exp in double, rounded
  // once to fp32: the correctly rounded expf that the CPU's libm gives.
  const float signed_root = copysignf(__fsqrt_rn(fmaxf(fabsf(dv), 1e-6f)), dv);
  const float gate = __fdiv_rn(1.0f, __fadd_rn(1.0f, float(exp(double(-signed_root)))));
  for (int64_t d = threadIdx.x; d < hidden; d += blockDim.x)
    x[d] = __float2bfloat16_rn(__fadd_rn(__bfloat162float(x[d]), __fmul_rn(gate, value[d])));
}

struct Layout {
  uint8_t* q;
  float* xs;
  float* kv;
};

Layout layout(void* workspace, int rows, const EngramGpu& w) {
  const size_t k = size_t(w.hash_heads) * size_t(w.dim);
  char* p = static_cast<char*>(workspace);
  Layout l;
  l.q = reinterpret_cast<uint8_t*>(p);
  p += align256(size_t(rows) * k);
  l.xs = reinterpret_cast<float*>(p);
  p += align256(size_t(rows) * (k / kRowScaleBlock) * sizeof(float));
  l.kv = reinterpret_cast<float*>(p);
  return l;
}

}  // namespace

size_t engram_workspace_bytes(int rows, const EngramGpu& w) {
  const size_t r = size_t(std::max(rows, 0));
  const size_t k = size_t(w.hash_heads) * size_t(w.dim);
  return align256(r * k) + align256(r * (k / kRowScaleBlock) * sizeof(float)) +
         align256(r * size_t(w.hc + 1) * size_t(w.hidden) * sizeof(float));
}

void engram_apply(bf16* X, const int64_t* row_ids, int rows, const EngramGpu& w, float eps, void* workspace,
                  cudaStream_t stream) {
  DI_CHECK(w.dim > 0 && w.dim % kRowScaleBlock == 0 && w.hash_heads > 0 && w.table_rows > 0,
           "cuda::engram_apply: table rows of " + std::to_string(w.dim) + " values (a multiple of 32), " +
               std::to_string(w.hash_heads) + " hash heads and " + std::to_string(w.table_rows) +
               " table rows must be positive");
  DI_CHECK(w.table && w.table_scale, "cuda::engram_apply: the table and its scales are required");
  DI_CHECK(w.hc > 0 && w.hidden > 0 && w.q_weight && w.k_weight,
           "cuda::engram_apply: hc, hidden, q_weight and k_weight are required");
  DI_CHECK(w.wkv.block == kRowScaleBlock && w.wkv.k == int64_t(w.hash_heads) * w.dim &&
               w.wkv.n == int64_t(w.hc + 1) * w.hidden,
           "cuda::engram_apply: wkv is [" + std::to_string(w.wkv.n) + ", " + std::to_string(w.wkv.k) + "] with block " +
               std::to_string(w.wkv.block) + ", expected [" + std::to_string(int64_t(w.hc + 1) * w.hidden) + ", " +
               std::to_string(int64_t(w.hash_heads) * w.dim) + "] with block 32");
  DI_CHECK(rows >= 0, "cuda::engram_apply: negative row count");
  if (rows == 0) return;

  const Layout l = layout(workspace, rows, w);
  const int64_t pieces = int64_t(rows) * w.hash_heads * (w.dim / 16);
  const int64_t blocks = std::min<int64_t>((pieces + kGatherThreads - 1) / kGatherThreads, 4096);
  // Rows start at multiples of dim (a multiple of 32), so the table's own alignment is every row's.
  const bool aligned16 = reinterpret_cast<uintptr_t>(w.table) % 16 == 0;
  DI_CUDA_CHECK(launch(aligned16 ? engram_gather_kernel<true> : engram_gather_kernel<false>, dim3(unsigned(blocks)),
                       dim3(kGatherThreads), 0, stream, w.table,
                       w.table_scale, w.table_rows, w.dim, w.hash_heads, row_ids, rows, l.q, l.xs));
  fp8_gemm(l.q, l.xs, rows, w.wkv, l.kv, OutType::F32, stream);
  DI_CUDA_CHECK(launch(engram_gate_kernel, dim3(unsigned(int64_t(rows) * w.hc)), dim3(kGateThreads), 0, stream, X,
                       l.kv, w.q_weight, w.k_weight, w.hc, w.hidden, eps));
}

}  // namespace deepinfer::cuda
