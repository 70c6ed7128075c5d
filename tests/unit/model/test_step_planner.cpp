// The host planner of the GPU models' batched steps (model/step_planner.h): row arrays, slot lengths and the
// compressed-KV pages per ratio. Expected values follow from the planner's rules: a slot at length L holds
// L / ratio entries of a ratio in ceil((L / ratio) / page_size) pages, pages come from the back of a free list
// that starts as [N - 1, ..., 1, 0] (so page 0 is handed out first), position 0 returns a slot's pages to the
// back of the list in table order.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/step_planner.h"

using deepinfer::Error;
using deepinfer::RatioPages;
using deepinfer::StepCapacity;
using deepinfer::StepPlanner;
using deepinfer::StepRow;

namespace {

constexpr int kVocab = 100;
constexpr int kSentinel = -7;

// 3 slots of 40 positions, 8 rows a step, 4 entries a page. Ratio 2: ceil(ceil(40 / 2) / 4) = 5 pages per slot;
// ratio 8: ceil(ceil(40 / 8) / 4) = 2.
StepCapacity small_capacity() { return StepCapacity{3, 40, 8, 4}; }

struct Planned {
  StepPlanner planner{small_capacity(), kVocab, "test planner"};
  int r2 = planner.add_ratio(2);
  int r8 = planner.add_ratio(8);
  std::vector<int32_t> arrays = std::vector<int32_t>(size_t(StepPlanner::kRowArrays) * 8, kSentinel);

