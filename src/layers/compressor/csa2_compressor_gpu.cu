// The V4.1 CSA2 compressor on the GPU (model-spec.md §4 "Compressor (KV sources only)", §6), next to its CPU
// reference csa2_compressor.cpp (and the entry finish of V41Model::update_caches / csa2_index_key). Three
// stream-ordered steps per call:
//   1. kv = x . wkv^T (and gate = x . wgate^T for ratio 2) for every row (cuBLAS, bf16 in, fp32 out);
//   2. one block per row that closes a group: gather the group's rows (this call's projections, or the slot's
//      open-group state for rows of earlier calls), pool them, then the entry finish in shared memory: norm,
//      index key (wk GEMV, k_norm, RoPE, FP4 / ue8m0 / 32), KV entry (RoPE, FP4 / e4m3 / 16), and the bf16
//      writes into the two paged pools (decode calls copy wk into shared memory before the PDL wait);
//   3. save the rows of groups that stay open into the state.
// Step 3 runs after step 2 has read the state, so a state row is never overwritten before its last reader.
// Steps 2-3 launch with PDL (cuda/launch.h): each waits at its top, so that order holds.
//
// Numerics follow the CPU reference operation by operation so that most entries come out bit-identical: the
// softmax pooling, the norms' sums of squares and the wk dot products run in double like csa2_compress_token /
// rms_norm / matmul_nt (they are a handful of values per entry), the rest in fp32 with the _rn intrinsics
// (no FMA contraction). What still differs is the cuBLAS fp32 accumulation of step 1 against the CPU's double
// dot products (~1e-7 relative before the bf16 / FP4 roundings).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda/blas.h"
#include "cuda/check.h"
#include "cuda/launch.h"
#include "cuda/mbarrier.cuh"
#include "layers/compressor/csa2_compressor_gpu.h"
#include "layers/compressor/entry_finish.cuh"
#include "layers/compressor/push_rows.cuh"

namespace deepinfer::cuda {

namespace {

using push::align256;
using push::kEntryThreads;

constexpr int kMaxRatio = 2;  // model-spec §1.2: the V4.1 compress ratios are 2 and 1

struct PushArgs : push::PushRows {  // kv: [rows, dim]; gate: [rows, dim], ratio 2 only
  float* open_kv;
  float* open_gate;
  int ratio, dim, index_dim;
  const float* norm;
  const bf16* wk;
  const float* k_norm;
  Csa2EntryFinish finish;
  PagedPool kv_out, key_out;
};

// Sum over the whole block in double, returned to every thread (fixed order: warp tree, then the warps in order).
// `scratch` holds 32 doubles.
__device__ __forceinline__ double block_sum_f64(double v, double* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, warps = int(blockDim.x) / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  __syncthreads();  // scratch may be reused after the return
  return total;
}

// rms_norm (layers/norm_rope/rms_norm.cpp) in place: the sum of squares in double, r = 1 / sqrt(float(ss / n) + eps)
// in fp32, y = w * (x * r) without a bf16 cast after it.
__device__ __forceinline__ void rms_norm_inplace(float* v, int n, const float* __restrict__ weight, float eps,
                                                 double* scratch) {
  double ss = 0.0;
  for (int d = int(threadIdx.x); d < n; d += int(blockDim.x)) ss += double(v[d]) * double(v[d]);
  ss = block_sum_f64(ss, scratch);
  const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(float(ss / double(n)), eps)));
  for (int d = int(threadIdx.x); d < n; d += int(blockDim.x)) v[d] = __fmul_rn(weight[d], __fmul_rn(v[d], r));
  __syncthreads();
}

