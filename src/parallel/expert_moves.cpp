#include "parallel/expert_moves.h"

#include <string>

#include "core/error.h"

namespace deepinfer::parallel {

size_t RankExpertTransfers::sends() const {
  size_t n = 0;
  for (const auto& s : send_slots) n += s.size();
  return n;
}

size_t RankExpertTransfers::receives() const {
  size_t n = 0;
  for (const auto& r : recv_slots) n += r.size();
  return n;
}

RankExpertTransfers rank_transfers(const std::vector<ExpertMove>& moves, int layer, int rank, int world,
                                   int slots_per_rank) {
  DI_CHECK(world > 0 && rank >= 0 && rank < world && slots_per_rank > 0,
           "expert moves: rank " + std::to_string(rank) + " of " + std::to_string(world) + ", " +
               std::to_string(slots_per_rank) + " slots per rank");
  RankExpertTransfers t;
  t.send_slots.resize(size_t(world));
  t.recv_slots.resize(size_t(world));
  for (const ExpertMove& m : moves) {
    if (m.layer != layer) continue;
    DI_CHECK(m.src_rank >= 0 && m.src_rank < world && m.dst_rank >= 0 && m.dst_rank < world &&
                 m.src_slot / slots_per_rank == m.src_rank && m.dst_slot / slots_per_rank == m.dst_rank,
             "expert moves: a move of expert " + std::to_string(m.expert) + " at layer " + std::to_string(layer) +
                 " names slots outside its ranks");
    const int32_t src = m.src_slot % slots_per_rank, dst = m.dst_slot % slots_per_rank;
    if (m.src_rank == rank && m.dst_rank == rank)
      t.local.emplace_back(src, dst);
    else if (m.src_rank == rank)
      t.send_slots[size_t(m.dst_rank)].push_back(src);
    else if (m.dst_rank == rank)
      t.recv_slots[size_t(m.src_rank)].push_back(dst);
  }
  return t;
}

}  // namespace deepinfer::parallel
