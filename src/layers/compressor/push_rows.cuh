// What the push kernels of the V4 compressor (compressor_gpu.cu, model-spec §3 "Compressor") and the V4.1 CSA2
// compressor (csa2_compressor_gpu.cu, §4) share: the rows a push call hands its kernels, the entry kernel's block
// size, the entry a row closes, where a position's row is in this call, saving a row's projections into the slot's
// state, writing a finished entry into its paged pool, and the workspace alignment. Only .cu files include this.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

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
__device__ __forceinline__ ClosedEntry closed_entry(const PushRows& a, int r, int ratio) {
  const int pos = a.positions[r], slot = a.slots[r];  // both loads in one round trip
  if ((pos + 1) % ratio != 0) return {-1, -1, -1};
  const int e = (pos + 1) / ratio - 1;
  return {slot, e, e * ratio};
}

// Row r's projections (width floats each) into its slot's state (state_kv / state_gate: state_rows rows of width
// per slot), at row pos % state_rows. Every thread of the block.
__device__ __forceinline__ void save_row(const PushRows& a, int r, int width, float* state_kv, float* state_gate,
                                         int state_rows) {
  const int64_t state_row = int64_t(a.slots[r]) * state_rows + a.positions[r] % state_rows;
  const float* kv = a.kv + int64_t(r) * width;
  const float* gate = a.gate + int64_t(r) * width;
  float* dkv = state_kv + state_row * width;
  float* dgate = state_gate + state_row * width;
  for (int c = int(threadIdx.x); c < width; c += int(blockDim.x)) {
    dkv[c] = kv[c];
    dgate[c] = gate[c];
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
