// The mHC site's one-token tail spread over the launch's blocks (session 8, H70; bench/gpu/NOTES.md "mHC site tail
// spread over the blocks"): hc_site_pre / hc_expand_site_pre below 64 tokens run hc_site_spread_kernel instead of
// hc_site_kernel<1> where the grid fits (hc_site_tail_spread_applies). The outputs are bit for bit the same
// (tests/gpu/test_hc_site_spread.cpp); only the time differs: batch-1 decode at 4K on 16 V4-Flash layers 3.668 ->
// 3.457 ms (-5.8 %, run 55, same-call A/B), so it is the default since session 9. Its finish (session 12's v2, the
// only form since session 13: bench/gpu/NOTES.md "mHC site latency", runs 78-79): every block loads its fn slice
// before pdl_wait; the last block stages the chunk partials in 16-byte copies, then one more warp per block (192
// threads) runs the comb steps (softmax, Sinkhorn) beside the finish warp's pre / post instead of after them, with the
// 4x4 matrix in rows (shuffles only for the column sums, the quotients of one divisor on a shared reciprocal, no
// slow-path branch; a range check falls back to the lane form).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/kernels.h"

namespace deepinfer::cuda {

// Process-wide switch: on unless DEEPINFER_HC_SITE_TAIL=single (read once; "single": hc_site_kernel<1>'s one-block
// tail); set_hc_site_tail_spread overrides it (tests, A/B in one process). CUDA graphs keep the kernel they were
// captured with.
bool hc_site_tail_spread();
void set_hc_site_tail_spread(bool on);

// Whether a call of this shape takes the spread kernel on the current device when the switch is on (quant_block 0:
// no codes): rows of whole 1024-column norm passes, and chunks x tokens blocks all resident (<= SM count).
bool hc_site_tail_spread_applies(int64_t tokens, int hc, int64_t hidden, int quant_block);

// V4.1's site entry (hc_lagged_site_pre) at hidden 5120 and up to 8 rows: each row over a cluster of 5 blocks
// (hc_lagged_site_spread_kernel, the sum of squares through distributed shared memory in the one-block kernel's
// order), bit for bit the one-block kernel's outputs (tests/gpu/test_hc_lagged_site.cpp). On unless
// DEEPINFER_HC_LAGGED_SITE=single (read once); set_hc_lagged_site_spread overrides it (tests, A/B in one process).
bool hc_lagged_site_spread();
void set_hc_lagged_site_spread(bool on);
// Whether a call of this shape takes the cluster form when the switch is on.
bool hc_lagged_site_spread_applies(int64_t tokens, int hc, int64_t hidden);

// Diagnostics for bench/gpu/mhc_site_latency.cu: the steps of hc_site_spread_kernel's chain (one token), in order.
// Every block stamps kMarkEntry..kMarkArrived; the last arriving block kMarkStaged, its finish warp kMarkPre (pre and
// post stored), its comb warp kMarkComb (the Sinkhorn steps done, comb stored); the tail blocks (chunks < tail_blocks)
// kMarkPrePolled (pre seen, block barrier) .. kMarkEnd.
enum HcSiteMark : int {
  kMarkEntry = 0,    // block entry
  kMarkWaited,       // past pdl_wait (the weight prefetches issued)
  kMarkPartials,     // the chunk's 25 partials stored
  kMarkArrived,      // past the arrival counter (fence, barrier, atomic, barrier)
  kMarkStaged,       // last block: the record staged in shared memory
  kMarkPre,          // finish warp: sums, pre (published), post
  kMarkComb,         // comb warp: Sinkhorn, comb stored
  kMarkPrePolled,    // tail block: pre polled, block barrier
  kMarkCollapsed,    // tail block: expanded, collapsed, bf16 vectors in shared memory
  kMarkSumsStored,   // tail block: its norm threads' sums of squares stored
  kMarkSumsPolled,   // tail block: the 128 sums polled, block sum, rsqrt
  kMarkEnd,          // tail block: u, codes, scales stored
  kHcSiteMarks
};

struct HcSitePhases {
  int blocks = 0, tail_blocks = 0;
  // [block * kHcSiteMarks + mark]: %globaltimer (ns, one clock for all SMs) and clock64 (the block's SM) of lane 0
  // of the stamping warp; 0 where the block did not reach the mark.
  std::vector<uint64_t> ns, cycles;
};

// Runs one token's site (hc_expand_site_pre when y != nullptr, else hc_site_pre; hidden where
// hc_site_tail_spread_applies) on the spread kernel with step marks, eagerly on `stream` (no PDL), and returns the
// stamps. Not capturable (allocates and synchronizes). The outputs are those of the call (the same bits as the
// model's kernel).
HcSitePhases hc_site_spread_phases(bf16* X, const bf16* y, int64_t hidden, const HcSite& site, float norm_eps,
                                   float hc_eps, int sinkhorn_iters, const bf16* norm_weight, float* mix, bf16* u,
                                   uint8_t* uq, float* us, int quant_block, void* workspace, cudaStream_t stream);

// The mix's dot products on tensor cores (session 9, H75; bench/gpu/NOTES.md "mHC site mix on tensor cores"): on
// unless DEEPINFER_HC_MIX=cuda (read once; the default since session 10: hc_site_mix at 4096 tokens 760 -> 94 us,
// run 60), hc_site_mix, and hc_site_pre / hc_expand_site_pre through it, compute the chunk partials of calls with
// hc_mix_mma_applies(tokens) with bf16 mma.sync (fn split into three bf16 parts: fp32-level sums, another summation
// order) instead of hc_site_kernel<4>; the per-token tail is the same. Batch-invariant mode keeps the CUDA-core
// kernels (their bits do not depend on the call's token count). set_hc_mix_mma overrides the variable (tests, A/B).
bool hc_mix_mma();
void set_hc_mix_mma(bool on);
bool hc_mix_mma_applies(int64_t tokens);

}  // namespace deepinfer::cuda
