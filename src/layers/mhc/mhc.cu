// mHC site on the GPU (model-spec §3 "mHC site"), the CUDA twin of mhc.cpp, for hc = 4 streams (V4 and V4.1).
//  - hc_site_mix / hc_site_pre: the 24 site logits are dot products of the flattened streams (hc * hidden values)
//    with the rows of `fn`, scaled by the unweighted RMS of the streams. Split over column chunks so that every SM
//    reads a slice of fn at decode sizes; each block writes its chunk's partial sums, and the last block of a
//    token group to arrive (an arrival counter per group in the workspace) sums the partials in chunk order
//    (deterministic) and runs the sigmoid / softmax / Sinkhorn steps on the 24 numbers with one warp per token, in
//    fp32 as the reference. hc_site_pre's last block goes on with the collapse, the sublayer's RMSNorm and the
//    FP8 quantization of the normed row, so a site's whole pre-sublayer half is one launch (issue 4: at decode
//    the chain of small launches, not the bytes, sets the time). Since session 5 (H8) the one-token tail has a
//    fifth warp for the sums and the Sinkhorn steps, which run beside the collapse -> norm -> FP8 tail (it needs
//    only pre); the old kernel stays callable for the bitwise test (mhc_gpu_ref.h, namespace site_ref below).
//    Issue 4 (SASS-guided, same bits): the tail stages the partials with cp.async (was one dependent L2 round trip
//    per 160 values), the finish warp loads base / scale before its sums, the collapse loads 4 vectors' streams
//    before computing them.
//    Session 8 (H70), the default since session 9 (DEEPINFER_HC_SITE_TAIL=single opts out; mhc_site_tail.h): the
//    one-token tail spread over the launch's blocks (hc_site_spread_kernel; bench/gpu/NOTES.md "mHC site tail spread
//    over the blocks"), bitwise the same outputs; batch 1 at 4K 3.668 -> 3.457 ms in run 55.
//    Session 12: step marks for bench/gpu/mhc_site_latency.cu (hc_site_spread_phases; a no-op in the model's kernel,
//    whose SASS they leave byte-identical) and the spread kernel's finish v2 (same bits): fn before pdl_wait, 16-byte
//    staging, the comb steps in their own warp beside pre's publication, the Sinkhorn steps with the matrix in rows
//    (sinkhorn_rows); bench/gpu/NOTES.md "mHC site latency". The only form since session 13 (runs 78-79: 7.35 ->
//    5.91 us per hc_site_pre launch at V4, batch 1 3.023 -> 2.958 ms on 16 V4 layers).
//  - hc_collapse / hc_expand: elementwise over hidden, 8 values per thread.
//  - hc_lagged_site_pre (session 13): V4.1's site entry, the previous sublayer's expand, the collapse with the
//    previous site's pre, the norm and the FP8 codes in one launch, one block per row (site_collapse_norm).
//    Session 51 (helper-150): at hidden 5120 up to 8 rows a cluster of 5 blocks per row (hc_lagged_site_spread_kernel,
//    one norm step each, the sum of squares through DSMEM in the same order; DEEPINFER_HC_LAGGED_SITE=single opts out;
//    run 242: V4.1 batch 1 -2.2 %).
//  - hc_head_collapse: the head's collapse, a cluster of 8 blocks per row (session 5; the one-block form it
//    replaced, bit for bit, is hc_head_collapse_reference).
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <cooperative_groups.h>

#include "core/env_switch.h"
#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/kernels.h"
#include "cuda/launch.h"
#include "cuda/mbarrier.cuh"
#include "cuda/numerics_mode.h"
#include "cuda/step_kernels.h"
#include "layers/moe/moe_combine.cuh"
#include "layers/norm_rope/rms_norm.cuh"
#include "layers/quant/fp8_quant.cuh"
#include "layers/quant/fp8_quant_lanes.cuh"
#include "layers/mhc/mhc_gpu_ref.h"
#include "layers/mhc/mhc_site_tail.h"

namespace deepinfer::cuda {

namespace {

constexpr int kHc = 4;
constexpr int kRows = (2 + kHc) * kHc;  // 24 logits: pre | post | comb
// 256 columns of the flattened streams per block (kMixThreads threads of 4 columns): at decode (one token,
// 16384 or 20480 columns) that is 64 or 80 blocks reading fn in parallel. The block has kSiteThreads threads, the RMSNorm's
// (rms_norm.cuh): the tail's collapse -> norm -> quantization uses them all with the norm's own thread mapping.
constexpr int kMixThreads = 64;
constexpr int kColsPerThread = 4;
constexpr int kChunkCols = kMixThreads * kColsPerThread;
constexpr int kSiteThreads = dev::kNormThreads;
static_assert(kSiteThreads >= kMixThreads && kSiteThreads % 32 == 0, "the site block holds the mix threads");
// One token per block (hc_site_kernel<1>): one more warp, the finish warp. In hc_site_pre's tail it sums the
// chunk partials, publishes pre (named barrier kPreBarrier) and then runs the 20 Sinkhorn steps while the first
// kSiteThreads threads do the collapse -> norm -> FP8 codes (which need only pre): the Sinkhorn chain (~2 us of
// dependent shuffles and divisions) is off the critical path (session 5, H8).
constexpr int kFinishWarp = kSiteThreads / 32;
constexpr int kTailThreads = kSiteThreads + 32;
// The spread kernel (hc_site_spread_kernel; bench/gpu/NOTES.md "mHC site latency") has one more warp: in the last
// block it runs the comb steps (softmax, Sinkhorn) beside the finish warp, which then only publishes pre and stores
// post.
constexpr int kCombWarp = kFinishWarp + 1;
constexpr int kSpreadThreads = kTailThreads + 32;
constexpr int kPreBarrier = 1;   // bar id: the finish warp arrives, the norm threads wait
constexpr int kNormBarrier = 2;  // bar id: the norm threads' block sum (kSiteThreads threads)
// Widest streams: hidden 8192 (the norm's register slice, rms_norm.cuh) = 128 chunks, whose partials the last block
// stages in shared memory (one L2 round trip for all of them instead of one per chunk in the summing warp).
constexpr int kMaxHidden = dev::kNormMaxVecs * dev::kNormThreads * 8;
constexpr int kMaxChunks = kHc * kMaxHidden / kChunkCols;
// Token counts from this on take 4 tokens per block (fn re-read from L2 a quarter as often); below it one token
// per block, so that every token's tail (Sinkhorn, collapse, norm) runs in its own block, side by side. From this
// count on hc_site_pre runs the chain of separate kernels instead (bitwise the same): a group's last block would run
// four tails one after the other, and one token per block re-reads fn from L2 per token (H200, hidden 4096, graph
// replay: 1 token fused 12.2 us vs chain 13.0, 8 tokens 14.1 vs 14.4; at 128 tokens fused with 4 per block 60.9
// vs chain 50.5; in the model at batch 64 the chain with 4 tokens per block beat one token per block).
constexpr int64_t kTokensForGroups = 64;

// Workspace: per token a record of `chunks` partials of kRows + 1 floats (fn[r] . x for r < 24, x . x at 24),
// then one arrival counter. The counter of a token group lives in its first token's record, at the same place
// whatever the token count of the call, so the counters stay zero between calls.
__host__ __device__ inline int64_t record_floats(int chunks) { return int64_t(chunks) * (kRows + 1) + 1; }

// Release / acquire fence at GPU scope for the last-block-arrives pattern (session 5, H8): each thread's stores,
// this fence, a barrier, one relaxed atomicAdd; the last block's atomic, a barrier, this fence, its loads. That is
// message passing, which needs acq_rel (PTX memory model: release / acquire patterns), not __threadfence()'s
// fence.sc (MEMBAR.SC.GPU), which also orders against every other SC fence on the GPU.
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }

// The spread tail's hand-offs (hc_site_spread_kernel): a value published by one block and polled by others is
// its own flag. Its word holds kUnpublished (a negative NaN with every payload bit set, which no arithmetic of
// the site produces: a NaN result is the canonical 0x7FFFFFFF) until the value is stored; pollers read with
// strong loads (ld.relaxed / ld.acquire at GPU scope: never satisfied from a stale L1 line, never hoisted).
constexpr unsigned kUnpublished = 0xFFFFFFFFu;
__device__ __forceinline__ void st_relaxed_gpu(float* p, float v) {
  asm volatile("st.relaxed.gpu.global.f32 [%0], %1;\n" ::"l"(p), "f"(v) : "memory");
}
__device__ __forceinline__ void st_unpublished(float* p) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;\n" ::"l"(p), "r"(kUnpublished) : "memory");
}
__device__ __forceinline__ unsigned ld_relaxed_gpu(const float* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned ld_acquire_gpu(const float* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// Step marks of hc_site_spread_kernel (bench/gpu/NOTES.md "mHC site latency"): the kernel calls mark(step) where a
// step of its chain ends (HcSiteMark, mhc_site_tail.h); the model's kernel takes NoSiteMarks, which compiles to
// nothing (its SASS is byte-identical to the kernel without the calls). StampSiteMarks (hc_site_spread_phases) stores
// %globaltimer and clock64 of lane 0 of the calling warp per block and step.
struct NoSiteMarks {
  __device__ __forceinline__ void operator()(int) const {}
};

struct StampSiteMarks {
  unsigned long long* stamps;  // [block][kHcSiteMarks][2]: globaltimer ns, clock64
  __device__ __forceinline__ void operator()(int step) const {
    unsigned long long ns, cycles;
    // "memory": the stamp comes after the step's loads / stores / polls in program order.
    ns = dev::globaltimer_ns();
    asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(cycles)::"memory");
    // The finish warp's steps (site_finish) by its lane 0, the block's steps by thread 0.
    const bool finish_step = step == kMarkPre || step == kMarkComb;
    if (finish_step ? threadIdx.x % 32 == 0 : threadIdx.x == 0) {
      unsigned long long* s = stamps + (size_t(blockIdx.y) * gridDim.x + blockIdx.x) * (2 * kHcSiteMarks) + 2 * step;
      s[0] = ns;
      s[1] = cycles;
    }
  }
};

// The Sinkhorn steps of site_finish in one warp with the matrix in rows (the spread kernel's comb warp;
// bench/gpu/NOTES.md "mHC site latency"). The lane form (one element per lane, 16 lanes) pays two dependent shuffles
// per sum and one division with its slow-path branch (FCHK, BSSY / BSYNC) per normalisation: ~105 cycles of
// dependent latency x 39 normalisations (SASS). Here lane l holds row j = l % 4 (every group of 4 lanes the same
// matrix): a row sum is 3 register adds, a column sum one shuffle pair for the 4 columns at once, and the 4
// quotients of a row (or the row's 4 column quotients) share the divisor's reciprocal.
// Same bits as the lane form:
//  - sums: the lane form's butterflies add (x0 + x1) + (x2 + x3) in every lane (float addition commutes exactly);
//    the row sums here are that expression, the column sums the same shuffles (xor 1, 2 over rows).
//  - the max: fmaxf(fmaxf(v0, v1), fmaxf(v2, v3)) equals the butterfly's value up to the sign of a zero, which
//    v - mx and expf do not see (expf(+-0) = 1, v - (+-0) = v for v != 0).
//  - quotients: div.rn.f32's fast path (SASS: MUFU.RCP, FCHK, 5 FFMA; the slow-path call only where FCHK flags) is
//    reciprocal r0, e = fma(-b, r0, 1), r1 = fma(r0, e, r0), q0 = fma(a, r1, 0), rem = fma(-b, q0, a),
//    q = fma(r1, rem, q0): correctly rounded wherever FCHK does not flag (it flags exponents near the float range's
//    ends, zeros, subnormals, infinities, NaN). div_rn_fast is that sequence without the check, the reciprocal
//    shared by the quotients of one divisor (r1 depends on b only). It is used only where every dividend lies in
//    [2^-64, 2^64] and every divisor in [2^-32, 2^32] (quotients in [2^-96, 2^96], the remainders ~2^-24 of the
//    dividend: every intermediate a normal float far from the ends): the warp checks that over all steps (running
//    min / max of the dividends, a predicate for the divisors, which a NaN dividend makes NaN too) and returns
//    false otherwise, and the caller reruns the lane form (a uniform branch, not taken in practice: the dividends
//    stay near the matrix's entries, >= ~hc_eps, and the softmax's exps fall below 2^-64 only for a logit spread
//    > 44).
__device__ __forceinline__ float recip_fast(float b) {
  float r0;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(r0) : "f"(b));  // MUFU.RCP, as div.rn.f32's fast path
  return __fmaf_rn(r0, __fmaf_rn(-b, r0, 1.0f), r0);
}
__device__ __forceinline__ float div_rn_fast(float a, float b, float r1) {
  const float q0 = __fmaf_rn(a, r1, 0.0f);
  return __fmaf_rn(r1, __fmaf_rn(-b, q0, a), q0);
}

// logit: lane e < 16 holds comb logit (e / 4, e % 4) (site_finish's v). True with the doubly-stochastic comb in
// out[0..15] (row-major, as the lane form stores it) when every quotient was in div_rn_fast's range; false (nothing
// stored) otherwise. Warp-uniform.
__device__ __forceinline__ bool sinkhorn_rows(float logit, float hc_eps, int sinkhorn_iters, float* out) {
  constexpr float kDividendMin = 0x1p-64f, kDividendMax = 0x1p64f, kDivisorMin = 0x1p-32f, kDivisorMax = 0x1p32f;
  const int lane = threadIdx.x % 32, row = lane % 4;
  float x[kHc];
#pragma unroll
  for (int c = 0; c < kHc; ++c) x[c] = __shfl_sync(0xFFFFFFFFu, logit, kHc * row + c);
  float lo = kDividendMax, hi = kDividendMin;
  bool ok = true;
  auto track = [&] {  // the dividends of the next normalisation
#pragma unroll
    for (int c = 0; c < kHc; ++c) lo = fminf(lo, x[c]), hi = fmaxf(hi, x[c]);
  };
  auto divide = [&](int c, float d, float r1) {
    ok = ok && d >= kDivisorMin && d <= kDivisorMax;
    x[c] = div_rn_fast(x[c], d, r1);
  };
  auto normalise_row = [&] {  // v / (row sum + eps)
    track();
    const float d = ((x[0] + x[1]) + (x[2] + x[3])) + hc_eps, r1 = recip_fast(d);
#pragma unroll
    for (int c = 0; c < kHc; ++c) divide(c, d, r1);
  };
  auto normalise_columns = [&] {  // v / (column sum + eps)
    track();
    float d[kHc];
#pragma unroll
    for (int c = 0; c < kHc; ++c) d[c] = x[c] + __shfl_xor_sync(0xFFFFFFFFu, x[c], 1);
#pragma unroll
    for (int c = 0; c < kHc; ++c) d[c] = (d[c] + __shfl_xor_sync(0xFFFFFFFFu, d[c], 2)) + hc_eps;
#pragma unroll
    for (int c = 0; c < kHc; ++c) divide(c, d[c], recip_fast(d[c]));
  };
  // The softmax over a row, + eps (the lane form's first steps).
  const float mx = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
#pragma unroll
  for (int c = 0; c < kHc; ++c) x[c] = expf(x[c] - mx);
  track();
  {
    const float s = (x[0] + x[1]) + (x[2] + x[3]), r1 = recip_fast(s);
#pragma unroll
    for (int c = 0; c < kHc; ++c) {
      divide(c, s, r1);
      x[c] += hc_eps;
    }
  }
  // Sinkhorn (model-spec §3): one column normalisation, then (iters - 1) x (rows, columns).
  normalise_columns();
  for (int it = 1; it < sinkhorn_iters; ++it) {
    normalise_row();
    normalise_columns();
  }
  if (!__all_sync(0xFFFFFFFFu, ok && lo >= kDividendMin && hi <= kDividendMax)) return false;
  if (lane < kHc) {
#pragma unroll
    for (int c = 0; c < kHc; ++c) out[kHc * lane + c] = x[c];
  }
  return true;
}

