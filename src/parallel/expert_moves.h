// One rank's part of carrying out an EPLB rebalancing (parallel/eplb.h rebalance_plan) at one layer, as one
// all-to-all-v of expert weights (docs/parallel.md "Rebalancing with weight moves", algorithms.md §2.2): which of its
// slots it sends to each rank, which of its slots receive what each rank sends, and the copies inside the rank.
// Every rank derives its part from the same plan in the plan's order, so the sender's and the receiver's orders of a
// (source rank, destination rank) segment agree without exchanging anything. The executor (the GPU models,
// model/gpu/step_model_base.h) stages every source before it writes any destination, because the plan reads every
// source from the old placement.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "parallel/eplb.h"

namespace deepinfer::parallel {

struct RankExpertTransfers {
  std::vector<std::vector<int32_t>> send_slots;  // [world] this rank's local slots sent to each rank, in plan order
  std::vector<std::vector<int32_t>> recv_slots;  // [world] this rank's local slots written by what each rank sends
  std::vector<std::pair<int32_t, int32_t>> local;  // (source, destination) local slots copied inside this rank

  size_t sends() const;     // experts this rank sends
  size_t receives() const;  // experts this rank receives from other ranks
  bool empty() const { return sends() == 0 && receives() == 0 && local.empty(); }
};

// Rank `rank`'s transfers for the moves of `layer` (moves of other layers are skipped). send_slots[rank] and
// recv_slots[rank] stay empty: a copy inside the rank is in `local`.
RankExpertTransfers rank_transfers(const std::vector<ExpertMove>& moves, int layer, int rank, int world,
                                   int slots_per_rank);

}  // namespace deepinfer::parallel
