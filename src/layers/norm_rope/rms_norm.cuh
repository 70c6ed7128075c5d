// Device-side pieces of the RMSNorm kernels (model-spec §2), shared with the kernels that fuse a norm into their
// tail (layers/mhc/mhc.cu: the mHC site's collapse -> norm). A fused kernel that uses the same thread mapping and
// these functions computes bitwise the values rms_norm / rms_norm_f32 compute: the reduction order is fixed here
// (per thread in index order, then lanes, then warps in index order) and every expression is the same one.
// Only .cu files include this.
#pragma once

#include "cuda/device_util.cuh"
#include "layers/norm_rope/rms_factor.h"
#include "layers/norm_rope/rope.cuh"

namespace deepinfer::cuda::dev {

// One block per row; thread i of a bf16 row takes the 16-byte vectors i, i + kNormThreads, ..., the first
// kNormMaxVecs of them kept in registers (rows up to 8192 wide are read once).
constexpr int kNormThreads = 128;
constexpr int kNormMaxVecs = 8;

// Four values of an fp32 GEMM output row as the norms of a GEMM's output read them (rms_norm_f32*, the attention
// split's query prologue: wq_a . u, wkv . u, wq_b . qr): the reference's FP8 GEMMs return bf16, and its q_norm /
// kv_norm and V4's per-head query norm run on those bf16 values (model-spec §2 "RMSNorm", §3; bench/gpu/NOTES.md
// "Session 59"), so each value is rounded to bf16 as it is read; the norm itself stays fp32.
// gemm_out4(v): the same of a float4 already loaded (raw), for a caller that rounds later than its load (the split's
// query prologue: its loads' results unused until the key lists' loads are issued).
__device__ __forceinline__ float4 gemm_out4(const float4 v) { return round_bf16(v); }
__device__ __forceinline__ float4 gemm_out4(const float4* __restrict__ row, int i) { return gemm_out4(row[i]); }

// The block's sum of v in a fixed order (lanes, then warps in index order), returned to every thread. A caller
// that sums again in the same kernel separates the two calls with __syncthreads().
__device__ __forceinline__ float norm_block_sum(float v) {
  __shared__ float partial[kNormThreads / 32];
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kNormThreads / 32; ++w) total += partial[w];
  return total;
}

__device__ __forceinline__ float add_squares8(float ss, const float (&t)[8]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) ss += t[j] * t[j];
  return ss;
}

__device__ __forceinline__ float add_squares4(float ss, const float4 v) {
  return ss + (v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w);
}

// V4's per-head query norm (the norms of an fp32 GEMM output without a weight: wq_b's output) in the reference's
// bf16 ops, `q * rsqrt(q.square().mean(-1) + eps)` on its bf16 query (model-spec §3; the CPU's head_rms_norm_bf16):
// each square is rounded to bf16 before the fp32 sum (head_bf16), then the mean, mean + eps and r
// (head_rms_factor_bf16); the products x * r are rounded where every norm stores its bf16 result.
// head_rms_factor_bf16x2: the factors of two rows (the split's query prologue), one conversion a rounding step for both.
__device__ __forceinline__ float add_squares4(float ss, const float4 v, bool head_bf16) {
  if (!head_bf16) return add_squares4(ss, v);
  const float4 q = round_bf16(make_float4(v.x * v.x, v.y * v.y, v.z * v.z, v.w * v.w));
  return ss + (q.x + q.y + q.z + q.w);
}
__device__ __forceinline__ float2 head_rms_factor_bf16x2(const float2 sum_squares, int n, float eps) {
  const float2 mean = round_bf16x2(sum_squares.x / float(n), sum_squares.y / float(n));
  const float2 t = round_bf16x2(mean.x + eps, mean.y + eps);
  return round_bf16x2(rsqrtf(t.x), rsqrtf(t.y));
}
__device__ __forceinline__ float head_rms_factor_bf16(float sum_squares, int n, float eps) {
  const float mean = round_bf16(sum_squares / float(n));
  return round_bf16(rsqrtf(round_bf16(mean + eps)));
}