// u[8] = sum_j pre[j] * X_j[8] for one 16-byte vector of the token's streams, from its kHc raw vectors.
__device__ __forceinline__ void collapse8_raw(const uint4 (&raw)[kHc], const float* pre, float (&acc)[8]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] = 0.0f;
#pragma unroll
  for (int j = 0; j < kHc; ++j) {
    float x[8];
    dev::unpack8(reinterpret_cast<const dev::Bf16x8&>(raw[j]), x);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] += pre[j] * x[e];
  }
}

__device__ __forceinline__ void load_streams8(const bf16* X_token, int64_t hidden, int64_t v, uint4 (&raw)[kHc]) {
#pragma unroll
  for (int j = 0; j < kHc; ++j) raw[j] = reinterpret_cast<const uint4*>(X_token + j * hidden)[v];
}

// The same for one vector read here (hc_collapse; the reference tail).
__device__ __forceinline__ void collapse8(const bf16* X_token, int64_t hidden, int64_t v, const float* pre,
                                          float (&acc)[8]) {
  uint4 raw[kHc];
  load_streams8(X_token, hidden, v, raw);
  collapse8_raw(raw, pre, acc);
}

// Lane's logit idx (sum of squares at kRows) of a token's record summed over its `chunks` partials in chunk order
// (deterministic), 8 chunks' loads in flight; kFromL2: the record is in the workspace, written by other blocks of the
// launch (__ldcg), else staged in shared memory. Lanes past kRows sum nothing (site_finish, site_ref::site_finish).
template <bool kFromL2>
__device__ __forceinline__ float chunk_sum(const float* partial, int chunks, int idx, int lane) {
  float m = 0.0f;
  if (lane <= kRows) {
#pragma unroll 8
    for (int ch = 0; ch < chunks; ++ch) {
      const float* p = partial + ch * (kRows + 1) + idx;
      m += kFromL2 ? __ldcg(p) : *p;
    }
  }
  return m;
}

// The comb's steps in the lane form (site_finish; site_ref::site_finish, the reference, runs the same expressions):
// lane e < 16 holds comb logit (e / 4, e % 4), so a row is 4 neighbouring lanes (xor 1, 2) and a column lanes xor 4, 8.
// The softmax over a row, + hc_eps, then Sinkhorn (model-spec §3): one column normalisation, then (iters - 1) x (rows,
// columns), each sum + hc_eps. Lanes >= 16 compute along unused (their results are not stored). Returns the lane's
// element of the doubly-stochastic comb.
__device__ __forceinline__ float comb_sinkhorn_lanes(float v, float hc_eps, int sinkhorn_iters) {
  float mx = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
  v = expf(v - mx);
  auto row_sum = [](float x) {
    x += __shfl_xor_sync(0xFFFFFFFFu, x, 1);
    return x + __shfl_xor_sync(0xFFFFFFFFu, x, 2);
  };
  auto col_sum = [](float x) {
    x += __shfl_xor_sync(0xFFFFFFFFu, x, 4);
    return x + __shfl_xor_sync(0xFFFFFFFFu, x, 8);
  };
  v = v / row_sum(v) + hc_eps;
  v = v / (col_sum(v) + hc_eps);
  for (int it = 1; it < sinkhorn_iters; ++it) {
    v = v / (row_sum(v) + hc_eps);
    v = v / (col_sum(v) + hc_eps);
  }
  return v;
}

// One warp, one token: lane e < 16 holds comb element (j, k) = (e / 4, e % 4), so a row of the 4x4 matrix is 4
// neighbouring lanes (xor 1, 2) and a column is lanes k, k + 4, k + 8, k + 12 (xor 4, 8); lanes 16..19 hold pre,
// 20..23 post, lane 24 the sum of squares. The 20 Sinkhorn normalisations are then one shuffle pair and one
// division each instead of a serial loop over the matrix. `partial` is the token's record: in shared memory
// (kFromL2 false) or in the workspace, read through L2 (__ldcg: other blocks of this launch wrote it), 8 chunks'
// loads in flight; the sum runs in chunk order either way.
// pre_smem != nullptr (hc_site_pre's tail, the finish warp): pre also goes to pre_smem, then the warp arrives on
// kPreBarrier (kTailThreads) before the softmax and Sinkhorn steps; the values are the same either way.
// spread_sums != nullptr (hc_site_spread_kernel): the warp first marks the 128 words there kUnpublished (the tail
// blocks' sums of squares go there), then stores pre with release semantics (a fence, then strong stores): a tail
// block that sees pre (ld.acquire) sees those marks too.
// kRowSinkhorn: the Sinkhorn steps by sinkhorn_rows (same bits; the lane form below where it declines). kPart: all of
// it, or (hc_site_spread_kernel's finish and comb warps, side by side with the same sums) pre / post only or comb
// only. mark: the spread kernel's step marks (kMarkPre once pre / post are stored, kMarkComb at the end).
enum class FinishPart { kAll, kPrePost, kComb };
template <bool kFromL2, bool kRowSinkhorn = false, class Marks = NoSiteMarks, FinishPart kPart = FinishPart::kAll>
__device__ void site_finish(const float* partial, int chunks, int64_t width, const float* __restrict__ base,
                            const float* __restrict__ scale, float norm_eps, float hc_eps, int sinkhorn_iters,
                            float* out, float* pre_smem = nullptr, float* spread_sums = nullptr, Marks mark = {}) {
  const int lane = threadIdx.x % 32;
  // Lane -> logit index: comb 8 + lane, pre / post lane - 16, sum of squares 24.
  const int idx = lane < 16 ? 2 * kHc + lane : lane < 24 ? lane - 16 : kRows;
  // The site's scale and base (weights) are loaded before the sums, so their round trip runs beside them instead
  // of after (issue 4: it sat between the sums and pre, on the tail's critical path).
  const float scale_pre = scale[0], scale_post = scale[1], scale_comb = scale[2];
  const float b = lane < kRows ? base[idx] : 0.0f;
  if (kPart != FinishPart::kComb && spread_sums) {  // warp-uniform; the marks drain during the sums below
#pragma unroll
    for (int i = lane; i < dev::kNormThreads; i += 32) st_unpublished(spread_sums + i);
  }
  const float m = chunk_sum<kFromL2>(partial, chunks, idx, lane);
  const float ss = __shfl_sync(0xFFFFFFFFu, m, 24);
  const float r = rsqrtf(ss / float(width) + norm_eps);
  if constexpr (kPart != FinishPart::kComb) {
    if (spread_sums) {  // warp-uniform: every lane's marks (the warp barrier), then the release fence, before pre
      __syncwarp();
      fence_acq_rel_gpu();
    }
    if (lane >= 16 && lane < 20) {
      const float pre = sigmoidf(m * r * scale_pre + b) + hc_eps;
      if (spread_sums)
        st_relaxed_gpu(out + idx, pre);
      else
        out[idx] = pre;
      if (pre_smem) pre_smem[idx] = pre;
    }
    if (lane >= 20 && lane < 24) out[idx] = 2.0f * sigmoidf(m * r * scale_post + b);
    if (pre_smem) {  // warp-uniform
      __syncwarp();
      asm volatile("bar.arrive %0, %1;\n" ::"n"(kPreBarrier), "n"(kTailThreads) : "memory");
    }
    mark(kMarkPre);
  }
  if constexpr (kPart == FinishPart::kPrePost) return;

  // comb: softmax over the last index (a row: 4 neighbouring lanes), + eps. Lanes >= 16 compute along unused.
  float v = lane < 16 ? m * r * scale_comb + b : 0.0f;
  if constexpr (kRowSinkhorn) {
    if (sinkhorn_rows(v, hc_eps, sinkhorn_iters, out + 2 * kHc)) {
      mark(kMarkComb);
      return;
    }
  }
  v = comb_sinkhorn_lanes(v, hc_eps, sinkhorn_iters);
  if (lane < 16) out[idx] = v;
  mark(kMarkComb);
}

struct SiteArgs {
  const bf16* X;
  const float* fn;
  const float* base;
  const float* scale;
  int64_t tokens, hidden;
  int chunks;
  float norm_eps, hc_eps;
  int sinkhorn_iters;
  float* workspace;
  float* mix;
  // The tail past the mix (hc_site_pre); u == nullptr stops at the mix (hc_site_mix).
  const bf16* norm_weight;
  bf16* u;
  uint8_t* uq;  // nullptr: no quantization
  float* us;
  int quant_lanes;  // quant_block / 8
  // hc_expand_site_pre (one token per block only): the previous sublayer's output y [tokens, hidden], expanded
  // into the streams first with the coefficients `mix` still holds (the previous site's); X_out (== X) receives
  // the expanded streams, written by the token's tail once every block of the token has read the old ones.
  const bf16* y = nullptr;
  bf16* X_out = nullptr;
  // hc_expand_site_pre with the MoE's output before its combine (layers/moe/moe_combine.h; the spread kernel only):
  // y's values are the combine of these parts (site_y4 / site_y8), y itself is not read.
  MoeCombineParts y_parts;
};

// The y readers below take kParts = false in the kernels that are never given parts (launch_site gives them to the
// spread kernel only), which then compile to the plain read of y.
// Token t's slots of y_parts (its top_k expert_y rows), into registers; nothing without parts.
template <bool kParts = true>
__device__ __forceinline__ void site_y_slots(const SiteArgs& a, int64_t t, int32_t (&slots)[kSiteCombineMaxTopK]) {
  if constexpr (!kParts) return;
  if (!a.y_parts.set()) return;
#pragma unroll
  for (int k = 0; k < kSiteCombineMaxTopK; ++k)
    if (k < a.y_parts.top_k) slots[k] = a.y_parts.pair_slot[t * a.y_parts.top_k + k];
}
// y's columns h .. h + 3 of token t as bf16 (h % 4 == 0): read from y, or the combine of y_parts (combine_kernel's
// sum and rounding, moe_combine.cuh: the same bits).
template <bool kParts = true>
__device__ __forceinline__ uint2 site_y4(const SiteArgs& a, int64_t t, int64_t h,
                                         const int32_t (&slots)[kSiteCombineMaxTopK]) {
  if constexpr (kParts)
    if (a.y_parts.set()) return moe_dev::combine_bf16x4<kSiteCombineMaxTopK>(a.y_parts, slots, a.hidden, t, h / 4);
  return *reinterpret_cast<const uint2*>(a.y + t * a.hidden + h);
}
// y's 16-byte vector `vec` (columns 8 vec .. 8 vec + 7) of token t, as site_y4.
__device__ __forceinline__ uint4 site_y8(const SiteArgs& a, int64_t t, int vec,
                                         const int32_t (&slots)[kSiteCombineMaxTopK]) {
  if (!a.y_parts.set()) return reinterpret_cast<const uint4*>(a.y + t * a.hidden)[vec];
  const uint2 lo = site_y4(a, t, int64_t(vec) * 8, slots), hi = site_y4(a, t, int64_t(vec) * 8 + 4, slots);
  return make_uint4(lo.x, lo.y, hi.x, hi.y);
}

// X'_k = post_k * y + sum_j comb[j][k] * X_j of one element before its bf16 rounding (model-spec §3 "mHC site"
// step 4): hc_expand_kernel's expression (a product, then the fused multiply-adds in order of j); callers round it
// to nearest bf16 as hc_expand_kernel's pack8 does. ck[j] = comb[j][k] (the column of output stream k).
__device__ __forceinline__ float expand_value(float post_k, float y, const float (&ck)[kHc], const float (&x)[kHc]) {
  float o = post_k * y;
#pragma unroll
  for (int j = 0; j < kHc; ++j) o += ck[j] * x[j];
  return o;
}

// The expanded streams of one 16-byte vector, in place of the old ones in raw (bf16, as hc_expand_kernel writes
// them): expand_value with the previous site's row coef (post at kHc + k, comb[j][k] at 2 kHc + j kHc + k).
__device__ __forceinline__ void expand_streams8(uint4 (&raw)[kHc], const uint4& yraw, const float* coef) {
  float x[kHc][8], yv[8];
#pragma unroll
  for (int j = 0; j < kHc; ++j) dev::unpack8(reinterpret_cast<const dev::Bf16x8&>(raw[j]), x[j]);
  dev::unpack8(reinterpret_cast<const dev::Bf16x8&>(yraw), yv);
#pragma unroll
  for (int k = 0; k < kHc; ++k) {
    const float ck[kHc] = {coef[2 * kHc + k], coef[3 * kHc + k], coef[4 * kHc + k], coef[5 * kHc + k]};
    float o[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float xe[kHc] = {x[0][e], x[1][e], x[2][e], x[3][e]};
      o[e] = expand_value(coef[kHc + k], yv[e], ck, xe);
    }
    const dev::Bf16x8 packed = dev::pack8(o);
    raw[k] = reinterpret_cast<const uint4&>(packed);
  }
}

// Vector idx of token t's normed row (its collapsed values v, r the row's RMS factor, w the norm weight's vector idx,
// read only where the norm has a weight (a.norm_weight); valid: idx is a vector of the row, else the lane only joins
// the quantization's shuffles): u = bf16(v x r x w) as rms_norm writes it, then fp8_quantize8's codes of bf16(u) and
// the block scale (the sublayer's RMSNorm and its FP8 input, model-spec §3 "mHC site"). The whole warp calls it: a
// quantization block is whole quant_lanes-aligned lanes. w points at the vector, not the row: hc_site_spread_kernel
// passes the copy it loaded with its streams (bench/gpu/NOTES.md session 49). kQuantLanes: fp8_quantize8_lanes's kLanes
// (> 0: a.quant_lanes is that).
template <int kQuantLanes = 0>
__device__ __forceinline__ void store_normed_vec_fp8(const SiteArgs& a, int64_t t, int vecs, const float (&v)[8],
                                                     float r, const dev::Bf16x8* w, int idx, bool valid) {
  float f[8] = {};
  if (valid) {
    float o[8];
    // Two calls, not one with `a.norm_weight ? w : nullptr`: that select puts the spread kernel's register copy in
    // local memory (a 16-byte stack frame).
    if (a.norm_weight)
      dev::rms_scale8(v, r, w, 0, o);
    else
      dev::rms_scale8(v, r, nullptr, 0, o);
    const dev::Bf16x8 rounded = dev::pack8(o);
    reinterpret_cast<dev::Bf16x8*>(a.u + t * a.hidden)[idx] = rounded;
    dev::unpack8(rounded, f);
  }
  if (a.uq) {
    uint2 codes;
    const int lanes = kQuantLanes > 0 ? kQuantLanes : a.quant_lanes;
    const float scale = dev::fp8_quantize8_lanes<kQuantLanes>(f, lanes, codes);
    if (valid) {
      reinterpret_cast<uint2*>(a.uq + t * a.hidden)[idx] = codes;
      // quant_lanes is a power of two (check_quant_block) and idx, vecs >= 0: the scale's test and index by a mask
      // and a shift, as fp8_quantize_kernel does, not by runtime 32-bit % and / (~45 dependent instructions, MUFU.RCP
      // among them, between the codes' store and the scale's, a kernel's last; bench/gpu/NOTES.md session 49).
      const int quant_shift = __ffs(lanes) - 1;
      if ((idx & (lanes - 1)) == 0) a.us[t * (vecs >> quant_shift) + (idx >> quant_shift)] = scale;
    }
  }
}

