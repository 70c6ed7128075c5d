// Error checks for the CUDA backend: every runtime call and every launch is checked, and a failure throws
// deepinfer::Error naming the call and the place (DESIGN.md principle 7: errors are answers).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace deepinfer::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* what, const char* file, int line) {
  throw Error(std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " + what +
              " at " + file + ":" + std::to_string(line));
}

}  // namespace deepinfer::cuda

#define DI_CUDA_CHECK(expr)                                                               \
  do {                                                                                    \
    cudaError_t di_err_ = (expr);                                                         \
    if (di_err_ != cudaSuccess) ::deepinfer::cuda::throw_cuda_error(di_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a <<<...>>> launch: a bad configuration shows up here, not at the launch.
#define DI_CUDA_CHECK_LAUNCH(name) DI_CUDA_CHECK(cudaGetLastError())
