// Step kernels of the V4.1 GPU forward that V4's step kernels (cuda/step_kernels.h) do not cover.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels.h"

namespace deepinfer::cuda {

// model-spec §4 "Attention", §6: the V4.1 window KV row is MXFP8 over all `dim` channels (rope included): one
// power-of-two scale 2^ceil(log2(max(amax, 1e-4) / 448)) per 32 consecutive channels, the values rounded to e4m3
// (the rule of the CPU's fp8_fake_quant(kv, dim, 32)). Written as bf16 values (exact: an e4m3 code times a power of
// two) to dst [rows, dim], dim % 32 == 0; or, format Mxfp8, as the packed window records of the same codes and
// scales (layers/attention/kv_record.h kvrec41: rows of 528 bytes, dim 512).
constexpr int kV41WindowKvBlock = 32;
static_assert(kV41WindowKvBlock == kvrec41::kWindowBlock, "one MXFP8 block size");
void mxfp8_window_fake_quant(const bf16* kv, int rows, int dim, void* dst, cudaStream_t stream,
                             KvFormat format = KvFormat::Bf16);

// SWA bounded replay (model-spec §9): a decoder layer's ring restarts at the first kept row of a cut prefill, so the
// window of the query at p reads only positions >= base[slot]. Sets the entries of the window lists (window_rows'
// layout: row r's entry w names position p - (window - 1) + w) below the row's slot base to -1.
void cut_window_rows(int32_t* lists, const int32_t* slots, const int32_t* positions, const int32_t* base, int rows,
                     int window, cudaStream_t stream);

}  // namespace deepinfer::cuda
