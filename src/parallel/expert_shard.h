// The routed experts one rank holds under expert parallelism, and the layout of the gathered EP exchange of the
// GPU MoE (issue 7, docs/parallel.md "Expert parallelism: the exact gathered version", layers/moe/moe_gpu.h).
// The placement (EPLB's phy2log, parallel/eplb.h) is the source of truth: a rank's slots are its segment of a
// layer's physical slots, and the table the MoE reads (MoeGpu::replicas, parallel/replica_choice.h) is the layer's
// phy2log inverted, the same on every rank, so any EPLB placement (redundant copies included) plugs in.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/eplb.h"
#include "parallel/replica_choice.h"

namespace deepinfer::parallel {

// The host form of one layer's ReplicaView (parallel/replica_choice.h): every logical expert's global slots in
// ascending order, in a table of fixed capacity max_replicas (>= the most copies of any expert at the layer).
struct ReplicaTable {
  int experts = 0, max_replicas = 0, slots_per_rank = 0;
  std::vector<int32_t> count;  // [experts]
  std::vector<int32_t> slots;  // [experts * max_replicas], -1 past count[e]
  // A view of the host vectors (host-side choice: tests, planning); the device view points at an upload of them.
  ReplicaView view() const { return {count.data(), slots.data(), max_replicas, slots_per_rank}; }
};

struct RankExperts {
  std::vector<int32_t> experts;  // [slots_per_rank] the logical expert in each of the rank's slots, slot order
  std::vector<int32_t> slot_of;  // [experts] the rank's first slot holding each logical expert, -1 where it holds none
  ReplicaTable replicas;         // the layer's table (every rank's copies), capacity replica_capacity(...)
};

// The rank's experts at `layer`. An expert may have several copies (EPLB's redundant experts) on different ranks,
// or on one; which copy computes a pair is ReplicaTable's choice (parallel/replica_choice.h).
RankExperts rank_experts(const ExpertPlacement& placement, int layer, int rank);

// The capacity every layer's table of a placement of `experts` experts in `physical_slots` slots is built with:
// 1 + the redundant slots, the most copies one expert can have, so any later placement of the same shape fits.
int replica_capacity(int experts, int physical_slots);
ReplicaTable replica_table(const ExpertPlacement& placement, int layer, int max_replicas);

// The rank whose slot computes pair k of gathered row g (rank-major, rows_per_rank M) routed to `expert`: the
// host twin of PairOwner (same ReplicaView::serving_slot), for tests and statistics.
int serving_rank(const ReplicaTable& table, int expert, int rows_per_rank, int64_t global_row);

// The per-pair buffer of the gathered exchange: every rank's rows padded to rows_per_rank (M), top_k pairs per
// row, rank-major: pair (rank, row, k) is entry (rank * M + row) * top_k + k, so that the reduce-scatter hands
// each rank the contiguous segment of its own rows.
struct GatheredPairs {
  int world = 1, rows_per_rank = 0, top_k = 1;
  int64_t pair(int rank, int row, int k) const { return (int64_t(rank) * rows_per_rank + row) * top_k + k; }
  int64_t pairs() const { return int64_t(world) * rows_per_rank * top_k; }
  int64_t rank_pairs() const { return int64_t(rows_per_rank) * top_k; }  // one rank's segment
  // Whether gathered row g is a real row of its rank (not padding), given every rank's row count.
  bool real_row(int64_t g, const std::vector<int32_t>& rank_rows) const {
    return g % rows_per_rank < rank_rows[size_t(g / rows_per_rank)];
  }
};

}  // namespace deepinfer::parallel