// The thread's vectors of token t's normed row (the norm's mapping: vectors i, i + 128, ..., their collapsed values
// v[i]) through store_normed_vec_fp8. The one-token tails of hc_site_pre (site_collapse_norm) and of the reference
// (site_ref::site_collapse_norm); hc_site_spread_kernel calls store_normed_vec_fp8 for its one vector.
__device__ __forceinline__ void store_normed_row_fp8(const SiteArgs& a, int64_t t, int vecs,
                                                     const float (&v)[dev::kNormMaxVecs][8], float r) {
  using dev::kNormMaxVecs;
  using dev::kNormThreads;
  const auto* w = reinterpret_cast<const dev::Bf16x8*>(a.norm_weight);
#pragma unroll
  for (int i = 0; i < kNormMaxVecs; ++i) {
    if (i * kNormThreads >= vecs) break;  // block-uniform: whole warps run every quantization step
    const int idx = threadIdx.x + i * kNormThreads;
    store_normed_vec_fp8(a, t, vecs, v[i], r, w ? w + idx : nullptr, idx, idx < vecs);
  }
}

// The norm mapping's shape of a row (thread i: vectors i, i + kNormThreads, ...). kSteps 0: hidden / 8 vectors at run
// time, so a step exists where i * kNormThreads < vecs (block-uniform) and a thread's vector where idx < vecs. kSteps > 0
// (hc_lagged_site_pre_kernel at V4.1's hidden 5120 = 5 x 1024): hidden is kSteps x 8 kNormThreads, every thread has
// kSteps whole vectors, and the tests, the row's size and its offsets are compile-time (each runtime test is a branch
// on a uniform predicate, ~20 cycles per vector per loop, and splits the vectors' instructions into blocks in series).
template <int kSteps>
struct RowShape {
  const SiteArgs& a;
  int vecs;
  __device__ explicit RowShape(const SiteArgs& args) : a(args), vecs(int(hidden() / 8)) {}
  __device__ int64_t hidden() const { return kSteps ? int64_t(kSteps) * 8 * dev::kNormThreads : a.hidden; }
  __device__ bool step(int i) const { return kSteps ? i < kSteps : i * dev::kNormThreads < vecs; }
  __device__ bool has(int i, int idx) const { return kSteps ? i < kSteps : idx < vecs; }  // idx: step i's vector
};

// store_normed_row_fp8_steps' first step: every vector's u = bf16(v x r x w) stored, kept packed in rounded (the
// quantizer's input), and its amax. kWeighted: a.norm_weight is set (tested once for the row, not once per vector).
template <bool kWeighted, int kSteps>
__device__ __forceinline__ void store_normed_row_u(const SiteArgs& a, int64_t t, const float (&v)[dev::kNormMaxVecs][8],
                                                   float r, const dev::Bf16x8 (&w)[kSteps],
                                                   dev::Bf16x8 (&rounded)[kSteps], float (&amax)[kSteps]) {
  const int64_t hidden = RowShape<kSteps>(a).hidden();
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    const int idx = threadIdx.x + i * dev::kNormThreads;
    float o[8], f[8];
    dev::rms_scale8(v[i], r, kWeighted ? &w[i] : nullptr, 0, o);
    rounded[i] = dev::pack8(o);
    reinterpret_cast<dev::Bf16x8*>(a.u + t * hidden)[idx] = rounded[i];
    dev::unpack8(rounded[i], f);
    amax[i] = dev::fp8_amax8(f);
  }
}

// store_normed_row_fp8 for a compile-time row shape (RowShape<kSteps>, kSteps > 0: every thread has every step's
// vector) with the thread's vectors side by side: every vector's u (w: the norm weight's vectors, loaded before the
// block sum), then the quantization blocks' amax shuffles of all vectors at once, then the scales, then the codes.
// Per vector the same expressions in the same order as store_normed_vec_fp8 (fp8_quantize8 = fp8_amax8, the shuffles
// from quant_lanes / 2 down, fp8_block_scale, fp8_codes8). Vector by vector (store_normed_row_fp8), each one's weight
// read (an L1 hit behind the previous vector's stores: ptxas does not move a load above a store that may alias it),
// its shuffles and its scale chain ran in series (bench/gpu/NOTES.md helper-141).
template <int kSteps>
__device__ __forceinline__ void store_normed_row_fp8_steps(const SiteArgs& a, int64_t t,
                                                           const float (&v)[dev::kNormMaxVecs][8], float r,
                                                           const dev::Bf16x8 (&w)[kSteps]) {
  static_assert(kSteps > 0 && kSteps <= dev::kNormMaxVecs, "a compile-time row shape");
  const RowShape<kSteps> row(a);
  dev::Bf16x8 rounded[kSteps];
  float amax[kSteps];
  if (a.norm_weight)
    store_normed_row_u<true>(a, t, v, r, w, rounded, amax);
  else
    store_normed_row_u<false>(a, t, v, r, w, rounded, amax);
  if (!a.uq) return;
  for (int o = a.quant_lanes / 2; o > 0; o >>= 1) {
    float other[kSteps];
#pragma unroll
    for (int i = 0; i < kSteps; ++i) other[i] = __shfl_xor_sync(0xFFFFFFFFu, amax[i], o);
#pragma unroll
    for (int i = 0; i < kSteps; ++i) amax[i] = fmaxf(amax[i], other[i]);
  }
  // fp8_block_scale's division and fp8_codes8's reciprocal each branch to a slow path: in one loop a vector's
  // division waited for the previous vector's codes.
  float scale[kSteps];
#pragma unroll
  for (int i = 0; i < kSteps; ++i) scale[i] = dev::fp8_block_scale(amax[i]);
  // quant_lanes is a power of two (check_quant_block): the scale's test and index by mask and shift (session 49).
  const int quant_shift = __ffs(a.quant_lanes) - 1;
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    const int idx = threadIdx.x + i * dev::kNormThreads;
    float f[8];
    dev::unpack8(rounded[i], f);
    reinterpret_cast<uint2*>(a.uq + t * row.hidden())[idx] = dev::fp8_codes8(f, scale[i]);
    if ((idx & (a.quant_lanes - 1)) == 0) a.us[t * (row.vecs >> quant_shift) + (idx >> quant_shift)] = scale[i];
  }
}

// dev::norm_block_sum (rms_norm.cuh) with the same order (lanes, then the 4 warps in index order) over the first
// kSiteThreads threads only, on the named barrier kNormBarrier: the finish warp is still in its Sinkhorn steps.
__device__ __forceinline__ float site_norm_block_sum(float v) {
  __shared__ float partial[kSiteThreads / 32];
  v = dev::warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  asm volatile("bar.sync %0, %1;\n" ::"n"(kNormBarrier), "n"(kSiteThreads) : "memory");
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kSiteThreads / 32; ++w) total += partial[w];
  return total;
}

// The tail of hc_site_pre for one token, with the norm's thread mapping (thread i: vectors i, i + 128, ...):
// u = rms_norm(bf16(collapse)) as hc_collapse then rms_norm compute it, then fp8_quantize of bf16(u).
// coef (hc_expand_site_pre): the previous site's mix row (shared memory), the streams are expanded first.
// kSteps: RowShape's (0: the row's size at run time).
template <int kSteps = 0>
__device__ void site_collapse_norm(const SiteArgs& a, int64_t t, const float* pre, const float* coef = nullptr) {
  using dev::kNormMaxVecs;
  using dev::kNormThreads;
  const RowShape<kSteps> row(a);
  const bf16* X_token = a.X + t * kHc * row.hidden();
  float v[kNormMaxVecs][8];
  float ss = 0.0f;
  // The streams' vectors of kLoadBatch steps are loaded before the first is collapsed (issue 4: each step's
  // loads sat behind the previous step's arithmetic, 4 dependent round trips at hidden 4096; now one, two at
  // 5120). The same values in the same order of i.
  constexpr int kLoadBatch = 4;
  static_assert(kNormMaxVecs % kLoadBatch == 0, "whole batches");
#pragma unroll
  for (int i0 = 0; i0 < kNormMaxVecs; i0 += kLoadBatch) {
    if (!row.step(i0)) break;  // block-uniform
    uint4 raw[kLoadBatch][kHc];
    uint4 yraw[kLoadBatch];
#pragma unroll
    for (int b = 0; b < kLoadBatch; ++b) {
      const int idx = threadIdx.x + (i0 + b) * kNormThreads;
      if (row.has(i0 + b, idx)) {
        load_streams8(X_token, row.hidden(), idx, raw[b]);
        if (coef) yraw[b] = reinterpret_cast<const uint4*>(a.y + t * row.hidden())[idx];
      }
    }
#pragma unroll
    for (int b = 0; b < kLoadBatch; ++b) {
      const int i = i0 + b, idx = threadIdx.x + i * kNormThreads;
      if (row.has(i, idx)) {
        if (coef) {  // hc_expand_site_pre: the expanded streams replace the old ones, here and in memory
          expand_streams8(raw[b], yraw[b], coef);
#pragma unroll
          for (int k = 0; k < kHc; ++k)
            reinterpret_cast<uint4*>(a.X_out + t * kHc * row.hidden() + k * row.hidden())[idx] = raw[b][k];
        }
        float acc[8];
        collapse8_raw(raw[b], pre, acc);
        dev::unpack8(dev::pack8(acc), v[i]);  // hc_collapse's bf16 u is what rms_norm reads
        ss = dev::add_squares8(ss, v[i]);
      }
    }
  }
  if constexpr (kSteps > 0) {
    // The norm weight's vectors (in L1: the kernel prefetches it with the streams) are read here, their L1 round
    // trip under the block sum, not one after each vector's stores (store_normed_row_fp8_steps).
    dev::Bf16x8 w[kSteps];
    if (a.norm_weight) {
#pragma unroll
      for (int i = 0; i < kSteps; ++i)
        w[i] = reinterpret_cast<const dev::Bf16x8*>(a.norm_weight)[threadIdx.x + i * kNormThreads];
    }
    const float r = rsqrtf(site_norm_block_sum(ss) / float(row.hidden()) + a.norm_eps);
    store_normed_row_fp8_steps<kSteps>(a, t, v, r, w);
  } else {
    const float r = rsqrtf(site_norm_block_sum(ss) / float(row.hidden()) + a.norm_eps);
    store_normed_row_fp8(a, t, row.vecs, v, r);
  }
}

// Starts `bytes` of a buffer towards L1, one prefetch per 128-byte line, the block's threads side by side (the
// one-block tails: their loads come after a dependent round trip, which the prefetches run under).
__device__ __forceinline__ void prefetch_l1_block(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t b = int64_t(threadIdx.x) * 128; b < bytes; b += int64_t(blockDim.x) * 128)
    prefetch_l1(c + b);
}

// fn is a weight (PDL, cuda/launch.h): its 24 row slices of this block's chunk (1 KB each) start towards L2 while the
// predecessor drains; X, the workspace and every output only after the wait.
__device__ __forceinline__ void prefetch_fn_chunk(const SiteArgs& a, int chunk, int64_t width) {
  if (threadIdx.x < kRows) {
    const int64_t col = int64_t(chunk) * kChunkCols;
    const int64_t cols = min(int64_t(kChunkCols), width - col);  // a multiple of 4 floats: 16-byte sizes
    prefetch_l2_bulk(a.fn + threadIdx.x * width + col, unsigned(cols * sizeof(float)));
  }
}

// Four bf16 values (8 bytes) as floats, exactly: a mix thread's 4 columns of a stream or of y (site_chunk_partials).
__device__ __forceinline__ void unpack_bf16x4(const uint2 raw, float (&x)[4]) {
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  x[0] = lo.x, x[1] = lo.y, x[2] = hi.x, x[3] = hi.y;
}

// The warps' sums (warp_sum) of a mix thread's partials into red[warp].
template <int kTokensPerBlock>
__device__ __forceinline__ void warp_chunk_partials(const float (&acc)[kTokensPerBlock][kRows + 1],
                                                    float (&red)[kMixThreads / 32][kTokensPerBlock][kRows + 1],
                                                    int warp, int lane) {
#pragma unroll
  for (int t = 0; t < kTokensPerBlock; ++t)
#pragma unroll
    for (int r = 0; r <= kRows; ++r) {
      const float s = dev::warp_sum(acc[t][r]);
      if (lane == 0) red[warp][t][r] = s;
    }
}

// Step 1 of the site kernels (hc_site_kernel, hc_site_spread_kernel), every block of the launch: the weight
// prefetches, pdl_wait, this chunk's partial sums of its token group into the workspace, pdl_launch_dependents.
// kPreloadFn (hc_site_spread_kernel, one token): a mix thread's 24 float4 of fn go into registers before pdl_wait (a
// weight: launch.h allows it) and the expansion's stream / column index is computed there too. SASS of the form
// without it (hc_site_kernel): the fn loads (24 LDG.E.128.CONSTANT) issue only after the X / y / previous-row loads
// have returned and been expanded (or, hc_site_pre, squared): two dependent L2 round trips per block before its
// partials, with it one. The same values in the same expressions.
template <int kTokensPerBlock, class Marks = NoSiteMarks, bool kPreloadFn = false>
__device__ __forceinline__ void site_chunk_partials(const SiteArgs& a, Marks mark = {}) {
  const int chunk = blockIdx.x;
  const int64_t t0 = int64_t(blockIdx.y) * kTokensPerBlock;
  const int64_t width = kHc * a.hidden;
  const int64_t record = record_floats(a.chunks);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  prefetch_fn_chunk(a, chunk, width);
  // hc_site_pre: the norm weight (read by the tail, whichever block is last) towards L2 too, once per token row.
  if (a.norm_weight && chunk == 0 && threadIdx.x == kRows)
    prefetch_l2_bulk(a.norm_weight, unsigned(a.hidden * sizeof(bf16)));
  // And the site's base (24 floats) and scale (3): the tail's finish warp reads them first.
  if (chunk == 0 && threadIdx.x == kRows + 1) {
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(a.base));
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(a.base + kRows - 1));
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(a.scale));
  }
  float4 fn_pre[kPreloadFn ? kRows : 1];
  int k_pre = 0;
  int64_t h_pre = 0;
  if constexpr (kPreloadFn) {
    static_assert(kTokensPerBlock == 1, "one token per block");
    const int64_t col = int64_t(chunk) * kChunkCols + threadIdx.x * kColsPerThread;
    if (threadIdx.x < kMixThreads && col < width) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) fn_pre[r] = __ldg(reinterpret_cast<const float4*>(a.fn + r * width + col));
      if (a.y) {
        k_pre = int(col / a.hidden);
        h_pre = col % a.hidden;
      }
    }
  }
  pdl_wait();
  mark(kMarkWaited);

  // 1. This chunk's partial sums (the first kMixThreads threads, kColsPerThread columns each).
  __shared__ float red[kMixThreads / 32][kTokensPerBlock][kRows + 1];
  if (threadIdx.x < kMixThreads) {  // whole warps
    const int64_t col = int64_t(chunk) * kChunkCols + threadIdx.x * kColsPerThread;
    float acc[kTokensPerBlock][kRows + 1];
#pragma unroll
    for (int t = 0; t < kTokensPerBlock; ++t)
#pragma unroll
      for (int r = 0; r <= kRows; ++r) acc[t][r] = 0.0f;

    if (col < width) {  // width is a multiple of 4 (hidden % 8 == 0)
      float x[kTokensPerBlock][4];
#pragma unroll
      for (int t = 0; t < kTokensPerBlock; ++t) {
        if (kTokensPerBlock == 1 && a.y) {
          // hc_expand_site_pre: this chunk's 4 columns of stream k expanded from the old streams (all hc of them at
          // these columns), y and the previous site's coefficients, as the tail writes them; the mix reads those.
          const int k = kPreloadFn ? k_pre : int(col / a.hidden);
          const int64_t h = kPreloadFn ? h_pre : col % a.hidden;
          const float* prev = a.mix + t0 * kRows;  // still the previous site's: the tail overwrites it last
          const float post_k = prev[kHc + k];
          float ck[kHc];
#pragma unroll
          for (int j = 0; j < kHc; ++j) ck[j] = prev[2 * kHc + j * kHc + k];
          float xs[kHc][4], ys[4];
#pragma unroll
          for (int j = 0; j < kHc; ++j)
            unpack_bf16x4(*reinterpret_cast<const uint2*>(a.X + t0 * width + j * a.hidden + h), xs[j]);
          {
            // The combine's parts reach the spread kernel only, whose form this is (kPreloadFn).
            int32_t slots[kSiteCombineMaxTopK];
            site_y_slots<kPreloadFn>(a, t0, slots);
            unpack_bf16x4(site_y4<kPreloadFn>(a, t0, h, slots), ys);
          }
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float xe[kHc] = {xs[0][e], xs[1][e], xs[2][e], xs[3][e]};
            x[t][e] = __bfloat162float(__float2bfloat16(expand_value(post_k, ys[e], ck, xe)));
          }
          acc[t][kRows] = x[t][0] * x[t][0] + x[t][1] * x[t][1] + x[t][2] * x[t][2] + x[t][3] * x[t][3];
          continue;
        }
        if (t0 + t < a.tokens) {
          const uint2 raw = *reinterpret_cast<const uint2*>(a.X + (t0 + t) * width + col);
          const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
          const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
          x[t][0] = lo.x, x[t][1] = lo.y, x[t][2] = hi.x, x[t][3] = hi.y;
        } else {
          x[t][0] = x[t][1] = x[t][2] = x[t][3] = 0.0f;
        }
        acc[t][kRows] = x[t][0] * x[t][0] + x[t][1] * x[t][1] + x[t][2] * x[t][2] + x[t][3] * x[t][3];
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float4 f = kPreloadFn ? fn_pre[r] : __ldg(reinterpret_cast<const float4*>(a.fn + r * width + col));
#pragma unroll
        for (int t = 0; t < kTokensPerBlock; ++t)
          acc[t][r] = f.x * x[t][0] + f.y * x[t][1] + f.z * x[t][2] + f.w * x[t][3];
      }
    }
    warp_chunk_partials<kTokensPerBlock>(acc, red, warp, lane);
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kTokensPerBlock * (kRows + 1); idx += blockDim.x) {
    const int t = idx / (kRows + 1), r = idx % (kRows + 1);
    if (t0 + t < a.tokens) {
      float s = 0.0f;
      for (int w = 0; w < kMixThreads / 32; ++w) s += red[w][t][r];
      a.workspace[(t0 + t) * record + int64_t(chunk) * (kRows + 1) + r] = s;
    }
  }
  // The fn stream is done; only the group's last block has work left (the tail): the next kernel may be scheduled.
  pdl_launch_dependents();
}