// FP4 fake-quant of v[0, n), n % 16 == 0, with one e4m3 scale per 16 values (fp4_fake_quant with Fp4Scale::E4M3,
// the V4.1 compressed-KV format): scale = e4m3(max(amax, 6 * 2^-9) / 6), v = e2m1(v / scale) * scale. Each
// half-warp owns one block of 16; the xor shuffles below 16 stay inside the half. With `rec` (block-uniform; n ==
// kvrec41::kDim) also the packed entry record of the same codes and scales (layers/attention/kv_record.h kvrec41):
// lane pairs (2j, 2j + 1) of a half make byte j of the block's 8 code bytes, the half's first lane the scale byte.
__device__ __forceinline__ void fp4_e4m3_block16(float* v, int n, uint8_t* rec) {
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, warps = int(blockDim.x) / 32;
  const int blocks = n / kCsa2KvFp4Block;
  const float floor_amax = 6.0f / 512.0f;  // 6 * 2^-9, exact
  for (int b0 = 2 * warp; b0 < blocks; b0 += 2 * warps) {  // warp-uniform trip count: every lane shuffles
    const int b = b0 + lane / 16;
    const bool has = b < blocks;
    const float x = has ? v[b * kCsa2KvFp4Block + lane % 16] : 0.0f;
    float amax = fabsf(x);
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    const float scale = finish::round_e4m3(__fdiv_rn(fmaxf(amax, floor_amax), 6.0f));
    const float q = finish::round_e2m1(__fdiv_rn(x, scale));
    if (has) v[b * kCsa2KvFp4Block + lane % 16] = __fmul_rn(q, scale);
    if (rec) {  // block-uniform
      const uint32_t code = kvrec41::e2m1_code(q);
      const uint32_t high = __shfl_xor_sync(0xFFFFFFFFu, code, 1);  // the odd channel's code, for the even lane
      if (has && lane % 2 == 0)
        rec[kvrec41::kEntryCodes + (b * kCsa2KvFp4Block + lane % 16) / 2] = uint8_t(code | (high << 4));
      if (has && lane % 16 == 0) rec[kvrec41::kEntryScales + b] = kvrec::e4m3_code(scale);  // exact: an e4m3 number
    }
  }
  __syncthreads();
}

// The entry kernel's dynamic shared memory: wk's bytes where it is staged (kStageWk), then the entry's floats
// (latent [dim], key [index_dim]) and the small weights staged before the PDL wait (norm [dim], k_norm [index_dim],
// inv_freq [rope_dim / 2]).
__host__ __device__ inline size_t entry_wk_bytes(int index_dim, int dim) {
  return size_t(index_dim) * size_t(dim) * sizeof(bf16);
}
__host__ __device__ inline size_t entry_smem_bytes(bool stage_wk, int index_dim, int dim, int rope_dim) {
  return (stage_wk ? entry_wk_bytes(index_dim, dim) : 0) +
         size_t(2 * dim + 2 * index_dim + rope_dim / 2) * sizeof(float);
}
constexpr uint32_t kWkCopyChunk = 32768;   // bytes per bulk copy of wk (a multiple of 16)
constexpr int kEntrySmemCap = 227 * 1024;  // sm_90's largest dynamic shared memory per block
// Calls of at most this many rows stage wk: one block per row, at most one per SM of an H200 (132), so its shared
// memory costs no occupancy. Larger calls (prefill) read wk from global memory (L2) with many blocks per SM.
constexpr int kStageWkMaxRows = 128;

