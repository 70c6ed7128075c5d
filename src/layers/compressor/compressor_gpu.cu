// The V4 compressor on the GPU (model-spec.md §3 "Compressor", §6), next to its CPU reference
// v4_compressor.cpp. Four stream-ordered steps per call:
//   1. kv = x . wkv^T and gate = x . wgate^T for every row (cuBLAS, bf16 in, fp32 out) into the workspace;
//   2. gate += ape[pos % ratio];
//   3. one block per row that closes a group: gather the pooled rows (this call's projections, or the slot's
//      ring for rows of earlier calls), channelwise fp32 softmax pooling, then the entry finish (bf16 round,
//      RMSNorm, RoPE, FP8 / Hadamard + FP4) and the bf16 write into the paged pool;
//   4. copy the rows later calls may need into the ring.
// Step 4 runs after step 3 has read the ring, so a ring row is never overwritten before its last reader.
// Steps 2-4 launch with PDL (cuda/launch.h): each waits at its top, so step 4's ring writes still follow step 3's
// ring reads (the wait is for the predecessor's completion), and step 2 follows cuBLAS's gate GEMM.
#include <algorithm>
#include <cmath>
#include <string>

#include "cuda/blas.h"
#include "cuda/check.h"
#include "cuda/launch.h"
#include "layers/compressor/compressor_gpu.h"
#include "layers/compressor/entry_finish.cuh"
#include "layers/compressor/push_rows.cuh"

