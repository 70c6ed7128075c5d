// What the GPU module tests (compressors, indexers, Engram; V4 and V4.1) feed their modules: steps whose rows are
// runs of consecutive positions of interleaved slots, as the model's steps are, and page tables that scatter every
// slot's pages over the pool.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gpu_test_util.h"

namespace deepinfer::gputest {

// One call of the step: rows grouped by slot (runs of consecutive positions), slots interleaved across calls.
struct Call {
  std::vector<int32_t> slots, positions;
  int rows() const { return int(slots.size()); }
};

// slots[i]'s sequence of lengths[i] positions cut into calls: each call takes a random non-empty subset of the
// unfinished slots, in random order, each with a chunk of 1 token (half the time) or 2 .. max_chunk tokens, so
// compression groups and windows fall inside and across calls.
inline std::vector<Call> make_schedule(Rng& rng, const std::vector<int>& slots, const std::vector<int>& lengths,
                                       int max_chunk) {
  std::vector<int> next(slots.size(), 0);
  std::vector<Call> calls;
  for (;;) {
    std::vector<size_t> active;
    for (size_t i = 0; i < slots.size(); ++i)
      if (next[i] < lengths[i]) active.push_back(i);
    if (active.empty()) break;
    std::shuffle(active.begin(), active.end(), rng.engine());
    const size_t take = size_t(rng.integer(1, int(active.size())));
    Call call;
    for (size_t a = 0; a < take; ++a) {
      const size_t i = active[a];
      const int chunk = rng.uniform(0.0f, 1.0f) < 0.5f ? 1 : rng.integer(2, max_chunk);
      const int n = std::min(chunk, lengths[i] - next[i]);
      for (int t = 0; t < n; ++t) {
        call.slots.push_back(slots[i]);
        call.positions.push_back(next[i]++);
      }
    }
    calls.push_back(std::move(call));
  }
  return calls;
}

// Every slot's whole sequence in one call (one run per slot).
inline Call one_call(const std::vector<int>& slots, const std::vector<int>& lengths) {
  Call call;
  for (size_t i = 0; i < slots.size(); ++i)
    for (int p = 0; p < lengths[i]; ++p) {
      call.slots.push_back(slots[i]);
      call.positions.push_back(p);
    }
  return call;
}

inline int max_rows(const std::vector<Call>& calls) {
  int m = 0;
  for (const Call& c : calls) m = std::max(m, c.rows());
  return m;
}

// Random page tables: every slot's pages are scattered over the pool.
struct Paging {
  int slots = 0, max_pages = 0, page_size = 0;
  std::vector<int32_t> table;  // [slots, max_pages]
  int64_t row(int slot, int e) const {
    return int64_t(table[size_t(slot * max_pages + e / page_size)]) * page_size + e % page_size;
  }
  int64_t pool_rows() const { return int64_t(slots) * max_pages * page_size; }
  int capacity() const { return max_pages * page_size; }
};

inline Paging make_paging(Rng& rng, int slots, int max_pages, int page_size) {
  Paging p{slots, max_pages, page_size, {}};
  p.table.resize(size_t(slots * max_pages));
  for (size_t i = 0; i < p.table.size(); ++i) p.table[i] = int32_t(i);
  std::shuffle(p.table.begin(), p.table.end(), rng.engine());
  return p;
}

}  // namespace deepinfer::gputest
