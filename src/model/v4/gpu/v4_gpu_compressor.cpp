#include "model/v4/gpu/v4_gpu_compressor.h"

#include <cmath>

#include "core/error.h"

namespace deepinfer::gpu {

namespace {

// The ratio of the V4 CSA layers, whose indexer compressor runs at the same ratio (model-spec §3: 4).
int csa_ratio(const ModelConfig& c) {
  for (const LayerPlan& l : c.layers)
    if (l.attention == AttentionKind::CSA) return l.compress_ratio;
  return 4;
}

void check_index_shape(const ModelConfig& c) {
  DI_CHECK(c.index_n_heads > 0 && c.index_head_dim > 0 && c.index_topk > 0 && c.q_lora_rank > 0,
           "gpu weights: the V4 indexer needs index_n_heads, index_head_dim, index_topk and q_lora_rank (got " +
               std::to_string(c.index_n_heads) + ", " + std::to_string(c.index_head_dim) + ", " +
               std::to_string(c.index_topk) + ", " + std::to_string(c.q_lora_rank) + ")");
}

}  // namespace

cuda::CompressorGpu upload_v4_compressor(DeviceArena& arena, const Checkpoint& ck, const std::string& prefix, int ratio,
                                         int dim, bool overlap, int64_t hidden) {
  DI_CHECK(ratio > 0 && dim > 0 && hidden > 0, "gpu weights: compressor '" + prefix + "' needs a positive ratio, dim "
                                                   "and hidden");
  cuda::CompressorGpu w;
  w.ratio = ratio;
  w.dim = dim;
  w.overlap = overlap;
  w.hidden = hidden;
  const int64_t width = int64_t(w.series()) * dim;
  // V4's FP8 block (128) only matters if an export stored these bf16 weights as FP8.
  w.wkv = upload_linear_as_bf16(arena, ck, prefix + "wkv", width, hidden, 128);
  w.wgate = upload_linear_as_bf16(arena, ck, prefix + "wgate", width, hidden, 128);
  w.ape = upload_f32(arena, ck, prefix + "ape", {ratio, width});
  w.norm = upload_f32(arena, ck, prefix + "norm.weight", {dim});
  return w;
}

cuda::IndexerGpu upload_v4_indexer(DeviceArena& arena, const Checkpoint& ck, const std::string& prefix,
                                   const ModelConfig& c) {
  check_index_shape(c);
  cuda::IndexerGpu w;
  w.heads = c.index_n_heads;
  w.dim = c.index_head_dim;
  w.topk = c.index_topk;
  w.wq_b = upload_fp8_linear(arena, ck, prefix + "wq_b", int64_t(w.heads) * w.dim, c.q_lora_rank, c.weight_block_size);
  w.weights_proj = upload_linear_as_bf16(arena, ck, prefix + "weights_proj", w.heads, c.hidden_size,
                                         c.weight_block_size);
  w.compressor = upload_v4_compressor(arena, ck, prefix + "compressor.", csa_ratio(c), w.dim, true, c.hidden_size);
  return w;
}

cuda::CompressorGpu random_v4_compressor(DeviceArena& arena, int ratio, int dim, bool overlap, int64_t hidden,
                                         uint64_t seed) {
  DI_CHECK(ratio > 0 && dim > 0 && hidden > 0, "gpu weights: a random compressor needs a positive ratio, dim and hidden");
  cuda::CompressorGpu w;
  w.ratio = ratio;
  w.dim = dim;
  w.overlap = overlap;
  w.hidden = hidden;
  const size_t width = size_t(w.series()) * size_t(dim);
  const float proj_std = float(1.0 / std::sqrt(double(hidden)));
  w.wkv = random_bf16(arena, width * size_t(hidden), 0.0f, proj_std, seed ^ 0x6b76ull);
  w.wgate = random_bf16(arena, width * size_t(hidden), 0.0f, proj_std, seed ^ 0x67617465ull);
  w.ape = random_f32(arena, size_t(ratio) * width, 0.0f, 0.5f, seed ^ 0x617065ull);
  w.norm = random_f32(arena, size_t(dim), 1.0f, 0.1f, seed ^ 0x6e6f726dull);
  return w;
}

cuda::IndexerGpu random_v4_indexer(DeviceArena& arena, const ModelConfig& c, uint64_t seed) {
  check_index_shape(c);
  cuda::IndexerGpu w;
  w.heads = c.index_n_heads;
  w.dim = c.index_head_dim;
  w.topk = c.index_topk;
  w.wq_b = random_fp8_linear(arena, int64_t(w.heads) * w.dim, c.q_lora_rank, c.weight_block_size, seed ^ 0x7771ull);
  w.weights_proj = random_bf16(arena, size_t(w.heads) * size_t(c.hidden_size), 0.0f,
                               float(1.0 / std::sqrt(double(c.hidden_size))), seed ^ 0x77707ull);
  w.compressor = random_v4_compressor(arena, csa_ratio(c), w.dim, true, c.hidden_size, seed ^ 0x636f6d70ull);
  return w;
}

}  // namespace deepinfer::gpu
