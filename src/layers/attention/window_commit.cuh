// The window ring's commit of one step row (model-spec §6 "Cached state": the sliding window's last `window` rows per
// sequence), shared by window_commit / window_commit_derotate (kv_cache.cu) and the attention merge that runs the
// attention core's epilogue in its own launch (sink_attention.cu), so that each writes the same bytes.
// Only .cu files include this.
#pragma once

#include <cstdint>

namespace deepinfer::cuda {

// A load issued where it stands: nvcc and ptxas sink an ordinary load whose only uses lie behind a branch into that
// branch, behind the round trip of the load that the branch tests (SASS of window_rows_kernel: its three indices in
// three dependent round trips; of visible_entry_rows_kernel: the slot after the position). A strong load at GPU
// scope (asm volatile, as mhc.cu's ld_relaxed_gpu) is not moved into a branch; it reads the same value from L2, where
// these single reads were served anyway.
__device__ __forceinline__ int32_t load_here(const int32_t* p) {
  int32_t v;
  asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}

// 16 bytes by the ordinary global load that `*p` compiles to (ld.global.v4.u32), issued where it stands (asm volatile,
// as load_here).
__device__ __forceinline__ uint4 load_uint4_here(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// One block per row; the row copies itself into the ring if it is among the last `window` rows of its chunk
// (earlier rows of a long chunk would land on the same ring rows). Rows of row_bytes (a multiple of 16) in either
// format: a copy. The row's indices and the thread's first 16 bytes of it are loaded together (load_here): the
// position and slot had been sunk behind the chunk test, and the row's load behind the ring address (SASS of the
// merge's commit block: three dependent L2 round trips before the store; now one). The same bytes to the same place.
__device__ __forceinline__ void window_commit_row(void* pool, const int32_t* __restrict__ slots,
                                                  const int32_t* __restrict__ positions,
                                                  const int32_t* __restrict__ chunk_first,
                                                  const int32_t* __restrict__ chunk_rows, int r, int window,
                                                  int slots_capacity, int row_bytes) {
  auto* bytes = static_cast<uint8_t*>(pool);
  const auto* src = reinterpret_cast<const uint4*>(bytes + (int64_t(slots_capacity) * window + r) * row_bytes);
  const int chunks = row_bytes / 16, i0 = int(threadIdx.x);
  const int first = chunk_first[r], n = chunk_rows[r], p = load_here(positions + r), slot = load_here(slots + r);
  uint4 v0;
  if (i0 < chunks) v0 = load_uint4_here(src + i0);  // the step row (staged for every row r: read whether or not used)
  const int last = first + n - 1;
  if (last - r >= window) return;
  auto* dst = reinterpret_cast<uint4*>(bytes + (int64_t(slot) * window + p % window) * row_bytes);
  if (i0 < chunks) dst[i0] = v0;
  for (int i = i0 + int(blockDim.x); i < chunks; i += blockDim.x) dst[i] = src[i];
}

}  // namespace deepinfer::cuda