  void plan(const std::vector<StepRow>& rows) { planner.plan(rows, arrays); }
  std::vector<int32_t> array(int which, int n) const {
    return {arrays.begin() + which * 8, arrays.begin() + which * 8 + n};
  }
  // The pages slot `slot` holds of class `cls`, in table order.
  std::vector<int32_t> pages(int cls, int slot) const {
    const RatioPages& rp = planner.ratios()[size_t(cls)];
    return {rp.table.begin() + size_t(slot) * rp.max_pages,
            rp.table.begin() + size_t(slot) * rp.max_pages + rp.used[size_t(slot)]};
  }
};

std::vector<StepRow> run(int slot, int32_t first_position, int count, int32_t first_token = 1) {
  std::vector<StepRow> rows;
  for (int i = 0; i < count; ++i) rows.push_back({slot, first_token + i, first_position + i});
  return rows;
}

std::vector<StepRow> concat(std::vector<StepRow> a, const std::vector<StepRow>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Every page of a class is either in exactly one slot's table or in the free list.
void expect_pages_partitioned(const Planned& p, int cls) {
  const RatioPages& rp = p.planner.ratios()[size_t(cls)];
  std::vector<int32_t> all(rp.free_pages);
  for (int slot = 0; slot < p.planner.capacity().slots; ++slot) {
    const std::vector<int32_t> held = p.pages(cls, slot);
    all.insert(all.end(), held.begin(), held.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<int32_t> expected(size_t(p.planner.capacity().slots) * rp.max_pages);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(all, expected) << "ratio " << rp.ratio;
}

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test planner"), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(StepPlanner, RatioClassesAndTheirSizes) {
  Planned p;
  EXPECT_EQ(p.r2, 0);
  EXPECT_EQ(p.r8, 1);
  EXPECT_EQ(p.planner.add_ratio(2), 0);  // one class per ratio, shared by every layer of it
  EXPECT_EQ(p.planner.add_ratio(8), 1);
  ASSERT_EQ(p.planner.ratios().size(), 2u);
  EXPECT_EQ(p.planner.ratios()[0].max_pages, 5);
  EXPECT_EQ(p.planner.ratios()[1].max_pages, 2);
  EXPECT_EQ(p.planner.ratios()[0].free_pages.size(), 15u);
  EXPECT_EQ(p.planner.ratios()[1].free_pages.size(), 6u);
  EXPECT_EQ(p.planner.ratios()[0].free_pages.back(), 0);
  for (int slot = 0; slot < 3; ++slot) EXPECT_EQ(p.planner.length(slot), 0);
  EXPECT_THROW(p.planner.add_ratio(0), Error);
  EXPECT_THROW(StepPlanner(StepCapacity{0, 40, 8, 4}, kVocab, "test planner"), Error);
}

TEST(StepPlanner, RowArraysOfAPrefillAndADecodeStep) {
  Planned p;
  // Slot 1 prefills 5 tokens, slot 0 two.
  p.plan(concat(run(1, 0, 5, 10), run(0, 0, 2, 20)));
  EXPECT_EQ(p.array(StepPlanner::kTokens, 7), (std::vector<int32_t>{10, 11, 12, 13, 14, 20, 21}));
  EXPECT_EQ(p.array(StepPlanner::kSlots, 7), (std::vector<int32_t>{1, 1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(p.array(StepPlanner::kPositions, 7), (std::vector<int32_t>{0, 1, 2, 3, 4, 0, 1}));
  EXPECT_EQ(p.array(StepPlanner::kChunkFirst, 7), (std::vector<int32_t>{0, 0, 0, 0, 0, 5, 5}));
  EXPECT_EQ(p.array(StepPlanner::kChunkRows, 7), (std::vector<int32_t>{5, 5, 5, 5, 5, 2, 2}));
  for (int a = 0; a < StepPlanner::kRowArrays; ++a) EXPECT_EQ(p.arrays[size_t(a) * 8 + 7], kSentinel);
  EXPECT_EQ(p.planner.length(0), 2);
  EXPECT_EQ(p.planner.length(1), 5);
  // Length 5: 5 / 2 = 2 ratio-2 entries in one page (page 0, handed out first); 5 / 8 = 0 ratio-8 entries.
  // Slot 0, length 2: one entry, page 1.
  EXPECT_EQ(p.pages(p.r2, 1), (std::vector<int32_t>{0}));
  EXPECT_EQ(p.pages(p.r2, 0), (std::vector<int32_t>{1}));
  EXPECT_TRUE(p.pages(p.r8, 0).empty());
  EXPECT_TRUE(p.pages(p.r8, 1).empty());

  // A decode step: slot 0's token is the one sampled for row 0 of the previous step (-0 - 1).
  p.plan({{0, -1, 2}, {1, 7, 5}});
  EXPECT_EQ(p.array(StepPlanner::kTokens, 2), (std::vector<int32_t>{-1, 7}));
  EXPECT_EQ(p.array(StepPlanner::kSlots, 2), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(p.array(StepPlanner::kPositions, 2), (std::vector<int32_t>{2, 5}));
  EXPECT_EQ(p.array(StepPlanner::kChunkFirst, 2), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(p.array(StepPlanner::kChunkRows, 2), (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(p.planner.length(0), 3);
  EXPECT_EQ(p.planner.length(1), 6);
  EXPECT_EQ(p.pages(p.r2, 1), (std::vector<int32_t>{0}));  // 3 entries still fit one page

  // Slot 1 to length 10: 5 ratio-2 entries need a second page (the next free one, 2); 10 / 8 = 1 ratio-8 entry
  // takes ratio-8 page 0.
  p.plan(run(1, 6, 4));
  EXPECT_EQ(p.pages(p.r2, 1), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(p.pages(p.r8, 1), (std::vector<int32_t>{0}));
  expect_pages_partitioned(p, p.r2);
  expect_pages_partitioned(p, p.r8);
}

TEST(StepPlanner, PositionZeroReleasesTheSlotsPages) {
  Planned p;
  p.plan(run(1, 0, 8));  // length 8: 4 ratio-2 entries (page 0), 1 ratio-8 entry (page 0)
  p.plan(run(1, 8, 2));  // length 10: 5 ratio-2 entries (pages 0, 1)
  p.plan(run(0, 0, 3));  // slot 0, length 3: 1 entry (page 2)
  ASSERT_EQ(p.pages(p.r2, 1), (std::vector<int32_t>{0, 1}));
  ASSERT_EQ(p.pages(p.r2, 0), (std::vector<int32_t>{2}));
  ASSERT_EQ(p.pages(p.r8, 1), (std::vector<int32_t>{0}));

  // Slot 1 starts a new sequence of one token: its pages go back (0 then 1 to the back of the free list) and it
  // needs none (1 / 2 = 0 entries).
  p.plan(run(1, 0, 1));
  EXPECT_EQ(p.planner.length(1), 1);
  EXPECT_TRUE(p.pages(p.r2, 1).empty());
  EXPECT_TRUE(p.pages(p.r8, 1).empty());
  EXPECT_EQ(p.planner.ratios()[size_t(p.r2)].free_pages.back(), 1);
  expect_pages_partitioned(p, p.r2);
  expect_pages_partitioned(p, p.r8);
  // The next page handed out is the last one released.
  p.plan(run(2, 0, 2));
  EXPECT_EQ(p.pages(p.r2, 2), (std::vector<int32_t>{1}));
  // A restart in the middle of a step with other slots' rows releases only that slot's pages.
  p.plan(concat(run(0, 3, 1), run(2, 0, 1)));
  EXPECT_EQ(p.pages(p.r2, 0), (std::vector<int32_t>{2}));
  EXPECT_TRUE(p.pages(p.r2, 2).empty());
  expect_pages_partitioned(p, p.r2);
}

TEST(StepPlanner, ReleaseDropsTheSequence) {
  Planned p;
  p.plan(run(1, 0, 8));  // pages 0 of ratio 2 and ratio 8
  p.plan(run(1, 8, 2));  // ratio 2: pages 0, 1
  p.planner.release(1);
  EXPECT_EQ(p.planner.length(1), 0);
  EXPECT_TRUE(p.pages(p.r2, 1).empty());
  EXPECT_TRUE(p.pages(p.r8, 1).empty());
  EXPECT_EQ(p.planner.ratios()[size_t(p.r2)].free_pages.back(), 1);
  expect_pages_partitioned(p, p.r2);
  expect_pages_partitioned(p, p.r8);
  // The slot continues only from position 0; a released slot twice is harmless.
  EXPECT_THROW(p.plan(run(1, 10, 1)), Error);
  p.planner.release(1);
  p.plan(run(1, 0, 4));
  EXPECT_EQ(p.planner.length(1), 4);
  EXPECT_THROW(p.planner.release(3), Error);
}

TEST(StepPlanner, DirtyTablesAndAssumedLengths) {
  Planned p;
  EXPECT_TRUE(p.planner.ratios()[0].dirty);  // a new table was never copied
  p.planner.mark_uploaded(p.r2);
  p.planner.mark_uploaded(p.r8);
  p.plan(run(0, 0, 1));  // no entry yet: no page, nothing to copy
  EXPECT_FALSE(p.planner.ratios()[0].dirty);
  p.plan(run(0, 1, 1));  // length 2: the first ratio-2 page
  EXPECT_TRUE(p.planner.ratios()[0].dirty);
  EXPECT_FALSE(p.planner.ratios()[1].dirty);

  // assume_length(17): 17 / 2 = 8 entries in 2 pages, 17 / 8 = 2 entries in 1 page.
  p.planner.assume_length(2, 17);
  EXPECT_EQ(p.planner.length(2), 17);
  EXPECT_EQ(p.pages(p.r2, 2).size(), 2u);
  EXPECT_EQ(p.pages(p.r8, 2).size(), 1u);
  p.plan(run(2, 17, 1));  // continues there
  EXPECT_EQ(p.planner.length(2), 18);
  expect_error([&] { p.planner.assume_length(3, 5); }, "out of range");
  expect_error([&] { p.planner.assume_length(0, 41); }, "out of range");
}

TEST(StepPlanner, FullSlotsUseEveryPage) {
  // Each ratio holds max_pages for every slot, so all slots reach max_context together and the free lists end
  // empty (no step can run out of pages before a slot runs past max_context).
  Planned p;
  for (int slot = 0; slot < 3; ++slot)
    for (int32_t pos = 0; pos < 40; pos += 8) p.plan(run(slot, pos, 8));
  for (int cls : {p.r2, p.r8}) {
    EXPECT_TRUE(p.planner.ratios()[size_t(cls)].free_pages.empty());
    expect_pages_partitioned(p, cls);
  }
  EXPECT_EQ(p.pages(p.r2, 0).size(), 5u);  // 40 / 2 = 20 entries, 5 pages
  EXPECT_EQ(p.pages(p.r8, 0).size(), 2u);  // 40 / 8 = 5 entries, 2 pages
  expect_error([&] { p.plan(run(0, 40, 1)); }, "max_context");
}

TEST(StepPlanner, RejectsBadSteps) {
  {
    Planned p;
    expect_error([&] { p.plan({}); }, "1 .. 8 rows, got 0");
    expect_error([&] { p.plan(run(0, 0, 9)); }, "1 .. 8 rows, got 9");
    expect_error([&] { p.plan(run(3, 0, 1)); }, "names slot 3");
    expect_error([&] { p.plan(run(-1, 0, 1)); }, "names slot -1");
    expect_error([&] { p.plan(run(0, 1, 1)); }, "slot 0 holds 0 positions; row 0 continues at 1");
  }
  {
    Planned p;
    p.plan(concat(run(0, 0, 3), run(1, 0, 5)));
    // One slot in two separate runs.
    expect_error([&] { p.plan({{0, 1, 3}, {1, 1, 5}, {0, 1, 4}}); }, "two separate runs");
  }
  {
    Planned p;
    p.plan(run(0, 0, 3));
    expect_error([&] { p.plan({{0, 1, 3}, {0, 1, 5}}); }, "consecutive positions");
  }
  {
    Planned p;
    expect_error([&] { p.plan({{0, kVocab, 0}}); }, "has token 100");
  }
  {
    Planned p;
    expect_error([&] { p.plan({{0, -9, 0}}); }, "has token -9");  // row 8 of a step of at most 8 rows
  }
  {
    Planned p;
    p.plan({{0, -8, 0}});  // row 7: the last row a previous step can have
    EXPECT_EQ(p.array(StepPlanner::kTokens, 1), (std::vector<int32_t>{-8}));
  }
  {
    Planned p;
    p.planner.assume_length(1, 38);
    p.plan(run(1, 38, 2));  // positions 38, 39: the last ones max_context 40 allows
    expect_error([&] { p.plan(run(1, 40, 1)); }, "past the capacity's max_context 40");
  }
  {
    Planned p;
    std::vector<int32_t> short_arrays(10);
    expect_error([&] { p.planner.plan(run(0, 0, 1), short_arrays); }, "row arrays");
  }
}
