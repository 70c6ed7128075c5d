// The switch between the decode-fused kernels of the CSA indexer and the attention core (issue 4: batch-1 decode
// is launch latency, bench/gpu/NOTES.md "Decode-fused indexer and attention core") and the split kernels they
// replace at few rows. Both paths give the same bits (the fused kernels run the same device functions in the same
// order: index_scoring.cuh's scores, one top-k select, the attention's split and merge bodies), so the switch is
// for A/B timing and for the tests that compare the two, not a numerics choice.
//
// DEEPINFER_DECODE_FUSED=0 keeps the split kernels process-wide; default on. Read once, at the first query;
// set_decode_fused overrides it (tests). Like batch_invariant(), it is set before steps are in flight: a CUDA
// graph replays the kernels of the mode it was captured in.
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace deepinfer::cuda {

inline std::atomic<bool>& decode_fused_flag() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("DEEPINFER_DECODE_FUSED");
    return !(v && std::strcmp(v, "0") == 0);
  }()};
  return on;
}
inline bool decode_fused() { return decode_fused_flag().load(std::memory_order_relaxed); }
inline void set_decode_fused(bool on) { decode_fused_flag().store(on, std::memory_order_relaxed); }

}  // namespace deepinfer::cuda
