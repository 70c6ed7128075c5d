// Device weights of the V4 compressors and the lightning indexer (model-spec.md §3 "Compressor", "Lightning
// indexer", §5 checkpoint names) for the CUDA kernels of layers/compressor/compressor_gpu.h and
// layers/indexer/indexer_gpu.h, owned by a DeviceArena: from a checkpoint in the official formats, or random
// stand-ins of the same shapes for the full-width benchmark model.
#pragma once

#include <cstdint>
#include <string>

#include "layers/compressor/compressor_gpu.h"
#include "layers/indexer/indexer_gpu.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/gpu/device_weights.h"

namespace deepinfer::gpu {

// `<prefix>wkv.weight`, `<prefix>wgate.weight` [series * dim, hidden] (bf16 on disk; an FP8 export is
// dequantized exactly), `<prefix>ape` f32 [ratio, series * dim], `<prefix>norm.weight` [dim] (as fp32).
// prefix e.g. "layers.2.attn.compressor." or "layers.2.attn.indexer.compressor.".
cuda::CompressorGpu upload_v4_compressor(DeviceArena& arena, const Checkpoint& ck, const std::string& prefix, int ratio,
                                         int dim, bool overlap, int64_t hidden);

// `<prefix>wq_b` FP8 [index_n_heads * index_head_dim, q_lora_rank] with its block scales, `<prefix>weights_proj`
// [index_n_heads, hidden] (bf16), and `<prefix>compressor.*` (overlapping, the CSA ratio, index_head_dim wide).
// prefix e.g. "layers.2.attn.indexer.".
cuda::IndexerGpu upload_v4_indexer(DeviceArena& arena, const Checkpoint& ck, const std::string& prefix,
                                   const ModelConfig& c);

// Random stand-ins, deterministic in `seed`, scaled like the trained weights (and the test fixtures):
// projections ~ 1/sqrt(hidden), ape ~ 0.5, norm ~ 1 +- 0.1.
cuda::CompressorGpu random_v4_compressor(DeviceArena& arena, int ratio, int dim, bool overlap, int64_t hidden,
                                         uint64_t seed);
cuda::IndexerGpu random_v4_indexer(DeviceArena& arena, const ModelConfig& c, uint64_t seed);

}  // namespace deepinfer::gpu