namespace deepinfer::cuda {

namespace {

using push::align256;
using push::kEntryThreads;

// Rows pooled into one entry: 2 * ratio when overlapping (CSA: 8), ratio otherwise (HCA: 128).
constexpr int kMaxPooledRows = 256;

struct PushArgs : push::PushRows {  // kv, gate: [rows, width], the gate with ape included
  float* ring_kv;
  float* ring_gate;
  int ring_rows;
  int ratio, dim, width;
  bool overlap;
  const float* norm;
  EntryFinish finish;
  PagedPool out;
};

// Thread c of block (x, y) takes column blockIdx.x * kApeThreads + c of rows y, y + gridDim.y, ...: the row and the
// column come from the grid, not from a flat index. The flat grid-stride form took, ahead of the first load, the
// loop's 64-bit trip count and the row's 64-bit division by the width (a div_u64 / div_s64 call or the 32-bit
// paths, ~60 dependent instructions on the batch-1 path; SASS). The same addition on the same values.
constexpr int kApeThreads = 256;
__global__ void __launch_bounds__(kApeThreads) add_ape_kernel(float* __restrict__ gate,
                                                              const int32_t* __restrict__ positions,
                                                              const float* __restrict__ ape, int rows, int width,
                                                              int ratio) {
  pdl_wait();
  pdl_launch_dependents();
  const int c = int(blockIdx.x) * kApeThreads + int(threadIdx.x);
  if (c >= width) return;
#pragma unroll 1
  for (int r = int(blockIdx.y); r < rows; r += int(gridDim.y)) {
    const int64_t i = int64_t(r) * width + c;
    gate[i] += ape[int64_t(positions[r] % ratio) * width + c];
  }
}

// One block per row; rows that do not close a group leave at once (the whole block agrees).
__global__ void __launch_bounds__(kEntryThreads) compressor_entry_kernel(PushArgs a) {
  extern __shared__ float entry[];  // [dim]
  __shared__ const float* src_kv[kMaxPooledRows];
  __shared__ const float* src_gate[kMaxPooledRows];
  __shared__ float scratch[32];

  // The finish's weights (the norm's, the RoPE frequencies: read before pdl_wait, cuda/launch.h) and, once the entry
  // is known, its page-table entry start towards L1 here: read where they are used, each was a round trip of its own
  // after a block barrier on the path of a row that closes an entry (SASS: the norm's loads after the sum's barrier,
  // inv_freq's after the next, the page table's after the finish), as csa2_entry_kernel avoids by staging them.
#pragma unroll 1
  for (int d = int(threadIdx.x); d < a.dim; d += kEntryThreads) prefetch_l1(a.norm + d);
  if (int(threadIdx.x) < a.finish.rope_dim / 2) prefetch_l1(a.finish.inv_freq + threadIdx.x);
  pdl_wait();  // before the early return: every block waits (cuda/launch.h)
  const int r = int(blockIdx.x);
  const auto [slot, e, group_start] = push::closed_entry(a, r, a.ratio);
  if (e < 0) return;
  if (threadIdx.x == 0) push::prefetch_pool_row(a.out, slot, e);
  const int n_pool = a.overlap ? 2 * a.ratio : a.ratio;

  // The pooled rows in position order. Overlap (model-spec §3 CSA): j < ratio is the Ca half (channels
  // [0, dim)) of group e-1, j >= ratio the Cb half (channels [dim, 2 dim)) of group e. A row of this call
  // (push::call_row), or else one of the slot's ring.
  for (int j = int(threadIdx.x); j < n_pool; j += int(blockDim.x)) {
    const bool ca = a.overlap && j < a.ratio;
    const int p = a.overlap ? group_start - a.ratio + j : group_start + j;
    if (p < 0) {  // entry 0 has no previous group: its Ca rows are skipped below (weight 0)
      src_kv[j] = nullptr;
      src_gate[j] = nullptr;
      continue;
    }
    const int channel0 = a.overlap && !ca ? a.dim : 0;
    const int rr = push::call_row(a, r, p);
    const float *kv, *gate;
    if (rr >= 0) {
      kv = a.kv + int64_t(rr) * a.width;
      gate = a.gate + int64_t(rr) * a.width;
    } else {
      const int64_t ring_row = int64_t(slot) * a.ring_rows + p % a.ring_rows;
      kv = a.ring_kv + ring_row * a.width;
      gate = a.ring_gate + ring_row * a.width;
    }
    src_kv[j] = kv + channel0;
    src_gate[j] = gate + channel0;
  }
  __syncthreads();

  // Channelwise softmax over the pooled rows in fp32 (model-spec §8: "the compressor softmax runs in fp32"),
  // then the bf16 cast of the official code (v4_compressor_push with bf16_pooled).
  const int j0 = a.overlap && e == 0 ? a.ratio : 0;
  float ss = 0.0f;
  for (int d = int(threadIdx.x); d < a.dim; d += int(blockDim.x)) {
    float mx = -INFINITY;
    for (int j = j0; j < n_pool; ++j) mx = fmaxf(mx, src_gate[j][d]);
    float den = 0.0f, num = 0.0f;
    for (int j = j0; j < n_pool; ++j) {
      const float wgt = expf(src_gate[j][d] - mx);
      den += wgt;
      num += wgt * src_kv[j][d];
    }
    const float pooled = finish::round_bf16(num / den);
    entry[d] = pooled;
    ss += pooled * pooled;
  }
  pdl_launch_dependents();  // the pooled rows are read; the finish runs in shared memory
  // RMSNorm in fp32 without a bf16 cast after it (rms_norm: y = w * (x * r), r = 1 / sqrt(mean(x^2) + eps)).
  ss = finish::block_sum(ss, scratch);
  const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, float(a.dim)), a.finish.norm_eps)));
  for (int d = int(threadIdx.x); d < a.dim; d += int(blockDim.x)) entry[d] = __fmul_rn(a.norm[d], __fmul_rn(entry[d], rs));
  __syncthreads();

  finish::rope_slice(entry + a.dim - a.finish.rope_dim, a.finish.rope_dim, group_start, a.finish.inv_freq);
  if (a.finish.format == EntryFormat::KvFp8Record) {  // block-uniform; the host checked the record's shape
    const int64_t row = push::pool_row(a.out, slot, e);
    if (row >= 0) finish::fp8_record_block64(entry, a.out.records + row * kvrec::kRowBytes);
    return;
  }
  if (a.finish.format == EntryFormat::KvFp8) {
    // The rope channels stay bf16: the cast below is their only rounding (v4_quantize_kv_row).
    finish::fp8_ragged_block64(entry, a.dim - a.finish.rope_dim);
  } else {
    finish::hadamard(entry, a.dim);
    finish::fp4_ue8m0_block32(entry, a.dim);
  }

  push::write_entry(a.out, slot, e, entry, a.dim);
}

// Saves row r into its slot's ring unless a later row of the same chunk lands on the same ring index (that
// row is ring_rows positions later, hence ring_rows rows later in the run): only the last ring_rows rows of a
// run are kept, so no two blocks write one ring row.
// The row's first batch is loaded before that test (push::save_row says why the loads come first; at one row the
// test reads nothing, so they are the kernel's first loads, beside the row's slot and position).
__global__ void __launch_bounds__(push::kSaveThreads) compressor_save_kernel(PushArgs a) {
  pdl_wait();  // the entry kernel (the predecessor) reads the ring rows written here
  pdl_launch_dependents();
  const int r = int(blockIdx.x);
  push::RowBatch first;
  push::load_batch(a, r, a.width, 0, first);
  if (push::call_row(a, r, a.positions[r] + a.ring_rows) >= 0) return;
  push::save_row(a, r, a.width, a.ring_kv, a.ring_gate, a.ring_rows, first);
}

}  // namespace

size_t compressor_state_floats(const CompressorGpu& w, int slots) {
  return size_t(slots) * size_t(w.ring_rows()) * size_t(w.series()) * size_t(w.dim);
}

size_t compressor_workspace_bytes(int rows, const CompressorGpu& w) {
  const size_t one = align256(size_t(rows) * size_t(w.series()) * size_t(w.dim) * sizeof(float));
  return 2 * one;
}

