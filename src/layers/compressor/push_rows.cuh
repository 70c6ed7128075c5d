// What the push kernels of the V4 compressor (compressor_gpu.cu, model-spec §3 "Compressor") and the V4.1 CSA2
// compressor (csa2_compressor_gpu.cu, §4) share: the rows a push call hands its kernels, the entry kernel's block
// size, the entry a row closes, where a position's row is in this call, saving a row's projections into the slot's
// state, writing a finished entry into its paged pool, and the workspace alignment. Only .cu files include this.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/launch.h"
#include "layers/compressor/compressor_gpu.h"

namespace deepinfer::cuda::push {

constexpr int kEntryThreads = 256;  // the entry kernels: one block per row

// The workspace's projections start 256-byte aligned.
inline size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// This call's rows: their projections kv and gate [rows, width] (fp32, in the workspace; gate may be null where
// nothing is gated), slots and positions. Each compressor's kernel arguments derive from it.
struct PushRows {
  const float* kv;
  const float* gate;
  const int32_t* slots;
  const int32_t* positions;
  int rows;
};

// This call's row that holds position p of row r's slot run (a slot's rows are consecutive, with consecutive
// positions), or -1 when position p is not in this call (an earlier call's row is in the slot's state).
__device__ __forceinline__ int call_row(const PushRows& a, int r, int p) {
  const int rr = r + (p - a.positions[r]);
  return rr >= 0 && rr < a.rows && a.slots[rr] == a.slots[r] && a.positions[rr] == p ? rr : -1;
}

// The entry row r closes: a group of `ratio` positions is compressed when its last row arrives (model-spec §3
// "Compressor", §4), so row r (position pos) closes entry e = (pos + 1) / ratio - 1 when pos + 1 is a multiple of
// ratio, e = -1 (no entry, slot not read) otherwise; the entry's RoPE position is its group's first position
// group_start (§2). The same for every thread of a block.
struct ClosedEntry {
  int slot, e, group_start;
};
// The slot's line is prefetched towards L1 beside the position's load: the slot's load, whose uses all lie behind
// the test of pos, is sunk by the compiler behind that test and the position's round trip, which made it a second
// round trip on the path of every row that closes an entry (SASS of compressor_entry_kernel and csa2_entry_kernel);
// it now hits L1 there, and so do call_row's reads of the slot.
__device__ __forceinline__ ClosedEntry closed_entry(const PushRows& a, int r, int ratio) {
  prefetch_l1(a.slots + r);
  const int pos = a.positions[r], slot = a.slots[r];
  if ((pos + 1) % ratio != 0) return {-1, -1, -1};
  const int e = (pos + 1) / ratio - 1;
  return {slot, e, e * ratio};
}

// The save kernels' block (compressor_save_kernel, csa2_save_kernel): a compile-time stride, so that the copy's
// loops need no trip-count division by blockDim.x ahead of their first load (SASS: I2F, MUFU.RCP, F2I, ~20 dependent
// instructions).
constexpr int kSaveThreads = 256;
// Values of each projection a thread of a save kernel holds at once: rows up to kSaveBatch * kSaveThreads = 1024
// wide (V4's CSA ring rows, the widest) in one batch.
constexpr int kSaveBatch = 4;

// One batch of row r's projections: thread t's values c0 + t, c0 + t + kSaveThreads, ... (those below width).
struct RowBatch {
  float kv[kSaveBatch], gate[kSaveBatch];
};
__device__ __forceinline__ void load_batch(const PushRows& a, int r, int width, int c0, RowBatch& b) {
  const float* kv = a.kv + int64_t(r) * width;
  const float* gate = a.gate + int64_t(r) * width;
#pragma unroll
  for (int i = 0; i < kSaveBatch; ++i) {
    const int c = c0 + i * kSaveThreads + int(threadIdx.x);
    if (c < width) {
      b.kv[i] = kv[c];
      b.gate[i] = gate[c];
    }
  }
}

// load_batch's lines towards L1.
__device__ __forceinline__ void prefetch_batch(const PushRows& a, int r, int width, int c0) {
#pragma unroll
  for (int i = 0; i < kSaveBatch; ++i) {
    const int c = c0 + i * kSaveThreads + int(threadIdx.x);
    if (c < width) {
      prefetch_l1(a.kv + int64_t(r) * width + c);
      prefetch_l1(a.gate + int64_t(r) * width + c);
    }
  }
}

// Row r's projections (width floats each) into its slot's state (state_kv / state_gate: state_rows rows of width
// per slot), at row pos % state_rows; `first` is the row's first batch (load_batch at c0 = 0), loaded by the caller.
// Every thread of the block (kSaveThreads of them).
// The loads come before the stores, a batch at a time: copied value by value (a load, its store, the next load), a
// thread's loads waited for its earlier stores' operands (the state might alias the projections as far as the
// compiler knew), so each value was a dependent L2 round trip (SASS: LDG / STG pairs in turn; 8 of them at V4's CSA
// width 1024, 4 at 512); and the row's slot and position are loaded with the first batch's values, one round trip
// for all of them.
__device__ __forceinline__ void save_row(const PushRows& a, int r, int width, float* state_kv, float* state_gate,
                                         int state_rows, const RowBatch& first) {
  const int slot = a.slots[r], pos = a.positions[r];
  const int64_t state_row = int64_t(slot) * state_rows + pos % state_rows;
  float* dkv = state_kv + state_row * width;
  float* dgate = state_gate + state_row * width;
  auto store_batch = [&](int c0, const RowBatch& b) {
#pragma unroll
    for (int i = 0; i < kSaveBatch; ++i) {
      const int c = c0 + i * kSaveThreads + int(threadIdx.x);
      if (c < width) {
        dkv[c] = b.kv[i];
        dgate[c] = b.gate[i];
      }
    }
  };
  store_batch(0, first);
  for (int c0 = kSaveBatch * kSaveThreads; c0 < width; c0 += kSaveBatch * kSaveThreads) {
    RowBatch b;
    load_batch(a, r, width, c0, b);
    store_batch(c0, b);
  }
}

// The pool row of entry e of `slot` in a paged pool, or -1 when its page is past the table or not mapped (the entry
// is dropped).
__device__ __forceinline__ int64_t pool_row(const PagedPool& p, int slot, int e) {
  const int page = e / p.page_size;
  if (page >= p.max_pages) return -1;
  const int32_t phys = p.page_table[int64_t(slot) * p.max_pages + page];
  if (phys < 0) return -1;
  return int64_t(phys) * p.page_size + e % p.page_size;
}

// pool_row's page-table entry towards L1 (nothing where pool_row reads none).
__device__ __forceinline__ void prefetch_pool_row(const PagedPool& p, int slot, int e) {
  const int page = e / p.page_size;
  if (page < p.max_pages) prefetch_l1(p.page_table + int64_t(slot) * p.max_pages + page);
}

// The finished entry v[0, width) as bf16 into pool row `row` of a paged pool of bf16 rows (nothing where the row is
// -1: pool_row dropped the entry). Every thread of the block.
__device__ __forceinline__ void write_entry_row(const PagedPool& p, int64_t row, const float* v, int width) {
  if (row < 0) return;
  bf16* dst = p.pool + row * p.width;
  for (int d = int(threadIdx.x); d < width; d += int(blockDim.x)) dst[d] = __float2bfloat16_rn(v[d]);
}
// The same into entry e of `slot`.
__device__ __forceinline__ void write_entry(const PagedPool& p, int slot, int e, const float* v, int width) {
  write_entry_row(p, pool_row(p, slot, e), v, width);
}

}  // namespace deepinfer::cuda::push
