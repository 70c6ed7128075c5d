// The CUDA backend's entry point: registers the "cuda" device with load_model (model/model.h). Binaries that
// link deepinfer_gpu call it once at start (the CLI, the Python module, the GPU tests).
#pragma once

namespace deepinfer::gpu {

void register_cuda_backend();

}  // namespace deepinfer::gpu
