// EP dispatch / combine layout (src/parallel/expert_dispatch.h): ranks simulated in memory exchange their pairs
// through the layouts, experts compute on the ranks that hold them, and the combined rows must equal the
// single-GPU combine (experts summed from zero in top-k slot order) bit for bit.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "parallel/eplb.h"
#include "parallel/expert_dispatch.h"

namespace deepinfer::parallel {
namespace {

constexpr int kHidden = 4;

// The stand-in for expert e's output on a row: depends on the expert, so a pair computed by the wrong expert
// shows.
void expert_output(int e, const float* x, float* y) {
  for (int h = 0; h < kHidden; ++h) y[h] = x[h] * (0.37f * float(e + 1)) + float(e) * 0.001f;
}

TEST(ExpertDispatch, CombineEqualsTheSingleGpuOrder) {
  const int ranks = 3, experts = 12, top_k = 3, redundant = 3;
  std::vector<double> skew(experts, 1.0);
  skew[2] = 9.0;
  const ExpertPlacement placement = eplb_placement({skew}, ranks, redundant);
  const std::vector<int> tokens{5, 0, 7};
  // Routing and activations of each rank (distinct experts per token, as top-k selects).
  std::vector<std::vector<int32_t>> ids(ranks);
  std::vector<std::vector<float>> x(ranks);
  uint32_t s = 12345;
  auto next = [&] { return s = s * 1664525u + 1013904223u; };
  for (int r = 0; r < ranks; ++r)
    for (int t = 0; t < tokens[size_t(r)]; ++t) {
      std::vector<int32_t> picked;
      while (int(picked.size()) < top_k) {
        const int32_t e = int32_t(next() % experts);
        if (std::find(picked.begin(), picked.end(), e) == picked.end()) picked.push_back(e);
      }
      ids[size_t(r)].insert(ids[size_t(r)].end(), picked.begin(), picked.end());
      for (int h = 0; h < kHidden; ++h) x[size_t(r)].push_back(float(int(next() % 2001) - 1000) / 997.0f);
    }
  std::vector<DispatchLayout> layouts;
  uint64_t key = 0;
  for (int r = 0; r < ranks; ++r) {
    layouts.push_back(plan_dispatch(ids[size_t(r)], top_k, placement, 0, key));
    key += uint64_t(tokens[size_t(r)]);
  }
  // Dispatch (all-to-all-v): each destination receives the rows of every source's segment for it; it computes
  // with the expert its slot holds and returns the outputs to the same positions.
  std::vector<std::vector<float>> returned(ranks);
  for (int r = 0; r < ranks; ++r) returned[size_t(r)].assign(ids[size_t(r)].size() * kHidden, 0.0f);
  for (int dst = 0; dst < ranks; ++dst)
    for (int src = 0; src < ranks; ++src) {
      const DispatchLayout& L = layouts[size_t(src)];
      for (size_t i = 0; i < L.send_counts[size_t(dst)]; ++i) {
        const size_t pos = L.send_offsets[size_t(dst)] + i;
        const int token = L.send_pair[pos] / top_k;
        const int e = placement.phy2log[0][size_t(dst * placement.slots_per_rank + L.send_slot[pos])];
        expert_output(e, &x[size_t(src)][size_t(token) * kHidden], &returned[size_t(src)][pos * kHidden]);
      }
    }
  for (int r = 0; r < ranks; ++r) {
    std::vector<float> combined(size_t(tokens[size_t(r)]) * kHidden);
    combine_in_slot_order(returned[size_t(r)].data(), layouts[size_t(r)], kHidden, combined.data());
    for (int t = 0; t < tokens[size_t(r)]; ++t) {
      float expect[kHidden] = {0, 0, 0, 0}, y[kHidden];
      for (int k = 0; k < top_k; ++k) {
        expert_output(ids[size_t(r)][size_t(t * top_k + k)], &x[size_t(r)][size_t(t) * kHidden], y);
        for (int h = 0; h < kHidden; ++h) expect[h] += y[h];
      }
      for (int h = 0; h < kHidden; ++h) EXPECT_EQ(combined[size_t(t) * kHidden + h], expect[h]) << r << " " << t;
    }
  }
}

TEST(ExpertDispatch, SegmentsAreRankMajorAndOrderedByToken) {
  const ExpertPlacement p = contiguous_placement(1, 8, 4);  // experts 2r, 2r + 1 on rank r
  const std::vector<int32_t> ids{7, 0, 2, 1, 6, 3};         // 3 tokens, top-2
  const DispatchLayout L = plan_dispatch(ids, 2, p, 0, 0);
  EXPECT_EQ(L.send_counts, (std::vector<size_t>{2, 2, 0, 2}));
  EXPECT_EQ(L.send_offsets, (std::vector<size_t>{0, 2, 4, 4}));
  EXPECT_EQ(L.send_pair, (std::vector<int32_t>{1, 3, 2, 5, 0, 4}));
  EXPECT_EQ(L.send_slot, (std::vector<int32_t>{0, 1, 0, 1, 1, 0}));
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(L.send_pair[size_t(L.pair_position[i])], int32_t(i));
  EXPECT_THROW(plan_dispatch(std::vector<int32_t>{1, 2, 3}, 2, p, 0, 0), Error);
  EXPECT_THROW(plan_dispatch(std::vector<int32_t>{1, 8}, 2, p, 0, 0), Error);
}

}  // namespace
}  // namespace deepinfer::parallel
