// The window ring's commit of one step row (model-spec §6 "Cached state": the sliding window's last `window` rows per
// sequence), shared by window_commit / window_commit_derotate (kv_cache.cu) and the attention merge that runs the
// attention core's epilogue in its own launch (sink_attention.cu), so that each writes the same bytes.
// Only .cu files include this.
#pragma once

#include <cstdint>

namespace deepinfer::cuda {

// One block per row; the row copies itself into the ring if it is among the last `window` rows of its chunk
// (earlier rows of a long chunk would land on the same ring rows). Rows of row_bytes (a multiple of 16) in either
// format: a copy.
__device__ __forceinline__ void window_commit_row(void* pool, const int32_t* __restrict__ slots,
                                                  const int32_t* __restrict__ positions,
                                                  const int32_t* __restrict__ chunk_first,
                                                  const int32_t* __restrict__ chunk_rows, int r, int window,
                                                  int slots_capacity, int row_bytes) {
  const int first = chunk_first[r], n = chunk_rows[r], p = positions[r], slot = slots[r];
  const int last = first + n - 1;
  if (last - r >= window) return;
  auto* bytes = static_cast<uint8_t*>(pool);
  const auto* src = reinterpret_cast<const uint4*>(bytes + (int64_t(slots_capacity) * window + r) * row_bytes);
  auto* dst = reinterpret_cast<uint4*>(bytes + (int64_t(slot) * window + p % window) * row_bytes);
  for (int i = threadIdx.x; i < row_bytes / 16; i += blockDim.x) dst[i] = src[i];
}

}  // namespace deepinfer::cuda
