// How a long prefill is cut over the ranks of a context-parallel group (docs/parallel.md "Context parallelism",
// algorithms.md §7; issue 7): the zigzag split. The prompt is cut into 2 * ranks chunks of near-equal length and
// rank r takes chunks r and 2 * ranks - 1 - r, one early and one late, so every rank's share of the causal
// attention work (a query at position p attends over the p + 1 positions before it, or their compressed form)
// is nearly the same; contiguous cuts would give the last rank ~2x the mean.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer::parallel {

struct TokenRange {
  int64_t begin = 0, end = 0;  // positions [begin, end)
  int64_t size() const { return end - begin; }
};

// Rank r's ranges, ascending: {chunk r, chunk 2 * ranks - 1 - r}; chunk i covers positions
// [i * tokens / (2 ranks), (i + 1) * tokens / (2 ranks)) (integer division, so the lengths differ by at most one).
// Empty ranges are dropped. ranks >= 1, tokens >= 0.
std::vector<std::vector<TokenRange>> zigzag_split(int64_t tokens, int ranks);

// The causal attention work of a set of query ranges, sum over their positions p of (p + 1): the number of
// (query, key) pairs of a full causal attention. A compressed layer's work is a fraction of this (keys p / ratio),
// and the window's is bounded; the balance of this sum bounds theirs (docs/parallel.md).
double causal_work(const std::vector<TokenRange>& ranges);

// The query rows of one context-parallel prefill step (the V4 GPU model's prefill_context_parallel, docs/parallel.md
// "Context parallelism"): the step's `rows` consecutive positions cut into `ranks` contiguous ranges, rank r's
// [cut_r, cut_{r+1}), cut_r = r * rows / ranks rounded to the nearest multiple of `align` (so every per-row device
// array of a range starts aligned), cut_0 = 0, cut_ranks = rows. Ranges may be empty (rows < align); together they
// cover [0, rows) once, in rank order. A prefill runs in steps of at most max_rows rows, so the positions of one step
// differ by less than a step and equal row counts are (nearly) equal work; the zigzag split above is for a whole
// prompt in one step. ranks >= 1, rows >= 0, align >= 1.
std::vector<TokenRange> step_query_split(int64_t rows, int ranks, int64_t align);

}  // namespace deepinfer::parallel
