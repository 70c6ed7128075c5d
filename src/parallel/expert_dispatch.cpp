#include "parallel/expert_dispatch.h"

#include <string>

#include "core/error.h"

namespace deepinfer::parallel {

std::vector<size_t> segment_offsets(std::span<const size_t> counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  size_t at = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    offsets[r] = at;
    at += counts[r];
  }
  return offsets;
}

DispatchLayout plan_dispatch(std::span<const int32_t> expert_ids, int top_k, const ExpertPlacement& p, int layer,
                             uint64_t first_key) {
  DI_CHECK(top_k > 0 && expert_ids.size() % size_t(top_k) == 0,
           "dispatch: " + std::to_string(expert_ids.size()) + " expert ids are not a whole number of tokens of top-k " +
               std::to_string(top_k));
  DI_CHECK(layer >= 0 && layer < p.layers(), "dispatch: layer " + std::to_string(layer) + " outside the placement");
  DispatchLayout L;
  L.ranks = p.ranks;
  L.top_k = top_k;
  L.tokens = int(expert_ids.size() / size_t(top_k));
  const size_t pairs = expert_ids.size();
  std::vector<int32_t> slot_of_pair(pairs), rank_of_pair(pairs);
  L.send_counts.assign(size_t(p.ranks), 0);
  for (size_t i = 0; i < pairs; ++i) {
    const int32_t e = expert_ids[i];
    DI_CHECK(e >= 0 && e < p.experts, "dispatch: expert id " + std::to_string(e) + " of token " +
                                          std::to_string(i / size_t(top_k)) + " outside [0, " +
                                          std::to_string(p.experts) + ")");
    const int slot = p.slot_for(layer, e, first_key + i / size_t(top_k));
    rank_of_pair[i] = p.rank_of_slot(slot);
    slot_of_pair[i] = slot % p.slots_per_rank;
    ++L.send_counts[size_t(rank_of_pair[i])];
  }
  L.send_offsets = segment_offsets(L.send_counts);
  std::vector<size_t> fill = L.send_offsets;
  L.send_pair.assign(pairs, -1);
  L.send_slot.assign(pairs, -1);
  L.pair_position.assign(pairs, -1);
  for (size_t i = 0; i < pairs; ++i) {  // pairs in (token, k) order within each destination
    const size_t pos = fill[size_t(rank_of_pair[i])]++;
    L.send_pair[pos] = int32_t(i);
    L.send_slot[pos] = slot_of_pair[i];
    L.pair_position[i] = int32_t(pos);
  }
  return L;
}

void combine_in_slot_order(const float* returned, const DispatchLayout& L, int hidden, float* out) {
  for (int t = 0; t < L.tokens; ++t) {
    float* row = out + size_t(t) * size_t(hidden);
    for (int h = 0; h < hidden; ++h) row[h] = 0.0f;
    for (int k = 0; k < L.top_k; ++k) {
      const float* y = returned + size_t(L.pair_position[size_t(t) * size_t(L.top_k) + size_t(k)]) * size_t(hidden);
      for (int h = 0; h < hidden; ++h) row[h] += y[h];
    }
  }
}

}  // namespace deepinfer::parallel
