// What the 2-GPU tests (test_comm.cpp, test_ep_model.cpp, test_dp_engine.cpp) share: the visible CUDA device count
// and the guard that skips a test on fewer than two devices, or fails it where DEEPINFER_REQUIRE_GPU says the
// machine must have them (tools/gpu/run_bounded.sh).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>

namespace deepinfer::multi_gpu_test {

inline int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

}  // namespace deepinfer::multi_gpu_test

#define SKIP_WITHOUT_TWO_GPUS()                                                                               \
  if (::deepinfer::multi_gpu_test::device_count() < 2) {                                                     \
    if (std::getenv("DEEPINFER_REQUIRE_GPU")) FAIL() << "DEEPINFER_REQUIRE_GPU: fewer than 2 CUDA devices";  \
    GTEST_SKIP() << "needs 2 CUDA devices";                                                                   \
  }