// Step 2, the arrival: the block that brings the group's count to `chunks` sees every other block's partials (each
// writer fences its stores before the count, the last block fences before reading them). True in that block.
__device__ __forceinline__ bool site_arrive(unsigned int* counter, int chunks) {
  __shared__ bool last;
  fence_acq_rel_gpu();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == unsigned(chunks - 1);
  __syncthreads();
  if (!last) return false;
  fence_acq_rel_gpu();
  return true;
}

// The one-token tail's first step: the token's record (`chunks` partials) into shared memory with global -> shared
// copies (cp.async, 4 bytes each: a record need not be 16-byte aligned), all in flight at once: as a load -> store
// loop this was a chain of ceil(chunks * 25 / 160) dependent L2 round trips (10 at hidden 4096; SASS: one
// LDG.STRONG per iteration) before any of the tail could start (issue 4). The copies read after the arrival's
// acquire fence (weak reads: they see the other blocks' released partials). The caller syncs the block after.
// kVec16 (hc_site_spread_kernel): 16-byte copies where the record and the staging buffer are 16-byte aligned (one
// token: the record starts the workspace and holds chunks x 25 floats, a multiple of 4 for 64 / 80 chunks): a quarter
// of the copies and L2 requests; the same values.
template <bool kVec16 = false>
__device__ __forceinline__ void stage_partials(const float* rec, int chunks, float* staged) {
  const int n = chunks * (kRows + 1);
  const int threads = int(blockDim.x);
  if (kVec16 && n % 4 == 0 &&
      ((reinterpret_cast<uintptr_t>(rec) | unsigned(__cvta_generic_to_shared(staged))) & 15u) == 0) {  // uniform
    for (int i = 4 * threadIdx.x; i < n; i += 4 * threads)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(unsigned(__cvta_generic_to_shared(staged + i))),
                   "l"(rec + i)
                   : "memory");
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }
  for (int i = threadIdx.x; i < chunks * (kRows + 1); i += blockDim.x)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(unsigned(__cvta_generic_to_shared(staged + i))),
                 "l"(rec + i)
                 : "memory");
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

template <int kTokensPerBlock>
__global__ void __launch_bounds__(kTailThreads) hc_site_kernel(const SiteArgs a) {
  const int64_t t0 = int64_t(blockIdx.y) * kTokensPerBlock;
  const int64_t width = kHc * a.hidden;
  const int64_t record = record_floats(a.chunks);
  const int warp = threadIdx.x / 32;

  site_chunk_partials<kTokensPerBlock>(a);
  auto* counter = reinterpret_cast<unsigned int*>(a.workspace + t0 * record + record - 1);
  if (!site_arrive(counter, a.chunks)) return;

  // 3. The group's tokens.
  if constexpr (kTokensPerBlock == 1) {
    // One token: its partials staged in shared memory first by every thread (all loads in flight at once,
    // __ldcg as above; the sums then run in chunk order from shared memory, the same values).
    __shared__ float pre[kHc];
    __shared__ float staged[kMaxChunks * (kRows + 1)];
    __shared__ float prev[kRows];  // hc_expand_site_pre: the previous site's row, before the finish warp's stores
    if (a.y && threadIdx.x < kRows) prev[threadIdx.x] = a.mix[t0 * kRows + threadIdx.x];
    const float* rec = a.workspace + t0 * record;
    float* out = a.mix + t0 * kRows;
    if (a.u) {
      // hc_site_pre: the collapse reads the token's streams and the norm its weight; start them towards L1 now,
      // under the staging round trip (the loads come after pre).
      prefetch_l1_block(a.X + t0 * width, width * 2);
      if (a.y) prefetch_l1_block(a.y + t0 * a.hidden, a.hidden * 2);
      if (a.norm_weight) prefetch_l1_block(a.norm_weight, a.hidden * 2);
    }
    stage_partials(rec, a.chunks, staged);
    __syncthreads();
    if (!a.u) {  // hc_site_mix: the mix only
      if (warp == kFinishWarp)
        site_finish<false>(staged, a.chunks, width, a.base, a.scale, a.norm_eps, a.hc_eps, a.sinkhorn_iters, out);
    } else if (warp == kFinishWarp) {
      // hc_site_pre: the finish warp publishes pre, then runs the Sinkhorn steps beside the norm threads' tail.
      site_finish<false>(staged, a.chunks, width, a.base, a.scale, a.norm_eps, a.hc_eps, a.sinkhorn_iters, out,
                         pre);
    } else {
      asm volatile("bar.sync %0, %1;\n" ::"n"(kPreBarrier), "n"(kTailThreads) : "memory");  // pre is in `pre`
      site_collapse_norm(a, t0, pre, a.y ? prev : nullptr);
    }
  } else {
    // Groups of 4 tokens (>= kTokensForGroups tokens, hc_site_mix only): one warp per token side by side.
    for (int t = warp; t < kTokensPerBlock && t0 + t < a.tokens; t += kSiteThreads / 32)
      site_finish<true>(a.workspace + (t0 + t) * record, a.chunks, width, a.base, a.scale, a.norm_eps, a.hc_eps,
                        a.sinkhorn_iters, a.mix + (t0 + t) * kRows);
  }
  if (threadIdx.x == 0) *counter = 0u;  // ready for the next launch
}

// ---- The one-token tail spread over the launch's blocks (on unless DEEPINFER_HC_SITE_TAIL=single; bench/gpu/NOTES.md
// "mHC site tail spread over the blocks"). The collapse -> norm -> FP8 tail is split by the RMSNorm's own thread
// mapping (norm thread i owns the vectors i, i + 128, ..., i + 128 (K - 1), K = hidden / 1024), so that every sum
// keeps today's order and the outputs stay bit for bit those of hc_site_kernel<1>: tail block b (chunk b <
// 128 / G) runs norm threads [b G, b G + G) with one vector per thread (slot s: norm thread b G + s % G, its
// vector number s / G). G = max(16, quant_lanes), so a quantization block (quant_lanes consecutive vectors) is
// always inside one tail block and, in a warp, aligned lanes as fp8_quantize8 needs. A tail block:
//  - before the arrival: copies the previous site's row (hc_expand_site_pre; the last block overwrites it once
//    every block has arrived) and marks pre (mix row words 0..3, which nothing reads before this site writes them)
//    kUnpublished; after it, loads its vectors' streams (and y) and norm weight into registers while the last block
//    works;
//  - polls pre (threads 0..3, ld.acquire): the last block's finish warp stores it after marking the 128 sum words
//    kUnpublished (the record's first 128 floats: its staging has consumed the chunk partials there);
//  - collapses (after the expansion) and rounds its vectors to bf16; each of its G norm threads sums its squares
//    in today's order (its K vectors in order, add_squares8) and stores the sum in word b G + s (strong store);
//  - every norm thread i polls word i until it is published (ld.relaxed: the word is its own flag, the value its
//    only payload) and site_norm_block_sum adds them as rms_norm.cuh does (lanes, then warps in index order):
//    the same total in every tail block;
//  - writes its vectors' normed bf16 row, FP8 codes and scales, and (hc_expand_site_pre) the expanded streams.
// Nothing carries over between launches but today's arrival counter (zeroed by the last block, as hc_site_kernel
// does): every mark is stored in the launch that polls it, before (in happens-before order) any poll of it.
// Deadlock: the tail blocks wait for the last block to arrive and for each other; launch_site takes this kernel
// only when the whole grid fits at once (chunks x tokens <= SM count, 192 threads and 17 KB per block), so no
// waiting block can keep another block of its launch from being scheduled (other kernels on the GPU finish
// without waiting for this one; a PDL dependent starts only after every block here has run
// pdl_launch_dependents, i.e. is resident).
constexpr int kSpreadMinGroup = 16;
// V4's activation block of 128 values (model-spec §2) is 16 lanes: the spread kernel's compile-time form for it
// (spread_kernel; fp8_quantize8_lanes's unrolled rounds and the scale's index by constants). Other blocks (V4.1's 32,
// which takes the lagged site's own kernels at decode) keep the run-time form.
constexpr int kSpreadQuantLanes = 16;

__host__ __device__ inline int spread_group(int quant_lanes) {
  return quant_lanes > kSpreadMinGroup ? quant_lanes : kSpreadMinGroup;
}

__device__ __forceinline__ void norm_bar_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kNormBarrier), "n"(kSiteThreads) : "memory");
}

// The finish (session 12, bench/gpu/NOTES.md "mHC site latency"; the same bits as hc_site_kernel<1>'s): every block
// loads its fn slice before pdl_wait (site_chunk_partials kPreloadFn: one L2 round trip less before the arrival); the
// last block stages the record in 16-byte copies, then the finish warp publishes pre and stores post while the comb
// warp (kCombWarp, one more warp per block) runs the comb steps, the Sinkhorn ones by sinkhorn_rows; so the Sinkhorn
// chain starts once the sums are done instead of after pre's fence, sigmoids and stores.
// mark: the step marks (HcSiteMark; NoSiteMarks in the model, StampSiteMarks in hc_site_spread_phases). kQuantLanes:
// fp8_quantize8_lanes's kLanes (kSpreadQuantLanes where the call's codes have blocks of that many lanes,
// spread_kernel).
template <class Marks, int kQuantLanes = 0>
__global__ void __launch_bounds__(kSpreadThreads) hc_site_spread_kernel(const SiteArgs a, Marks mark) {
  using dev::kNormThreads;
  const int chunk = blockIdx.x;
  const int64_t t = blockIdx.y;
  const int64_t width = kHc * a.hidden;
  const int64_t record = record_floats(a.chunks);
  float* rec = a.workspace + t * record;
  auto* counter = reinterpret_cast<unsigned int*>(rec + record - 1);
  float* mix = a.mix + t * kRows;
  const int warp = threadIdx.x / 32;
  const int group = spread_group(kQuantLanes > 0 ? kQuantLanes : a.uq ? a.quant_lanes : 1);
  const int per_thread = int(a.hidden / 8) / kNormThreads;  // K
  const bool tail = chunk < kNormThreads / group;
  const int slot = threadIdx.x;
  const bool has_vec = tail && slot < group * per_thread;
  const int vec = chunk * group + slot % group + kNormThreads * (slot / group);
  float* sums = rec;  // the norm threads' sums of squares: the record's first words, once the last block staged it

  mark(kMarkEntry);
  // The site's base and scale (weights) into shared memory before pdl_wait, by the finish and comb warps, which have
  // no part in the chunk's partials: site_finish read them from L2 after the staging, and the comb warp's chunk sums
  // (~550 cycles) did not cover that round trip (bench/gpu/NOTES.md session 49).
  __shared__ float site_base[kRows], site_scale[3];
  if (warp == kFinishWarp && threadIdx.x % 32 < kRows) site_base[threadIdx.x % 32] = a.base[threadIdx.x % 32];
  if (warp == kCombWarp && threadIdx.x % 32 < 3) site_scale[threadIdx.x % 32] = a.scale[threadIdx.x % 32];
  site_chunk_partials<1, Marks, true>(a, mark);  // fn before pdl_wait
  mark(kMarkPartials);

  __shared__ float prev[kRows];
  if (tail && a.y && threadIdx.x < kRows) prev[threadIdx.x] = mix[threadIdx.x];
  if (tail && threadIdx.x < kHc) st_unpublished(mix + threadIdx.x);  // after its own read of the old value
  const bool last = site_arrive(counter, a.chunks);
  mark(kMarkArrived);
  if (last) {
    __shared__ alignas(16) float staged[kMaxChunks * (kRows + 1)];
    stage_partials<true>(rec, a.chunks, staged);
    __syncthreads();
    mark(kMarkStaged);
    if (warp == kFinishWarp) {
      site_finish<false, true, Marks, FinishPart::kPrePost>(staged, a.chunks, width, site_base, site_scale,
                                                            a.norm_eps, a.hc_eps, a.sinkhorn_iters, mix, nullptr, rec,
                                                            mark);
      if (threadIdx.x % 32 == 0) *counter = 0u;  // ready for the next launch (every block has arrived)
      return;
    }
    if (warp == kCombWarp) {
      site_finish<false, true, Marks, FinishPart::kComb>(staged, a.chunks, width, site_base, site_scale, a.norm_eps,
                                                         a.hc_eps, a.sinkhorn_iters, mix, nullptr, nullptr, mark);
      return;
    }
  }
  if (!tail || warp == kFinishWarp || warp == kCombWarp) return;

  // The norm threads of a tail block (named barrier kNormBarrier). Their inputs now: the round trip runs while the
  // last block stages and sums (after the arrival: its fence would wait for these loads). The norm weight's vector
  // too: read where the norm's factor is known, after the sums' poll, it was one more L2 round trip before the last
  // stores (bench/gpu/NOTES.md session 49).
  uint4 raw[kHc], yraw = {};
  dev::Bf16x8 weight;
  if (has_vec) {
    int32_t slots[kSiteCombineMaxTopK];
    site_y_slots(a, t, slots);
    load_streams8(a.X + t * width, a.hidden, vec, raw);
    if (a.y) yraw = site_y8(a, t, vec, slots);
    if (a.norm_weight) weight = reinterpret_cast<const dev::Bf16x8*>(a.norm_weight)[vec];
  }
  __shared__ float pre[kHc];
  if (threadIdx.x < kHc) {
    unsigned bits;
    while ((bits = ld_acquire_gpu(mix + threadIdx.x)) == kUnpublished) {
    }
    pre[threadIdx.x] = __uint_as_float(bits);
  }
  norm_bar_sync();
  mark(kMarkPrePolled);
  __shared__ float collapsed[kNormThreads][8];
  float v[8];
  if (has_vec) {
    if (a.y) expand_streams8(raw, yraw, prev);
    float acc[8];
    collapse8_raw(raw, pre, acc);
    dev::unpack8(dev::pack8(acc), v);  // hc_collapse's bf16 u is what rms_norm reads
#pragma unroll
    for (int e = 0; e < 8; ++e) collapsed[slot][e] = v[e];
  }
  norm_bar_sync();
  mark(kMarkCollapsed);
  if (slot < group) {  // norm thread chunk * group + slot: its vectors in order, as site_collapse_norm sums them
    float ss = 0.0f;
    for (int k = 0; k < per_thread; ++k) ss = dev::add_squares8(ss, collapsed[k * group + slot]);
    st_relaxed_gpu(sums + chunk * group + slot, ss);
  }
  mark(kMarkSumsStored);
  // The expanded streams: read by no block of this launch (each block expanded its own columns from the old ones
  // for its partials, before the arrival), so they are stored while the sums travel.
  if (has_vec && a.y) {
#pragma unroll
    for (int k = 0; k < kHc; ++k) reinterpret_cast<uint4*>(a.X_out + t * width + k * a.hidden)[vec] = raw[k];
  }
  unsigned bits;
  while ((bits = ld_relaxed_gpu(sums + threadIdx.x)) == kUnpublished) {
  }
  const float r = rsqrtf(site_norm_block_sum(__uint_as_float(bits)) / float(a.hidden) + a.norm_eps);
  mark(kMarkSumsPolled);

  // This block's vectors of u and their codes: site_collapse_norm's expressions. Whole warps run the quantization
  // (its amax shuffles); a quantization block is whole quant_lanes-aligned lanes of one vector number.
  store_normed_vec_fp8<kQuantLanes>(a, t, int(a.hidden / 8), v, r, &weight, vec, has_vec);
  mark(kMarkEnd);
}

