#include "model/v4/gpu/v4_gpu_moe.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "model/weight_formats.h"

namespace deepinfer::gpu {

namespace {

// The sizes and routing constants of a V4 MoE layer (model-spec §1.1, §3 "MoE").
cuda::MoeGpu v4_moe_shape(const ModelConfig& c) {
  DI_CHECK(c.family == ModelFamily::V4, "gpu moe: upload_v4_moe is the V4 layout (V4.1 adds bias_vl and routes "
                                        "with eps 1e-20)");
  cuda::MoeGpu m;
  m.experts = c.n_routed_experts;
  m.top_k = c.n_experts_per_tok;
  m.act_block = c.weight_block_size;  // W8A8 activation block = the FP8 weight block (model-spec §2)
  m.hidden = c.hidden_size;
  m.inter = c.moe_intermediate_size;
  m.shared_inter = int64_t(c.n_shared_experts) * c.moe_intermediate_size;
  m.swiglu_limit = c.swiglu_limit;
  m.route_scale = c.routed_scaling_factor;
  m.route_eps = 0.0f;  // V4 normalises without an epsilon (model-spec §3)
  m.gate_temp = 1.0f;  // V4 has no gate temperature (V4.1's gate_temp, model-spec §4)
  m.normalize = c.norm_topk_prob;
  return m;
}

// The routed experts held here in slot order: the shard's, or every expert (one GPU).
std::vector<int32_t> held_experts(const cuda::MoeGpu& m, const parallel::RankExperts* shard) {
  if (shard) {
    DI_CHECK(shard->slot_of.size() == size_t(m.experts), "gpu moe: the expert shard maps " +
                                                             std::to_string(shard->slot_of.size()) + " experts, the layer has " +
                                                             std::to_string(m.experts));
    return shard->experts;
  }
  std::vector<int32_t> all(size_t(m.experts));
  for (size_t e = 0; e < all.size(); ++e) all[e] = int32_t(e);
  return all;
}

// Expert parallelism: the layer's replica table (moe_gpu.h MoeGpu::replicas), the same on every rank, in a buffer
// of fixed capacity that a rebalancing rewrites in place (GpuStepModelBase::rebalance_experts).
void upload_expert_slots(DeviceArena& arena, const parallel::RankExperts* shard, cuda::MoeGpu& m) {
  if (!shard) return;
  const parallel::ReplicaTable& t = shard->replicas;
  m.replicas.count = arena.upload(t.count.data(), t.count.size());
  m.replicas.slots = arena.upload(t.slots.data(), t.slots.size());
  m.replicas.max_replicas = t.max_replicas;
  m.replicas.slots_per_rank = t.slots_per_rank;
}

}  // namespace

cuda::MoeGpu upload_v4_moe(DeviceArena& arena, const Checkpoint& ck, const ModelConfig& c, const LayerPlan& plan,
                           const std::string& prefix, const parallel::RankExperts* shard) {
  cuda::MoeGpu m = v4_moe_shape(c);
  const int64_t H = m.hidden, E = m.experts;
  const int block = c.weight_block_size;
  m.gate = upload_linear_as_bf16(arena, ck, prefix + "gate", E, H, block);  // bf16 on disk: exact
  if (plan.hash_moe) {
    const std::string name = prefix + "gate.tid2eid";
    const std::vector<int64_t> table = read_int_table(ck, name, {c.vocab_size, m.top_k});
    std::vector<int32_t> ids(table.size());
    for (size_t i = 0; i < table.size(); ++i) {
      DI_CHECK(table[i] >= 0 && table[i] < E, "checkpoint: tensor '" + name + "' routes token " +
                                                  std::to_string(i / size_t(m.top_k)) + " to expert " +
                                                  std::to_string(table[i]) + ", outside [0, " + std::to_string(E) + ")");
      ids[i] = int32_t(table[i]);
    }
    m.tid2eid = arena.upload(ids.data(), ids.size());
    m.vocab = c.vocab_size;
  } else {
    m.gate_bias = upload_f32(arena, ck, prefix + "gate.bias", {E});
  }
  upload_moe_experts(arena, ck, c, prefix, m, shard);
  cuda::moe_validate(m);
  return m;
}

void upload_moe_experts(DeviceArena& arena, const Checkpoint& ck, const ModelConfig& c, const std::string& prefix,
                        cuda::MoeGpu& m, const parallel::RankExperts* shard) {
  const int64_t H = m.hidden, I = m.inter, S = m.shared_inter;
  const int block = c.weight_block_size;
  const std::vector<int32_t> held = held_experts(m, shard);
  m.w13 = upload_fp4_experts(arena, ck, prefix + "experts.", held, {"w1", "w3"}, I, H);
  m.w2 = upload_fp4_experts(arena, ck, prefix + "experts.", held, {"w2"}, H, I);
  upload_expert_slots(arena, shard, m);
  m.shared_w13 =
      upload_fp8_stacked(arena, ck, {prefix + "shared_experts.w1", prefix + "shared_experts.w3"}, S, H, block);
  m.shared_w2 = upload_fp8_linear(arena, ck, prefix + "shared_experts.w2", H, S, block);
}

cuda::MoeGpu random_v4_moe(DeviceArena& arena, const ModelConfig& c, bool hash_layer, uint64_t seed,
                           const parallel::RankExperts* shard) {
  cuda::MoeGpu m = v4_moe_shape(c);
  const int64_t H = m.hidden, E = m.experts;
  uint64_t s = seed * 7919;
  // Logits of O(1) for a normalised (unit-RMS) input.
  m.gate = random_bf16(arena, size_t(E * H), 0.0f, float(1.0 / std::sqrt(double(H))), ++s);
  if (hash_layer) {
    DI_CHECK(m.top_k >= 1 && m.top_k <= m.experts, "gpu moe: top_k " + std::to_string(m.top_k) + " of " +
                                                       std::to_string(m.experts) + " experts");
    std::mt19937_64 rng(++s);
    std::uniform_int_distribution<int32_t> pick(0, int32_t(E) - 1);
    std::vector<int32_t> ids(size_t(c.vocab_size) * size_t(m.top_k));
    for (int64_t t = 0; t < c.vocab_size; ++t) {
      int32_t* row = ids.data() + t * m.top_k;
      for (int k = 0; k < m.top_k; ++k) {
        int32_t e;
        do e = pick(rng);
        while (std::find(row, row + k, e) != row + k);
        row[k] = e;
      }
    }
    m.tid2eid = arena.upload(ids.data(), ids.size());
    m.vocab = c.vocab_size;
  } else {
    m.gate_bias = random_f32(arena, size_t(E), 0.0f, 0.1f, ++s);
  }
  random_moe_experts(arena, c, m, s, shard);
  cuda::moe_validate(m);
  return m;
}

void random_moe_experts(DeviceArena& arena, const ModelConfig& c, cuda::MoeGpu& m, uint64_t& s,
                        const parallel::RankExperts* shard) {
  const int64_t H = m.hidden, I = m.inter, S = m.shared_inter;
  const int block = c.weight_block_size;
  const std::vector<int32_t> held = held_experts(m, shard);
  m.w13 = random_fp4_experts(arena, held, 2 * I, H, ++s);
  m.w2 = random_fp4_experts(arena, held, H, I, ++s);
  upload_expert_slots(arena, shard, m);
  m.shared_w13 = random_fp8_linear(arena, 2 * S, H, block, ++s);
  m.shared_w2 = random_fp8_linear(arena, H, S, block, ++s);
}

std::optional<parallel::RankExperts> layer_expert_shard(const ModelConfig& c,
                                                        const parallel::ExpertPlacement* placement, int layer,
                                                        int rank, const std::string& who) {
  if (!placement) return std::nullopt;
  DI_CHECK(placement->experts == c.n_routed_experts && placement->layers() == c.num_layers,
           who + ": the expert placement has " + std::to_string(placement->layers()) + " layers of " +
               std::to_string(placement->experts) + " experts, the config " + std::to_string(c.num_layers) + " of " +
               std::to_string(c.n_routed_experts));
  return parallel::rank_experts(*placement, layer, rank);
}

}  // namespace deepinfer::gpu
