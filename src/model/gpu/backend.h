// The CUDA backend's entry point: registers the "cuda" device with load_model (model/model.h). Binaries that
// link deepinfer_gpu call it once at start (the CLI, the Python module, the GPU tests).
#pragma once

namespace deepinfer::gpu {

void register_cuda_backend();
// The data-parallel engine on the GPU (EngineOptions::data_parallel > 1, device cuda; docs/data_parallel.md "On the
// GPU"): registers the loader of one V4 GPU model per device with an NCCL expert-parallel group. Defined only in
// deepinfer_gpu_dp (built with NCCL: cmake/nccl.cmake); call it after register_cuda_backend().
void register_cuda_data_parallel();

}  // namespace deepinfer::gpu
