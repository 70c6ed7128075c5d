#include "parallel/expert_shard.h"

#include <string>

#include "core/error.h"

namespace deepinfer::parallel {

RankExperts rank_experts(const ExpertPlacement& placement, int layer, int rank) {
  DI_CHECK(layer >= 0 && layer < placement.layers(), "expert shard: layer " + std::to_string(layer) + " outside [0, " +
                                                         std::to_string(placement.layers()) + ")");
  DI_CHECK(rank >= 0 && rank < placement.ranks,
           "expert shard: rank " + std::to_string(rank) + " outside [0, " + std::to_string(placement.ranks) + ")");
  const std::vector<int> copies = placement.replica_counts(layer);
  for (int e = 0; e < placement.experts; ++e)
    DI_CHECK(copies[size_t(e)] == 1, "expert shard: expert " + std::to_string(e) + " of layer " +
                                         std::to_string(layer) + " has " + std::to_string(copies[size_t(e)]) +
                                         " copies; the gathered exchange needs exactly one");
  RankExperts r;
  r.slot_of.assign(size_t(placement.experts), -1);
  const std::vector<int32_t>& phy2log = placement.phy2log[size_t(layer)];
  for (int s = 0; s < placement.slots_per_rank; ++s) {
    const int32_t e = phy2log[size_t(rank) * size_t(placement.slots_per_rank) + size_t(s)];
    r.experts.push_back(e);
    r.slot_of[size_t(e)] = s;
  }
  return r;
}

}  // namespace deepinfer::parallel
