// An engine's EPLB statistics (docs/parallel.md "EPLB", docs/data_parallel.md "Statistics"): the routed-expert
// counts its models report after each step (Model::take_expert_loads), one ExpertLoadWindow of the last
// eplb_window_steps steps, and the moe_lb of that window's load, computed when the statistics are read.
//
// A one-rank engine owns one. The ranks of a data-parallel group share one: the placement the window judges is the
// group's (every rank's MoE rows go through the same experts, sharded the same way), so its load is the sum of the
// ranks'. Each rank adds its model's counts of a lockstep step to that step. A rank's model reports a disjoint share
// of the group's routed pairs (the CPU models: the pairs of the rank's own rows; a rank without rows reports none), so
// the sum counts every pair of the step once.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "deepinfer/engine.h"
#include "parallel/eplb.h"

namespace deepinfer::runtime {

// Checks EngineOptions::expert_parallel / eplb_window_steps / eplb_redundant_experts against the model's routed
// experts; throws deepinfer::Error naming the option. True when they ask for statistics (expert_parallel > 1 and a
// window > 0).
bool check_expert_load_options(const EngineOptions& options, int routed_experts);

class ExpertLoadStats {
 public:
  // `expert_parallel` ranks of the placement, `window_steps` > 0 steps in the window, `redundant_experts` extra
  // slots per layer for the EPLB placement (EngineOptions, already checked by the engine).
  ExpertLoadStats(int expert_parallel, int window_steps, int redundant_experts);

  // Adds `counts` [layer][logical expert] to step `step`. A step number other than the open step's closes the open
  // step (the window keeps the last window_steps steps) and opens `step`; equal numbers add up, so the ranks of a
  // group, each recording its share of lockstep step s under the number s, fill one window step. Callers number
  // their steps in increasing order (a group's ranks record step s before any of them starts step s + 1: every rank
  // records before its next lockstep exchange). The first table fixes the window's shape; a table whose experts
  // do not split evenly over the ranks is ignored, as are layers of another width.
  void record(uint64_t step, const std::vector<std::vector<int64_t>>& counts);

  // Sets stats.moe_lb_contiguous, moe_lb_eplb, eplb_window_steps and eplb_window_pairs (left as they are while
  // nothing was recorded).
  void fill(EngineStats& stats) const;

  // [layer][expert] pairs in the window now (empty before the first record), and record() calls so far.
  std::vector<std::vector<double>> load() const;
  uint64_t records() const;

 private:
  const int expert_parallel_;
  const int window_steps_;
  const int redundant_experts_;
  mutable std::mutex mutex_;
  std::optional<parallel::ExpertLoadWindow> window_;
  uint64_t open_step_ = 0;  // the step number of the window's open step
  uint64_t steps_ = 0;      // distinct steps recorded so far
  uint64_t records_ = 0;
};

}  // namespace deepinfer::runtime
