// Random weights in the checkpoint formats, generated on the device (the full-width benchmark model of issue 4
// does not fit a file we could carry). Every generator is a counter hash of (seed, index), so a buffer's
// contents depend only on the seed; values are finite and scaled like trained weights.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::cuda {

// bf16 / fp32 ~ uniform with the standard deviation `std` around `mean`.
void fill_random_bf16(__nv_bfloat16* x, size_t n, float mean, float std, uint64_t seed, cudaStream_t stream);
void fill_random_f32(float* x, size_t n, float mean, float std, uint64_t seed, cudaStream_t stream);
// e4m3 codes of values ~ uniform in [-1, 1] (never NaN), and e8m0 scales 2^e with e uniform in
// [min_exp, max_exp].
void fill_random_e4m3(uint8_t* x, size_t n, uint64_t seed, cudaStream_t stream);
void fill_random_e8m0(uint8_t* x, size_t n, int min_exp, int max_exp, uint64_t seed, cudaStream_t stream);
// Bytes holding two random e2m1 codes each (MXFP4 weights).
void fill_random_e2m1_pairs(uint8_t* x, size_t n, uint64_t seed, cudaStream_t stream);
// int32 values uniform in [0, high).
void fill_random_int(int32_t* x, size_t n, int32_t high, uint64_t seed, cudaStream_t stream);

}  // namespace deepinfer::cuda
