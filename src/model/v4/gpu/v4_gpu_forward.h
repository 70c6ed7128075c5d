// The engine's Model contract (model/model.h) over a GPU step model (model/gpu/step_model.h: V4GpuModel,
// V41GpuModel): a SequenceState is a slot of the device pools, forward() / forward_batch() turn chunks into step rows (several steps when they exceed max_rows) and
// bring the wanted logits rows back to the host.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"
#include "cuda/device.h"
#include "model/gpu/device_timeline.h"
#include "model/gpu/step_model.h"
#include "model/v4/gpu/v4_gpu_model.h"

namespace deepinfer::gpu {

// The end of a data-parallel group's communicators. ncclCommDestroy is a collective of the group (each rank's call
// waits for the others'), so the ranks' communicators cannot be destroyed one after the other on one thread (the
// engine drops its ranks in turn). Each rank hands its communicator here instead (its model already gone); when
// the last one arrives, all are destroyed at once, one thread each with its device current.
class GroupTeardown {
 public:
  explicit GroupTeardown(int ranks) : ranks_(ranks) {}
  ~GroupTeardown();  // destroys what arrived, concurrently, when not every rank did
  // `comm` may be null (a rank that never joined): it still counts as arrived.
  void release(std::unique_ptr<parallel::Collectives> comm, int device);

 private:
  void destroy_all();
  const int ranks_;
  std::mutex mutex_;
  int arrived_ = 0;
  std::vector<std::pair<std::unique_ptr<parallel::Collectives>, int>> held_;
};

class V4GpuForward : public Model {
 public:
  explicit V4GpuForward(std::unique_ptr<GpuStepModel> model);
  // One rank of a data-parallel engine on the GPU (docs/data_parallel.md "On the GPU"): `model` is a GPU step model
  // (V4GpuModel, V41GpuModel) built with `group` (its expert-parallel group, owned here and destroyed after the
  // model) on CUDA device `device`. Every call makes `device` current on the calling thread (the engine's rank loop)
  // and restores the previous one. Every step is one GpuStepModel::step(rows, M) with the rows per rank M of
  // set_group_rows.
  // `teardown` is shared by the group's ranks: the communicator goes there when this rank is destroyed.
  V4GpuForward(std::unique_ptr<GpuStepModel> model, std::unique_ptr<parallel::Collectives> group, int device,
               std::shared_ptr<GroupTeardown> teardown);
  ~V4GpuForward() override;

  const ModelConfig& config() const override { return model_->config(); }
  std::unique_ptr<SequenceState> new_sequence() const override;
  Tensor forward(SequenceState& state, std::span<const int32_t> tokens) const override;
  void forward_batch(std::span<const BatchChunk> chunks, std::vector<std::vector<float>>& last_logits) const override;
  bool runs_batches() const override { return true; }
  // One device step with the tokens chosen on the device and only they copied back: the sampled rows drawn by
  // cuda::sample_rows and marked as their rows' arg-max, then every row's arg-max (sample_greedy) into the buffer
  // the next step's -k - 1 tokens resolve from (V4GpuRow). Decode-only steps replay CUDA graphs.
  std::unique_ptr<SampledStep> enqueue_sampled(std::span<const BatchChunk> chunks,
                                               std::span<const ChunkSampling> sampling) const override;

  // Seeded sampling on the device (cuda::sample_rows) draws the host sampler's token (H200 run 17: 3800 of 3800
  // rows); DEEPINFER_GPU_ASYNC_SAMPLING=0 (read at load) sends sampled requests' steps through the host sampler
  // synchronously instead.
  bool samples_asynchronously() const override { return device_sampling_ && model_->resolves_tokens_on_device(); }
  std::optional<DeviceTime> device_time() const override;
  // Data parallelism: the next step's rows per rank (the most rows any rank of the group planned).
  void set_group_rows(int rows_per_rank) const override { group_rows_ = rows_per_rank; }
  // The rows per rank a group step actually uses for the group's M: M rounded up to a tier (1, 2, 4, 8, then
  // multiples of 16 up to 256; larger M as is), at most `max_rows`. Every rank rounds the same M the same way, so
  // the collectives still agree, and the CUDA graphs (keyed by the model per (M, own rows)) stay few.
  static int group_rows_tier(int rows_per_rank, int max_rows);
  // EPLB statistics (Model; docs/parallel.md "EPLB"): the GPU model's device counter of the routed pairs of this
  // rank's own rows (GpuStepModel::set_expert_load_counting / take_expert_loads), with the rank's device current.
  // take_expert_loads waits for the steps enqueued so far (the engine calls it between steps).
  void set_expert_load_counting(bool on) const override;
  std::optional<std::vector<std::vector<int64_t>>> take_expert_loads() const override;
  // EPLB rebalancing (Model; docs/parallel.md "The engine's rebalancing"): in a group, the placement the weights are
  // this rank's share of, and GpuStepModelBase::rebalance_experts (a collective of the group, on the rank's device;
  // synchronizes the model's stream). One GPU (no group): nullopt, and rebalance_experts throws as Model's default.
  std::optional<parallel::ExpertPlacement> expert_placement() const override;
  size_t rebalance_experts(const parallel::ExpertPlacement& to) const override;

