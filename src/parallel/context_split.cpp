#include "parallel/context_split.h"

#include <algorithm>

#include "core/error.h"

namespace deepinfer::parallel {

std::vector<std::vector<TokenRange>> zigzag_split(int64_t tokens, int ranks) {
  DI_CHECK(ranks >= 1, "zigzag_split: ranks must be >= 1, got " + std::to_string(ranks));
  DI_CHECK(tokens >= 0, "zigzag_split: negative token count");
  const int64_t chunks = 2 * int64_t(ranks);
  auto chunk = [&](int64_t i) { return TokenRange{i * tokens / chunks, (i + 1) * tokens / chunks}; };
  std::vector<std::vector<TokenRange>> out(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    for (const TokenRange& c : {chunk(r), chunk(chunks - 1 - r)})
      if (c.size() > 0) out[size_t(r)].push_back(c);
  return out;
}

double causal_work(const std::vector<TokenRange>& ranges) {
  double w = 0;
  // sum_{p = b}^{e - 1} (p + 1) = (e (e + 1) - b (b + 1)) / 2
  for (const TokenRange& r : ranges)
    w += (double(r.end) * double(r.end + 1) - double(r.begin) * double(r.begin + 1)) / 2;
  return w;
}

std::vector<TokenRange> step_query_split(int64_t rows, int ranks, int64_t align) {
  DI_CHECK(ranks >= 1, "step_query_split: ranks must be >= 1, got " + std::to_string(ranks));
  DI_CHECK(rows >= 0, "step_query_split: negative row count");
  DI_CHECK(align >= 1, "step_query_split: align must be >= 1");
  std::vector<TokenRange> out(static_cast<size_t>(ranks));
  int64_t prev = 0;
  for (int r = 0; r < ranks; ++r) {
    int64_t cut = rows;
    if (r + 1 < ranks) {
      const int64_t even = int64_t(r + 1) * rows / ranks;
      cut = std::min(rows, std::max(prev, (even + align / 2) / align * align));
    }
    out[size_t(r)] = TokenRange{prev, cut};
    prev = cut;
  }
  return out;
}

}  // namespace deepinfer::parallel
