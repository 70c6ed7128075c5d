// Pieces the runtime tests' fake models share (test_data_parallel, test_eplb_stats, test_eplb_rebalance): a
// deterministic 64-bit mixer for the fake routings and outputs, and a sequence state that only counts its length.
#pragma once

#include <cstdint>

#include "model/model.h"

namespace deepinfer::fake {

// SplitMix64's finalizer: a fixed function of x (the fakes' "random" choices are reproducible by construction).
inline uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

class FakeState : public SequenceState {
 public:
  int64_t length() const override { return length_; }
  int64_t length_ = 0;
};

}  // namespace deepinfer::fake
