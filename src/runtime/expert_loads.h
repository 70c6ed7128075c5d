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

// Checks EngineOptions::expert_parallel / eplb_window_steps / eplb_redundant_experts / eplb_rebalance_steps /
// eplb_rebalance_min_gain against the model's routed experts; throws deepinfer::Error naming the option. True when
// they ask for statistics (expert_parallel > 1 and a window > 0).
bool check_expert_load_options(const EngineOptions& options, int routed_experts);

// One rebalance the group decided (ExpertLoadStats::rebalance_before).
struct RebalanceDecision {
  uint64_t step = 0;  // the lockstep step before which every rank applies it
  parallel::ExpertPlacement placement;
  double moe_lb_before = 1, moe_lb_after = 1;  // the window's moe_lb on the current placement / on `placement`
  size_t slots_moved = 0;                      // slots whose expert changes (parallel::rebalance_plan), all layers
};

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

  // EPLB rebalancing (EngineOptions::eplb_rebalance_steps; docs/parallel.md "The engine's rebalancing",
  // algorithms.md §2.2). The group's one decision point: after `current` (the placement the models were loaded with)
  // every `every_steps` lockstep steps with rows the placement may change. Call before the first record().
  void enable_rebalancing(int every_steps, double min_gain, parallel::ExpertPlacement current);
  bool rebalancing() const;
  // Every rank calls it right after the lockstep exchange that starts step `step` (steps with rows, counted from 1)
  // and before that step's model call; it returns the placement to move to before the step, or nullopt. Due at steps
  // k * every_steps + 1 (after every every_steps steps): the EPLB placement of the window (eplb_placement with
  // redundant_experts slots and the current placement as `previous`, so experts that stay on a rank keep their
  // slot), unless it equals the current one or lowers the window's moe_lb by less than min_gain (relative). A
  // decision makes its placement the current one.
  //
  // Deterministic and the same on every rank: it depends only on the window, the step and the current placement.
  // With thread ranks (one shared object) the decision for a step is computed once, by the first rank that asks,
  // and kept for the others: every rank has recorded step - 1 before the exchange of `step` completes, and none
  // records `step` before asking, so the first asker sees exactly the window through step - 1 — a later asker would
  // see a window that another rank's record of `step` has already moved. With ranks as processes each process holds
  // its own object, fed with the same summed counts under the same step numbers (Lockstep::Agreement::loads), so
  // each computes the same decision.
  std::optional<RebalanceDecision> rebalance_before(uint64_t step);

 private:
  const int expert_parallel_;
  const int window_steps_;
  const int redundant_experts_;
  mutable std::mutex mutex_;
  std::optional<parallel::ExpertLoadWindow> window_;
  uint64_t open_step_ = 0;  // the step number of the window's open step
  uint64_t steps_ = 0;      // distinct steps recorded so far
  uint64_t records_ = 0;
  // Rebalancing (every_steps_ 0: off).
  int every_steps_ = 0;
  double min_gain_ = 0;
  std::optional<parallel::ExpertPlacement> current_;  // the placement the group's models hold
  uint64_t decided_step_ = 0;                         // the last step rebalance_before decided on
  std::optional<RebalanceDecision> decision_;         // its decision (kept for the other thread ranks)
  uint64_t rebalances_ = 0;
  uint64_t slots_moved_ = 0;
};

}  // namespace deepinfer::runtime
