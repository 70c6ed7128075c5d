// The engine's device timeline (model/gpu/device_timeline.h, issue 5): busy time per step and the idle gaps
// between steps, from events around each step. The steps here are device memsets of known size and the gaps host
// sleeps of known length, so the expected values come from the clock, not from the timeline itself.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "cuda/device.h"
#include "gpu_test_util.h"
#include "model/gpu/device_timeline.h"

namespace deepinfer::gputest {
namespace {

TEST(DeviceTimeline, GapsAreTheHostsPausesAndBusyIsTheWork) {
  DI_SKIP_WITHOUT_GPU();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cuda::DeviceBuffer buf(size_t(1) << 30);
  gpu::DeviceTimeline timeline;
  const int steps = 12;  // more than the event ring: it must recycle slots
  const auto pause = std::chrono::milliseconds(3);
  for (int i = 0; i < steps; ++i) {
    timeline.begin(stream);
    ASSERT_EQ(cudaMemsetAsync(buf.get(), i, buf.bytes(), stream), cudaSuccess);
    timeline.end(stream);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::this_thread::sleep_for(pause);  // the device idles while the host "prepares" the next step
  }
  const DeviceTime t = timeline.totals();
  const double expected_idle = (steps - 1) * std::chrono::duration<double>(pause).count();
  std::printf("GPU_CHECK device_timeline busy %.3f ms over %d memsets of 1 GiB, idle %.3f ms (host pauses >= %.3f ms)\n",
              t.busy_s * 1e3, steps, t.idle_s * 1e3, expected_idle * 1e3);
  // A 1 GiB memset takes ~0.2-0.5 ms on an H200; a sleep lasts at least its length and rarely 2x more.
  EXPECT_GT(t.busy_s, steps * 0.05e-3);
  EXPECT_LT(t.busy_s, steps * 5e-3);
  EXPECT_GE(t.idle_s, 0.95 * expected_idle);
  EXPECT_LT(t.idle_s, 3.0 * expected_idle);

  // Back to back (the asynchronous scheduler's case): the next step is queued before the previous one ends, so
  // the device does not wait between them.
  gpu::DeviceTimeline queued;
  for (int i = 0; i < steps; ++i) {
    queued.begin(stream);
    ASSERT_EQ(cudaMemsetAsync(buf.get(), i, buf.bytes(), stream), cudaSuccess);
    queued.end(stream);
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const DeviceTime q = queued.totals();
  std::printf("GPU_CHECK device_timeline queued steps: busy %.3f ms, idle %.4f ms (%.2f %%)\n", q.busy_s * 1e3,
              q.idle_s * 1e3, 100 * q.idle_s / (q.busy_s + q.idle_s));
  EXPECT_LT(q.idle_s, 0.05 * q.busy_s);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
}  // namespace deepinfer::gputest
