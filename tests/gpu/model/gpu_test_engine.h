// What the engine tests on the GPU (model/test_engine_gpu.cpp, multi/test_dp_engine.cpp) share: the engine options
// over the GPU test checkpoint with the cuda backend registered, and the guard that resets the process-wide
// batch-invariant switch a model load sets.
#pragma once

#include "cuda/numerics_mode.h"
#include "deepinfer/engine.h"
#include "gpu_test_model.h"
#include "model/gpu/backend.h"

namespace deepinfer::gputest {

// The engine on the V4 GPU test checkpoint (gpu_test_model_dir) with device cuda and 128-token sequences; the test
// sets its batch shape. Registers the cuda backend first (a test that registers the data-parallel backend too does
// so after this: register_cuda_backend installs the stand-in that says NCCL is needed).
inline EngineOptions gpu_test_engine_options() {
  gpu::register_cuda_backend();
  EngineOptions o;
  o.model = gpu_test_model_dir();
  o.device = "cuda";
  o.max_model_len = 128;
  return o;
}

// The kernels' batch-invariant switch is process-wide and set by the model load: the other tests of a binary that
// build GPU modules directly must not inherit it.
struct ResetBatchInvariant {
  ~ResetBatchInvariant() { cuda::set_batch_invariant(false); }
};

}  // namespace deepinfer::gputest
