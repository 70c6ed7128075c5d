// mbarrier and 1-D bulk-copy wrappers (PTX ISA 8.x, sm_90), shared by the stream decode GEMM (cuda/stream_gemm.cuh),
// the MXFP4 prefill GEMMs v2 / v3 (layers/moe/mxfp4_prefill.cu) and the mHC site kernels (layers/mhc/mhc.cu). `bar`
// and `dst` are shared-memory addresses.
#pragma once

#include <cstdint>

#include "cuda/l2_policy.cuh"  // l2_evict_first_policy

namespace deepinfer::cuda::dev {

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialized barriers visible to the async proxy (the bulk copies that complete on them) and to the
// cluster; the initializing thread calls it after its mbar_init calls, before a barrier synchronizes the block.
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "MBAR_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra MBAR_WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// mbar_wait with acquire at cluster scope (PTX ISA "mbarrier.try_wait", .acquire.cluster): for a barrier on which
// other CTAs of the cluster arrive (mbarrier.arrive.release.cluster) or complete bytes (st.async's complete_tx), so
// that their writes before the arrival are visible here. The loop stays inside the asm as in mbar_wait.
__device__ __forceinline__ void mbar_wait_acquire_cluster(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "MBAR_WAIT_ACQUIRE_CLUSTER:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra MBAR_WAIT_ACQUIRE_CLUSTER;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// The proxy fence for this CTA's shared memory (PTX ISA "fence.proxy.async"): orders the thread's generic-proxy
// accesses of shared memory (ld.shared, st.shared, cp.async) against async-proxy ones (cp.async.bulk, wgmma operand
// reads) in both directions. An mbarrier's release / acquire alone orders neither direction across the proxies.
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// A consumer warp's release of a ring stage it read with ld.shared, whose next bytes a bulk copy (async proxy) writes
// once the producer sees the stage's `empty_bar` complete: every lane fences its reads before lane 0 arrives. Without
// the fence the copy can overwrite the stage before the warp's loads read it: beside a concurrent kernel, the dense
// decode stream's ring put a wrong work item (8 rows x 16 columns) into most runs of
// GpuMoe.DecodeV8InvariantRunToRunFullWidth, none with the fence (bench/gpu/NOTES.md "Session 30"; racecheck had
// flagged this pair since session 18). The warp is converged (every lane calls it). Call it after the stage's math,
// where the fragments were used: the fence waits for the warp's outstanding memory operations, and by then the
// stage's loads have returned (run 172: batch 8 -3.9 % V4 / -6.2 % V4.1 against releasing right after the loads).
__device__ __forceinline__ void warp_release_stage(uint32_t empty_bar) {
  fence_proxy_async_smem();
  __syncwarp();
  if ((threadIdx.x & 31u) == 0) mbar_arrive(empty_bar);
}

// 1-D bulk copy global -> shared completing `bytes` transactions on `bar`. dst, src and bytes: multiples of 16.
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
// bulk_g2s with an L2 evict_first policy: the copied lines are the first L2 replaces. For weights streamed once per
// step (cuda/l2_policy.cuh), so that they do not push out the lines the step reuses.
__device__ __forceinline__ void bulk_g2s_evict_first(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(
          dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(l2_evict_first_policy())
      : "memory");
}
// bulk_g2s to every CTA of the cluster in `cta_mask` (bit r = cluster rank r): the bytes land at the same
// shared-memory offset `dst` in each of them and complete `bytes` transactions on the mbarrier at offset `bar` in each
// (PTX ISA "cp.async.bulk", .multicast::cluster). Each receiving CTA expects the bytes on its own barrier
// (mbar_arrive_expect_tx) and must have initialized it before the copy is issued (a cluster barrier in between).
__device__ __forceinline__ void bulk_g2s_multicast(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                                   uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], "
      "%4;\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "h"(cta_mask)
      : "memory");
}
// This CTA's rank in its cluster (%cluster_ctarank), and a barrier over every thread of the cluster, release /
// acquire at cluster scope (the non-.aligned form: the threads may arrive from different code; threads that have
// exited count as arrived, PTX ISA "exit"). Used by bench/gpu/stream_probe.cu's act_relay_kernel.
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// A weight stream's copy: evict_first where the launch asked for it (packed::Args::weights_evict_first).
__device__ __forceinline__ void bulk_g2s_weights(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                                 bool evict_first) {
  if (evict_first)
    bulk_g2s_evict_first(dst, src, bytes, bar);
  else
    bulk_g2s(dst, src, bytes, bar);
}

}  // namespace deepinfer::cuda::dev
