// The routed experts one rank holds under expert parallelism, and the layout of the gathered EP exchange of the
// GPU MoE (issue 7, docs/parallel.md "Expert parallelism: the exact gathered version", layers/moe/moe_gpu.h).
// The placement (EPLB's phy2log, parallel/eplb.h) is the source of truth: a rank's slots are its segment of a
// layer's physical slots, and the table the MoE reads (MoeGpu::expert_slot) is that segment inverted, so an EPLB
// placement plugs in where the contiguous one is used today.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/eplb.h"

namespace deepinfer::parallel {

struct RankExperts {
  std::vector<int32_t> experts;  // [slots_per_rank] the logical expert in each of the rank's slots, slot order
  std::vector<int32_t> slot_of;  // [experts] the rank's slot holding each logical expert, -1 where it holds none
};

// The rank's experts at `layer`. Every logical expert must have exactly one copy in the whole placement: the
// gathered exchange lets the one rank that holds an expert compute all of its pairs (redundant copies need the
// per-pair replica choice of ExpertPlacement::slot_for, the all-to-all-v version's job).
RankExperts rank_experts(const ExpertPlacement& placement, int layer, int rank);

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
