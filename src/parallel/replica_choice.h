// Which physical copy of a logical expert computes a routed (row, k) pair when EPLB gives the expert several
// replicas on different ranks (algorithms.md §2.1-2.2, docs/parallel.md "Redundant experts"). One definition for the
// host (tests, planning) and the device (layers/moe/moe_gpu.cu's dispatch, layers/moe/expert_counts.cu's per-rank
// pair counter), so the rank that computes a pair and the rank a test or a counter expects are the same by
// construction.
//
// The rule: the replica on the pair's home rank (the rank whose request the row is) if the expert has one there,
// else replica (global row mod copies) in ascending slot order. Every input is something every rank of the group
// holds (the placement's replica table, the gathered row index, the rows per rank M), so all ranks agree on the one
// writer of each pair without exchanging anything, and the choice never depends on the load (batch invariance,
// algorithms.md §4: the replicas hold the same bits, so which one computes a pair changes no result bit). Under
// attention DP the rows are spread evenly over home ranks, so a replica serves its own rank's share plus an even part
// of the rest: the per-replica load is the expert's load / copies that eplb_placement plans for.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DI_REPLICA_FN __host__ __device__ __forceinline__
#else
#define DI_REPLICA_FN inline
#endif

namespace deepinfer::parallel {

// One layer's logical -> physical table (the placement's phy2log inverted), the same on every rank: count[e] copies
// of expert e at slots[e * max_replicas + i], i < count[e], ascending; a global slot s lives on rank
// s / slots_per_rank in its local slot s % slots_per_rank. Fixed max_replicas (the table's capacity), so a new
// placement is written into the same buffer and captured CUDA graphs stay valid.
struct ReplicaView {
  const int32_t* count = nullptr;  // [experts]
  const int32_t* slots = nullptr;  // [experts * max_replicas]
  int max_replicas = 0, slots_per_rank = 0;

  DI_REPLICA_FN int32_t serving_slot(int expert, int home_rank, int64_t global_row) const {
    const int32_t* mine = slots + int64_t(expert) * max_replicas;
    const int copies = count[expert];
    for (int i = 0; i < copies; ++i)
      if (mine[i] / slots_per_rank == home_rank) return mine[i];
    return mine[global_row % copies];
  }
};

// Which local slot of this rank computes pair p (row p / top_k of the gathered rows, rank-major with M rows per
// rank) whose logical expert is e, or -1: another rank computes it, or the row is padding of its rank (rank_rows:
// gathered row g = rank * M + i is real while i < rank_rows[rank]). On one GPU (no rank_rows, no replicas) the slot
// is the expert.
struct PairOwner {
  ReplicaView replicas;                // slots null: one GPU, every expert in its own slot
  const int32_t* rank_rows = nullptr;  // [world] the group's rows this call; null on one GPU
  int rows_per_rank = 0, top_k = 1, rank = 0;

  DI_REPLICA_FN int slot(int64_t p, int e) const {
    if (!rank_rows) return e;
    const int64_t g = p / top_k;
    const int home = int(g / rows_per_rank);
    if (int(g % rows_per_rank) >= rank_rows[home]) return -1;
    if (!replicas.slots) return e;
    const int32_t phy = replicas.serving_slot(e, home, g);
    return phy / replicas.slots_per_rank == rank ? phy % replicas.slots_per_rank : -1;
  }
};

}  // namespace deepinfer::parallel

#undef DI_REPLICA_FN