// The index key's GEMV, key[o] = wk[o] . latent for o < index_dim (wk in shared or global memory): one warp per output
// (warp w takes outputs w, w + warps, ...), lane l the channels l, l + 32, ... in order, as double sums of the exact
// products (an fp32 x bf16 product fits a double's mantissa), then the xor tree over the lanes. kOut outputs of a
// warp run side by side, each with its own chain in the same order, so a key's bits do not depend on kOut.
template <int kOut>
__device__ __forceinline__ void index_key_gemv(const bf16* __restrict__ wk, const float* __restrict__ latent,
                                               float* __restrict__ key, int index_dim, int dim) {
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, warps = int(blockDim.x) / 32;
  for (int o0 = warp; o0 < index_dim; o0 += kOut * warps) {
    double acc[kOut];
#pragma unroll
    for (int j = 0; j < kOut; ++j) acc[j] = 0.0;
    for (int d = lane; d < dim; d += 32) {
      const double x = double(latent[d]);
#pragma unroll
      for (int j = 0; j < kOut; ++j) {
        const int o = o0 + j * warps;
        if (o < index_dim) acc[j] += x * double(__bfloat162float(wk[int64_t(o) * dim + d]));
      }
    }
#pragma unroll
    for (int j = 0; j < kOut; ++j) {
#pragma unroll
      for (int s = 16; s > 0; s >>= 1) acc[j] += __shfl_xor_sync(0xFFFFFFFFu, acc[j], s);
      const int o = o0 + j * warps;
      if (lane == 0 && o < index_dim) key[o] = float(acc[j]);
    }
  }
}

