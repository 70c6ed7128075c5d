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

}  // namespace deepinfer::cuda
