// The device's busy and idle time between the engine's steps (issue 5: "the device's idle fraction between
// steps"), measured with CUDA events on the model's stream: one before a step's first operation, one after its
// last. Once a step's end event has completed, its busy time (end - begin) and the gap since the previous step's
// end (begin - previous end) are added. The events live in a small ring: at most two steps are in flight under
// asynchronous scheduling, and a full ring waits for its oldest step before reusing it.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>

#include "model/model.h"

namespace deepinfer::gpu {

class DeviceTimeline {
 public:
  DeviceTimeline();
  ~DeviceTimeline();
  DeviceTimeline(const DeviceTimeline&) = delete;
  DeviceTimeline& operator=(const DeviceTimeline&) = delete;

  void begin(cudaStream_t stream);  // before a step's first device operation
  void end(cudaStream_t stream);    // after its last
  // The totals of every step whose end event has completed (never waits).
  DeviceTime totals();

 private:
  static constexpr int kRing = 8;
  struct Mark {
    cudaEvent_t begin = nullptr, end = nullptr;
  };
  // Adds the completed steps in order; with `wait`, waits for the oldest open one first.
  void settle(bool wait);

  std::array<Mark, kRing> ring_{};
  uint64_t begun_ = 0;    // steps whose begin event was recorded
  uint64_t settled_ = 0;  // steps added to the totals (their slots hold the previous end until the next settles)
  DeviceTime totals_;
};

}  // namespace deepinfer::gpu