void compressor_push(const bf16* x, const int32_t* slots, const int32_t* positions, int rows, const CompressorGpu& w,
                     const CompressorGpuState& state, const EntryFinish& finish, const PagedPool& out,
                     void* workspace, cublasHandle_t blas, cudaStream_t stream) {
  DI_CHECK(w.ratio > 0 && w.dim > 0 && w.hidden > 0,
           "cuda::compressor_push: ratio " + std::to_string(w.ratio) + ", dim " + std::to_string(w.dim) +
               " and hidden " + std::to_string(w.hidden) + " must be positive");
  DI_CHECK(w.series() * w.ratio <= kMaxPooledRows, "cuda::compressor_push: an entry pools " +
                                                       std::to_string(w.series() * w.ratio) + " rows, at most " +
                                                       std::to_string(kMaxPooledRows) + " supported");
  DI_CHECK(w.dim <= 8192, "cuda::compressor_push: entry width " + std::to_string(w.dim) + " exceeds 8192");
  DI_CHECK(finish.rope_dim >= 0 && finish.rope_dim % 2 == 0 && finish.rope_dim <= w.dim,
           "cuda::compressor_push: rope_dim " + std::to_string(finish.rope_dim) + " must be even and <= dim " +
               std::to_string(w.dim));
  DI_CHECK(finish.rope_dim == 0 || finish.inv_freq, "cuda::compressor_push: inv_freq is null");
  DI_CHECK(finish.format != EntryFormat::IndexFp4 ||
               ((w.dim & (w.dim - 1)) == 0 && w.dim % kIndexFp4Block == 0),
           "cuda::compressor_push: an FP4 index entry needs a power-of-two width (Hadamard) that is a multiple of " +
               std::to_string(kIndexFp4Block) + ", got " + std::to_string(w.dim));
  DI_CHECK(out.width == w.dim, "cuda::compressor_push: pool rows are " + std::to_string(out.width) +
                                   " wide, entries " + std::to_string(w.dim));
  const bool records = finish.format == EntryFormat::KvFp8Record;
  DI_CHECK(!records || (w.dim == kvrec::kDim && finish.rope_dim == kvrec::kRopeDim),
           "cuda::compressor_push: the FP8 record holds entries of " + std::to_string(kvrec::kDim) + " channels with " +
               std::to_string(kvrec::kRopeDim) + " RoPE channels, got " + std::to_string(w.dim) + " / " +
               std::to_string(finish.rope_dim));
  DI_CHECK((records ? out.records != nullptr : out.pool != nullptr) && out.page_table && out.page_size > 0 &&
               out.max_pages > 0,
           "cuda::compressor_push: the output pool has no pages");
  DI_CHECK(state.ring_kv && state.ring_gate, "cuda::compressor_push: the ring state is not allocated");
  DI_CHECK(rows >= 0, "cuda::compressor_push: negative row count");
  if (rows == 0) return;

  const int width = w.series() * w.dim;
  float* kv = static_cast<float*>(workspace);
  float* gate = reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                         align256(size_t(rows) * size_t(width) * sizeof(float)));
  // kv = wkv x, gate = wgate x (model-spec §3), fp32 out of bf16 operands: one call where the layout allows.
  gemm_bf16_pair(blas, x, w.hidden, w.wkv, w.wgate, w.hidden, kv, gate, OutType::F32, width, rows, width, w.hidden,
                 stream);

  // add_ape_kernel: the columns across x, the rows across y (at most 8192 blocks in all, as the flat grid had).
  const int ape_x = (width + kApeThreads - 1) / kApeThreads;
  const int ape_y = std::min(rows, std::max(1, 8192 / ape_x));
  DI_CUDA_CHECK(launch(add_ape_kernel, dim3(unsigned(ape_x), unsigned(ape_y)), dim3(kApeThreads), 0, stream, gate,
                       positions, w.ape, rows, width, w.ratio));

  PushArgs a;
  static_cast<push::PushRows&>(a) = {kv, gate, slots, positions, rows};
  a.ring_kv = state.ring_kv;
  a.ring_gate = state.ring_gate;
  a.ring_rows = w.ring_rows();
  a.ratio = w.ratio;
  a.dim = w.dim;
  a.width = width;
  a.overlap = w.overlap;
  a.norm = w.norm;
  a.finish = finish;
  a.out = out;
  DI_CUDA_CHECK(launch(compressor_entry_kernel, dim3(unsigned(rows)), dim3(kEntryThreads),
                       size_t(w.dim) * sizeof(float), stream, a));
  DI_CUDA_CHECK(launch(compressor_save_kernel, dim3(unsigned(rows)), dim3(push::kSaveThreads), 0, stream, a));
}

}  // namespace deepinfer::cuda
