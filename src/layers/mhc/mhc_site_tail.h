// The mHC site's one-token tail spread over the launch's blocks (session 8, H70; bench/gpu/NOTES.md "mHC site tail
// spread over the blocks"): hc_site_pre / hc_expand_site_pre below 64 tokens run hc_site_spread_kernel instead of
// hc_site_kernel<1> where the grid fits (hc_site_tail_spread_applies). The outputs are bit for bit the same
// (tests/gpu/test_hc_site_spread.cpp); only the time differs: batch-1 decode at 4K on 16 V4-Flash layers 3.668 ->
// 3.457 ms (-5.8 %, run 55, same-call A/B), so it is the default since session 9.
#pragma once

#include <cstdint>

namespace deepinfer::cuda {

// Process-wide switch: on unless DEEPINFER_HC_SITE_TAIL=single (read once; "single": hc_site_kernel<1>'s one-block
// tail); set_hc_site_tail_spread overrides it (tests, A/B in one process). CUDA graphs keep the kernel they were
// captured with.
bool hc_site_tail_spread();
void set_hc_site_tail_spread(bool on);

// Whether a call of this shape takes the spread kernel on the current device when the switch is on (quant_block 0:
// no codes): rows of whole 1024-column norm passes, and chunks x tokens blocks all resident (<= SM count).
bool hc_site_tail_spread_applies(int64_t tokens, int hc, int64_t hidden, int quant_block);

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
