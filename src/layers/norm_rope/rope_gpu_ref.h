// Reference forms of the norm / RoPE GPU kernels rewritten for latency (issue 4, batch-1 decode; bench/gpu/NOTES.md
// "Decode chain: RoPE, KV row, PDL"), kept callable so that tests/gpu/test_norm_rope.cpp can check the new forms
// against them bit for bit. Not for the model: the new forms give the same bits, faster.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels.h"

namespace deepinfer::cuda {

// cuda::rope as it was: each head's pair stored before the next head's pair is loaded.
void rope_reference(bf16* x, int64_t token_stride, const int32_t* positions, const float* inv_freq, int64_t tokens,
                    int heads, int head_dim, int rope_dim, bool inverse, cudaStream_t stream);

}  // namespace deepinfer::cuda