// ---- The mix's dot products on tensor cores for >= kTokensForGroups tokens (the default; DEEPINFER_HC_MIX=cuda opts
// out; mhc_site_tail.h, bench/gpu/NOTES.md "mHC site mix on tensor cores"). hc_site_kernel<4> does [tokens x 4 hidden]
// x [4 hidden x 24] on CUDA cores (run 58: 851 us at 4096 tokens, hidden 4096, 3.8 TFLOP/s). Here a warp computes one
// chunk's partials (the same kChunkCols columns, the same workspace record slot) for kMmaTokensPerWarp tokens with
// mma.sync m16n8k16 bf16 -> fp32: A = X (bf16, exact), B = fn split into bf16 hi + mid + lo (f = hi + mid + lo to
// ~2^-24 |f|: each part is the bf16 rounding of what the previous ones left, an exact fp32 difference), so each product
// is exact and the partial differs from today's fp32 sums only by summation order. hi's products go to one accumulator,
// mid's and lo's to a second (three orders of magnitude smaller, so they do not lose bits against hi's), added once at
// the end. The sum of squares comes from the same A registers (fp32 FMAs per thread, then the quad's 4 lanes in fixed
// order). The tail is hc_site_kernel<4>'s: site_finish over the record's chunk partials in chunk order
// (hc_site_mix_tail_kernel); no atomics, no arrival counter (the counters stay zero). k order: a lane loads 8
// consecutive columns (one 16-byte vector) of a row per 32-column step; the mma's k index is a permutation of the
// columns, the same for A and B (the dot product does not depend on it): for the step's first mma, k 2q, 2q + 1 <-
// columns 8q, 8q + 1 and k 2q + 8, 2q + 9 <- 8q + 2, 8q + 3 (lane quad index q); the second mma takes columns 8q + 4 ..
// 8q + 7 the same way.
constexpr int kMmaTokensPerWarp = 32;  // two m16 tiles: fn's split (per lane per step) serves both
constexpr int kMmaTiles = kMmaTokensPerWarp / 16;
// A block: one chunk, kMmaWarps token tiles of kMmaTokensPerWarp. Its warps read the same fn columns at about the
// same time, so 3 of 4 reads hit L1: fn's L2 -> SM traffic is 1.5 MB (V4) per 128 tokens, not per 32 (at 4096
// tokens 50 MB instead of 200 MB, beside X's 134 MB from HBM).
constexpr int kMmaWarps = 4;
constexpr int kMmaTokensPerBlock = kMmaWarps * kMmaTokensPerWarp;
constexpr int kMmaNTiles = kRows / 8;

// Two fp32 values as three bf16 pairs (hi, mid, lo), each pair packed as the mma's b register (first in the low half).
__device__ __forceinline__ void split_bf16x3(float f0, float f1, unsigned& hi, unsigned& mid, unsigned& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(f0, f1);
  const float2 hf = __bfloat1622float2(h);
  const float r0 = f0 - hf.x, r1 = f1 - hf.y;  // exact (Sterbenz / a bf16 rounding's remainder)
  const __nv_bfloat162 m = __floats2bfloat162_rn(r0, r1);
  const float2 mf = __bfloat1622float2(m);
  const __nv_bfloat162 l = __floats2bfloat162_rn(r0 - mf.x, r1 - mf.y);
  hi = reinterpret_cast<const unsigned&>(h);
  mid = reinterpret_cast<const unsigned&>(m);
  lo = reinterpret_cast<const unsigned&>(l);
}

__global__ void __launch_bounds__(kMmaWarps * 32) hc_site_mix_mma_kernel(const SiteArgs a) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  const int chunk = blockIdx.x;
  const int64_t t0 = int64_t(blockIdx.y) * kMmaTokensPerBlock + warp * kMmaTokensPerWarp;
  const int64_t width = kHc * a.hidden;
  const int64_t record = record_floats(a.chunks);
  pdl_wait();  // every block, before any exit (launch.h)
  if (t0 >= a.tokens) return;  // a tile past the end (no barriers below)
  const int64_t col0 = int64_t(chunk) * kChunkCols;
  const int cols = int(min(int64_t(kChunkCols), width - col0));  // a multiple of 32 (width = 4 hidden, hidden % 8 == 0)

  // The lane's rows: tile i, rows g and g + 8 (tokens past the end read as zeros and are not stored).
  const uint4* xrow[kMmaTiles][2];
  bool valid[kMmaTiles][2];
#pragma unroll
  for (int i = 0; i < kMmaTiles; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t t = t0 + i * 16 + h * 8 + g;
      valid[i][h] = t < a.tokens;
      xrow[i][h] = reinterpret_cast<const uint4*>(a.X + (valid[i][h] ? t : 0) * width + col0 + 8 * q);
    }
  const float* frow[kMmaNTiles];
#pragma unroll
  for (int n = 0; n < kMmaNTiles; ++n) frow[n] = a.fn + (n * 8 + g) * width + col0 + 8 * q;

  float acc_hi[kMmaTiles][kMmaNTiles][4] = {}, acc_lo[kMmaTiles][kMmaNTiles][4] = {};
  float ss[kMmaTiles][2] = {};
#pragma unroll 2
  for (int k = 0; k < cols; k += 32) {
    uint4 x[kMmaTiles][2];
#pragma unroll
    for (int i = 0; i < kMmaTiles; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) x[i][h] = valid[i][h] ? xrow[i][h][k / 8] : make_uint4(0, 0, 0, 0);
    // fn's 8 columns of row n * 8 + g, split: part p, mma s (columns 8q + 4s ..): b0 = bp[n][p][2s], b1 = [2s + 1].
    unsigned b[kMmaNTiles][3][4];
#pragma unroll
    for (int n = 0; n < kMmaNTiles; ++n) {
      const float4 f0 = __ldg(reinterpret_cast<const float4*>(frow[n] + k));
      const float4 f1 = __ldg(reinterpret_cast<const float4*>(frow[n] + k) + 1);
      split_bf16x3(f0.x, f0.y, b[n][0][0], b[n][1][0], b[n][2][0]);
      split_bf16x3(f0.z, f0.w, b[n][0][1], b[n][1][1], b[n][2][1]);
      split_bf16x3(f1.x, f1.y, b[n][0][2], b[n][1][2], b[n][2][2]);
      split_bf16x3(f1.z, f1.w, b[n][0][3], b[n][1][3], b[n][2][3]);
    }
#pragma unroll
    for (int i = 0; i < kMmaTiles; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float v[8];
        dev::unpack8(reinterpret_cast<const dev::Bf16x8&>(x[i][h]), v);
#pragma unroll
        for (int e = 0; e < 8; ++e) ss[i][h] += v[e] * v[e];
      }
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        // a0: row g, k 2q.. ; a1: row g + 8; a2: row g, k 2q + 8..; a3: row g + 8 (PTX ISA, m16n8k16 A fragment;
        // the layout sink_attention.cu's ldmatrix_x4 feeds dev::mma_bf16_m16n8k16, b0 / b1: n g, k 2q.. / 2q + 8..).
        const unsigned af[4] = {s ? x[i][0].z : x[i][0].x, s ? x[i][1].z : x[i][1].x, s ? x[i][0].w : x[i][0].y,
                                s ? x[i][1].w : x[i][1].y};
#pragma unroll
        for (int n = 0; n < kMmaNTiles; ++n) {
          dev::mma_bf16_m16n8k16(acc_hi[i][n], af[0], af[1], af[2], af[3], b[n][0][2 * s], b[n][0][2 * s + 1]);
          dev::mma_bf16_m16n8k16(acc_lo[i][n], af[0], af[1], af[2], af[3], b[n][1][2 * s], b[n][1][2 * s + 1]);
          dev::mma_bf16_m16n8k16(acc_lo[i][n], af[0], af[1], af[2], af[3], b[n][2][2 * s], b[n][2][2 * s + 1]);
        }
      }
    }
  }
  pdl_launch_dependents();  // the tail kernel's pdl_wait still waits for this grid to complete

  // C fragment: c0, c1 row g, n 2q, 2q + 1; c2, c3 row g + 8 (PTX ISA). Record slot of chunk: 24 logits, then x . x.
#pragma unroll
  for (int i = 0; i < kMmaTiles; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float s2 = ss[i][h];
      s2 += __shfl_xor_sync(0xFFFFFFFFu, s2, 1);
      s2 += __shfl_xor_sync(0xFFFFFFFFu, s2, 2);
      if (!valid[i][h]) continue;
      float* slot = a.workspace + (t0 + i * 16 + h * 8 + g) * record + int64_t(chunk) * (kRows + 1);
#pragma unroll
      for (int n = 0; n < kMmaNTiles; ++n) {
        slot[n * 8 + 2 * q] = acc_hi[i][n][2 * h] + acc_lo[i][n][2 * h];
        slot[n * 8 + 2 * q + 1] = acc_hi[i][n][2 * h + 1] + acc_lo[i][n][2 * h + 1];
      }
      if (q == 0) slot[kRows] = s2;
    }
}

// The mma path's tail: hc_site_kernel<4>'s, one warp per token (site_finish over the record's partials in chunk
// order), the same function so there is one implementation of the sigmoid / softmax / Sinkhorn steps.
constexpr int kMixTailWarps = 4;
__global__ void __launch_bounds__(kMixTailWarps * 32) hc_site_mix_tail_kernel(const SiteArgs a) {
  pdl_wait();  // the partials are the mma kernel's
  pdl_launch_dependents();
  const int64_t t = int64_t(blockIdx.x) * kMixTailWarps + threadIdx.x / 32;
  if (t >= a.tokens) return;
  site_finish<true>(a.workspace + t * record_floats(a.chunks), a.chunks, kHc * a.hidden, a.base, a.scale, a.norm_eps,
                    a.hc_eps, a.sinkhorn_iters, a.mix + t * kRows);
}

__global__ void hc_collapse_kernel(const bf16* __restrict__ X, const float* __restrict__ mix, int64_t tokens,
                                   int64_t hidden, bf16* __restrict__ u) {
  pdl_wait();  // X and mix are the predecessors' outputs
  pdl_launch_dependents();
  const int64_t vecs_per_token = hidden / 8, total = tokens * vecs_per_token;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / vecs_per_token, v = i % vecs_per_token;
    float pre[kHc];
#pragma unroll
    for (int j = 0; j < kHc; ++j) pre[j] = __ldg(mix + t * kRows + j);
    float acc[8];
    collapse8(X + t * kHc * hidden, hidden, v, pre, acc);
    reinterpret_cast<dev::Bf16x8*>(u + t * hidden)[v] = dev::pack8(acc);
  }
}

__global__ void hc_expand_kernel(const bf16* X, const bf16* __restrict__ y, const float* __restrict__ mix,
                                 int64_t tokens, int64_t hidden, bf16* X_out) {
  pdl_wait();  // y is the sublayer's output, mix the site's
  pdl_launch_dependents();
  const int64_t vecs_per_token = hidden / 8, total = tokens * vecs_per_token;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / vecs_per_token, v = i % vecs_per_token;
    const float* mx = mix + t * kRows;
    float x[kHc][8], yv[8];
#pragma unroll
    for (int j = 0; j < kHc; ++j) dev::unpack8(reinterpret_cast<const dev::Bf16x8*>(X + (t * kHc + j) * hidden)[v], x[j]);
    dev::unpack8(reinterpret_cast<const dev::Bf16x8*>(y + t * hidden)[v], yv);
    // Every input stream is read before any output is written, so X_out may alias X.
#pragma unroll
    for (int k = 0; k < kHc; ++k) {
      const float post = __ldg(mx + kHc + k);
      float o[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = post * yv[e];
#pragma unroll
      for (int j = 0; j < kHc; ++j) {
        const float cjk = __ldg(mx + 2 * kHc + j * kHc + k);  // sum over the FIRST index (model-spec §3)
#pragma unroll
        for (int e = 0; e < 8; ++e) o[e] += cjk * x[j][e];
      }
      reinterpret_cast<dev::Bf16x8*>(X_out + (t * kHc + k) * hidden)[v] = dev::pack8(o);
    }
  }
}

// V4.1's site entry (hc_lagged_site_pre; model-spec §4 "Single-pass mHC"): the collapse takes the previous site's pre,
// and that site's row also holds the post / comb that expand the previous sublayer's output, so the whole entry
// (expand, collapse, norm, FP8 codes) needs no mix of its own and is one block per row: site_collapse_norm with the
// previous row as pre and as coef, the chain's per-element expressions and rms_norm's thread mapping and block sum
// (hc_expand -> hc_collapse -> rms_norm -> fp8_quantize, bit for bit; bench/gpu/NOTES.md "V4.1 site entry in one
// launch"). a.y == nullptr: no expansion (the first site, or an expand already run). kSteps: RowShape's (5: V4.1's
// hidden 5120, hc_lagged_site_pre; 0: any other).
template <int kSteps>
__global__ void __launch_bounds__(kSiteThreads) hc_lagged_site_pre_kernel(const SiteArgs a) {
  __shared__ float row[kRows];
  const int64_t hidden = RowShape<kSteps>(a).hidden();
  // PDL (cuda/launch.h): the norm weight is a weight, towards L2 while the predecessor drains.
  if (blockIdx.x == 0 && threadIdx.x == 0) prefetch_l2_bulk(a.norm_weight, unsigned(hidden * sizeof(bf16)));
  pdl_wait();  // X, y and the mix row are the predecessors' outputs
  pdl_launch_dependents();
  const int64_t t = blockIdx.x;
  // The mix row's load first (asm volatile: issued here): it starts the kernel's first dependent round trip, which
  // began behind the prefetch loops below (~100 instructions, ~300 cycles at 5120).
  unsigned row_bits = 0;
  if (threadIdx.x < kRows) row_bits = ld_relaxed_gpu(a.mix + t * kRows + threadIdx.x);
  // The row's streams, y and the norm weight start towards L1 under the mix row's round trip (hc_site_kernel<1>'s
  // prefetches): site_collapse_norm's loads come after the row is in shared memory.
  prefetch_l1_block(a.X + t * kHc * hidden, kHc * hidden * 2);
  if (a.y) prefetch_l1_block(a.y + t * hidden, hidden * 2);
  prefetch_l1_block(a.norm_weight, hidden * 2);
  if (threadIdx.x < kRows) row[threadIdx.x] = __uint_as_float(row_bits);
  __syncthreads();
  site_collapse_norm<kSteps>(a, t, row, a.y ? row : nullptr);
}

