// The CUDA backend's data-parallel loader (docs/data_parallel.md "On the GPU"), built only with NCCL
// (cmake/nccl.cmake: the library deepinfer_gpu_dp). A .cc file so that the src/**/*.cpp globs of deepinfer_lib and
// deepinfer_gpu leave it out: only binaries that link deepinfer_gpu_dp need libnccl.so.2 at start.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <thread>
#include <span>
#include <vector>

#include "core/error.h"
#include "cuda/check.h"
#include "model/config.h"
#include "model/gpu/backend.h"
#include "model/gpu/step_model.h"
#include "model/model.h"
#include "model/v4/gpu/v4_gpu_forward.h"
#include "model/v4/gpu/v4_gpu_model.h"
#include "model/v41/gpu/v41_gpu_model.h"
#include "parallel/comm.h"
#include "parallel/eplb.h"
#include "runtime/data_parallel.h"

namespace deepinfer::gpu {

namespace {

// Rank r's model of a data-parallel group: the checkpoint's family (V4, V4.1) with the routed experts of `rank`'s
// share of `placement` (random weights too: each routed expert from its own seed, so the share is the one-GPU model's
// experts) and `group` as its expert-parallel group. V4.1's Engram tables are one pinned copy per process, shared by
// the ranks (V41GpuWeights::shared_engram_tables), and the model gets the one-GPU loader's bounded replay options.
std::unique_ptr<GpuStepModel> load_rank_model(const std::string& dir, const ModelConfig& config,
                                              const ModelOptions& options, const StepCapacity& cap,
                                              const parallel::ExpertPlacement& placement, int rank,
                                              parallel::Collectives* group) {
  if (config.family == ModelFamily::V41) {
    std::unique_ptr<V41GpuWeights> weights =
        options.random_weights ? random_v41_gpu_weights(config, 7, &placement, rank)
                               : upload_v41_gpu_weights(config, open_gpu_checkpoint(dir, options),
                                                        options.show_progress, &placement, rank);
    return std::make_unique<V41GpuModel>(config, std::move(weights), cap, options.prefill_replay, group);
  }
  std::unique_ptr<V4GpuWeights> weights =
      options.random_weights
          ? random_v4_gpu_weights(config, 7, &placement, rank)
          : upload_v4_gpu_weights(config, open_gpu_checkpoint(dir, options), options.show_progress, &placement, rank);
  return std::make_unique<V4GpuModel>(config, std::move(weights), cap, group);
}

// The placement every rank's experts are built in, the same on every rank (thread or process): a function of the
// config and the options only. The contiguous split, or with ModelOptions::eplb_redundant_experts = R > 0 the
// load-unaware EPLB placement with R redundant slots per layer (what v4_ep_decode --eplb-redundant R builds), so
// that the engine's rebalancing (EngineOptions::eplb_rebalance_steps) moves experts within that shape.
parallel::ExpertPlacement rank_placement(const ModelConfig& config, const ModelOptions& options, int ranks) {
  const int experts = config.n_routed_experts, redundant = options.eplb_redundant_experts;
  DI_CHECK(experts % ranks == 0, "EngineOptions.data_parallel: " + std::to_string(experts) +
                                     " routed experts do not split evenly over " + std::to_string(ranks) + " ranks");
  DI_CHECK(redundant >= 0 && (experts + redundant) % ranks == 0,
           "EngineOptions.eplb_redundant_experts: " + std::to_string(experts) + " routed experts + " +
               std::to_string(redundant) + " redundant slots do not split evenly over " + std::to_string(ranks) +
               " ranks");
  return parallel::load_unaware_placement(config.num_layers, experts, ranks, redundant);
}

// The checkpoint's config, checked for a GPU data-parallel group (both loaders below): the V4 / V4.1 GPU models
// are the ones with expert parallelism, and bounded replay is V4.1's.
ModelConfig data_parallel_config(const std::string& dir, const ModelOptions& options) {
  namespace fs = std::filesystem;
  ModelConfig config = load_model_config((fs::path(dir) / "config.json").string());
  DI_CHECK(config.family == ModelFamily::V4 || config.family == ModelFamily::V41,
           "EngineOptions.data_parallel: data parallelism on the GPU runs the V4 and V4.1 GPU models (expert "
           "parallelism); '" + config.model_type + "' needs data_parallel = 1");
  DI_CHECK(config.family == ModelFamily::V41 || options.prefill_replay.mode == PrefillReplayOptions::Mode::Exact,
           "v4 gpu model: bounded replay is a V4.1 feature");
  return config;
}

// The data-parallel engine's ranks on the GPU (docs/data_parallel.md "On the GPU"): rank r on CUDA device r, the V4 or
// V4.1 GPU model with the routed experts of rank_placement's share of rank r, its MoE layers collectives
// over an NCCL group of the `ranks` ranks. Each rank loads on its own thread: ncclCommInitRank returns only when
// every rank has joined.
std::vector<std::unique_ptr<Model>> load_gpu_group(const std::string& dir, const ModelOptions& options, int ranks) {
  const ModelConfig config = data_parallel_config(dir, options);
  const bool v41 = config.family == ModelFamily::V41;
  int devices = 0;
  const cudaError_t counted = cudaGetDeviceCount(&devices);
  if (counted != cudaSuccess) (void)cudaGetLastError();  // not sticky: clear it
  DI_CHECK(counted == cudaSuccess, "EngineOptions.data_parallel: " + std::to_string(ranks) +
                                       " ranks need one CUDA device each; none is usable here (" +
                                       cudaGetErrorString(counted) + ")");
  DI_CHECK(ranks <= devices, "EngineOptions.data_parallel: " + std::to_string(ranks) +
                                 " ranks need one CUDA device each; " + std::to_string(devices) + " are visible");
  const parallel::ExpertPlacement placement = rank_placement(config, options, ranks);
  // Sets the (process-wide) numerics mode.
  const StepCapacity cap = gpu_load_capacity(options, v41 ? "v4.1 gpu model" : "v4 gpu model");
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
        std::unique_ptr<GpuStepModel> model =
            load_rank_model(dir, config, rank_options, cap, placement, r, comm.get());
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
    std::fprintf(stderr, "[load] %d ranks, one GPU each, %d routed expert slots per rank and layer (%d redundant; "
                 "NCCL)\n", ranks, placement.slots_per_rank, options.eplb_redundant_experts);
  return models;
}

// One rank of a group of processes (`deepinfer launch --nproc N -- deepinfer generate --device cuda --data-parallel N`,
// EngineOptions::process_group): this process builds rank `rank`'s model only, on CUDA device `device` (LOCAL_RANK),
// with the same checks, placement and weights as load_gpu_group's rank. Rank 0 makes the NCCL unique id and `share`
// (the process group's connections) passes it to the others; ncclCommInitRank then returns once every process has
// joined. The communicator is the process's only one: its GroupTeardown of one destroys it when the model goes, and
// ncclCommDestroy meets the other processes' at their ends.
std::unique_ptr<Model> load_gpu_rank(const std::string& dir, const ModelOptions& options, int rank, int ranks,
                                     int device, const runtime::ShareBlob& share) {
  const ModelConfig config = data_parallel_config(dir, options);
  const bool v41 = config.family == ModelFamily::V41;
  int devices = 0;
  const cudaError_t counted = cudaGetDeviceCount(&devices);
  if (counted != cudaSuccess) (void)cudaGetLastError();  // not sticky: clear it
  DI_CHECK(counted == cudaSuccess && device >= 0 && device < devices,
           "EngineOptions.process_group: rank " + std::to_string(rank) + " needs CUDA device " +
               std::to_string(device) + " (LOCAL_RANK); " +
               (counted == cudaSuccess ? std::to_string(devices) + " are visible"
                                       : std::string("none is usable here (") + cudaGetErrorString(counted) + ")"));
  const parallel::ExpertPlacement placement = rank_placement(config, options, ranks);
  const StepCapacity cap = gpu_load_capacity(options, v41 ? "v4.1 gpu model" : "v4 gpu model");
  parallel::CommId id{};
  if (rank == 0) id = parallel::Comm::unique_id();
  const std::vector<uint8_t> shared =
      share(rank == 0 ? std::span<const uint8_t>(id.data(), id.size()) : std::span<const uint8_t>());
  DI_CHECK(shared.size() == id.size(), "EngineOptions.process_group: rank 0 shared a " +
                                           std::to_string(shared.size()) + "-byte NCCL id, not " +
                                           std::to_string(id.size()));
  std::copy(shared.begin(), shared.end(), id.begin());
  DI_CUDA_CHECK(cudaSetDevice(device));
  auto teardown = std::make_shared<GroupTeardown>(1);
  std::unique_ptr<parallel::Comm> comm;
  try {
    comm = std::make_unique<parallel::Comm>(id, rank, ranks, device);
    ModelOptions rank_options = options;
    rank_options.show_progress = options.show_progress && rank == 0;  // one rank's progress lines
    std::unique_ptr<GpuStepModel> model = load_rank_model(dir, config, rank_options, cap, placement, rank, comm.get());
    return std::make_unique<V4GpuForward>(std::move(model), std::move(comm), device, teardown);
  } catch (...) {
    teardown->release(std::move(comm), device);
    throw;
  }
}

}  // namespace

void register_cuda_data_parallel() {
  runtime::register_data_parallel_backend("cuda", load_gpu_group);
  runtime::register_process_rank_backend("cuda", load_gpu_rank);
}

}  // namespace deepinfer::gpu
