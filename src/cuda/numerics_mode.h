// Process-wide numerics switches read by the CUDA kernels' host-side dispatch (algorithms.md §4).
#pragma once

#include <atomic>

namespace deepinfer::cuda {

// Batch-invariant mode (DEEPINFER_BATCH_INVARIANT=1, EngineOptions::batch_invariant): every dispatcher picks its
// kernel, tile shape and reduction split from the model's shapes and from one row's own extent (its context
// length), never from how many rows the call carries, so a row's result is bitwise the same alone or inside any
// batch. It is process-wide because one process serves one model; it is set before the first step and not changed
// while steps are in flight (graphs captured in one mode replay that mode's kernels).
inline std::atomic<bool>& batch_invariant_flag() {
  static std::atomic<bool> on{false};
  return on;
}
inline bool batch_invariant() { return batch_invariant_flag().load(std::memory_order_relaxed); }
inline void set_batch_invariant(bool on) { batch_invariant_flag().store(on, std::memory_order_relaxed); }

}  // namespace deepinfer::cuda
