// Device probes of the tensor cores' arithmetic: small launches whose outputs a test compares with exact host math,
// to settle what a kernel design may assume (docs/status.md, issue 4 "Open leads" F).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda {

// The FP8 wgmma's sums of 32 products, one `m64n8k32.f32.e4m3.e4m3` a trial (scale-d false: D = A . B^T, nothing
// accumulated before): a [trials, 64, 32] and b [trials, 8, 32] e4m3 codes, row-major with K innermost; d [trials,
// 64, 8] fp32. One warpgroup a trial, A from registers, B K-major in shared memory (the decode MXFP4 stream's forms,
// cuda/stream_fp4_wgmma.cuh).
void wgmma_e4m3_block_dots(const uint8_t* a, const uint8_t* b, float* d, int trials, cudaStream_t stream);

}  // namespace deepinfer::cuda
