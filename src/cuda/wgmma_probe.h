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

// The bf16 mma.sync's sums of 128 products, as the index scores take them (layers/indexer/index_scoring.cuh): eight
// `m16n8k16.f32.bf16.bf16.f32` a trial accumulating into one fp32 fragment, K in order. a [trials, 16, 128] and
// b [trials, 8, 128] bf16 bits, row-major with K innermost; d [trials, 16, 8] fp32. One warp a trial, the fragments
// read from global memory.
void mma_bf16_dots128(const uint16_t* a, const uint16_t* b, float* d, int trials, cudaStream_t stream);

}  // namespace deepinfer::cuda
