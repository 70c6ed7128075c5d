// Host-side layout of one expert-parallel dispatch and its fixed-order combine (docs/parallel.md, issue 7).
// A rank's routed (token, top-k slot) pairs go to the ranks that hold their experts (EPLB placement,
// src/parallel/eplb.h) in one rank-major send buffer; the expert ranks send each pair's output back to the same
// position, and the home rank sums a token's outputs in top-k slot order, which is the order the single-GPU MoE
// combine uses (layers/moe/moe_gpu.cu combine_kernel), so EP does not change a result bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "parallel/eplb.h"

namespace deepinfer::parallel {

struct DispatchLayout {
  int ranks = 0, tokens = 0, top_k = 0;
  std::vector<size_t> send_counts;   // [ranks] pairs sent to each rank
  std::vector<size_t> send_offsets;  // [ranks] first send position of each rank's pairs (exclusive prefix)
  std::vector<int32_t> send_pair;    // [pairs] pair t * top_k + k at each send position (its row is token t)
  std::vector<int32_t> send_slot;    // [pairs] the expert slot on the destination rank (0 .. slots_per_rank)
  std::vector<int32_t> pair_position;  // [tokens * top_k] send position of each pair = where its output returns
};

// Pairs are ordered by destination rank, then by (token, k): deterministic for given routing. The replica of an
// expert with several copies is chosen by slot_for(layer, expert, first_key + token), a function of the token.
DispatchLayout plan_dispatch(std::span<const int32_t> expert_ids, int top_k, const ExpertPlacement& placement,
                             int layer, uint64_t first_key);

// Exclusive prefix sum: where each rank's segment starts in a rank-major buffer.
std::vector<size_t> segment_offsets(std::span<const size_t> counts);

// out[t, :] = sum over k = 0 .. top_k - 1 of returned[pair_position[t * top_k + k], :], accumulated in fp32 from
// zero in k order (the reference of the device combine; `returned` holds one fp32 row of `hidden` per pair).
void combine_in_slot_order(const float* returned, const DispatchLayout& layout, int hidden, float* out);

}  // namespace deepinfer::parallel
