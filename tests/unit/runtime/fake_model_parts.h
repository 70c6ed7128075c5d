// Pieces the runtime tests' fake models share (test_data_parallel, test_eplb_stats, test_eplb_rebalance): a
// deterministic 64-bit mixer for the fake routings and outputs, a Zipf-skewed expert draw, and a sequence state that
// only counts its length.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace deepinfer::fake {

// SplitMix64's finalizer: a fixed function of x (the fakes' "random" choices are reproducible by construction).
inline uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The cumulative distribution of a Zipf law over n items (weight of rank i: (i + 1)^-exponent), normalized to end at 1.
inline std::vector<double> zipf_cdf(int n, double exponent) {
  std::vector<double> cdf;
  double c = 0;
  for (int i = 0; i < n; ++i) cdf.push_back(c += std::pow(1.0 / (i + 1), exponent));
  for (double& x : cdf) x /= c;
  return cdf;
}

// The fakes' routed expert rank for one (position, token, layer, top-k slot): a Zipf draw keyed by a fixed mix of the
// four, so every run and every rank sees the same routing. The caller maps the rank to an expert id (its shift).
inline int zipf_rank(const std::vector<double>& cdf, int64_t pos, int32_t token, int layer, int slot) {
  const uint64_t h = splitmix(uint64_t(pos) * 1000003 + uint64_t(token) * 7919 + uint64_t(layer) * 131 + slot);
  const double u = double(h >> 11) / double(1ull << 53);
  const int rank = int(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
  return std::min(rank, int(cdf.size()) - 1);
}

class FakeState : public SequenceState {
 public:
  int64_t length() const override { return length_; }
  int64_t length_ = 0;
};

}  // namespace deepinfer::fake
