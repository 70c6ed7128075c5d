// The model-independent machinery of a batched GPU step, shared by V4GpuModel and V41GpuModel:
//  - StepStreams: the main stream and the side stream with the fork / join events of a layer's parallel branch;
//  - PinnedStaging: a host -> device upload per step through two pinned buffers used in turn, so the host fills
//    step N + 1's while the copy of step N may still be pending;
//  - StepRows: the host planner (model/step_planner.h) with its device side: the row arrays [5, max_rows] in
//    device memory, filled from pinned double-buffered staging, and one device page table per compression ratio;
//  - StepGraphs: one CUDA graph per row count (a step's kernels depend on the host only through the row count);
//  - PhaseTimer: events at phase boundaries for the benchmark's per-phase breakdown (eager steps only).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cuda/kernels.h"
#include "model/gpu/device_weights.h"
#include "model/step_planner.h"

namespace deepinfer::gpu {

class StepStreams {
 public:
  // The parallel branches of a step beside the main stream, each on its own stream with its own fork / join events;
  // all are captured into the decode graphs as parallel branches.
  //  - Side: the KV row and the compressors beside the query (the attention), the shared expert beside the routing
  //    (the MoE, side_branch()).
  //  - Mix: work that overlaps the side branch's too (V4.1's mHC site mix beside its whole sublayer:
  //    V41GpuModel::begin_site_mix).
  //  - Query: the attention's wq_b beside the indexer's query (IndexQueryPlace::First, step_model_base.h).
  //  - Compressor: the attention's KV compressor beside the side branch's KV row (compressor_branch(),
  //    step_model_base.h).
  //  - IndexKeys: V4's index compressor beside the KV compressor (index_inputs_early(), step_model_base.h).
  enum class Branch { Side, Mix, Query, Compressor, IndexKeys };

  StepStreams();
  ~StepStreams();
  StepStreams(const StepStreams&) = delete;
  StepStreams& operator=(const StepStreams&) = delete;

  cudaStream_t main() const { return main_; }
  cudaStream_t stream(Branch b) const { return branches_[index(b)].stream; }
  // The branch starts after the main stream's work so far (fork); the main stream waits for the branch's work so far
  // (join).
  void fork(Branch b) const;
  void join(Branch b) const;
  // A point inside a branch that the main stream needs before the branch's join: mark(b) records the branch's work
  // so far in its mark event and returns it; wait(e) makes the main stream wait for it. One mark per branch at a time
  // (a later mark of the same branch replaces it, for waits enqueued after it).
  cudaEvent_t mark(Branch b) const;
  void wait(cudaEvent_t mark) const;
  // The side branch as the MoE takes it (its shared expert runs on the side branch).
  cuda::SideStream side_branch() const { return branches_[index(Branch::Side)]; }

 private:
  static constexpr int kBranches = 5;
  static int index(Branch b) { return static_cast<int>(b); }
  cudaStream_t main_ = nullptr;
  cuda::SideStream branches_[kBranches];  // stream, fork event, join event
  cudaEvent_t marks_[kBranches] = {};
};

class PinnedStaging {
 public:
  PinnedStaging() = default;
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // Two pinned buffers of `bytes` each, copied into `device` (the caller's device buffer of the same size).
  void allocate(size_t bytes, void* device);
  // The next host buffer, once the copy that last read it is done; the wait adds to *waited_s.
  void* acquire(double* waited_s);
  // Enqueues the copy of the acquired buffer's first `bytes` to the device buffer on `stream`.
  void upload(size_t bytes, cudaStream_t stream);
  void* device() const { return device_; }

 private:
  size_t bytes_ = 0;
  void* device_ = nullptr;
  void* host_[2] = {nullptr, nullptr};
  cudaEvent_t copied_[2] = {nullptr, nullptr};
  int next_ = 0, current_ = -1;
};

class StepRows {
 public:
  StepRows(const StepCapacity& capacity, int vocab_size, const std::string& who);
  StepRows(const StepRows&) = delete;
  StepRows& operator=(const StepRows&) = delete;

  // The page class of `ratio` (StepPlanner::add_ratio) with its device table allocated from `arena`.
  int add_ratio(int ratio, DeviceArena& arena);
  // The device row arrays and the pinned staging; call once, after the ratios.
  void allocate_rows(DeviceArena& arena);

  // Plans the rows on the host and enqueues their upload (and that of the changed page tables) on `stream`.
  void plan(std::span<const StepRow> rows, cudaStream_t stream);
  void assume_length(int slot, int32_t length) { planner_.assume_length(slot, length); }
  // Drops the slot's sequence (StepPlanner::release); the device table is refreshed when the pages are reused.
  void release(int slot) { planner_.release(slot); }
  const StepPlanner& planner() const { return planner_; }

  // Device row arrays [max_rows] (StepPlanner::RowArray); tokens are resolved in place by cuda::resolve_tokens.
  int32_t* tokens() const { return array(StepPlanner::kTokens); }
  const int32_t* slots() const { return array(StepPlanner::kSlots); }
  const int32_t* positions() const { return array(StepPlanner::kPositions); }
  const int32_t* chunk_first() const { return array(StepPlanner::kChunkFirst); }
  const int32_t* chunk_rows() const { return array(StepPlanner::kChunkRows); }
  // The device page table [slots, max_pages(cls)] of page class `cls`.
  const int32_t* table(int cls) const { return tables_dev_[size_t(cls)]; }
  int max_pages(int cls) const { return planner_.ratios()[size_t(cls)].max_pages; }

  // Seconds the host spent blocked in plan() (waiting for a staging buffer the device still reads).
  double host_wait_seconds() const { return host_wait_s_; }

 private:
  int32_t* array(int which) const { return rows_dev_ + size_t(which) * planner_.capacity().max_rows; }

  StepPlanner planner_;
  std::vector<int32_t*> tables_dev_;  // by page class
  int32_t* rows_dev_ = nullptr;       // [kRowArrays, max_rows]
  PinnedStaging staging_;
  double host_wait_s_ = 0;
};

class PhaseTimer {
 public:
  ~PhaseTimer();
  void set(bool on);
  bool on() const { return on_; }
  // Closes the current phase on `stream` (timing mode only); a mark named "" opens a step (no phase ends there).
  void mark(const char* name, cudaStream_t stream);
  // Milliseconds per phase name summed over the steps since timing was turned on (synchronizes `stream`).
  std::vector<std::pair<std::string, double>> times(cudaStream_t stream);

 private:
  friend class StepGraphs;
  void clear_marks();
  bool on_ = false;
  bool paused_ = false;  // while a graph is captured: no events inside a graph
  std::vector<std::pair<std::string, cudaEvent_t>> marks_;
  std::map<std::string, double> ms_;
};

class StepGraphs {
 public:
  ~StepGraphs();
  // Replays the graph of `rows` rows on `stream`, capturing `enqueue(rows)` into it on the first call for that
  // row count (the timer pauses during the capture). A graph keeps the programmatic (PDL) edges it was captured
  // with, so there is one cache per setting of cuda::pdl_enabled() (cuda/launch.h): switching PDL off or on in a
  // running process (tests, v4_decode --pdl both) replays graphs of the current setting.
  void launch(int rows, cudaStream_t stream, PhaseTimer& timer, const std::function<void(int)>& enqueue);

 private:
  std::vector<cudaGraphExec_t> graphs_[2];  // [PDL off / on] by row count
};

}  // namespace deepinfer::gpu