// hc_lagged_site_pre_kernel<5> spread over a cluster (session 51, helper-150; NOTES session 14's "spread form"): one
// block ran ~1,700 instructions a warp between its barriers, one warp a scheduler (issue-bound). Here block s of a
// row's kLaggedSpread (the cluster rank) runs step s of the norm mapping (vectors s x 128 + thread): the expand, the
// collapse, then u and the FP8 codes of that one vector, the same expressions as the one-block kernel's step s. The
// sum of squares keeps its order: every block sends its bf16 collapsed vectors to every block's shared memory (DSMEM),
// so thread i of each block adds the squares of vectors i, i + 128, ..., i + 512 in that order from 0, as thread i of
// the one-block kernel does, then the same lane and warp sums (site_norm_block_sum): every block has the same r.
constexpr int kLaggedSpread = 5;  // V4.1's hidden 5120 = 5 norm steps of 128 vectors

// Bytes the mbarrier of each block of the cluster waits for: the other blocks' bf16 collapsed vectors.
constexpr unsigned kLaggedSpreadBytes = (kLaggedSpread - 1) * kSiteThreads * 16;

// v to shared-memory address `addr` of cluster block `rank`, completing 16 bytes on that block's mbarrier at `bar`
// (st.async: no fence, and the receiver's wait on its own mbarrier orders it; a cluster-scope release barrier after
// plain remote stores was a MEMBAR.ALL.GPU, which waits for the block's expanded-stream stores to reach memory).
__device__ __forceinline__ void st_async_cluster_u4(unsigned addr, unsigned bar, unsigned rank, const uint4 v) {
  unsigned remote, remote_bar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote_bar) : "r"(bar), "r"(rank));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
                   remote),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(remote_bar)
               : "memory");
}

__global__ void __cluster_dims__(kLaggedSpread, 1, 1) __launch_bounds__(kSiteThreads)
    hc_lagged_site_spread_kernel(const SiteArgs a) {
  using dev::kNormThreads;
  constexpr int64_t kHidden = int64_t(kLaggedSpread) * 8 * kNormThreads;
  constexpr int kVecs = kLaggedSpread * kNormThreads;
  __shared__ float row[kRows];
  __shared__ uint4 collapsed[kLaggedSpread][kSiteThreads];  // the row's bf16 collapsed vectors, [step][thread]
  __shared__ __align__(8) uint64_t received;                // mbarrier: kLaggedSpreadBytes from the cluster
  const int s = int(blockIdx.x % kLaggedSpread);           // the cluster rank (1-D grid and cluster)
  const int64_t t = blockIdx.x / kLaggedSpread;
  const int idx = threadIdx.x + s * kNormThreads;
  const unsigned bar = unsigned(__cvta_generic_to_shared(&received));
  if (threadIdx.x == 0) {
    dev::mbar_init(bar, 1);
    dev::mbar_arrive_expect_tx(bar, kLaggedSpreadBytes);  // the one arrival: the phase ends with the last byte
    dev::mbar_fence_init();
  }
  // Arrive now, wait before the first remote store: every block of the cluster has started and initialized its
  // mbarrier by then (PTX ISA "fence.mbarrier_init"; the CUDA guide's rule for distributed shared memory).
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  // PDL (cuda/launch.h): the norm weight is a weight: this block's 2 KB towards L2 and its vector into registers
  // before the wait (without the prefetch's branch ptxas put the load after griddepcontrol.wait).
  if (threadIdx.x == 0 && a.norm_weight)
    prefetch_l2_bulk(a.norm_weight + int64_t(s) * kNormThreads * 8, unsigned(kNormThreads * 8 * sizeof(bf16)));
  uint4 w_bits = make_uint4(0, 0, 0, 0);
  if (a.norm_weight) w_bits = __ldg(reinterpret_cast<const uint4*>(a.norm_weight) + idx);
  pdl_wait();  // X, y and the mix row are the predecessors' outputs
  pdl_launch_dependents();
  unsigned row_bits = 0;
  if (threadIdx.x < kRows) row_bits = ld_relaxed_gpu(a.mix + t * kRows + threadIdx.x);
  // The vector's streams and y need no row: their loads run beside the row's round trip.
  uint4 raw[kHc], yraw;
  load_streams8(a.X + t * kHc * kHidden, kHidden, idx, raw);
  int32_t slots[kSiteCombineMaxTopK];  // y as the MoE's parts (hc_lagged_site_pre's y_parts): the row's expert rows
  site_y_slots(a, t, slots);
  if (a.y) yraw = site_y8(a, t, idx, slots);
  if (threadIdx.x < kRows) row[threadIdx.x] = __uint_as_float(row_bits);
  __syncthreads();
  if (a.y) {  // the expanded streams replace the old ones, here and in memory (site_collapse_norm's)
    expand_streams8(raw, yraw, row);
#pragma unroll
    for (int k = 0; k < kHc; ++k) reinterpret_cast<uint4*>(a.X_out + (t * kHc + k) * kHidden)[idx] = raw[k];
  }
  float acc[8], v[8];
  collapse8_raw(raw, row, acc);
  const dev::Bf16x8 packed = dev::pack8(acc);  // hc_collapse's bf16 u is what rms_norm reads
  dev::unpack8(packed, v);
  // The thread's own slot by a plain store (it alone reads it back), the other blocks' by st.async.
  collapsed[s][threadIdx.x] = reinterpret_cast<const uint4&>(packed);
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
  const unsigned addr = unsigned(__cvta_generic_to_shared(&collapsed[s][threadIdx.x]));
#pragma unroll
  for (int b = 1; b < kLaggedSpread; ++b) {
    const int rank = s + b < kLaggedSpread ? s + b : s + b - kLaggedSpread;
    st_async_cluster_u4(addr, bar, unsigned(rank), reinterpret_cast<const uint4&>(packed));
  }
  // The other blocks' vectors are here (acquire at cluster scope: st.async's complete_tx is a release at cluster
  // scope). Every block waits for all the bytes sent to it, so none exits while a store to it is in flight.
  dev::mbar_wait_acquire_cluster(bar, 0);
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kLaggedSpread; ++i) {
    float f[8];
    dev::unpack8(reinterpret_cast<const dev::Bf16x8&>(collapsed[i][threadIdx.x]), f);
    ss = dev::add_squares8(ss, f);
  }
  const float r = rsqrtf(site_norm_block_sum(ss) / float(kHidden) + a.norm_eps);
  store_normed_vec_fp8(a, t, kVecs, v, r, reinterpret_cast<const dev::Bf16x8*>(&w_bits), idx, true);
}

// ---- The site kernel as it was before session 5 (reference for GpuMhc.SiteMatchesReferenceBitwise,
// mhc_gpu_ref.h): warp 0 of a 128-thread block runs the sums, pre / post and the Sinkhorn steps, then the whole
// block the collapse -> norm -> FP8 codes; hc_site_mix's one-token tail reads the partials through L2.
namespace site_ref {

template <bool kFromL2>
__device__ void site_finish(const float* partial, int chunks, int64_t width, const float* __restrict__ base,
                            const float* __restrict__ scale, float norm_eps, float hc_eps, int sinkhorn_iters,
                            float* out) {
  const int lane = threadIdx.x % 32;
  // Lane -> logit index: comb 8 + lane, pre / post lane - 16, sum of squares 24.
  const int idx = lane < 16 ? 2 * kHc + lane : lane < 24 ? lane - 16 : kRows;
  const float m = chunk_sum<kFromL2>(partial, chunks, idx, lane);
  const float ss = __shfl_sync(0xFFFFFFFFu, m, 24);
  const float r = rsqrtf(ss / float(width) + norm_eps);
  if (lane >= 16 && lane < 20) out[idx] = sigmoidf(m * r * scale[0] + base[idx]) + hc_eps;
  if (lane >= 20 && lane < 24) out[idx] = 2.0f * sigmoidf(m * r * scale[1] + base[idx]);

  // comb: softmax over the last index (a row: 4 neighbouring lanes), + eps. Lanes >= 16 compute along unused.
  float v = lane < 16 ? m * r * scale[2] + base[idx] : 0.0f;
  v = comb_sinkhorn_lanes(v, hc_eps, sinkhorn_iters);
  if (lane < 16) out[idx] = v;
}


// The tail of hc_site_pre for one token, with the norm's thread mapping (thread i: vectors i, i + 128, ...):
// u = rms_norm(bf16(collapse)) as hc_collapse then rms_norm compute it, then fp8_quantize of bf16(u).
__device__ void site_collapse_norm(const SiteArgs& a, int64_t t, const float* pre) {
  using dev::kNormMaxVecs;
  using dev::kNormThreads;
  const int vecs = int(a.hidden / 8);
  const bf16* X_token = a.X + t * kHc * a.hidden;
  float v[kNormMaxVecs][8];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kNormMaxVecs; ++i) {
    const int idx = threadIdx.x + i * kNormThreads;
    if (idx < vecs) {
      float acc[8];
      collapse8(X_token, a.hidden, idx, pre, acc);
      dev::unpack8(dev::pack8(acc), v[i]);  // hc_collapse's bf16 u is what rms_norm reads
      ss = dev::add_squares8(ss, v[i]);
    }
  }
  const float r = rsqrtf(dev::norm_block_sum(ss) / float(a.hidden) + a.norm_eps);
  store_normed_row_fp8(a, t, vecs, v, r);
}

template <int kTokensPerBlock>
__global__ void __launch_bounds__(kSiteThreads) hc_site_ref_kernel(const SiteArgs a) {
  const int chunk = blockIdx.x;
  const int64_t t0 = int64_t(blockIdx.y) * kTokensPerBlock;
  const int64_t width = kHc * a.hidden;
  const int64_t record = record_floats(a.chunks);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  prefetch_fn_chunk(a, chunk, width);
  pdl_wait();

  // 1. This chunk's partial sums (the first kMixThreads threads, kColsPerThread columns each).
  __shared__ float red[kMixThreads / 32][kTokensPerBlock][kRows + 1];
  if (threadIdx.x < kMixThreads) {  // whole warps
    const int64_t col = int64_t(chunk) * kChunkCols + threadIdx.x * kColsPerThread;
    float acc[kTokensPerBlock][kRows + 1];
#pragma unroll
    for (int t = 0; t < kTokensPerBlock; ++t)
#pragma unroll
      for (int r = 0; r <= kRows; ++r) acc[t][r] = 0.0f;

    if (col < width) {  // width is a multiple of 4 (hidden % 8 == 0)
      float x[kTokensPerBlock][4];
#pragma unroll
      for (int t = 0; t < kTokensPerBlock; ++t) {
        if (t0 + t < a.tokens) {
          const uint2 raw = *reinterpret_cast<const uint2*>(a.X + (t0 + t) * width + col);
          const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
          const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
          x[t][0] = lo.x, x[t][1] = lo.y, x[t][2] = hi.x, x[t][3] = hi.y;
        } else {
          x[t][0] = x[t][1] = x[t][2] = x[t][3] = 0.0f;
        }
        acc[t][kRows] = x[t][0] * x[t][0] + x[t][1] * x[t][1] + x[t][2] * x[t][2] + x[t][3] * x[t][3];
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float4 f = __ldg(reinterpret_cast<const float4*>(a.fn + r * width + col));
#pragma unroll
        for (int t = 0; t < kTokensPerBlock; ++t)
          acc[t][r] = f.x * x[t][0] + f.y * x[t][1] + f.z * x[t][2] + f.w * x[t][3];
      }
    }
    warp_chunk_partials<kTokensPerBlock>(acc, red, warp, lane);
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kTokensPerBlock * (kRows + 1); idx += kSiteThreads) {
    const int t = idx / (kRows + 1), r = idx % (kRows + 1);
    if (t0 + t < a.tokens) {
      float s = 0.0f;
      for (int w = 0; w < kMixThreads / 32; ++w) s += red[w][t][r];
      a.workspace[(t0 + t) * record + int64_t(chunk) * (kRows + 1) + r] = s;
    }
  }
  // The fn stream is done; only the group's last block has work left (the tail): the next kernel may be scheduled.
  pdl_launch_dependents();

  // 2. Arrival: the block that brings the group's count to `chunks` sees every other block's partials (each
  // writer fences its stores before the count, the last block fences before reading them).
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  auto* counter = reinterpret_cast<unsigned int*>(a.workspace + t0 * record + record - 1);
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == unsigned(a.chunks - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();

  // 3. The group's tokens. hc_site_mix: the mix only, one warp per token side by side.
  if (!a.u) {
    for (int t = warp; t < kTokensPerBlock && t0 + t < a.tokens; t += kSiteThreads / 32)
      site_ref::site_finish<true>(a.workspace + (t0 + t) * record, a.chunks, width, a.base, a.scale, a.norm_eps, a.hc_eps,
                        a.sinkhorn_iters, a.mix + (t0 + t) * kRows);
    if (threadIdx.x == 0) *counter = 0u;  // ready for the next launch
    return;
  }
  // hc_site_pre (one token per block, launch_site): the mix, the collapse, the norm and the quantization, the
  // token's partials staged in shared memory first (all loads in flight at once, __ldcg as above).
  if constexpr (kTokensPerBlock == 1) {
    __shared__ float mix[kRows];
    __shared__ float staged[kMaxChunks * (kRows + 1)];
    const float* rec = a.workspace + t0 * record;
    for (int i = threadIdx.x; i < a.chunks * (kRows + 1); i += kSiteThreads) staged[i] = __ldcg(rec + i);
    __syncthreads();
    if (warp == 0) {
      site_ref::site_finish<false>(staged, a.chunks, width, a.base, a.scale, a.norm_eps, a.hc_eps, a.sinkhorn_iters, mix);
      __syncwarp();
      if (lane < kRows) a.mix[t0 * kRows + lane] = mix[lane];
    }
    __syncthreads();
    site_ref::site_collapse_norm(a, t0, mix);
  }
  if (threadIdx.x == 0) *counter = 0u;  // ready for the next launch
}


}  // namespace site_ref

int mix_chunks(int64_t hidden) { return int((kHc * hidden + kChunkCols - 1) / kChunkCols); }

void check_hc(int hc, int64_t hidden, const char* what) {
  DI_CHECK(hc == kHc, std::string("cuda::") + what + ": hc_mult " + std::to_string(hc) + " (the kernels are built for 4)");
  DI_CHECK(hidden % 8 == 0, std::string("cuda::") + what + ": hidden " + std::to_string(hidden) + " is not a multiple of 8");
}

void check_quant_block(int quant_block, int64_t hidden, const char* what) {
  DI_CHECK(quant_block >= 8 && quant_block <= 256 && (quant_block & (quant_block - 1)) == 0 &&
               hidden % quant_block == 0,
           std::string("cuda::") + what + ": quantization block " + std::to_string(quant_block) +
               " must be a power of two in [8, 256] dividing hidden " + std::to_string(hidden));
}

void check_site_width(int64_t hidden, const char* what) {
  DI_CHECK(hidden <= kMaxHidden, std::string("cuda::") + what + ": hidden " + std::to_string(hidden) +
                                     " is wider than the site kernel's " + std::to_string(kMaxHidden));
}

