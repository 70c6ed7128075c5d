#include "model/step_planner.h"

#include <utility>

#include "core/error.h"

namespace deepinfer {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

StepPlanner::StepPlanner(const StepCapacity& capacity, int vocab_size, std::string who)
    : capacity_(capacity), vocab_size_(vocab_size), who_(std::move(who)) {
  DI_CHECK(capacity_.slots > 0 && capacity_.max_context > 0 && capacity_.max_rows > 0 && capacity_.page_size > 0,
           who_ + ": capacity needs positive slots, max_context, max_rows and page_size");
  lengths_.assign(size_t(capacity_.slots), 0);
}

int StepPlanner::add_ratio(int ratio) {
  DI_CHECK(ratio > 0, who_ + ": compression ratio " + std::to_string(ratio) + " is not positive");
  for (size_t i = 0; i < ratios_.size(); ++i)
    if (ratios_[i].ratio == ratio) return int(i);
  const int S = capacity_.slots;
  RatioPages rp;
  rp.ratio = ratio;
  rp.max_pages = int(ceil_div(ceil_div(capacity_.max_context, ratio), capacity_.page_size));
  rp.table.assign(size_t(S) * rp.max_pages, 0);
  rp.used.assign(size_t(S), 0);
  for (int p = S * rp.max_pages - 1; p >= 0; --p) rp.free_pages.push_back(p);
  ratios_.push_back(std::move(rp));
  return int(ratios_.size()) - 1;
}

void StepPlanner::reserve_pages(int slot, int32_t last_position) {
  for (RatioPages& rp : ratios_) {
    const int64_t entries = (int64_t(last_position) + 1) / rp.ratio;
    const int need = int(ceil_div(entries, capacity_.page_size));
    DI_CHECK(need <= rp.max_pages, who_ + ": position " + std::to_string(last_position) +
                                       " is past the capacity's max_context " + std::to_string(capacity_.max_context));
    int& used = rp.used[size_t(slot)];
    while (used < need) {
      DI_CHECK(!rp.free_pages.empty(), who_ + ": out of compressed-KV pages (ratio " + std::to_string(rp.ratio) + ")");
      rp.table[size_t(slot) * rp.max_pages + used] = rp.free_pages.back();
      rp.free_pages.pop_back();
      ++used;
      rp.dirty = true;
    }
  }
}

void StepPlanner::release_pages(int slot) {
  for (RatioPages& rp : ratios_) {
    for (int i = 0; i < rp.used[size_t(slot)]; ++i)
      rp.free_pages.push_back(rp.table[size_t(slot) * rp.max_pages + i]);
    rp.used[size_t(slot)] = 0;
  }
}

void StepPlanner::assume_length(int slot, int32_t length) {
  DI_CHECK(slot >= 0 && slot < capacity_.slots, who_ + ": slot " + std::to_string(slot) + " out of range");
  DI_CHECK(length > 0 && length <= capacity_.max_context, who_ + ": assumed length out of range");
  reserve_pages(slot, length - 1);
  lengths_[size_t(slot)] = length;
}

void StepPlanner::release(int slot) {
  DI_CHECK(slot >= 0 && slot < capacity_.slots, who_ + ": slot " + std::to_string(slot) + " out of range");
  release_pages(slot);
  lengths_[size_t(slot)] = 0;
}

void StepPlanner::plan(std::span<const StepRow> rows, std::span<int32_t> arrays) {
  const int n = int(rows.size()), R = capacity_.max_rows;
  DI_CHECK(n > 0 && n <= R, who_ + ": a step takes 1 .. " + std::to_string(R) + " rows, got " + std::to_string(n));
  DI_CHECK(arrays.size() >= size_t(kRowArrays) * R, who_ + ": the row arrays hold fewer than 5 x max_rows entries");
  int32_t* tokens = arrays.data() + size_t(kTokens) * R;
  int32_t* slots = arrays.data() + size_t(kSlots) * R;
  int32_t* positions = arrays.data() + size_t(kPositions) * R;
  int32_t* chunk_first = arrays.data() + size_t(kChunkFirst) * R;
  int32_t* chunk_rows = arrays.data() + size_t(kChunkRows) * R;
  std::vector<char> seen(size_t(capacity_.slots), 0);
  for (int r = 0; r < n;) {
    const StepRow& first = rows[size_t(r)];
    DI_CHECK(first.slot >= 0 && first.slot < capacity_.slots,
             who_ + ": row " + std::to_string(r) + " names slot " + std::to_string(first.slot) + ", outside [0, " +
                 std::to_string(capacity_.slots) + ")");
    DI_CHECK(!seen[size_t(first.slot)], who_ + ": slot " + std::to_string(first.slot) +
                                            " appears in two separate runs of rows in one step");
    seen[size_t(first.slot)] = 1;
    int32_t& length = lengths_[size_t(first.slot)];
    if (first.position == 0) {
      // A new sequence in this slot: its pages go back to the free lists.
      release_pages(first.slot);
      length = 0;
    }
    DI_CHECK(first.position == length, who_ + ": slot " + std::to_string(first.slot) + " holds " +
                                           std::to_string(length) + " positions; row " + std::to_string(r) +
                                           " continues at " + std::to_string(first.position));
    int end = r;
    while (end < n && rows[size_t(end)].slot == first.slot) {
      const StepRow& row = rows[size_t(end)];
      DI_CHECK(row.position == first.position + (end - r), who_ + ": rows of slot " + std::to_string(first.slot) +
                                                               " must have consecutive positions");
      DI_CHECK(row.token < vocab_size_ && (row.token >= 0 || -row.token - 1 < R),
               who_ + ": row " + std::to_string(end) + " has token " + std::to_string(row.token) + ", outside [0, " +
                   std::to_string(vocab_size_) + ")");
      ++end;
    }
    const int32_t last = rows[size_t(end - 1)].position;
    DI_CHECK(last < capacity_.max_context, who_ + ": position " + std::to_string(last) +
                                               " is past the capacity's max_context " +
                                               std::to_string(capacity_.max_context));
    reserve_pages(first.slot, last);
    for (int i = r; i < end; ++i) {
      tokens[i] = rows[size_t(i)].token;
      slots[i] = first.slot;
      positions[i] = rows[size_t(i)].position;
      chunk_first[i] = r;
      chunk_rows[i] = end - r;
    }
    length = last + 1;
    r = end;
  }
}

}  // namespace deepinfer
