#include "parallel/expert_shard.h"

#include <string>

#include "core/error.h"

namespace deepinfer::parallel {

RankExperts rank_experts(const ExpertPlacement& placement, int layer, int rank) {
  DI_CHECK(layer >= 0 && layer < placement.layers(), "expert shard: layer " + std::to_string(layer) + " outside [0, " +
                                                         std::to_string(placement.layers()) + ")");
  DI_CHECK(rank >= 0 && rank < placement.ranks,
           "expert shard: rank " + std::to_string(rank) + " outside [0, " + std::to_string(placement.ranks) + ")");
  RankExperts r;
  r.slot_of.assign(size_t(placement.experts), -1);
  const std::vector<int32_t>& phy2log = placement.phy2log[size_t(layer)];
  for (int s = 0; s < placement.slots_per_rank; ++s) {
    const int32_t e = phy2log[size_t(rank) * size_t(placement.slots_per_rank) + size_t(s)];
    r.experts.push_back(e);
    if (r.slot_of[size_t(e)] < 0) r.slot_of[size_t(e)] = s;
  }
  r.replicas = replica_table(placement, layer,
                             replica_capacity(placement.experts, placement.ranks * placement.slots_per_rank));
  return r;
}

int replica_capacity(int experts, int physical_slots) {
  DI_CHECK(experts > 0 && physical_slots >= experts, "expert shard: " + std::to_string(physical_slots) +
                                                         " slots cannot hold " + std::to_string(experts) + " experts");
  return 1 + physical_slots - experts;
}

ReplicaTable replica_table(const ExpertPlacement& placement, int layer, int max_replicas) {
  DI_CHECK(layer >= 0 && layer < placement.layers(), "expert shard: layer " + std::to_string(layer) + " outside [0, " +
                                                         std::to_string(placement.layers()) + ")");
  ReplicaTable t;
  t.experts = placement.experts;
  t.max_replicas = max_replicas;
  t.slots_per_rank = placement.slots_per_rank;
  t.count.assign(size_t(t.experts), 0);
  t.slots.assign(size_t(t.experts) * size_t(max_replicas), -1);
  const std::vector<int32_t>& phy2log = placement.phy2log[size_t(layer)];
  for (size_t s = 0; s < phy2log.size(); ++s) {  // ascending slots, so each expert's copies come out ascending
    const int32_t e = phy2log[s];
    DI_CHECK(e >= 0 && e < t.experts, "expert shard: slot " + std::to_string(s) + " of layer " + std::to_string(layer) +
                                          " holds expert " + std::to_string(e) + " outside the model");
    int32_t& c = t.count[size_t(e)];
    DI_CHECK(c < max_replicas, "expert shard: expert " + std::to_string(e) + " of layer " + std::to_string(layer) +
                                   " has more than " + std::to_string(max_replicas) + " copies (the table's capacity)");
    t.slots[size_t(e) * size_t(max_replicas) + size_t(c++)] = int32_t(s);
  }
  for (int e = 0; e < t.experts; ++e)
    DI_CHECK(t.count[size_t(e)] > 0, "expert shard: expert " + std::to_string(e) + " of layer " +
                                         std::to_string(layer) + " has no copy");
  return t;
}

int serving_rank(const ReplicaTable& table, int expert, int rows_per_rank, int64_t global_row) {
  DI_CHECK(expert >= 0 && expert < table.experts && rows_per_rank > 0 && global_row >= 0,
           "expert shard: serving_rank(expert " + std::to_string(expert) + ", row " + std::to_string(global_row) +
               ") outside the table");
  const int home = int(global_row / rows_per_rank);
  return table.view().serving_slot(expert, home, global_row) / table.slots_per_rank;
}

}  // namespace deepinfer::parallel
