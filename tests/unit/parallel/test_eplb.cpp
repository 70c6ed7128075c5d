// EPLB (src/parallel/eplb.h): expected values from arithmetic on the loads, never from the placement code.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "core/error.h"
#include "parallel/eplb.h"
#include "parallel/expert_moves.h"

namespace deepinfer::parallel {
namespace {

using Load = std::vector<std::vector<double>>;

// Zipf(1) load over `experts`, hottest expert first (so a contiguous split puts the hot ones on rank 0).
std::vector<double> zipf(int experts) {
  std::vector<double> w(static_cast<size_t>(experts));
  for (int e = 0; e < experts; ++e) w[size_t(e)] = 1e6 / double(e + 1);
  return w;
}

// Deterministic pseudo-random loads (64-bit LCG) for the structural checks.
Load random_load(int layers, int experts, uint64_t seed) {
  Load load(static_cast<size_t>(layers), std::vector<double>(static_cast<size_t>(experts)));
  for (auto& layer : load)
    for (double& x : layer) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      x = double((seed >> 33) % 1000);
    }
  return load;
}

TEST(Eplb, UniformLoadIsBalanced) {
  const Load load(3, std::vector<double>(256, 10.0));
  EXPECT_DOUBLE_EQ(moe_lb(load, contiguous_placement(3, 256, 8)), 1.0);
  for (int redundant : {0, 32}) {
    ExpertPlacement p = eplb_placement(load, 8, redundant);
    for (int l = 0; l < 3; ++l) EXPECT_DOUBLE_EQ(moe_lb(load[size_t(l)], p, l), 1.0) << redundant;
  }
}

TEST(Eplb, ZipfLoadRedundancyIsStrictlyBetter) {
  const int E = 256, ranks = 8;
  const Load load{zipf(E)};
  const double total = std::accumulate(load[0].begin(), load[0].end(), 0.0), mean = total / ranks;
  // Contiguous: rank 0 holds experts 0..31.
  const double rank0 = std::accumulate(load[0].begin(), load[0].begin() + E / ranks, 0.0);
  const double contiguous = moe_lb(load[0], contiguous_placement(1, E, ranks), 0);
  EXPECT_NEAR(contiguous, rank0 / mean, 1e-12);
  // Without redundancy some rank holds all of expert 0's load: moe_lb >= load0 / mean for every placement.
  const double bound = load[0][0] / mean;
  const double packed = moe_lb(load[0], eplb_placement(load, ranks, 0), 0);
  EXPECT_GE(packed, bound - 1e-12);
  EXPECT_LT(packed, contiguous);
  // With 32 redundant slots the hot experts are split: below the bound of any non-redundant placement.
  const double redundant = moe_lb(load[0], eplb_placement(load, ranks, 32), 0);
  EXPECT_LT(redundant, bound);
  EXPECT_LT(redundant, packed);
  EXPECT_GE(redundant, 1.0);
  EXPECT_LT(redundant, 1.05);
}

TEST(Eplb, EveryExpertHasACopyAndRanksAreFull) {
  for (int redundant : {0, 8, 32, 64}) {
    const Load load = random_load(4, 256, 17 + uint64_t(redundant));
    ExpertPlacement p = eplb_placement(load, 8, redundant);
    ASSERT_EQ(p.layers(), 4);
    EXPECT_EQ(p.slots_per_rank, (256 + redundant) / 8);
    for (int l = 0; l < 4; ++l) {
      std::vector<int> copies = p.replica_counts(l);
      EXPECT_EQ(std::accumulate(copies.begin(), copies.end(), 0), 256 + redundant);
      for (int c : copies) EXPECT_GE(c, 1);
      // No rank holds one expert twice (there are enough ranks for every replica).
      for (int r = 0; r < 8; ++r) {
        std::set<int32_t> held;
        for (int s = 0; s < p.slots_per_rank; ++s) held.insert(p.phy2log[size_t(l)][size_t(r * p.slots_per_rank + s)]);
        EXPECT_EQ(int(held.size()), p.slots_per_rank) << "layer " << l << " rank " << r;
      }
    }
  }
}

TEST(Eplb, HotExpertGetsTheRedundantSlots) {
  // One expert with 100x the load of the 15 others and 8 redundant slots over 8 ranks: its load per replica
  // stays above 1 until it has every redundant slot (100 / 9 > 1).
  Load load{std::vector<double>(16, 1.0)};
  load[0][3] = 100.0;
  ExpertPlacement p = eplb_placement(load, 8, 8);
  EXPECT_EQ(p.replica_counts(0)[3], 9);
  // Ranks: 9 replicas of 100 / 9 over 8 ranks -> one rank has two of them (no other choice).
  const std::vector<double> r = rank_loads(load[0], p, 0);
  const double mean = (100.0 + 15.0) / 8;
  EXPECT_NEAR(*std::max_element(r.begin(), r.end()) / mean, moe_lb(load[0], p, 0), 1e-12);
}

TEST(Eplb, Deterministic) {
  const Load load = random_load(3, 128, 99);
  ExpertPlacement a = eplb_placement(load, 4, 16), b = eplb_placement(load, 4, 16);
  EXPECT_EQ(a.phy2log, b.phy2log);
}

// The placement a model is built in before statistics (the GPU data-parallel loaders, v4_ep_decode): contiguous
// without redundant slots; with R, every expert has a copy, R experts a second one on another rank, every rank is
// full and the uniform load is balanced; a function of the shape only.
TEST(Eplb, LoadUnawarePlacement) {
  EXPECT_EQ(load_unaware_placement(3, 16, 2, 0).phy2log, contiguous_placement(3, 16, 2).phy2log);
  const ExpertPlacement p = load_unaware_placement(3, 16, 2, 8);
  EXPECT_EQ(p.phy2log, load_unaware_placement(3, 16, 2, 8).phy2log);
  EXPECT_EQ(p.ranks, 2);
  EXPECT_EQ(p.experts, 16);
  EXPECT_EQ(p.slots_per_rank, 12);
  ASSERT_EQ(p.layers(), 3);
  for (int l = 0; l < 3; ++l) {
    const std::vector<int> copies = p.replica_counts(l);
    EXPECT_EQ(std::count(copies.begin(), copies.end(), 2), 8);
    EXPECT_EQ(std::count(copies.begin(), copies.end(), 1), 8);
    for (int s = 0; s < 12; ++s)  // a rank holds each expert at most once
      for (int t = s + 1; t < 12; ++t) EXPECT_NE(p.phy2log[size_t(l)][size_t(s)], p.phy2log[size_t(l)][size_t(t)]);
  }
  EXPECT_DOUBLE_EQ(moe_lb(Load(3, std::vector<double>(16, 1.0)), p), 1.0);
  EXPECT_THROW(load_unaware_placement(1, 16, 2, 3), Error);  // 19 slots over 2 ranks
}

TEST(Eplb, PlansAreMinimal) {
  const Load load = random_load(2, 64, 5);
  ExpertPlacement p = eplb_placement(load, 4, 8);
  EXPECT_TRUE(rebalance_plan(p, p).empty());
  // The same statistics again, aligned to the placement in use: nothing moves.
  ExpertPlacement again = eplb_placement(load, 4, 8, &p);
  EXPECT_EQ(again.phy2log, p.phy2log);
  EXPECT_TRUE(rebalance_plan(p, again).empty());
}

TEST(Eplb, PlanTurnsOnePlacementIntoTheOther) {
  const ExpertPlacement from = eplb_placement(random_load(2, 64, 1), 4, 8);
  const ExpertPlacement to = eplb_placement(random_load(2, 64, 2), 4, 8, &from);
  const std::vector<ExpertMove> moves = rebalance_plan(from, to);
  ASSERT_FALSE(moves.empty());
  std::vector<std::vector<int32_t>> applied = from.phy2log;
  int network = 0;
  for (const ExpertMove& m : moves) {
    EXPECT_EQ(from.phy2log[size_t(m.layer)][size_t(m.src_slot)], m.expert);  // read from the old placement
    EXPECT_EQ(m.src_rank, m.src_slot / from.slots_per_rank);
    EXPECT_EQ(m.dst_rank, m.dst_slot / from.slots_per_rank);
    applied[size_t(m.layer)][size_t(m.dst_slot)] = m.expert;
    network += m.src_rank != m.dst_rank;
  }
  EXPECT_EQ(applied, to.phy2log);
  // Transfers between GPUs: the (rank, expert) pairs of the new placement that the rank did not hold before.
  int expected = 0;
  for (int l = 0; l < 2; ++l)
    for (int r = 0; r < 4; ++r) {
      std::multiset<int32_t> before, after;
      for (int s = 0; s < from.slots_per_rank; ++s) {
        before.insert(from.phy2log[size_t(l)][size_t(r * from.slots_per_rank + s)]);
        after.insert(to.phy2log[size_t(l)][size_t(r * to.slots_per_rank + s)]);
      }
      for (int32_t e : std::set<int32_t>(after.begin(), after.end()))
        if (!before.count(e)) expected += int(after.count(e));
    }
  EXPECT_EQ(network, expected);
}

// The executor's move lists (parallel/expert_moves.h), carried out the way GpuStepModelBase::rebalance_experts does
// on "weights" that are the expert ids themselves: every rank stages its sends (per destination, in order) and its
// local copies from the OLD slots, the all-to-all-v hands each rank the segments sent to it, then every rank writes
// its destinations. The result must be the new placement on every rank; the two sides of each (source, destination)
// segment must agree in length; and only experts a rank lacked cross the network.
TEST(Eplb, RankTransfersCarryOutThePlan) {
  for (int trial = 0; trial < 12; ++trial) {
    const int world = 2 + trial % 7, layers = 3, experts = 8 * world, redundant = world * (trial % 3);
    const ExpertPlacement from = eplb_placement(random_load(layers, experts, 10 + trial), world, redundant);
    const ExpertPlacement to = eplb_placement(random_load(layers, experts, 50 + trial), world, redundant, &from);
    const std::vector<ExpertMove> moves = rebalance_plan(from, to);
    const int spr = from.slots_per_rank;
    for (int l = 0; l < layers; ++l) {
      // held[r][s]: the expert rank r's slot s holds (its weights)
      std::vector<std::vector<int32_t>> held(static_cast<size_t>(world));
      for (int r = 0; r < world; ++r)
        held[size_t(r)].assign(from.phy2log[size_t(l)].begin() + r * spr, from.phy2log[size_t(l)].begin() + (r + 1) * spr);
      std::vector<RankExpertTransfers> t;
      for (int r = 0; r < world; ++r) t.push_back(rank_transfers(moves, l, r, world, spr));
      // Stage (reads only), exchange, write.
      std::vector<std::vector<std::vector<int32_t>>> wire(static_cast<size_t>(world),
                                                          std::vector<std::vector<int32_t>>(size_t(world)));
      std::vector<std::vector<int32_t>> local_staged(static_cast<size_t>(world));
      for (int r = 0; r < world; ++r) {
        EXPECT_TRUE(t[size_t(r)].send_slots[size_t(r)].empty() && t[size_t(r)].recv_slots[size_t(r)].empty());
        for (int d = 0; d < world; ++d)
          for (int32_t s : t[size_t(r)].send_slots[size_t(d)]) wire[size_t(r)][size_t(d)].push_back(held[size_t(r)][size_t(s)]);
        for (auto [src, dst] : t[size_t(r)].local) local_staged[size_t(r)].push_back(held[size_t(r)][size_t(src)]);
      }
      size_t network = 0;
      for (int r = 0; r < world; ++r) {
        for (int src = 0; src < world; ++src) {
          const std::vector<int32_t>& segment = wire[size_t(src)][size_t(r)];
          ASSERT_EQ(segment.size(), t[size_t(r)].recv_slots[size_t(src)].size()) << "segment " << src << " -> " << r;
          for (size_t i = 0; i < segment.size(); ++i) held[size_t(r)][size_t(t[size_t(r)].recv_slots[size_t(src)][i])] = segment[i];
          network += segment.size();
          // An expert that crosses the network is one the rank did not hold before.
          for (int32_t e : segment) {
            const auto& old_row = from.phy2log[size_t(l)];
            EXPECT_EQ(std::find(old_row.begin() + r * spr, old_row.begin() + (r + 1) * spr, e), old_row.begin() + (r + 1) * spr);
          }
        }
        for (size_t i = 0; i < t[size_t(r)].local.size(); ++i)
          held[size_t(r)][size_t(t[size_t(r)].local[i].second)] = local_staged[size_t(r)][i];
      }
      for (int r = 0; r < world; ++r)
        EXPECT_EQ(held[size_t(r)], std::vector<int32_t>(to.phy2log[size_t(l)].begin() + r * spr,
                                                        to.phy2log[size_t(l)].begin() + (r + 1) * spr))
            << "trial " << trial << " layer " << l << " rank " << r;
      size_t sends = 0;
      for (int r = 0; r < world; ++r) sends += t[size_t(r)].sends();
      EXPECT_EQ(sends, network);
    }
  }
  EXPECT_THROW(rank_transfers({}, 0, 2, 2, 4), Error);  // no such rank
}

TEST(Eplb, ReplicaChoiceIsAFunctionOfTheKey) {
  Load load{std::vector<double>(16, 1.0)};
  load[0][5] = 50.0;
  ExpertPlacement p = eplb_placement(load, 4, 4);
  const int copies = p.replica_counts(0)[5];
  ASSERT_GT(copies, 1);
  std::set<int> slots;
  for (uint64_t key = 0; key < uint64_t(copies); ++key) {
    const int s = p.slot_for(0, 5, key);
    EXPECT_EQ(p.phy2log[0][size_t(s)], 5);
    EXPECT_EQ(s, p.slot_for(0, 5, key + uint64_t(copies)));
    slots.insert(s);
  }
  EXPECT_EQ(int(slots.size()), copies);
}

TEST(Eplb, MoeLbOverLayersWeighsTheSlowestRankOfEachLayer) {
  // Two layers on 2 ranks, contiguous: layer 0 ranks (3, 1), layer 1 ranks (1, 1): (3 + 1) / (2 + 1).
  const Load load{{2, 1, 0.5, 0.5}, {0.5, 0.5, 0.5, 0.5}};
  EXPECT_DOUBLE_EQ(moe_lb(load, contiguous_placement(2, 4, 2)), 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(moe_lb(load[0], contiguous_placement(2, 4, 2), 0), 1.5);
}

TEST(Eplb, LoadWindowDropsOldSteps) {
  ExpertLoadWindow w(2, 4, 2);
  const std::vector<int32_t> a{0, 0, 1}, b{1}, c{2, 3};
  w.record(0, a);
  w.record(1, a);
  w.end_step();
  w.record(0, b);
  EXPECT_EQ(w.load()[0], (std::vector<double>{2, 2, 0, 0}));
  w.end_step();
  w.record(0, c);  // the window now holds steps b and c
  EXPECT_EQ(w.load()[0], (std::vector<double>{0, 1, 1, 1}));
  EXPECT_EQ(w.load()[1], (std::vector<double>{0, 0, 0, 0}));
  const std::vector<int32_t> bad{4};
  EXPECT_THROW(w.record(0, bad), Error);
  EXPECT_THROW(w.record(2, a), Error);
}

TEST(Eplb, BadShapesAreRejected) {
  EXPECT_THROW(contiguous_placement(1, 10, 4), Error);
  EXPECT_THROW(eplb_placement(Load{std::vector<double>(10, 1.0)}, 4, 1), Error);  // 11 slots over 4 ranks
  ExpertPlacement a = contiguous_placement(1, 8, 2), b = contiguous_placement(1, 8, 4);
  EXPECT_THROW(rebalance_plan(a, b), Error);
  a.phy2log[0][0] = 1;  // expert 0 lost its only copy
  EXPECT_THROW(rebalance_plan(a, a), Error);
}

}  // namespace
}  // namespace deepinfer::parallel
