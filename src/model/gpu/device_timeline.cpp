#include "model/gpu/device_timeline.h"

#include "cuda/check.h"

namespace deepinfer::gpu {

DeviceTimeline::DeviceTimeline() {
  for (Mark& m : ring_) {
    DI_CUDA_CHECK(cudaEventCreate(&m.begin));
    DI_CUDA_CHECK(cudaEventCreate(&m.end));
  }
}

DeviceTimeline::~DeviceTimeline() {
  for (Mark& m : ring_) {
    if (m.begin) cudaEventDestroy(m.begin);
    if (m.end) cudaEventDestroy(m.end);
  }
}

void DeviceTimeline::begin(cudaStream_t stream) {
  // Slot begun_ % kRing must not hold the last settled step's end (the next gap is measured from it) nor an open
  // step: keep at most kRing - 1 steps between the last settled one and this.
  while (begun_ - settled_ >= uint64_t(kRing - 1)) settle(true);
  DI_CUDA_CHECK(cudaEventRecord(ring_[begun_ % kRing].begin, stream));
}

void DeviceTimeline::end(cudaStream_t stream) {
  DI_CUDA_CHECK(cudaEventRecord(ring_[begun_ % kRing].end, stream));
  ++begun_;
}

void DeviceTimeline::settle(bool wait) {
  while (settled_ < begun_) {
    const Mark& m = ring_[settled_ % kRing];
    if (wait) {
      DI_CUDA_CHECK(cudaEventSynchronize(m.end));
      wait = false;
    } else {
      const cudaError_t q = cudaEventQuery(m.end);
      if (q == cudaErrorNotReady) return;
      DI_CUDA_CHECK(q);
    }
    float busy_ms = 0;
    DI_CUDA_CHECK(cudaEventElapsedTime(&busy_ms, m.begin, m.end));
    totals_.busy_s += busy_ms * 1e-3;
    if (settled_ > 0) {
      float gap_ms = 0;
      DI_CUDA_CHECK(cudaEventElapsedTime(&gap_ms, ring_[(settled_ - 1) % kRing].end, m.begin));
      totals_.idle_s += gap_ms > 0 ? gap_ms * 1e-3 : 0.0;
    }
    ++settled_;
  }
}

DeviceTime DeviceTimeline::totals() {
  settle(false);
  return totals_;
}

}  // namespace deepinfer::gpu
