// The memory planner (src/parallel/memory_plan.h) against byte counts worked out here from the tensor shapes of
// model-spec §5 / §6 and against the published totals of the official checkpoints.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "model/config.h"
#include "parallel/memory_plan.h"

namespace deepinfer::parallel {
namespace {

const std::string kTools = std::string(DEEPINFER_SOURCE_DIR) + "/tools/gpu/";

ModelConfig v4_flash() { return load_model_config(kTools + "v4_flash_config.json"); }
ModelConfig v41_flash() { return load_model_config(kTools + "v41_flash_config.json"); }

int64_t model_total(const MemoryPlan& p) {
  int64_t total = 0;
  for (const TensorClassPlan& t : p.classes) total += t.model_bytes;
  return total;
}

const TensorClassPlan& find_class(const MemoryPlan& p, const std::string& prefix) {
  for (const TensorClassPlan& t : p.classes)
    if (t.name.rfind(prefix, 0) == 0) return t;
  throw Error("no tensor class '" + prefix + "'");
}

// model-spec §5: V4-Flash has 69,187 tensors and 159,609,485,896 bytes (43 layers + the MTP layer).
TEST(MemoryPlan, V4FlashTotalEqualsTheOfficialCheckpoint) {
  ParallelLayout l;
  l.gpus = 2;
  EXPECT_EQ(model_total(plan_memory(v4_flash(), l)), 159609485896LL);
}

TEST(MemoryPlan, EngineCopiesOfTheGpuModel) {
  // V4-Flash: one byte per element of wq_a [1024, 4096], wq_b [32768, 1024], wkv [512, 4096], wo_b [4096, 8192],
  // shared w1|w3 [4096, 4096], w2 [4096, 2048] and the 21 CSA indexers' wq_b [8192, 1024]; wo_a [8192, 4096] in bf16;
  // 43 layers + the MTP layer.
  ParallelLayout l;
  l.gpus = 2;
  MemoryPlan p = plan_memory(v4_flash(), l);
  const int64_t per_layer = 1024LL * 4096 + 32768LL * 1024 + 512LL * 4096 + 4096LL * 8192 + 4096LL * 4096 +
                            4096LL * 2048 + 2LL * 8192 * 4096;
  const TensorClassPlan& copies = find_class(p, "engine copies");
  EXPECT_EQ(copies.rank_bytes, 44 * per_layer + 21 * 8192LL * 1024);
  EXPECT_EQ(copies.model_bytes, 0);
  l.engine_copies = false;
  MemoryPlan without = plan_memory(v4_flash(), l);
  EXPECT_EQ(without.weight_bytes_per_rank, p.weight_bytes_per_rank - copies.rank_bytes);
}

TEST(MemoryPlan, RoutedExpertBytesFromTheShapes) {
  // V4: w1, w3 I8 [2048, 2048] + e8m0 [2048, 128]; w2 I8 [4096, 1024] + [4096, 64].
  EXPECT_EQ(routed_expert_bytes(v4_flash()), 2 * (2048 * 2048 + 2048 * 128) + (4096 * 1024 + 4096 * 64));
  // V4.1: w1, w3 I8 [2304, 2560] + [2304, 160]; w2 I8 [5120, 1152] + [5120, 72].
  EXPECT_EQ(routed_expert_bytes(v41_flash()), 2 * (2304 * 2560 + 2304 * 160) + (5120 * 1152 + 5120 * 72));
}

TEST(MemoryPlan, V41FlashExpertsAndEngramAsTheIssueStates) {
  ParallelLayout l;
  l.gpus = 8;
  MemoryPlan p = plan_memory(v41_flash(), l);
  const TensorClassPlan& experts = find_class(p, "routed experts");
  EXPECT_EQ(experts.model_bytes, int64_t(40) * 384 * 18800640);
  EXPECT_NEAR(double(experts.model_bytes), 289e9, 0.5e9);  // "its experts alone are ~289 GB"
  const TensorClassPlan& engram = find_class(p, "Engram tables");
  EXPECT_EQ(engram.model_bytes, 202758032400LL);  // model-spec §5: (384006168 + 384016682) rows x (256 + 8) B
  EXPECT_EQ(engram.placement, Placement::Host);
  EXPECT_EQ(engram.rank_bytes, 0);
  EXPECT_EQ(p.host_bytes, 202758032400LL);
  // The text model without the vision tower: less than the checkpoint's 510,296,708,312 bytes, ~509 GB
  // (algorithms.md §0).
  EXPECT_LT(model_total(p), 510296708312LL);
  EXPECT_NEAR(double(model_total(p)), 509e9, 1e9);
  // DSpark draft ≈ 7.9 GB (model-spec §5).
  EXPECT_NEAR(double(find_class(p, "DSpark draft (dense)").model_bytes +
                     find_class(p, "DSpark draft routed experts").model_bytes),
              7.9e9, 0.3e9);
}

TEST(MemoryPlan, ExpertSlotsPerRankWithRedundancy) {
  ParallelLayout l;
  l.gpus = 8;
  l.redundant_experts = 32;
  MemoryPlan p = plan_memory(v41_flash(), l);
  EXPECT_EQ(p.expert_slots_per_rank, (384 + 32) / 8);
  EXPECT_EQ(find_class(p, "routed experts").rank_bytes, int64_t(40) * 52 * 18800640);
  // EP 4 inside 8 GPUs: two EP groups, each rank holds a quarter of every layer's experts.
  l.ep_size = 4;
  p = plan_memory(v41_flash(), l);
  EXPECT_EQ(p.expert_slots_per_rank, (384 + 32) / 4);
}

TEST(MemoryPlan, V41FlashFitsOnEp4AndEp8WithEngramOnHost) {
  for (int gpus : {4, 8}) {
    ParallelLayout l;
    l.gpus = gpus;
    l.redundant_experts = gpus * 4;
    MemoryPlan p = plan_memory(v41_flash(), l);
    EXPECT_TRUE(p.fits) << gpus << " GPUs: " << p.problem;
    EXPECT_GT(p.kv.tokens_per_rank, 1000000) << gpus;
    EXPECT_LT(p.weight_bytes_per_rank, l.gpu_memory_bytes);
  }
}

TEST(MemoryPlan, DoesNotFitIsExplained) {
  ParallelLayout l;
  l.gpus = 1;
  MemoryPlan p = plan_memory(v4_flash(), l);  // 159.6 GB of weights on one 140 GiB GPU
  EXPECT_FALSE(p.fits);
  EXPECT_EQ(p.kv.tokens_per_rank, 0);
  EXPECT_NE(p.problem.find("does not fit"), std::string::npos) << p.problem;
  EXPECT_NE(format_memory_plan(p).find("does not fit"), std::string::npos);
  // V4.1-Flash with the Engram tables row-sharded over 2 GPUs: 289 / 2 + 203 / 2 GB per rank.
  ParallelLayout two;
  two.gpus = 2;
  two.engram_on_host = false;
  EXPECT_FALSE(plan_memory(v41_flash(), two).fits);
  // V4-Flash on two GPUs (EP2) fits (algorithms.md §0).
  EXPECT_TRUE(plan_memory(v4_flash(), two).fits);
}

TEST(MemoryPlan, EngramRowShardedOnTheDevice) {
  ParallelLayout l;
  l.gpus = 8;
  l.engram_on_host = false;
  MemoryPlan p = plan_memory(v41_flash(), l);
  const TensorClassPlan& engram = find_class(p, "Engram tables");
  EXPECT_EQ(engram.placement, Placement::RowSharded);
  // ceil(rows / 8) rows of 264 bytes per layer table.
  EXPECT_EQ(engram.rank_bytes, ((384006168 + 7) / 8 + (384016682 + 7) / 8) * int64_t(264));
  EXPECT_EQ(p.host_bytes, 0);
}

TEST(MemoryPlan, CachedStatePerTokenAsModelSpec6) {
  ParallelLayout l;
  l.gpus = 8;
  l.kv_storage = KvStorage::Packed;
  // V4.1: 3 x (288 / 2 + 68 / 2) + (288 + 68) = 890 B per token.
  MemoryPlan p = plan_memory(v41_flash(), l);
  EXPECT_DOUBLE_EQ(p.kv.token_bytes, 890.0);
  // Windows 40 x 128 x 528 plus the 3 DSpark rings, and the ratio-2 partial groups [2, 512] x 2 fp32 at 2, 8, 14.
  EXPECT_EQ(p.kv.sequence_bytes, int64_t(43) * 128 * 528 + 3 * (2 * 2 * 512 * 4));
  // V4: 21 CSA x (584 / 4 + 68 / 4) + 20 HCA x 584 / 128 ≈ 3.5 KB.
  ParallelLayout two;
  two.gpus = 2;
  two.kv_storage = KvStorage::Packed;
  EXPECT_DOUBLE_EQ(plan_memory(v4_flash(), two).kv.token_bytes, 21 * (584.0 / 4 + 68.0 / 4) + 20 * 584.0 / 128);
  // bf16 storage (the GPU model today): 21 x (1024 + 256) / 4 + 20 x 1024 / 128 = 6880 ("6.9 KB if bf16").
  two.kv_storage = KvStorage::Bf16;
  MemoryPlan b = plan_memory(v4_flash(), two);
  EXPECT_DOUBLE_EQ(b.kv.token_bytes, 6880.0);
  // Windows of 43 + 1 MTP layers in bf16, CSA rings kv + gate [8, 2 x 512] and indexer [8, 2 x 128], HCA [128, 512].
  EXPECT_EQ(b.kv.sequence_bytes, int64_t(44) * 128 * 1024 + 21 * 2 * (8 * 1024 + 8 * 256) * 4 + 20 * 2 * 128 * 512 * 4);
}

TEST(MemoryPlan, TokensFollowTheBudget) {
  ParallelLayout l;
  l.gpus = 8;
  MemoryPlan p = plan_memory(v41_flash(), l);
  ASSERT_TRUE(p.fits);
  EXPECT_LE(double(p.kv.tokens_per_rank) * p.kv.token_bytes, double(p.kv_budget_bytes));
  EXPECT_GT(double(p.kv.tokens_per_rank + 1) * p.kv.token_bytes, double(p.kv_budget_bytes));
  // One more resident sequence costs exactly its window and compressor rings.
  l.sequences_per_rank += 1;
  EXPECT_EQ(plan_memory(v41_flash(), l).kv_budget_bytes, p.kv_budget_bytes - p.kv.sequence_bytes);
}

TEST(MemoryPlan, ImpossibleLayoutsAreRejected) {
  ParallelLayout l;
  l.gpus = 8;
  l.ep_size = 3;
  EXPECT_THROW(plan_memory(v41_flash(), l), Error);
  l.ep_size = 8;
  l.redundant_experts = 5;
  try {
    plan_memory(v41_flash(), l);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of the EP size"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace deepinfer::parallel
