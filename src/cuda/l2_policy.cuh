// The device side of cuda/l2_policy.h: the L2 cache policies and the loads that take them. Only .cu files include
// this.
#pragma once

#include <cstdint>

#include "cuda/l2_policy.h"
#include "cuda/launch.h"

namespace deepinfer::cuda {

namespace dev {

// A createpolicy value: every line the access brings into L2 is evict_first.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
// __ldg of 16 bytes (ld.global.nc) with an L2 cache policy.
__device__ __forceinline__ uint4 ldg_with_policy(const uint4* p, uint64_t policy) {
  uint4 v;
  asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(policy));
  return v;
}

// This block's share of a follow prefetch (cuda/l2_policy.h) of [base, base + bytes): the range in 32 KB chunks, its
// chunk j being chunk c0 + j of a concatenation of ranges, which block (c0 + j) mod blocks issues
// (cp.async.bulk.prefetch.L2: fire and forget). Returns the range's chunks (what the next range's c0 adds). base and
// bytes 16-byte aligned (prefetch_l2_bulk skips anything else: a hint never faults).
constexpr int64_t kL2ShareChunk = 32 << 10;
__device__ __forceinline__ int64_t prefetch_l2_share(const uint8_t* base, int64_t bytes, int64_t c0, int64_t block,
                                                     int64_t blocks) {
  const int64_t chunks = (bytes + kL2ShareChunk - 1) / kL2ShareChunk;
  for (int64_t j = ((block - c0) % blocks + blocks) % blocks; j < chunks; j += blocks)
    prefetch_l2_bulk(base + j * kL2ShareChunk, unsigned(min(kL2ShareChunk, bytes - j * kL2ShareChunk)));
  return chunks;
}

}  // namespace dev
}  // namespace deepinfer::cuda
