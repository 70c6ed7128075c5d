// Device-side helpers shared by the kernels: format decoding (model-spec §2), warp reductions, and thin
// wrappers over the PTX the kernels use (cp.async, ldmatrix, mma.sync). Only .cu files include this.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda::dev {

// %globaltimer in ns: the clock of the kernels' phase stamps, the same on every SM. The "memory" clobber keeps the read
// after the loads, stores and polls before it in program order (a stamp times the step those end).
__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

// e8m0: 2^(v - 127); v = 0 is 2^-127 (a binary32 subnormal), as the CPU reference decodes it (core/dtype.h).
__device__ __forceinline__ float e8m0_to_float(uint8_t v) {
  return v == 0 ? __uint_as_float(0x00400000u) : __uint_as_float(uint32_t(v) << 23);
}

// Smallest power of two >= x for a positive normal x: the ue8m0 rule 2^ceil(log2 x) of model-spec §2.
__device__ __forceinline__ float pow2_ceil(float x) {
  uint32_t u = __float_as_uint(x);
  return (u & 0x007FFFFFu) == 0 ? x : __uint_as_float((u & 0x7F800000u) + 0x00800000u);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

// 8 bf16 in one 16-byte word: four bf16 pairs (the lower address in the low half), held as plain words so that the
// type is trivially copyable and a copy from memory is one 16-byte load (with __nv_bfloat162 members, whose copies
// are user-defined, every Bf16x8 load or store compiled to four 4-byte ones: session 41's SASS).
struct alignas(16) Bf16x8 {
  uint32_t w[4];
};

// v by value: a caller's unpack8(row[i], f) copies the vector in with one 16-byte load (through a reference its four
// words were read one by one). A bf16 is the high half of its float: one shift or mask a value, the values of
// __bfloat1622float2, with fewer instructions in the latency kernels (mHC sites, norms, routing; NOTES "Session 41").
__device__ __forceinline__ void unpack8(const Bf16x8 v, float (&f)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(v.w[i] << 16);
    f[2 * i + 1] = __uint_as_float(v.w[i] & 0xFFFF0000u);
  }
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
// Two bf16 packed in a word (the lower one in the low half) as fp32 values: a bf16 is the high half of its float.
__device__ __forceinline__ float2 widen_bf16x2(uint32_t w) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xFFFF0000u));
}
__device__ __forceinline__ float4 widen_bf16x4(uint32_t lo, uint32_t hi) {
  const float2 a = widen_bf16x2(lo), b = widen_bf16x2(hi);
  return make_float4(a.x, a.y, b.x, b.y);
}
// Values rounded to the nearest bf16 (even on ties), as fp32 values: where the reference holds a bf16 tensor. Two at a
// time through the packed conversion (cvt.rn.bf16x2.f32, SASS F2FP.BF16.F32.PACK_AB) then widened: the same rounding
// as the one-value cvt.rn.bf16.f32 (F2F.BF16.F32), which issues on the conversion pipe at a quarter of the ALU rate
// with a variable latency; session 64's SASS audits (bench/gpu/NOTES.md "Session 64") found 64-140 of them a thread
// on the batch-1 latency paths (the split's query prologue, the site entry's combine, the SwiGLU prologue).
__device__ __forceinline__ float2 round_bf16x2(float lo, float hi) { return widen_bf16x2(pack_bf16x2(lo, hi)); }
__device__ __forceinline__ float round_bf16(float x) { return round_bf16x2(x, 0.0f).x; }
__device__ __forceinline__ float4 round_bf16(float4 v) {
  return widen_bf16x4(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
}
__device__ __forceinline__ Bf16x8 pack8(const float (&f)[8]) {
  Bf16x8 v;
#pragma unroll
  for (int i = 0; i < 4; ++i) v.w[i] = pack_bf16x2(f[2 * i], f[2 * i + 1]);
  return v;
}

// ---- asynchronous copies (sm_80+): 16 bytes global -> shared; src_bytes = 0 fills zeros (rows past the end).
__device__ __forceinline__ void cp_async16(uint32_t smem_addr, const void* gmem, int src_bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// fence.acq_rel, not __threadfence()'s fence.sc (MEMBAR.SC.GPU): a writer's stores before a release to other blocks
// need release / acquire only (PTX memory model), and an SC fence also orders against every other SC fence on the GPU
// (session 5, H8).
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }

// Spins until `count` (global memory) reads `expected`, each read an acquire at device scope: what the writers
// released with their increments is then visible to this thread, and a block barrier after it hands that to the
// block (the selector forms of the CSA2 decode select and of the fused routing: one thread of a block known from the
// launch waits for the other blocks' arrivals).
__device__ __forceinline__ void spin_until_count(const unsigned* count, unsigned expected) {
  unsigned v;
  do {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(count) : "memory");
  } while (v != expected);
}

// ---- ldmatrix: four 8x8 b16 matrices; lane l gives the row address of matrix l / 8, row l % 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                                  uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// ---- mma.sync: D = A * B + C, bf16 operands, fp32 accumulators (PTX ISA "Matrix fragments for mma.m16n8k16").
__device__ __forceinline__ void mma_bf16_m16n8k16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                  uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace deepinfer::cuda::dev
