// The CUDA backend's data-parallel loader (docs/data_parallel.md "On the GPU"), built only with NCCL
// (cmake/nccl.cmake: the library deepinfer_gpu_dp). A .cc file so that the src/**/*.cpp globs of deepinfer_lib and
// deepinfer_gpu leave it out: only binaries that link deepinfer_gpu_dp need libnccl.so.2 at start.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "cuda/check.h"
#include "model/config.h"
#include "model/gpu/backend.h"
#include "model/model.h"
#include "model/v4/gpu/v4_gpu_forward.h"
#include "parallel/comm.h"
#include "parallel/eplb.h"
#include "runtime/data_parallel.h"

namespace deepinfer::gpu {

namespace {

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
  const cudaError_t counted = cudaGetDeviceCount(&devices);
  if (counted != cudaSuccess) (void)cudaGetLastError();  // not sticky: clear it
  DI_CHECK(counted == cudaSuccess, "EngineOptions.data_parallel: " + std::to_string(ranks) +
                                       " ranks need one CUDA device each; none is usable here (" +
                                       cudaGetErrorString(counted) + ")");
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
  // Communicators are destroyed together, never one by one (ncclCommDestroy is a collective): see GroupTeardown.
  auto teardown = std::make_shared<GroupTeardown>(ranks);
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<parallel::Comm> comm;
      try {
        DI_CUDA_CHECK(cudaSetDevice(r));
        comm = std::make_unique<parallel::Comm>(id, r, ranks, r);
        ModelOptions rank_options = options;
        rank_options.show_progress = options.show_progress && r == 0;  // one rank's progress lines
        std::unique_ptr<V4GpuWeights> weights =
            options.random_weights
                ? random_v4_gpu_weights(config, 7, &placement, r)
                : upload_v4_gpu_weights(config, open_gpu_checkpoint(dir, rank_options), rank_options.show_progress,
                                        &placement, r);
        auto model = std::make_unique<V4GpuModel>(config, std::move(weights), cap, comm.get());
        models[size_t(r)] = std::make_unique<V4GpuForward>(std::move(model), std::move(comm), r, teardown);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
      // A rank that failed hands its communicator (or none) to the teardown, so that the others' can end.
      if (!models[size_t(r)]) teardown->release(std::move(comm), r);
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

}  // namespace

void register_cuda_data_parallel() { runtime::register_data_parallel_backend("cuda", load_v4_gpu_group); }

}  // namespace deepinfer::gpu