  GpuStepModel& device_model() const { return *model_; }

 private:
  friend class GpuSequence;
  void release(int slot) const;
  // Applies the chunks' grammar masks to their last rows of the step just enqueued (rows by origin).
  void apply_masks(std::span<const BatchChunk> chunks, const std::vector<std::pair<size_t, int64_t>>& origin,
                   float* logits) const;
  // Runs the chunks; `all_rows` keeps every row's logits (forward), else only each chunk's last row.
  void run(std::span<const BatchChunk> chunks, bool all_rows, std::vector<std::vector<float>>& out) const;
  // One step of `rows` (eager, or replayed from a graph): step(rows) on one GPU; step(rows, tier of M) in a group.
  float* step_rows(std::span<const V4GpuRow> rows, bool graph) const;
  // The group step's rows per rank, checked against the rank's own rows (group mode only).
  int group_step_rows(size_t own_rows) const;
  // A group rank whose own checks failed before its step still joins the step without rows (the other ranks are
  // in its collectives); errors of that join are dropped, the rank's own error is reported.
  void join_group_without_rows() const;

  // Data parallelism (null / -1 / 0 on one GPU): the group (declared before model_: destroyed after it), the
  // device, the rows per rank of the next step, and the number of group steps this rank has joined (with or
  // without rows), by which a failed call knows whether it still owes the group its step.
  std::unique_ptr<parallel::Collectives> group_;
  std::shared_ptr<GroupTeardown> teardown_;
  int device_ = -1;
  mutable int group_rows_ = 0;
  mutable uint64_t group_steps_joined_ = 0;
  std::unique_ptr<GpuStepModel> model_;
  bool device_sampling_ = false;
  // enqueue_sampled: pinned token buffers (two: the host reads step N's while N + 1 copies into the other), their
  // events, and the row of each chunk's last token in the previous step; the sampled rows' parameters and tokens.
  mutable int32_t* greedy_host_[2] = {nullptr, nullptr};
  mutable cudaEvent_t greedy_ready_[2] = {nullptr, nullptr};
  mutable int greedy_next_ = 0;
  mutable std::vector<int32_t> previous_rows_;
  mutable cuda::SampleRow* draws_host_[2] = {nullptr, nullptr};
  mutable cuda::DeviceBuffer sample_rows_dev_, sample_tokens_dev_;
  // Structured output: the masks of a step's constrained rows and those rows, uploaded for apply_token_bitmask.
  mutable cuda::DeviceBuffer mask_words_dev_, mask_rows_dev_;
  mutable DeviceTimeline timeline_;  // every step enqueued here, begin to end
  mutable std::mutex slots_mutex_;
  mutable std::vector<int> free_slots_;
};

// The loader steps every GPU model shares: only the official numerics, the batch-invariant mode set before the
// model is built (workspace sizes depend on it), the step capacity from the options; and the checkpoint opened
// with a progress line per shard.
StepCapacity gpu_load_capacity(const ModelOptions& options, const std::string& who);
Checkpoint open_gpu_checkpoint(const std::string& dir, const ModelOptions& options);

// The weights of a GPU model: random ones in the official formats (`--random-weights`, benchmarks: no checkpoint
// read) from random(config, seed), else upload(config, checkpoint, show_progress) of the checkpoint in `dir`.
template <class RandomFn, class UploadFn>
auto load_gpu_weights(const std::string& dir, const ModelConfig& config, const ModelOptions& options,
                      RandomFn random, UploadFn upload) {
  if (!options.random_weights) return upload(config, open_gpu_checkpoint(dir, options), options.show_progress);
  if (options.show_progress)
    std::fprintf(stderr, "[load] random weights for %d layers (benchmark model, no checkpoint read)\n",
                 config.num_layers);
  return random(config, uint64_t(7));
}

// Loads a V4 checkpoint onto the GPU with the capacity of `options`.
std::unique_ptr<Model> load_v4_gpu_model(const std::string& dir, const ModelOptions& options);

}  // namespace deepinfer::gpu