unsigned grid_for(int64_t total, int threads) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>((total + threads - 1) / threads, 65535)));
}

// The spread site tail: on unless DEEPINFER_HC_SITE_TAIL=single (the default since session 9; read once).
EnvSwitch<bool> g_site_tail_spread{"DEEPINFER_HC_SITE_TAIL",
                                   [](const char* v) { return !env_equals(v, "single"); }};

// V4.1's site entry spread over a cluster per row (hc_lagged_site_spread_kernel): on unless
// DEEPINFER_HC_LAGGED_SITE=single (read once), up to kLaggedSpreadMaxTokens rows (decode; a cluster of 5 blocks a row).
EnvSwitch<bool> g_lagged_site_spread{"DEEPINFER_HC_LAGGED_SITE",
                                     [](const char* v) { return !env_equals(v, "single"); }};
constexpr int64_t kLaggedSpreadMaxTokens = 8;

// The mix's chunk partials on tensor cores from kTokensForGroups tokens on (hc_site_mix_mma_kernel): on unless
// DEEPINFER_HC_MIX=cuda (read once).
EnvSwitch<bool> g_hc_mix_mma{"DEEPINFER_HC_MIX", [](const char* v) { return !env_equals(v, "cuda"); }};

int device_sm_count() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> counts[kMaxDevices] = {};
  int device = 0;
  DI_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= kMaxDevices) return 0;
  int n = counts[device].load(std::memory_order_relaxed);
  if (n == 0) {
    DI_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    counts[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

// Whether hc_site_spread_kernel takes a one-token-per-block hc_site_pre launch: rows of whole 128-vector norm
// passes (K = hidden / 1024 vectors per norm thread), one vector per tail thread (G K <= 128), and every block of
// the grid resident at once (its tail blocks wait for the last block to arrive): chunks x tokens <= SM count.
// At decode: V4 (hidden 4096, 64 chunks) up to 2 tokens, V4.1 (5120, 80 chunks) 1 token.
bool spread_fits(int64_t tokens, int64_t hidden, int quant_lanes) {
  using dev::kNormThreads;
  const int64_t vecs = hidden / 8;
  if (tokens < 1 || tokens >= kTokensForGroups || vecs % kNormThreads != 0) return false;
  const int group = spread_group(quant_lanes);
  const int chunks = mix_chunks(hidden);
  if (kNormThreads % group != 0 || group * (vecs / kNormThreads) > kNormThreads || kNormThreads / group > chunks ||
      chunks * (kRows + 1) < kNormThreads)
    return false;
  return int64_t(chunks) * tokens <= device_sm_count();
}

// The spread kernel's form for a call: compile-time quantization lanes where they are kSpreadQuantLanes.
template <class Marks>
auto spread_kernel(const SiteArgs& a) {
  return a.uq && a.quant_lanes == kSpreadQuantLanes ? hc_site_spread_kernel<Marks, kSpreadQuantLanes>
                                                    : hc_site_spread_kernel<Marks, 0>;
}

// Whether launch_site runs the site as hc_site_spread_kernel (the one-token-a-launch tail spread over the blocks).
bool takes_spread(const SiteArgs& a) {
  return a.u && g_site_tail_spread.get() && spread_fits(a.tokens, a.hidden, a.uq ? a.quant_lanes : 1);
}

// One token per block below kTokensForGroups tokens, 4 from there on (the mix only: hc_site_pre runs the chain).
// reference: the kernel as it was before session 5 (mhc_gpu_ref.h). The combine's parts (SiteArgs::y_parts) only where
// the spread kernel runs.
void launch_site(SiteArgs a, cudaStream_t stream, bool reference) {
  DI_CHECK(!a.y_parts.set() || (!reference && takes_spread(a)),
           "cuda::hc_expand_site_pre: the combine's parts are read by the spread kernel only");
  if (a.tokens == 0) return;
  DI_CHECK(!a.u || a.tokens < kTokensForGroups, "cuda::hc_site_pre: the one-launch site takes < 64 tokens");
  if (reference) {
    const bool one = a.tokens < kTokensForGroups;
    DI_CUDA_CHECK(launch(one ? site_ref::hc_site_ref_kernel<1> : site_ref::hc_site_ref_kernel<4>,
                         dim3(unsigned(a.chunks), unsigned(one ? a.tokens : (a.tokens + 3) / 4)), dim3(kSiteThreads),
                         0, stream, a));
    return;
  }
  if (takes_spread(a)) {
    DI_CUDA_CHECK(launch(spread_kernel<NoSiteMarks>(a), dim3(unsigned(a.chunks), unsigned(a.tokens)),
                         dim3(kSpreadThreads), 0, stream, a, NoSiteMarks{}));
    return;
  }
  if (!a.u && a.tokens >= kTokensForGroups && g_hc_mix_mma.get() && !batch_invariant()) {
    // The chunk partials on tensor cores, then the same per-token tail. Not in batch-invariant mode: a token's mix
    // would then depend on whether its call had >= 64 tokens (the CUDA-core kernels give every count the same bits).
    DI_CUDA_CHECK(launch(hc_site_mix_mma_kernel,
                         dim3(unsigned(a.chunks), unsigned((a.tokens + kMmaTokensPerBlock - 1) / kMmaTokensPerBlock)),
                         dim3(kMmaWarps * 32), 0, stream, a));
    DI_CUDA_CHECK(launch(hc_site_mix_tail_kernel, dim3(unsigned((a.tokens + kMixTailWarps - 1) / kMixTailWarps)),
                         dim3(kMixTailWarps * 32), 0, stream, a));
    return;
  }
  if (a.tokens < kTokensForGroups) {
    DI_CUDA_CHECK(launch(hc_site_kernel<1>, dim3(unsigned(a.chunks), unsigned(a.tokens)), dim3(kTailThreads), 0,
                         stream, a));
  } else {
    DI_CUDA_CHECK(launch(hc_site_kernel<4>, dim3(unsigned(a.chunks), unsigned((a.tokens + 3) / 4)),
                         dim3(kSiteThreads), 0, stream, a));
  }
}

SiteArgs site_args(const bf16* X, int64_t tokens, int64_t hidden, const HcSite& site, float norm_eps, float hc_eps,
                   int sinkhorn_iters, float* mix, void* workspace) {
  SiteArgs a{};
  a.X = X;
  a.fn = site.fn;
  a.base = site.base;
  a.scale = site.scale;
  a.tokens = tokens;
  a.hidden = hidden;
  a.chunks = mix_chunks(hidden);
  a.norm_eps = norm_eps;
  a.hc_eps = hc_eps;
  a.sinkhorn_iters = sinkhorn_iters;
  a.workspace = static_cast<float*>(workspace);
  a.mix = mix;
  return a;
}

}  // namespace

size_t hc_site_mix_workspace_bytes(int64_t tokens, int hc, int64_t hidden) {
  return size_t(tokens) * size_t(record_floats(mix_chunks(hidden))) * sizeof(float);
}

namespace {

void site_mix(const bf16* X, int64_t tokens, int hc, int64_t hidden, const HcSite& site, float norm_eps, float hc_eps,
              int sinkhorn_iters, float* mix, void* workspace, cudaStream_t stream, bool reference) {
  check_hc(hc, hidden, "hc_site_mix");
  check_site_width(hidden, "hc_site_mix");
  launch_site(site_args(X, tokens, hidden, site, norm_eps, hc_eps, sinkhorn_iters, mix, workspace), stream,
              reference);
}

// The site launches' common outputs (SiteArgs): the normed row u with its norm weight, and the FP8 codes / scales of
// u where uq is set (quant_lanes: 8 values a lane).
void set_site_outputs(SiteArgs& a, const bf16* norm_weight, bf16* u, uint8_t* uq, float* us, int quant_block) {
  a.norm_weight = norm_weight;
  a.u = u;
  a.uq = uq;
  a.us = us;
  a.quant_lanes = uq ? quant_block / 8 : 1;
}

void site_pre(const bf16* X, int64_t tokens, int hc, int64_t hidden, const HcSite& site, float norm_eps,
              float hc_eps, int sinkhorn_iters, const bf16* norm_weight, float* mix, bf16* u, uint8_t* uq, float* us,
              int quant_block, void* workspace, cudaStream_t stream, bool reference) {
  check_hc(hc, hidden, "hc_site_pre");
  check_site_width(hidden, "hc_site_pre");
  DI_CHECK(u != nullptr, "cuda::hc_site_pre: no output row u");
  if (uq) check_quant_block(quant_block, hidden, "hc_site_pre");
  if (tokens >= kTokensForGroups) {
    site_mix(X, tokens, hc, hidden, site, norm_eps, hc_eps, sinkhorn_iters, mix, workspace, stream, reference);
    hc_collapse(X, mix, tokens, hc, hidden, u, stream);
    rms_norm(u, norm_weight, u, tokens, int(hidden), norm_eps, stream);
    if (uq) fp8_quantize(u, uq, us, tokens, int(hidden), quant_block, stream);
    return;
  }
  SiteArgs a = site_args(X, tokens, hidden, site, norm_eps, hc_eps, sinkhorn_iters, mix, workspace);
  set_site_outputs(a, norm_weight, u, uq, us, quant_block);
  launch_site(a, stream, reference);
}

}  // namespace

void hc_site_mix(const bf16* X, int64_t tokens, int hc, int64_t hidden, const HcSite& site, float norm_eps,
                 float hc_eps, int sinkhorn_iters, float* mix, void* workspace, cudaStream_t stream) {
  site_mix(X, tokens, hc, hidden, site, norm_eps, hc_eps, sinkhorn_iters, mix, workspace, stream, false);
}

void hc_site_pre(const bf16* X, int64_t tokens, int hc, int64_t hidden, const HcSite& site, float norm_eps,
                 float hc_eps, int sinkhorn_iters, const bf16* norm_weight, float* mix, bf16* u, uint8_t* uq,
                 float* us, int quant_block, void* workspace, cudaStream_t stream) {
  site_pre(X, tokens, hc, hidden, site, norm_eps, hc_eps, sinkhorn_iters, norm_weight, mix, u, uq, us, quant_block,
           workspace, stream, false);
}

void hc_expand_site_pre(bf16* X, const bf16* y, int64_t tokens, int hc, int64_t hidden, const HcSite& site,
                        float norm_eps, float hc_eps, int sinkhorn_iters, const bf16* norm_weight, float* mix, bf16* u,
                        uint8_t* uq, float* us, int quant_block, void* workspace, cudaStream_t stream,
                        const MoeCombineParts* y_parts) {
  const bool parts = y_parts && y_parts->set();
  // y is the buffer the MoE left unwritten (moe_forward's defer): combined there first where the spread kernel,
  // which reads the parts itself, does not take the call.
  auto combine_into_y = [&] {
    if (parts) moe_combine(*y_parts, tokens, hidden, const_cast<bf16*>(y), stream, false);
  };
  if (tokens >= kTokensForGroups) {  // the site's chain runs anyway: the expansion as its own launch
    combine_into_y();
    hc_expand(X, y, mix, tokens, hc, hidden, X, stream);
    hc_site_pre(X, tokens, hc, hidden, site, norm_eps, hc_eps, sinkhorn_iters, norm_weight, mix, u, uq, us,
                quant_block, workspace, stream);
    return;
  }
  check_hc(hc, hidden, "hc_expand_site_pre");
  check_site_width(hidden, "hc_expand_site_pre");
  DI_CHECK(u != nullptr && y != nullptr, "cuda::hc_expand_site_pre: no output row u or no sublayer output y");
  if (uq) check_quant_block(quant_block, hidden, "hc_expand_site_pre");
  if (tokens == 0) return;
  SiteArgs a = site_args(X, tokens, hidden, site, norm_eps, hc_eps, sinkhorn_iters, mix, workspace);
  set_site_outputs(a, norm_weight, u, uq, us, quant_block);
  a.y = y;
  a.X_out = X;
  if (parts && takes_spread(a) && y_parts->top_k <= kSiteCombineMaxTopK)
    a.y_parts = *y_parts;
  else
    combine_into_y();
  launch_site(a, stream, false);
}

void hc_site_mix_reference(const bf16* X, int64_t tokens, int hc, int64_t hidden, const HcSite& site, float norm_eps,
                           float hc_eps, int sinkhorn_iters, float* mix, void* workspace, cudaStream_t stream) {
  site_mix(X, tokens, hc, hidden, site, norm_eps, hc_eps, sinkhorn_iters, mix, workspace, stream, true);
}

void hc_site_pre_reference(const bf16* X, int64_t tokens, int hc, int64_t hidden, const HcSite& site, float norm_eps,
                           float hc_eps, int sinkhorn_iters, const bf16* norm_weight, float* mix, bf16* u,
                           uint8_t* uq, float* us, int quant_block, void* workspace, cudaStream_t stream) {
  site_pre(X, tokens, hc, hidden, site, norm_eps, hc_eps, sinkhorn_iters, norm_weight, mix, u, uq, us, quant_block,
           workspace, stream, true);
}

bool hc_mix_mma() { return g_hc_mix_mma.get(); }
void set_hc_mix_mma(bool on) { g_hc_mix_mma.set(on); }
bool hc_mix_mma_applies(int64_t tokens) { return tokens >= kTokensForGroups; }

HcSitePhases hc_site_spread_phases(bf16* X, const bf16* y, int64_t hidden, const HcSite& site, float norm_eps,
                                   float hc_eps, int sinkhorn_iters, const bf16* norm_weight, float* mix, bf16* u,
                                   uint8_t* uq, float* us, int quant_block, void* workspace, cudaStream_t stream) {
  DI_CHECK(hc_site_tail_spread_applies(1, kHc, hidden, uq ? quant_block : 0),
           "cuda::hc_site_spread_phases: the spread kernel does not take hidden " + std::to_string(hidden));
  if (uq) check_quant_block(quant_block, hidden, "hc_site_spread_phases");  // store_normed_vec_fp8's mask and shift
  SiteArgs a = site_args(X, 1, hidden, site, norm_eps, hc_eps, sinkhorn_iters, mix, workspace);
  set_site_outputs(a, norm_weight, u, uq, us, quant_block);
  if (y) {
    a.y = y;
    a.X_out = X;
  }
  HcSitePhases p;
  p.blocks = a.chunks;
  p.tail_blocks = dev::kNormThreads / spread_group(a.quant_lanes);
  const size_t n = size_t(p.blocks) * kHcSiteMarks * 2;
  unsigned long long* stamps = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&stamps, n * sizeof(unsigned long long)));
  DI_CUDA_CHECK(cudaMemsetAsync(stamps, 0, n * sizeof(unsigned long long), stream));
  LaunchSpec spec;
  spec.grid = dim3(unsigned(a.chunks), 1u);
  spec.block = dim3(kSpreadThreads);
  spec.stream = stream;
  spec.pdl = false;
  DI_CUDA_CHECK(launch(spec, spread_kernel<StampSiteMarks>(a), a, StampSiteMarks{stamps}));
  std::vector<unsigned long long> h(n);
  DI_CUDA_CHECK(cudaMemcpyAsync(h.data(), stamps, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost, stream));
  DI_CUDA_CHECK(cudaStreamSynchronize(stream));
  DI_CUDA_CHECK(cudaFree(stamps));
  p.ns.resize(n / 2);
  p.cycles.resize(n / 2);
  for (size_t i = 0; i < n / 2; ++i) {
    p.ns[i] = uint64_t(h[2 * i]);
    p.cycles[i] = uint64_t(h[2 * i + 1]);
  }
  return p;
}

