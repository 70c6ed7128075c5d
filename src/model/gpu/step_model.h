// What the engine adapter (model/v4/gpu/v4_gpu_forward.h) needs of a GPU model that runs batched steps of
// (slot, token, position) rows, on one GPU or as one rank of a data-parallel engine's expert-parallel group
// (docs/data_parallel.md "On the GPU"): V4GpuModel and V41GpuModel implement it over GpuStepModelBase
// (model/gpu/step_model_base.h) and the shared machinery of model/gpu/step_rows.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/step_planner.h"

namespace deepinfer::gpu {

class GpuStepModel {
 public:
  virtual ~GpuStepModel() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const StepCapacity& capacity() const = 0;
  virtual cudaStream_t stream() const = 0;
  // Runs the rows (eagerly / from the CUDA graph of their row count) and returns the device pointer of their
  // fp32 logits [rows, vocab], valid until the next step; enqueued on stream(), nothing waits.
  virtual float* step(std::span<const StepRow> rows) = 0;
  virtual float* step_graph(std::span<const StepRow> rows) = 0;
  // A step of an expert-parallel group (docs/parallel.md "Expert parallelism: the exact gathered version"): every
  // rank calls it with the same rows_per_rank M (>= each rank's rows), `rows` may be empty (the rank only joins the
  // MoE collectives; nullptr is returned). One graph per (M, row count). The plain forms pad to capacity().max_rows.
  virtual float* step(std::span<const StepRow> rows, int rows_per_rank) = 0;
  virtual float* step_graph(std::span<const StepRow> rows, int rows_per_rank) = 0;
  // The ranks of the expert-parallel group the weights are one share of (1: one GPU, every expert here).
  virtual int expert_ranks() const = 0;
  // Greedy tokens of the last step's rows into the device buffer that the next step's negative tokens read.
  virtual const int32_t* sample_greedy(int rows) = 0;
  // Whether rows may name the previous step's sampled tokens (negative tokens resolved on the device). A model
  // whose step needs every token on the host (V4.1's Engram hashing) says no, and the adapter runs its sampled
  // steps synchronously.
  virtual bool resolves_tokens_on_device() const { return true; }
  // EPLB statistics (model/model.h Model::set_expert_load_counting / take_expert_loads, docs/parallel.md "EPLB"):
  // while on, every step adds the routed (row, k) pairs of this rank's own rows per (MoE layer, logical expert) into
  // a device counter (GpuStepModelBase); take_expert_loads copies it to the host [layer][expert], restarts it and
  // returns it (waits for stream()); nullopt while off. Off by default: no launch, the same graphs.
  virtual void set_expert_load_counting(bool on) { (void)on; }
  virtual std::optional<std::vector<std::vector<int64_t>>> take_expert_loads() { return std::nullopt; }
};

}  // namespace deepinfer::gpu
