#include "model/gpu/backend.h"

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/model.h"
#include "model/v4/gpu/v4_gpu_forward.h"
#include "model/v41/gpu/v41_gpu_model.h"
#include "runtime/data_parallel.h"

namespace deepinfer::gpu {

void register_cuda_backend() {
  register_device_backend("cuda", [](const std::string& dir, const ModelOptions& options) -> std::unique_ptr<Model> {
    const ModelConfig config = load_model_config((std::filesystem::path(dir) / "config.json").string());
    if (config.family == ModelFamily::V41) return load_v41_gpu_model(dir, options);
    DI_CHECK(config.family == ModelFamily::V4, "cuda backend: '" + config.model_type +
                                                   "' does not run on the GPU (V4 and V4.1 do; use --device cpu)");
    return load_v4_gpu_model(dir, options);
  });
  // Replaced by register_cuda_data_parallel() in binaries that link deepinfer_gpu_dp (built only with NCCL).
  runtime::register_data_parallel_backend(
      "cuda", [](const std::string&, const ModelOptions&, int) -> std::vector<std::unique_ptr<Model>> {
        DI_CHECK(false, "EngineOptions.data_parallel: data parallelism on the GPU needs NCCL (cmake/nccl.cmake) and "
                        "a binary linked with deepinfer_gpu_dp that calls gpu::register_cuda_data_parallel()");
        return {};
      });
}

}  // namespace deepinfer::gpu
