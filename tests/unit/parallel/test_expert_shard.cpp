// The experts a rank holds and the gathered EP exchange's pair layout (src/parallel/expert_shard.h): the tables
// against the placement written out by hand, and the exchange's exactness claim (layers/moe/moe_gpu.h): when one
// rank writes each pair's output and every other rank +0.0, the reduce-scatter's sum in any rank order followed by
// the combine (fp32 from +0.0, top-k order) equals the one-GPU combine of the outputs bit for bit, -0.0 included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "parallel/eplb.h"
#include "parallel/expert_shard.h"

namespace deepinfer::parallel {
namespace {

TEST(ExpertShard, ContiguousSplitOfV4FlashOverTwoRanks) {
  const ExpertPlacement p = contiguous_placement(43, 256, 2);
  const RankExperts r0 = rank_experts(p, 0, 0), r1 = rank_experts(p, 42, 1);
  ASSERT_EQ(r0.experts.size(), 128u);
  ASSERT_EQ(r1.experts.size(), 128u);
  for (int s = 0; s < 128; ++s) {
    EXPECT_EQ(r0.experts[size_t(s)], s);
    EXPECT_EQ(r1.experts[size_t(s)], 128 + s);
  }
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(r0.slot_of[size_t(e)], e < 128 ? e : -1) << e;
    EXPECT_EQ(r1.slot_of[size_t(e)], e < 128 ? -1 : e - 128) << e;
  }
}

TEST(ExpertShard, FollowsAnyPlacementWithOneCopyPerExpert) {
  // 8 experts on 2 ranks in an order EPLB might choose.
  ExpertPlacement p;
  p.ranks = 2;
  p.experts = 8;
  p.slots_per_rank = 4;
  p.phy2log = {{6, 1, 3, 0, 2, 7, 5, 4}};
  const RankExperts r0 = rank_experts(p, 0, 0), r1 = rank_experts(p, 0, 1);
  EXPECT_EQ(r0.experts, (std::vector<int32_t>{6, 1, 3, 0}));
  EXPECT_EQ(r1.experts, (std::vector<int32_t>{2, 7, 5, 4}));
  EXPECT_EQ(r0.slot_of, (std::vector<int32_t>{3, 1, -1, 2, -1, -1, 0, -1}));
  EXPECT_EQ(r1.slot_of, (std::vector<int32_t>{-1, -1, 0, -1, 3, 2, -1, 1}));
}

TEST(ExpertShard, RefusesRedundantCopies) {
  ExpertPlacement p;
  p.ranks = 2;
  p.experts = 3;
  p.slots_per_rank = 2;
  p.phy2log = {{0, 1, 2, 0}};  // expert 0 twice
  EXPECT_THROW(rank_experts(p, 0, 0), Error);
  EXPECT_THROW(rank_experts(p, 1, 0), Error);  // no such layer
  EXPECT_THROW(rank_experts(contiguous_placement(1, 4, 2), 0, 2), Error);  // no such rank
}

TEST(ExpertShard, GatheredPairsAreRankMajorSegments) {
  const GatheredPairs g{3, 5, 6};
  EXPECT_EQ(g.pairs(), 3 * 5 * 6);
  EXPECT_EQ(g.rank_pairs(), 30);
  // Rank r's rows are the contiguous segment [r * 30, (r + 1) * 30): what a reduce-scatter of 30 pairs hands it.
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(g.pair(r, 0, 0), r * 30);
    EXPECT_EQ(g.pair(r, 4, 5), r * 30 + 29);
  }
  EXPECT_EQ(g.pair(1, 2, 3), 30 + 2 * 6 + 3);
  const std::vector<int32_t> rank_rows{5, 0, 2};
  EXPECT_TRUE(g.real_row(4, rank_rows));    // rank 0, row 4
  EXPECT_FALSE(g.real_row(5, rank_rows));   // rank 1 has no rows
  EXPECT_TRUE(g.real_row(11, rank_rows));   // rank 2, row 1
  EXPECT_FALSE(g.real_row(12, rank_rows));  // rank 2, row 2: padding
}

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

TEST(ExpertShard, OneWriterPerPairMakesTheExchangeExact) {
  const int world = 3, rows = 4, top_k = 6, hidden = 64, experts = 12;
  const GatheredPairs g{world, rows, top_k};
  const ExpertPlacement placement = contiguous_placement(1, experts, world);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, experts - 1);
  // The pairs' outputs as one GPU computes them, some exactly -0.0 / +0.0 / tiny, and each pair's expert.
  std::vector<float> out(size_t(g.pairs()) * hidden);
  for (size_t i = 0; i < out.size(); ++i) {
    const int kind = int(i % 11);
    out[i] = kind == 0 ? -0.0f : kind == 1 ? 0.0f : kind == 2 ? normal(rng) * 1e-40f : normal(rng);
  }
  std::vector<int> expert(size_t(g.pairs()));
  for (int& e : expert) e = pick(rng);
  // Each rank's per-pair buffer: the outputs of the pairs whose expert it holds, +0.0 elsewhere.
  std::vector<std::vector<float>> buffer(world, std::vector<float>(out.size(), 0.0f));
  for (int r = 0; r < world; ++r) {
    const RankExperts mine = rank_experts(placement, 0, r);
    for (int64_t p = 0; p < g.pairs(); ++p)
      if (mine.slot_of[size_t(expert[size_t(p)])] >= 0)
        std::memcpy(&buffer[r][size_t(p) * hidden], &out[size_t(p) * hidden], sizeof(float) * hidden);
  }
  for (const std::vector<int>& order : {std::vector<int>{0, 1, 2}, std::vector<int>{2, 0, 1}, std::vector<int>{1, 2, 0}}) {
    for (int home = 0; home < world; ++home) {
      for (int row = 0; row < rows; ++row) {
        for (int h = 0; h < hidden; ++h) {
          float exchanged_sum = 0.0f, one_gpu_sum = 0.0f;
          for (int k = 0; k < top_k; ++k) {
            const size_t i = size_t(g.pair(home, row, k)) * hidden + size_t(h);
            float returned = buffer[size_t(order[0])][i];  // the reduce-scatter, ranks added in `order`
            for (int j = 1; j < world; ++j) returned += buffer[size_t(order[size_t(j)])][i];
            exchanged_sum += returned;
            one_gpu_sum += out[i];
          }
          ASSERT_EQ(bits(exchanged_sum), bits(one_gpu_sum)) << "home " << home << " row " << row << " h " << h;
        }
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer::parallel
