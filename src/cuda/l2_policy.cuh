// The device side of cuda/l2_policy.h: the L2 cache policies and the loads that take them. Only .cu files include
// this.
#pragma once

#include <cstdint>

#include "cuda/l2_policy.h"

namespace deepinfer::cuda {

namespace dev {

// A createpolicy value: every line the access brings into L2 is evict_first.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
// cuda/launch.h's prefetch_l2_bulk with an L2 cache policy: the prefetched lines take the policy's priority (a
// stream's own weights pulled into L2 ahead of its evict_first loads stay below what the step reuses; runs 120-121,
// bench/gpu/NOTES.md "Session 21": default-priority prefetches pushed the latency kernels' data out). Skipped unless
// address and size are 16-byte aligned (a hint never faults).
__device__ __forceinline__ void prefetch_l2_bulk_with_policy(const void* src, unsigned bytes, uint64_t policy) {
  if (bytes == 0 || ((reinterpret_cast<uintptr_t>(src) | bytes) & 15u) != 0) return;
  asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;\n" ::"l"(src), "r"(bytes), "l"(policy)
               : "memory");
}
// __ldg of 16 bytes (ld.global.nc) with an L2 cache policy.
__device__ __forceinline__ uint4 ldg_with_policy(const uint4* p, uint64_t policy) {
  uint4 v;
  asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(policy));
  return v;
}

}  // namespace dev
}  // namespace deepinfer::cuda
