#include "model/gpu/backend.h"

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/model.h"
#include "model/v4/gpu/v4_gpu_forward.h"
#include "model/v41/gpu/v41_gpu_model.h"
#include "runtime/data_parallel.h"

#if DEEPINFER_HAS_NCCL
#include "cuda/check.h"
#include "parallel/comm.h"
#include "parallel/eplb.h"
#endif

namespace deepinfer::gpu {

namespace {

#if DEEPINFER_HAS_NCCL
// The data-parallel engine's ranks on the GPU (docs/data_parallel.md "On the GPU"): rank r on CUDA device r, the V4 GPU
// model with the routed experts of the contiguous placement's share of rank r, its MoE layers collectives over an
// NCCL group of the `ranks` ranks. Each rank loads on its own thread: ncclCommInitRank returns only when every rank
// has joined.
std::vector<std::unique_ptr<Model>> load_v4_gpu_group(const std::string& dir, const ModelOptions& options,
                                                      int ranks) {
  namespace fs = std::filesystem;
  const ModelConfig config = load_model_config((fs::path(dir) / "config.json").string());
  DI_CHECK(config.family == ModelFamily::V4,
           "EngineOptions.data_parallel: data parallelism on the GPU runs the V4 GPU model (expert parallelism); '" +
               config.model_type + "' needs data_parallel = 1");
  int devices = 0;
  DI_CUDA_CHECK(cudaGetDeviceCount(&devices));
  DI_CHECK(ranks <= devices, "EngineOptions.data_parallel: " + std::to_string(ranks) +
                                 " ranks need one CUDA device each; " + std::to_string(devices) + " are visible");
  DI_CHECK(config.n_routed_experts % ranks == 0,
           "EngineOptions.data_parallel: " + std::to_string(config.n_routed_experts) +
               " routed experts do not split evenly over " + std::to_string(ranks) + " ranks");
  const StepCapacity cap = gpu_load_capacity(options, "v4 gpu model");  // sets the (process-wide) numerics mode
  const parallel::ExpertPlacement placement =
      parallel::contiguous_placement(config.num_layers, config.n_routed_experts, ranks);
  const parallel::CommId id = parallel::Comm::unique_id();
  std::vector<std::unique_ptr<Model>> models(static_cast<size_t>(ranks));
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        DI_CUDA_CHECK(cudaSetDevice(r));
        auto comm = std::make_unique<parallel::Comm>(id, r, ranks, r);
        ModelOptions rank_options = options;
        rank_options.show_progress = options.show_progress && r == 0;  // one rank's progress lines
        std::unique_ptr<V4GpuWeights> weights =
            options.random_weights
                ? random_v4_gpu_weights(config, 7, &placement, r)
                : upload_v4_gpu_weights(config, open_gpu_checkpoint(dir, rank_options), rank_options.show_progress,
                                        &placement, r);
        auto model = std::make_unique<V4GpuModel>(config, std::move(weights), cap, comm.get());
        models[size_t(r)] = std::make_unique<V4GpuForward>(std::move(model), std::move(comm), r);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r)
    DI_CHECK(errors[size_t(r)].empty(), "data-parallel GPU load, rank " + std::to_string(r) + " (device " +
                                            std::to_string(r) + "): " + errors[size_t(r)]);
  if (options.show_progress)
    std::fprintf(stderr, "[load] %d ranks, one GPU each, %d routed experts per rank and layer (NCCL)\n", ranks,
                 config.n_routed_experts / ranks);
  return models;
}
#endif

}  // namespace

void register_cuda_backend() {
  register_device_backend("cuda", [](const std::string& dir, const ModelOptions& options) -> std::unique_ptr<Model> {
    const ModelConfig config = load_model_config((std::filesystem::path(dir) / "config.json").string());
    if (config.family == ModelFamily::V41) return load_v41_gpu_model(dir, options);
    DI_CHECK(config.family == ModelFamily::V4, "cuda backend: '" + config.model_type +
                                                   "' does not run on the GPU (V4 and V4.1 do; use --device cpu)");
    return load_v4_gpu_model(dir, options);
  });
#if DEEPINFER_HAS_NCCL
  runtime::register_data_parallel_backend("cuda", load_v4_gpu_group);
#else
  runtime::register_data_parallel_backend(
      "cuda", [](const std::string&, const ModelOptions&, int) -> std::vector<std::unique_ptr<Model>> {
        DI_CHECK(false, "EngineOptions.data_parallel: data parallelism on the GPU needs NCCL (cmake/nccl.cmake); this "
                        "build has none");
        return {};
      });
#endif
}

}  // namespace deepinfer::gpu