// The sum of squares of a 4 * kNormThreads-wide fp32 row as rms_norm_f32's block forms it (thread t adds float4 t's
// squares, norm_block_sum adds the lanes, then the warps in index order), from one warp: v[w] is float4 32 w + lane,
// thread 32 w + lane's slice, so the same additions in the same order without shared memory or a block barrier (the
// attention split kernel's query prologue, layers/attention/sink_attention.cu).
__device__ __forceinline__ float norm_warp_row_sum(const float4 (&v)[kNormThreads / 32], bool head_bf16) {
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kNormThreads / 32; ++w) total += warp_sum(add_squares4(0.0f, v[w], head_bf16));
  return total;
}

// A row's factor rsqrt(mean(x^2) + eps) from the sum of its n squares. The addition is __fadd_rn: where n is a
// compile-time power of two the division becomes an exact multiplication by 1 / n, which must not fuse with the
// addition into an FMA (a caller with a runtime n divides, rounds, then adds).
__device__ __forceinline__ float rms_factor(float sum_squares, int n, float eps) {
  return rsqrtf(__fadd_rn(sum_squares / float(n), eps));
}

// rsqrtf(x) for x >= FLT_MIN (or +inf, NaN) without its subnormal guard. rsqrtf is rsqrt.approx.f32, which ptxas
// wraps for subnormal x (SASS: FSETP |x| < 2^-126, then FMUL by 2^24 before MUFU.RSQ and by 2^12 after, both skipped
// for every other x); rsqrt.approx.ftz.f32 is that MUFU.RSQ of the same x alone: the same bits wherever x >= FLT_MIN
// (the result, <= 2^63, is never subnormal). rms_factor_as calls it where rmsf::eps_normal(eps) (rms_factor.h).
__device__ __forceinline__ float rsqrt_normal(float x) {
  float r;
  asm("rsqrt.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

// rms_factor in the form the host picked with rmsf::rms_form(n, eps) (rms_factor.h: the same bits). inv_n:
// rmsf::pow2_inverse(n) for kPow2NormalEps (uniform, off the chain: ptxas forms it beside the block sum's adds), else
// unused. On the chain after the block's sum this drops the division's three dependent FFMAs, FCHK and its slow-path
// branch (one FMUL instead) and rsqrtf's guard (FSETP, two predicated FMULs around MUFU.RSQ; SASS).
template <rmsf::RmsForm kForm>
__device__ __forceinline__ float rms_factor_as(float sum_squares, int n, float inv_n, float eps) {
  if constexpr (kForm == rmsf::RmsForm::kDivide) {
    return rms_factor(sum_squares, n, eps);
  } else {
    const float mean = kForm == rmsf::RmsForm::kPow2NormalEps ? sum_squares * inv_n : sum_squares / float(n);
    return rsqrt_normal(__fadd_rn(mean, eps));  // __fadd_rn: the product must not fuse into an FMA
  }
}

// o = w * (t * r) for the 8 values of vector `idx` of the row (w = 1 when the norm has no weight).
__device__ __forceinline__ void rms_scale8(const float (&t)[8], float r, const Bf16x8* weight, int idx,
                                           float (&o)[8]) {
  if (weight) {
    float w8[8];
    unpack8(weight[idx], w8);
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = w8[j] * (t[j] * r);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = t[j] * r;
  }
}

// One value of an fp32 row's norm: w * (x * r), or x * r without a weight, as rms_norm_f32 rounds it to bf16.
__device__ __forceinline__ float rms_scale_f32(float x, float r, const bf16* weight, int i) {
  const float t = x * r;
  return weight ? __bfloat162float(weight[i]) * t : t;
}

// The pair (c, c + 1) of an fp32 row's norm + RoPE as rms_norm_f32_rope writes it: each value rms_scale_f32 rounded to
// bf16, then, when the pair lies in the RoPE span (c >= nope), rotated at angle() (rope.cuh), which is called only
// then.
template <class Angle>
__device__ __forceinline__ __nv_bfloat162 rms_scale_rope_pair(float x0, float x1, float r, const bf16* weight, int c,
                                                              int nope, Angle angle) {
  __nv_bfloat162 v = __halves2bfloat162(__float2bfloat16(rms_scale_f32(x0, r, weight, c)),
                                        __float2bfloat16(rms_scale_f32(x1, r, weight, c + 1)));
  if (c >= nope) v = rope_rotate(v, angle());
  return v;
}

}  // namespace deepinfer::cuda::dev