// One block per row; rows that do not close a group leave at once (the whole block agrees), once wk's copy has
// landed where it is staged.
//
// The kernel is a chain of dependent memory round trips on its layer's critical path (the select that follows
// reads the new key), each ~1-2 us under the step's weight streams: run 162's trace has the ratio-1 source's entry at
// ~42 us, this kernel with only wk staged at ~23 us (run 184; bench/gpu/NOTES.md "Session 33"). So everything that
// is a weight is read before pdl_wait (cuda/launch.h): the small ones (norm, k_norm, inv_freq) by every thread into
// shared memory, wk (kStageWk: V4.1's 128 x 512 bf16, 128 KB, read whole by the index key's GEMV) by thread 0's bulk
// copies; and after the wait three round trips remain: the row's position and slot, then the group's rows and the
// two pool rows of the entry together, then the projections.
template <bool kStageWk>
__global__ void __launch_bounds__(kEntryThreads) csa2_entry_kernel(PushArgs a) {
  extern __shared__ __align__(16) unsigned char entry_smem[];
  const size_t wk_bytes = kStageWk ? entry_wk_bytes(a.index_dim, a.dim) : 0;
  const bf16* wk = kStageWk ? reinterpret_cast<const bf16*>(entry_smem) : a.wk;  // [index_dim, dim]
  float* latent = reinterpret_cast<float*>(entry_smem + wk_bytes);              // [dim]
  float* key = latent + a.dim;                                                  // [index_dim]
  float* norm = key + a.index_dim;                                              // [dim]
  float* k_norm = norm + a.dim;                                                 // [index_dim]
  float* inv_freq = k_norm + a.index_dim;                                       // [rope_dim / 2]
  __shared__ const float* src_kv[kMaxRatio];
  __shared__ const float* src_gate[kMaxRatio];
  __shared__ int64_t kv_row, key_row;  // the entry's rows in the two pools (-1: dropped)
  __shared__ double scratch[32];
  __shared__ __align__(8) uint64_t wk_landed;

  const uint32_t bar = uint32_t(__cvta_generic_to_shared(&wk_landed));
  if constexpr (kStageWk) {
    if (threadIdx.x == 0) {
      dev::mbar_init(bar, 1);
      dev::mbar_fence_init();
      dev::mbar_arrive_expect_tx(bar, uint32_t(wk_bytes));
      const uint32_t dst = uint32_t(__cvta_generic_to_shared(entry_smem));
      const auto* src = reinterpret_cast<const unsigned char*>(a.wk);
      for (size_t off = 0; off < wk_bytes; off += kWkCopyChunk)
        dev::bulk_g2s(dst + uint32_t(off), src + off, uint32_t(min(size_t(kWkCopyChunk), wk_bytes - off)), bar);
    }
  }
  for (int d = int(threadIdx.x); d < a.dim; d += int(blockDim.x)) norm[d] = a.norm[d];
  for (int d = int(threadIdx.x); d < a.index_dim; d += int(blockDim.x)) k_norm[d] = a.k_norm[d];
  for (int i = int(threadIdx.x); i < a.finish.rope_dim / 2; i += int(blockDim.x)) inv_freq[i] = a.finish.inv_freq[i];

  pdl_wait();  // before the early return: every block waits (cuda/launch.h)
  const int r = int(blockIdx.x);
  const auto [slot, e, group_start] = push::closed_entry(a, r, a.ratio);
  if (e < 0) {
    if constexpr (kStageWk) {  // no bulk copy may write the block's memory after it exits
      __syncthreads();        // the barrier's init (thread 0) before any other thread waits on it
      dev::mbar_wait(bar, 0);
    }
    return;
  }

  // The group's rows in position order: a row of this call (push::call_row), or else one of the slot's open-group
  // state (saved by an earlier call); and the entry's pool rows (page-table reads), by threads of other warps so
  // that all of these loads are in flight together.
  const int tid = int(threadIdx.x);
  if (tid < a.ratio) {
    const int p = group_start + tid;
    const int rr = push::call_row(a, r, p);
    if (rr >= 0) {
      src_kv[tid] = a.kv + int64_t(rr) * a.dim;
      src_gate[tid] = a.gate ? a.gate + int64_t(rr) * a.dim : nullptr;
    } else {
      const int64_t state_row = int64_t(slot) * a.ratio + p % a.ratio;
      src_kv[tid] = a.open_kv + state_row * a.dim;
      src_gate[tid] = a.open_gate + state_row * a.dim;
    }
  }
  if (tid == 32) kv_row = push::pool_row(a.kv_out, slot, e);
  if (tid == 64) key_row = push::pool_row(a.key_out, slot, e);
  __syncthreads();  // also: the barrier's init and the staged small weights before their readers

  // csa2_compress_token: ratio 1 takes the projection; ratio 2 pools with a channelwise softmax (double, like
  // the reference) and casts the pooled value to bf16 (the official code's cast before the norm).
  for (int d = tid; d < a.dim; d += int(blockDim.x)) {
    if (a.ratio == 1) {
      latent[d] = src_kv[0][d];
      continue;
    }
    float mx = -INFINITY;
    for (int j = 0; j < a.ratio; ++j) mx = fmaxf(mx, src_gate[j][d]);
    double den = 0.0, num = 0.0;
    for (int j = 0; j < a.ratio; ++j) {
      const double wgt = exp(double(src_gate[j][d]) - double(mx));
      den += wgt;
      num = __dadd_rn(num, __dmul_rn(wgt, double(src_kv[j][d])));  // rounded product, no FMA (as on the CPU)
    }
    latent[d] = finish::round_bf16(float(num / den));
  }
  pdl_launch_dependents();  // the group's rows are read; the finish runs in shared memory
  __syncthreads();
  rms_norm_inplace(latent, a.dim, norm, a.finish.norm_eps, scratch);

  // Index key (csa2_index_key): key = wk . latent, k_norm, RoPE at the group start, FP4 with ue8m0 scales per 32
  // (model-spec §4 "Compressor" (a)).
  if constexpr (kStageWk) dev::mbar_wait(bar, 0);
  index_key_gemv<4>(wk, latent, key, a.index_dim, a.dim);
  __syncthreads();
  rms_norm_inplace(key, a.index_dim, k_norm, a.finish.norm_eps, scratch);
  finish::rope_slice(key + a.index_dim - a.finish.rope_dim, a.finish.rope_dim, group_start, inv_freq);
  finish::fp4_ue8m0_block32(key, a.index_dim);

  // KV entry (model-spec §4 "Compressor" (b)): RoPE on the last rope_dim channels, FP4 with e4m3 scales per 16.
  finish::rope_slice(latent + a.dim - a.finish.rope_dim, a.finish.rope_dim, group_start, inv_freq);
  // The entry as bf16 values (write_entry_row below) or as the packed FP4 record (written by the quantization).
  uint8_t* record = nullptr;
  if (a.finish.kv_format == KvFormat::Fp4 && kv_row >= 0)
    record = a.kv_out.records + kv_row * kvrec41::kEntryRowBytes;
  fp4_e4m3_block16(latent, a.dim, record);

  if (a.finish.kv_format != KvFormat::Fp4) push::write_entry_row(a.kv_out, kv_row, latent, a.dim);
  push::write_entry_row(a.key_out, key_row, key, a.index_dim);
}

