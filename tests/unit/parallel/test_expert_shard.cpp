// The experts a rank holds and the gathered EP exchange's pair layout (src/parallel/expert_shard.h): the tables
// against the placement written out by hand, and the exchange's exactness claim (layers/moe/moe_gpu.h): when one
// rank writes each pair's output and every other rank +0.0, the reduce-scatter's sum in any rank order followed by
// the combine (fp32 from +0.0, top-k order) equals the one-GPU combine of the outputs bit for bit, -0.0 included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/float_bits.h"
#include "core/error.h"
#include "parallel/eplb.h"
#include "parallel/expert_shard.h"
#include "parallel/replica_choice.h"

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

TEST(ExpertShard, RedundantCopiesAndBadIndices) {
  ExpertPlacement p;
  p.ranks = 2;
  p.experts = 3;
  p.slots_per_rank = 2;
  p.phy2log = {{0, 1, 2, 0}};  // expert 0 on both ranks
  const RankExperts r0 = rank_experts(p, 0, 0), r1 = rank_experts(p, 0, 1);
  EXPECT_EQ(r0.experts, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(r1.experts, (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(r1.slot_of, (std::vector<int32_t>{1, -1, 0}));
  // The table: capacity 1 + 1 redundant slot, expert 0 at global slots 0 and 3, ascending.
  EXPECT_EQ(r0.replicas.max_replicas, 2);
  EXPECT_EQ(r0.replicas.count, (std::vector<int32_t>{2, 1, 1}));
  EXPECT_EQ(r0.replicas.slots, (std::vector<int32_t>{0, 3, 1, -1, 2, -1}));
  EXPECT_EQ(r1.replicas.slots, r0.replicas.slots);  // the same on every rank
  EXPECT_THROW(rank_experts(p, 1, 0), Error);                              // no such layer
  EXPECT_THROW(rank_experts(contiguous_placement(1, 4, 2), 0, 2), Error);  // no such rank
  EXPECT_THROW(replica_table(p, 0, 1), Error);                             // 2 copies, capacity 1
  p.phy2log = {{0, 1, 1, 0}};                                              // expert 2 has no copy
  EXPECT_THROW(replica_table(p, 0, 2), Error);
}

// The device rule of which pairs `rank` computes, over a group whose ranks hold rank_rows[r] of rows_per_rank rows.
PairOwner pair_owner(const ReplicaTable& table, const std::vector<int32_t>& rank_rows, int rows_per_rank, int top_k,
                     int rank) {
  PairOwner owner;
  owner.replicas = table.view();
  owner.rank_rows = rank_rows.data();
  owner.rows_per_rank = rows_per_rank;
  owner.top_k = top_k;
  owner.rank = rank;
  return owner;
}

// Every routed pair of the gathered rows is computed by exactly one rank, in a slot holding its expert; padding rows
// by none; the replica on the row's home rank when there is one; and the device rule (PairOwner) agrees with the host
// serving_rank. Random EPLB placements with redundant experts, random row counts per rank.
TEST(ReplicaChoice, EveryPairHasExactlyOneWriter) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const int world = 2 + trial % 7;                       // 2 .. 8 ranks
    const int experts = world * (2 + trial % 5);           // divisible by world
    const int redundant = world * (trial % 4);             // 0 .. 3 extra slots per rank
    const int top_k = std::min(experts, 2 + trial % 5), M = 1 + trial % 9;
    std::vector<std::vector<double>> load(1, std::vector<double>(size_t(experts)));
    for (int e = 0; e < experts; ++e) load[0][size_t(e)] = 1000.0 / (1 + ((e * 7 + trial) % experts));  // skewed
    const ExpertPlacement p = eplb_placement(load, world, redundant);
    const ReplicaTable table = replica_table(p, 0, replica_capacity(experts, world * p.slots_per_rank));
    std::vector<int32_t> rank_rows(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) rank_rows[size_t(r)] = int32_t(rng() % uint32_t(M + 1));
    std::uniform_int_distribution<int> pick(0, experts - 1);
    std::vector<int> served(static_cast<size_t>(world), 0);
    for (int64_t g = 0; g < int64_t(world) * M; ++g) {
      const int home = int(g / M);
      const bool real = g % M < rank_rows[size_t(home)];
      for (int k = 0; k < top_k; ++k) {
        const int e = pick(rng);
        const int64_t pair = g * top_k + k;
        int writers = 0, writer = -1;
        for (int r = 0; r < world; ++r) {
          const int slot = pair_owner(table, rank_rows, M, top_k, r).slot(pair, e);
          if (slot < 0) continue;
          ++writers;
          writer = r;
          ASSERT_LT(slot, p.slots_per_rank);
          EXPECT_EQ(p.phy2log[0][size_t(r) * size_t(p.slots_per_rank) + size_t(slot)], e) << "rank " << r;
        }
        ASSERT_EQ(writers, real ? 1 : 0) << "trial " << trial << " row " << g << " k " << k;
        if (!real) continue;
        EXPECT_EQ(writer, serving_rank(table, e, M, g));
        bool home_holds = false;
        for (int s = 0; s < p.slots_per_rank; ++s)
          home_holds |= p.phy2log[0][size_t(home) * size_t(p.slots_per_rank) + size_t(s)] == e;
        if (home_holds) {
          EXPECT_EQ(writer, home);
        }
        ++served[size_t(writer)];
      }
    }
  }
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

using deepinfer::testing::bits;

TEST(ExpertShard, OneWriterPerPairMakesTheExchangeExact) {
  const int world = 3, rows = 4, top_k = 6, hidden = 64, experts = 12;
  const GatheredPairs g{world, rows, top_k};
  // 12 experts + 3 redundant copies on 3 ranks (EPLB on a skewed load): pairs of a replicated expert are written by
  // the one replica PairOwner picks.
  std::vector<std::vector<double>> load(1, std::vector<double>(size_t(experts)));
  for (int e = 0; e < experts; ++e) load[0][size_t(e)] = 100.0 / (1 + e);
  const ExpertPlacement placement = eplb_placement(load, world, 3);
  const ReplicaTable table = replica_table(placement, 0, replica_capacity(experts, 15));
  const std::vector<int32_t> rank_rows(size_t(world), rows);
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
    const PairOwner owner = pair_owner(table, rank_rows, rows, top_k, r);
    for (int64_t p = 0; p < g.pairs(); ++p)
      if (owner.slot(p, expert[size_t(p)]) >= 0)
        std::memcpy(&buffer[r][size_t(p) * hidden], &out[size_t(p) * hidden], sizeof(float) * hidden);
  }
  std::vector<int> order{0, 1, 2};
  do {
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
  } while (std::next_permutation(order.begin(), order.end()));  // every rank order of the reduce-scatter's sum
}

}  // namespace
}  // namespace deepinfer::parallel
