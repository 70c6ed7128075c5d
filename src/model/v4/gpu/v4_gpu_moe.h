// The V4 MoE sublayer's weights in device memory (model-spec.md §3 "MoE", §5 checkpoint layout), in the formats
// cuda::moe_forward reads: the gate as bf16, gate.bias fp32 (or the hash table gate.tid2eid as int32 on the first
// num_hash_layers layers), the routed experts as MXFP4 codes + e8m0 scales with w1 | w3 stacked per expert, the
// shared expert as FP8 codes + 128-block e8m0 scales with w1 | w3 stacked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "layers/moe/moe_gpu.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/gpu/device_weights.h"
#include "parallel/expert_shard.h"

namespace deepinfer::gpu {

// `prefix` names the layer's FFN, e.g. "layers.3.ffn.". Validates every tensor's dtype and shape (by name), the
// hash table's expert ids, and the shapes moe_forward supports. With `shard` (expert parallelism) only the rank's
// routed experts are uploaded, in its slot order (redundant copies included), and MoeGpu::replicas maps the router's
// experts to the group's slots; the router, its bias / hash table and the shared expert are whole on every rank.
cuda::MoeGpu upload_v4_moe(DeviceArena& arena, const Checkpoint& ck, const ModelConfig& c, const LayerPlan& plan,
                           const std::string& prefix, const parallel::RankExperts* shard = nullptr);

// The parts of an MoE layer V4 and V4.1 store alike under `prefix` (model-spec §5): the routed experts (MXFP4,
// w1 | w3 stacked per expert, then w2) and the shared expert (FP8 with the config's weight block). m's shape
// fields must be set; the gate and its bias / hash table are the caller's (they differ by family).
void upload_moe_experts(DeviceArena& arena, const Checkpoint& ck, const ModelConfig& c, const std::string& prefix,
                        cuda::MoeGpu& m, const parallel::RankExperts* shard = nullptr);

// Random stand-ins of what upload_moe_experts uploads, drawn from `seed` in this order (each draw advances it):
// w1 | w3, w2 (each routed expert from its own seed: a rank's `shard` holds the very experts of the one-GPU model),
// the shared w1 | w3, the shared w2.
void random_moe_experts(DeviceArena& arena, const ModelConfig& c, cuda::MoeGpu& m, uint64_t& seed,
                        const parallel::RankExperts* shard = nullptr);

// The routed experts `rank` holds at `layer` under `placement` (expert parallelism), none without a placement (one
// GPU: every expert). Checks that the placement is of the config's layers and experts; `who` names the model.
std::optional<parallel::RankExperts> layer_expert_shard(const ModelConfig& c,
                                                        const parallel::ExpertPlacement* placement, int layer,
                                                        int rank, const std::string& who);

// Full-width benchmark stand-in with the same formats and shapes, deterministic in `seed`; a hash layer gets a
// random table of distinct experts per token. Each routed expert is drawn from its own seed, so a rank's `shard`
// holds the very experts of the one-GPU model.
cuda::MoeGpu random_v4_moe(DeviceArena& arena, const ModelConfig& c, bool hash_layer, uint64_t seed,
                           const parallel::RankExperts* shard = nullptr);

}  // namespace deepinfer::gpu
