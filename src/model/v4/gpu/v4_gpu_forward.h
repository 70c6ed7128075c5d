// The engine's Model contract (model/model.h) over the V4 GPU model: a SequenceState is a slot of the device
// pools, forward() / forward_batch() turn chunks into step rows (several steps when they exceed max_rows) and
// bring the wanted logits rows back to the host.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "model/model.h"
#include "model/v4/gpu/v4_gpu_model.h"

namespace deepinfer::gpu {

class V4GpuForward : public Model {
 public:
  explicit V4GpuForward(std::unique_ptr<V4GpuModel> model);

  const ModelConfig& config() const override { return model_->config(); }
  std::unique_ptr<SequenceState> new_sequence() const override;
  Tensor forward(SequenceState& state, std::span<const int32_t> tokens) const override;
  void forward_batch(std::span<const BatchChunk> chunks, std::vector<std::vector<float>>& last_logits) const override;
  bool runs_batches() const override { return true; }

  V4GpuModel& device_model() const { return *model_; }

 private:
  friend class GpuSequence;
  void release(int slot) const;
  // Runs the chunks; `all_rows` keeps every row's logits (forward), else only each chunk's last row.
  void run(std::span<const BatchChunk> chunks, bool all_rows, std::vector<std::vector<float>>& out) const;

  std::unique_ptr<V4GpuModel> model_;
  mutable std::mutex slots_mutex_;
  mutable std::vector<int> free_slots_;
};

// Loads a V4 checkpoint onto the GPU with the capacity of `options`.
std::unique_ptr<Model> load_v4_gpu_model(const std::string& dir, const ModelOptions& options);

}  // namespace deepinfer::gpu
