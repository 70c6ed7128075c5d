// Reference forms of mHC GPU kernels that were rewritten for latency (session 5, H8; bench/gpu/NOTES.md "Small
// decode kernels"), kept callable so that tests/gpu/test_mhc.cpp can check the new forms against them bit for bit.
// Not for the model: the new forms give the same bits, faster.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels.h"

namespace deepinfer::cuda {

// cuda::hc_head_collapse (step_kernels.h) as it was: one block of 256 threads per row.
void hc_head_collapse_reference(const bf16* X, int rows, int hc, int64_t hidden, const float* fn, const float* base,
                                const float* scale, float norm_eps, float hc_eps, bf16* h, cudaStream_t stream);

// cuda::hc_site_mix / hc_site_pre (kernels.h) on the site kernel as it was (128 threads; the one-token tail ran the
// Sinkhorn steps before the collapse, and hc_site_mix's read the partials through L2). Same arguments, same
// workspace (its arrival counters are shared with the new kernel: both leave them at zero).
void hc_site_mix_reference(const bf16* X, int64_t tokens, int hc, int64_t hidden, const HcSite& site, float norm_eps,
                           float hc_eps, int sinkhorn_iters, float* mix, void* workspace, cudaStream_t stream);
void hc_site_pre_reference(const bf16* X, int64_t tokens, int hc, int64_t hidden, const HcSite& site, float norm_eps,
                           float hc_eps, int sinkhorn_iters, const bf16* norm_weight, float* mix, bf16* u,
                           uint8_t* uq, float* us, int quant_block, void* workspace, cudaStream_t stream);

}  // namespace deepinfer::cuda