// Saves row r into its slot's open-group state unless the row closing its group (position g_end, g_end - pos
// rows later in the same run) is in this call: that row has pooled it already. So only the rows of a group still
// open at the end of the call are written, and no two blocks write one state row.
// The row's first batch is loaded with its position, before that test (push::save_row says why the loads come first).
// Its lines are also prefetched towards L1 there: ptxas sinks the loads past the test, whose branch holds their only
// uses, so they were issued only after the position's round trip (SASS).
__global__ void __launch_bounds__(push::kSaveThreads) csa2_save_kernel(PushArgs a) {
  pdl_wait();  // the entry kernel (the predecessor) reads the state rows written here
  pdl_launch_dependents();
  const int r = int(blockIdx.x);
  const int pos = a.positions[r];
  push::prefetch_batch(a, r, a.dim, 0);
  push::RowBatch first;
  push::load_batch(a, r, a.dim, 0, first);
  const int g_end = (pos / a.ratio) * a.ratio + a.ratio - 1;
  if (push::call_row(a, r, g_end) >= 0) return;
  push::save_row(a, r, a.dim, a.open_kv, a.open_gate, a.ratio, first);
}

}  // namespace

size_t csa2_compressor_state_floats(const Csa2CompressorGpu& w, int slots) {
  return w.ratio > 1 ? size_t(slots) * size_t(w.ratio) * size_t(w.dim) : 0;
}

size_t csa2_compressor_workspace_bytes(int rows, const Csa2CompressorGpu& w) {
  const size_t one = align256(size_t(std::max(rows, 0)) * size_t(w.dim) * sizeof(float));
  return w.ratio > 1 ? 2 * one : one;
}

