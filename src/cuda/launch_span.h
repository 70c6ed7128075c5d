// The %globaltimer summary of one launch's blocks, shared by the stream kernels' phase readers (layers/quant/
// fp8_gemm.cu fp8_launch_phases, cuda/stream_fp4_wgmma.cu fp4_launch_phases; roofline --fp4-phases / --fp8-phases,
// v4_decode --fp4-stamps / --fp8-stamps). Host-only, no CUDA.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace deepinfer::cuda {

struct LaunchSpan {
  double span_us = 0;          // the first block's start to the last block's end
  double start_median_us = 0;  // the blocks' starts after the first block's: the median
  double start_last_us = 0;    // and the last
  double end_spread_us = 0;    // the last block's end after the median end
  double block_us = 0;         // the median block's time, its end after its own start
};

// From each block's (start, end) in ns; medians are the upper one of an even count. The differences are taken in
// integers (a globaltimer value has more digits than a double's mantissa). No blocks: all zero.
inline LaunchSpan launch_span(const std::vector<std::pair<uint64_t, uint64_t>>& blocks) {
  LaunchSpan p;
  const size_t n = blocks.size();
  if (n == 0) return p;
  std::vector<uint64_t> starts, ends;
  std::vector<int64_t> own;
  for (const auto& [start, end] : blocks) {
    starts.push_back(start);
    ends.push_back(end);
    own.push_back(int64_t(end - start));
  }
  std::sort(starts.begin(), starts.end());
  std::sort(ends.begin(), ends.end());
  std::sort(own.begin(), own.end());
  const auto us = [](int64_t ns) { return double(ns) * 1e-3; };
  p.span_us = us(int64_t(ends.back() - starts.front()));
  p.start_median_us = us(int64_t(starts[n / 2] - starts.front()));
  p.start_last_us = us(int64_t(starts.back() - starts.front()));
  p.end_spread_us = us(int64_t(ends.back() - ends[n / 2]));
  p.block_us = us(own[n / 2]);
  return p;
}

}  // namespace deepinfer::cuda