bool hc_lagged_site_spread() { return g_lagged_site_spread.get(); }
void set_hc_lagged_site_spread(bool on) { g_lagged_site_spread.set(on); }
bool hc_lagged_site_spread_applies(int64_t tokens, int hc, int64_t hidden) {
  return hc == kHc && hidden == int64_t(kLaggedSpread) * 8 * dev::kNormThreads && tokens >= 1 &&
         tokens <= kLaggedSpreadMaxTokens && tokens * kLaggedSpread <= device_sm_count();
}
bool hc_site_tail_spread() { return g_site_tail_spread.get(); }
void set_hc_site_tail_spread(bool on) { g_site_tail_spread.set(on); }
bool hc_site_tail_spread_applies(int64_t tokens, int hc, int64_t hidden, int quant_block) {
  return hc == kHc && hidden % 8 == 0 && hidden <= kMaxHidden &&
         spread_fits(tokens, hidden, quant_block > 0 ? quant_block / 8 : 1);
}

void hc_collapse(const bf16* X, const float* mix, int64_t tokens, int hc, int64_t hidden, bf16* u,
                 cudaStream_t stream) {
  check_hc(hc, hidden, "hc_collapse");
  if (tokens == 0) return;
  DI_CUDA_CHECK(launch(hc_collapse_kernel, dim3(grid_for(tokens * hidden / 8, 256)), dim3(256), 0, stream, X, mix,
                       tokens, hidden, u));
}

void hc_expand(const bf16* X, const bf16* y, const float* mix, int64_t tokens, int hc, int64_t hidden, bf16* X_out,
               cudaStream_t stream) {
  check_hc(hc, hidden, "hc_expand");
  if (tokens == 0) return;
  DI_CUDA_CHECK(launch(hc_expand_kernel, dim3(grid_for(tokens * hidden / 8, 256)), dim3(256), 0, stream, X, y, mix,
                       tokens, hidden, X_out));
}

void hc_lagged_site_pre(bf16* X, const bf16* y, const float* mix, int64_t tokens, int hc, int64_t hidden,
                        const bf16* norm_weight, float norm_eps, bf16* u, uint8_t* uq, float* us, int quant_block,
                        cudaStream_t stream, const MoeCombineParts* y_parts) {
  check_hc(hc, hidden, "hc_lagged_site_pre");
  check_site_width(hidden, "hc_lagged_site_pre");
  DI_CHECK(u != nullptr && norm_weight != nullptr, "cuda::hc_lagged_site_pre: no output row u or no norm weight");
  DI_CHECK(!(y_parts && y_parts->set()) || y != nullptr,
           "cuda::hc_lagged_site_pre: the combine's parts come with y, the buffer they combine into");
  if (uq) check_quant_block(quant_block, hidden, "hc_lagged_site_pre");
  if (tokens == 0) return;
  const bool spread = g_lagged_site_spread.get() && hc_lagged_site_spread_applies(tokens, hc, hidden);
  SiteArgs a{};
  a.X = X;
  a.tokens = tokens;
  a.hidden = hidden;
  a.norm_eps = norm_eps;
  a.mix = const_cast<float*>(mix);  // read only here (SiteArgs' mix is the mix kernels' output)
  set_site_outputs(a, norm_weight, u, uq, us, quant_block);
  a.y = y;
  a.X_out = X;
  // y left as the MoE's parts (moe_forward's defer): the cluster kernel sums them where it reads y (combine_kernel's
  // sum and rounding: the same bits); the one-block kernel reads y, combined into it first.
  if (y_parts && y_parts->set()) {
    if (spread && y_parts->top_k <= kSiteCombineMaxTopK)
      a.y_parts = *y_parts;
    else
      moe_combine(*y_parts, tokens, hidden, const_cast<bf16*>(y), stream, false);
  }
  if (spread) {
    DI_CUDA_CHECK(launch(hc_lagged_site_spread_kernel, dim3(unsigned(tokens * kLaggedSpread)), dim3(kSiteThreads), 0,
                         stream, a));
    return;
  }
  // V4.1's hidden with a compile-time row shape (RowShape), any other at run time.
  auto* kernel = hidden == 5 * 8 * dev::kNormThreads ? hc_lagged_site_pre_kernel<5> : hc_lagged_site_pre_kernel<0>;
  DI_CUDA_CHECK(launch(kernel, dim3(unsigned(tokens)), dim3(kSiteThreads), 0, stream, a));
}


namespace {

constexpr int kHeadThreads = 256;
constexpr int kMaxHc = 8;

// The reference form (until session 5; kept for the bitwise test, mhc_gpu_ref.h). One block per row: the sum of
// squares and the hc dot products in one pass over the flattened streams (fixed reduction order: per thread, then
// per warp, then warp 0 over the warps), then the collapse. Slow at one row (85.7 us in run 26's ncu table): one
// block walks all 16384 columns with one dependent global load latency per step of its strided loop.
__global__ void __launch_bounds__(kHeadThreads) hc_head_collapse_ref_kernel(const bf16* __restrict__ X, int hc,
                                                                            int64_t hidden,
                                                                            const float* __restrict__ fn,
                                                                            const float* __restrict__ base,
                                                                            const float* __restrict__ scale,
                                                                            float norm_eps, float hc_eps, bf16* h) {
  const int64_t r = blockIdx.x;
  const int64_t width = hc * hidden;
  if (blockIdx.x == 0 && threadIdx.x < hc) prefetch_l2_bulk(fn + threadIdx.x * width, unsigned(width * sizeof(float)));
  pdl_wait();
  const bf16* x = X + r * width;
  float acc[kMaxHc + 1] = {};
  for (int64_t i = threadIdx.x; i < width; i += kHeadThreads) {
    const float v = __bfloat162float(x[i]);
    acc[kMaxHc] += v * v;
    for (int j = 0; j < hc; ++j) acc[j] += fn[j * width + i] * v;
  }
  __shared__ float partial[kHeadThreads / 32][kMaxHc + 1];
  __shared__ float pre[kMaxHc];
  for (int j = 0; j <= kMaxHc; ++j) {
    const float s = dev::warp_sum(acc[j]);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32][j] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float tot[kMaxHc + 1] = {};
    for (int w = 0; w < kHeadThreads / 32; ++w)
      for (int j = 0; j <= kMaxHc; ++j) tot[j] += partial[w][j];
    const float rn = rsqrtf(tot[kMaxHc] / float(width) + norm_eps);
    for (int j = 0; j < hc; ++j) pre[j] = 1.0f / (1.0f + expf(-(tot[j] * rn * scale[0] + base[j]))) + hc_eps;
  }
  __syncthreads();
  pdl_launch_dependents();
  for (int64_t i = threadIdx.x; i < hidden; i += kHeadThreads) {
    float s = 0.0f;
    for (int j = 0; j < hc; ++j) s += pre[j] * __bfloat162float(x[j * hidden + i]);
    h[r * hidden + i] = __float2bfloat16(s);
  }
}

// Session 5 (H8): the same arithmetic in a cluster of 8 blocks per row. The reference's reduction is 256 serial
// chains ("virtual threads" t: columns t, t + 256, t + 512, ... in order, one fma per stream row and one for the
// sum of squares), then a butterfly over each virtual warp's 32 chains, then warp 0 adding the 8 warp sums in
// order. Cluster block w runs virtual warp w: its 256 threads stage the warp's columns (32 consecutive columns
// every 256, of x and of the hc fn rows) in shared memory with asynchronous copies, all in flight at once, then
// its warp 0 runs the 32 chains in the reference's column order and the same butterfly; the 8 sums go to every
// block of the cluster (distributed shared memory), and after the cluster barrier each block adds them in warp
// order as the reference's thread 0 did, computes pre, and collapses its eighth of the hidden columns (per
// column the reference's expression). Every value is the reference's: bitwise the same h.
constexpr int kHeadCluster = kHeadThreads / 32;
constexpr int kHeadStageBytes = 36 * 1024;
constexpr int kHeadCached = 4;  // collapse columns per thread held in registers (hidden <= 8192 all of them)  // a stage: ks steps x 32 columns of x (bf16) and of hc fn rows (fp32)

__device__ __forceinline__ void cp_async_bytes(void* smem, const void* gmem, int bytes) {
  const unsigned s = unsigned(__cvta_generic_to_shared(smem));
  if (bytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(s), "l"(gmem) : "memory");
}

__global__ void __cluster_dims__(kHeadCluster, 1, 1) __launch_bounds__(kHeadThreads)
    hc_head_collapse_kernel(const bf16* __restrict__ X, int hc, int64_t hidden, const float* __restrict__ fn,
                            const float* __restrict__ base, const float* __restrict__ scale, float norm_eps,
                            float hc_eps, bf16* h) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int w = int(cluster.block_rank());  // the virtual warp
  const int64_t r = blockIdx.x / kHeadCluster;
  const int64_t width = hc * hidden;
  const int tid = threadIdx.x, lane = tid % 32;
  // PDL (cuda/launch.h): fn (a weight) towards L2 before the wait, an eighth of each row per block; X after it.
  if (tid < hc) {
    const int64_t part = width / kHeadCluster;
    prefetch_l2_bulk(fn + tid * width + w * part, unsigned(part * sizeof(float)));
  }
  // Arrive now, wait before the first remote shared-memory store: every block of the cluster has started by then
  // (the CUDA guide's rule for distributed shared memory); long done by the time the chains are.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  pdl_wait();

  __shared__ __align__(16) unsigned char stage[kHeadStageBytes];
  __shared__ float partial[kHeadCluster][kMaxHc + 1];
  __shared__ float pre[kMaxHc];
  const int ks_max = kHeadStageBytes / (32 * (hc * 4 + 2));  // steps (of 256 columns) per stage
  float* fs = reinterpret_cast<float*>(stage);                // [hc][ks][32]
  bf16* xs = reinterpret_cast<bf16*>(stage + size_t(hc) * ks_max * 32 * 4);  // [ks][32]
  const bf16* x = X + r * width;
  const int64_t col0 = int64_t(w) * 32;  // the virtual warp's first column
  const int64_t steps = width > col0 ? (width - col0 + kHeadThreads - 1) / kHeadThreads : 0;

  float acc[kMaxHc + 1] = {};
  for (int64_t k0 = 0; k0 < steps; k0 += ks_max) {
    const int ks = int(min(int64_t(ks_max), steps - k0));
    // Quads of 4 columns (width % 8 == 0, so a quad is in range whole or not at all): ks x 8 of them, each from
    // x and from the hc fn rows.
    for (int it = tid; it < ks * 8; it += kHeadThreads) {
      const int k = it / 8, q = it % 8;
      const int64_t col = col0 + (k0 + k) * kHeadThreads + q * 4;
      if (col >= width) continue;
      cp_async_bytes(xs + k * 32 + q * 4, x + col, 8);
      for (int j = 0; j < hc; ++j) cp_async_bytes(fs + (j * ks_max + k) * 32 + q * 4, fn + j * width + col, 16);
    }
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();
    if (tid < 32) {
#pragma unroll 4
      for (int k = 0; k < ks; ++k) {
        if (col0 + (k0 + k) * kHeadThreads + lane < width) {
          const float v = __bfloat162float(xs[k * 32 + lane]);
          acc[kMaxHc] += v * v;
#pragma unroll
          for (int j = 0; j < kMaxHc; ++j)
            if (j < hc) acc[j] += fs[(j * ks_max + k) * 32 + lane] * v;
        }
      }
    }
    __syncthreads();  // the stage is free again
  }
  pdl_launch_dependents();  // the fn pass is done; the collapse below reads X (L2)

  // The collapse's inputs: this block's eighth of the hidden columns, kHeadCached columns per thread loaded into
  // registers now, so that their round trip runs under the exchange and the cluster barriers (the barriers'
  // acquire invalidates L1, so a prefetch there would not survive). Columns past that are read after.
  const int64_t per = (hidden + kHeadCluster - 1) / kHeadCluster;
  const int64_t c_begin = w * per, c1 = min(hidden, (w + 1) * per);
  float xc[kHeadCached][kMaxHc];
#pragma unroll
  for (int c = 0; c < kHeadCached; ++c) {
    const int64_t i = c_begin + tid + int64_t(c) * kHeadThreads;
#pragma unroll
    for (int j = 0; j < kMaxHc; ++j) xc[c][j] = (i < c1 && j < hc) ? __bfloat162float(x[j * hidden + i]) : 0.0f;
  }

  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
  if (tid < 32) {
#pragma unroll
    for (int j = 0; j <= kMaxHc; ++j) {
      const float s = dev::warp_sum(acc[j]);
      // Lane j sends sum j to every block of the cluster.
      if (lane == j)
        for (int b = 0; b < kHeadCluster; ++b) cluster.map_shared_rank(&partial[0][0], b)[w * (kMaxHc + 1) + j] = s;
    }
  }
  cluster.sync();  // every block's partials are in every block (release / acquire at cluster scope)
  if (tid == 0) {
    float tot[kMaxHc + 1] = {};
    for (int ww = 0; ww < kHeadCluster; ++ww)
      for (int j = 0; j <= kMaxHc; ++j) tot[j] += partial[ww][j];
    const float rn = rsqrtf(tot[kMaxHc] / float(width) + norm_eps);
    for (int j = 0; j < hc; ++j) pre[j] = 1.0f / (1.0f + expf(-(tot[j] * rn * scale[0] + base[j]))) + hc_eps;
  }
  __syncthreads();
  // Per column the reference's expression: s = 0, s += pre[j] * x_j in order of j, then bf16.
#pragma unroll
  for (int c = 0; c < kHeadCached; ++c) {
    const int64_t i = c_begin + tid + int64_t(c) * kHeadThreads;
    if (i < c1) {
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < kMaxHc; ++j)
        if (j < hc) s += pre[j] * xc[c][j];
      h[r * hidden + i] = __float2bfloat16(s);
    }
  }
  for (int64_t i = c_begin + tid + int64_t(kHeadCached) * kHeadThreads; i < c1; i += kHeadThreads) {
    float s = 0.0f;
    for (int j = 0; j < hc; ++j) s += pre[j] * __bfloat162float(x[j * hidden + i]);
    h[r * hidden + i] = __float2bfloat16(s);
  }
}

void check_head(int hc, int64_t hidden) {
  DI_CHECK(hc >= 1 && hc <= kMaxHc, "cuda::hc_head_collapse: hc " + std::to_string(hc) + " outside [1, 8]");
}

}  // namespace

void hc_head_collapse(const bf16* X, int rows, int hc, int64_t hidden, const float* fn, const float* base,
                      const float* scale, float norm_eps, float hc_eps, bf16* h, cudaStream_t stream) {
  check_head(hc, hidden);
  if (rows == 0) return;
  // The staged copies need 16-byte fn quads and 8-byte x quads: rows of hc * hidden % 8 == 0 (V4: hidden 4096 /
  // 7168); anything else runs the reference kernel (the same bits).
  const bool aligned = (hc * hidden) % 8 == 0 && reinterpret_cast<uintptr_t>(fn) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(X) % 16 == 0;
  if (!aligned || int64_t(rows) * kHeadCluster > INT32_MAX) {
    hc_head_collapse_reference(X, rows, hc, hidden, fn, base, scale, norm_eps, hc_eps, h, stream);
    return;
  }
  DI_CUDA_CHECK(launch(hc_head_collapse_kernel, dim3(unsigned(rows * kHeadCluster)), dim3(kHeadThreads), 0, stream,
                       X, hc, hidden, fn, base, scale, norm_eps, hc_eps, h));
}

void hc_head_collapse_reference(const bf16* X, int rows, int hc, int64_t hidden, const float* fn, const float* base,
                                const float* scale, float norm_eps, float hc_eps, bf16* h, cudaStream_t stream) {
  check_head(hc, hidden);
  if (rows == 0) return;
  DI_CUDA_CHECK(launch(hc_head_collapse_ref_kernel, dim3(unsigned(rows)), dim3(kHeadThreads), 0, stream, X, hc,
                       hidden, fn, base, scale, norm_eps, hc_eps, h));
}

}  // namespace deepinfer::cuda