void csa2_compressor_push(const bf16* x, const int32_t* slots, const int32_t* positions, int rows,
                          const Csa2CompressorGpu& w, const Csa2CompressorGpuState& state,
                          const Csa2EntryFinish& finish, const PagedPool& kv_out, const PagedPool& key_out,
                          void* workspace, cublasHandle_t blas, cudaStream_t stream) {
  DI_CHECK(w.ratio == 1 || w.ratio == 2,
           "cuda::csa2_compressor_push: ratio " + std::to_string(w.ratio) + " (V4.1 compresses by 2 or 1)");
  DI_CHECK(w.dim > 0 && w.dim <= 8192 && w.dim % kCsa2KvFp4Block == 0,
           "cuda::csa2_compressor_push: entry width " + std::to_string(w.dim) + " must be a multiple of " +
               std::to_string(kCsa2KvFp4Block) + ", at most 8192");
  DI_CHECK(w.index_dim > 0 && w.index_dim <= 8192 && w.index_dim % kIndexFp4Block == 0,
           "cuda::csa2_compressor_push: index key width " + std::to_string(w.index_dim) + " must be a multiple of " +
               std::to_string(kIndexFp4Block) + ", at most 8192");
  DI_CHECK(w.hidden > 0, "cuda::csa2_compressor_push: hidden must be positive");
  DI_CHECK(w.wkv && w.norm && w.wk && w.k_norm && (w.ratio == 1 || w.wgate),
           "cuda::csa2_compressor_push: missing weights (wkv, norm, wk, k_norm, and wgate for ratio 2)");
  DI_CHECK(finish.rope_dim >= 0 && finish.rope_dim % 2 == 0 && finish.rope_dim <= w.index_dim &&
               finish.rope_dim <= w.dim && (finish.rope_dim == 0 || finish.inv_freq),
           "cuda::csa2_compressor_push: rope_dim " + std::to_string(finish.rope_dim) +
               " must be even, at most the index key width, with inv_freq given");
  DI_CHECK(kv_out.width == w.dim && key_out.width == w.index_dim,
           "cuda::csa2_compressor_push: pool rows are " + std::to_string(kv_out.width) + " / " +
               std::to_string(key_out.width) + " wide, entries " + std::to_string(w.dim) + " / " +
               std::to_string(w.index_dim));
  DI_CHECK(finish.kv_format == KvFormat::Bf16 || (finish.kv_format == KvFormat::Fp4 && w.dim == kvrec41::kDim),
           std::string("cuda::csa2_compressor_push: compressed-KV rows of ") + kv_format_name(finish.kv_format) +
               " with entry width " + std::to_string(w.dim) + " (bf16 rows, or FP4 records of " +
               std::to_string(kvrec41::kDim) + " channels)");
  DI_CHECK((finish.kv_format == KvFormat::Fp4 ? kv_out.records != nullptr : kv_out.pool != nullptr) &&
               kv_out.page_table && kv_out.page_size > 0 && kv_out.max_pages > 0 && key_out.pool &&
               key_out.page_table && key_out.page_size > 0 && key_out.max_pages > 0,
           "cuda::csa2_compressor_push: an output pool has no pages");
  DI_CHECK(w.ratio == 1 || (state.open_kv && state.open_gate),
           "cuda::csa2_compressor_push: the open-group state is not allocated");
  DI_CHECK(rows >= 0, "cuda::csa2_compressor_push: negative row count");
  if (rows == 0) return;

  float* kv = static_cast<float*>(workspace);
  float* gate = w.ratio > 1 ? reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                                       align256(size_t(rows) * size_t(w.dim) * sizeof(float)))
                            : nullptr;
  // kv = wkv x, gate = wgate x (model-spec §4: fp32 out of the bf16 weights; no ape in V4.1).
  if (gate)  // one call where the layout allows (blas.h gemm_bf16_pair)
    gemm_bf16_pair(blas, x, w.hidden, w.wkv, w.wgate, w.hidden, kv, gate, OutType::F32, w.dim, rows, w.dim, w.hidden,
                   stream);
  else
    gemm_bf16(blas, x, w.hidden, w.wkv, w.hidden, kv, OutType::F32, w.dim, rows, w.dim, w.hidden, stream);

  PushArgs a;
  static_cast<push::PushRows&>(a) = {kv, gate, slots, positions, rows};
  a.open_kv = state.open_kv;
  a.open_gate = state.open_gate;
  a.ratio = w.ratio;
  a.dim = w.dim;
  a.index_dim = w.index_dim;
  a.norm = w.norm;
  a.wk = w.wk;
  a.k_norm = w.k_norm;
  a.finish = finish;
  a.kv_out = kv_out;
  a.key_out = key_out;
  // Decode calls hold wk in shared memory where it fits (the bulk copies also need a 16-byte aligned source).
  const bool stage_wk = rows <= kStageWkMaxRows && reinterpret_cast<uintptr_t>(w.wk) % 16 == 0 &&
                        entry_smem_bytes(true, w.index_dim, w.dim, finish.rope_dim) <= size_t(kEntrySmemCap);
  const size_t smem = entry_smem_bytes(stage_wk, w.index_dim, w.dim, finish.rope_dim);
  const auto entry = stage_wk ? csa2_entry_kernel<true> : csa2_entry_kernel<false>;
  if (smem > 48 * 1024)
    DI_CUDA_CHECK(cudaFuncSetAttribute(entry, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  DI_CUDA_CHECK(launch(entry, dim3(unsigned(rows)), dim3(kEntryThreads), smem, stream, a));
  if (w.ratio > 1)
    DI_CUDA_CHECK(launch(csa2_save_kernel, dim3(unsigned(rows)), dim3(push::kSaveThreads), 0, stream, a));
}

}  // namespace deepinfer::cuda
