// An engine's EPLB statistics (see expert_loads.h).
#include "runtime/expert_loads.h"

#include <algorithm>
#include <string>

#include "deepinfer/errors.h"

namespace deepinfer::runtime {

bool check_expert_load_options(const EngineOptions& o, int experts) {
  DI_CHECK(o.expert_parallel >= 1, "EngineOptions.expert_parallel: must be >= 1 (1 = one rank)");
  DI_CHECK(o.eplb_window_steps >= 0, "EngineOptions.eplb_window_steps: must be >= 0 (0 = off)");
  DI_CHECK(o.eplb_redundant_experts >= 0, "EngineOptions.eplb_redundant_experts: must be >= 0");
  DI_CHECK(o.eplb_rebalance_steps >= 0, "EngineOptions.eplb_rebalance_steps: must be >= 0 (0 = off)");
  DI_CHECK(o.eplb_rebalance_min_gain >= 0 && o.eplb_rebalance_min_gain < 1,
           "EngineOptions.eplb_rebalance_min_gain: " + std::to_string(o.eplb_rebalance_min_gain) +
               " is outside [0, 1) (a relative moe_lb gain; 0.02 = 2 %)");
  if (o.eplb_rebalance_steps > 0) {
    // The placement moves over the group's ranks: the expert-parallel ranks are the data-parallel ones.
    DI_CHECK(o.data_parallel > 1 && o.expert_parallel == o.data_parallel,
             "EngineOptions.eplb_rebalance_steps: rebalancing moves experts between the data-parallel ranks; it needs "
             "data_parallel = expert_parallel > 1 (got data_parallel " + std::to_string(o.data_parallel) +
                 ", expert_parallel " + std::to_string(o.expert_parallel) + ")");
    DI_CHECK(o.eplb_window_steps > 0,
             "EngineOptions.eplb_rebalance_steps: rebalancing plans from the expert-load window; eplb_window_steps "
             "must be > 0");
  }
  if (o.expert_parallel == 1 || o.eplb_window_steps == 0) return false;
  DI_CHECK(experts % o.expert_parallel == 0 && (experts + o.eplb_redundant_experts) % o.expert_parallel == 0,
           "EngineOptions.expert_parallel: " + std::to_string(experts) + " routed experts (+ " +
               std::to_string(o.eplb_redundant_experts) + " redundant slots) do not split evenly over " +
               std::to_string(o.expert_parallel) + " ranks");
  return true;
}

ExpertLoadStats::ExpertLoadStats(int expert_parallel, int window_steps, int redundant_experts)
    : expert_parallel_(expert_parallel), window_steps_(window_steps), redundant_experts_(redundant_experts) {}

void ExpertLoadStats::record(uint64_t step, const std::vector<std::vector<int64_t>>& counts) {
  if (counts.empty() || counts.front().empty()) return;
  const int experts = int(counts.front().size());
  if (experts % expert_parallel_ != 0 || (experts + redundant_experts_) % expert_parallel_ != 0) return;
  std::lock_guard<std::mutex> lk(mutex_);
  ++records_;
  if (!window_) {
    window_.emplace(int(counts.size()), experts, window_steps_);
    open_step_ = step;
    steps_ = 1;
  } else if (step != open_step_) {
    window_->end_step();  // closes the previous step
    open_step_ = step;
    ++steps_;
  }
  for (size_t l = 0; l < counts.size() && int(l) < window_->layers(); ++l)
    if (int(counts[l].size()) == window_->experts()) window_->record_counts(int(l), counts[l]);
}

void ExpertLoadStats::fill(EngineStats& s) const {
  std::vector<std::vector<double>> load;
  int window_steps = 0;
  uint64_t steps = 0;
  {
    // The placements are computed outside the lock: the ranks' record() calls do not wait for a reader.
    std::lock_guard<std::mutex> lk(mutex_);
    if (!window_) return;
    load = window_->load();
    window_steps = window_->window_steps();
    steps = steps_;
  }
  // moe_lb of the window's load for expert_parallel ranks: contiguous, and what EPLB would place.
  double pairs = 0;
  for (const std::vector<double>& layer : load)
    for (double x : layer) pairs += x;
  std::optional<parallel::ExpertPlacement> current;
  {
    std::lock_guard<std::mutex> lk(mutex_);
    s.eplb_rebalances = rebalances_;
    s.eplb_slots_moved = slots_moved_;
    current = current_;
  }
  s.eplb_window_steps = std::min<uint64_t>(steps, uint64_t(window_steps));
  s.eplb_window_pairs = uint64_t(pairs);
  if (pairs > 0) {
    const int layers = int(load.size()), experts = int(load.front().size());
    s.moe_lb_contiguous = parallel::moe_lb(load, parallel::contiguous_placement(layers, experts, expert_parallel_));
    s.moe_lb_eplb = parallel::moe_lb(load, parallel::eplb_placement(load, expert_parallel_, redundant_experts_));
    s.moe_lb_placed = current && current->layers() == layers && current->experts == experts
                          ? parallel::moe_lb(load, *current)
                          : s.moe_lb_contiguous;
  }
}

void ExpertLoadStats::enable_rebalancing(int every_steps, double min_gain, parallel::ExpertPlacement current) {
  DI_CHECK(every_steps > 0 && current.ranks == expert_parallel_ &&
               int64_t(current.ranks) * current.slots_per_rank == int64_t(current.experts) + redundant_experts_,
           "EngineOptions.eplb_rebalance_steps: the model's expert placement has " +
               std::to_string(int64_t(current.ranks) * current.slots_per_rank - current.experts) +
               " redundant slots per layer over " + std::to_string(current.ranks) +
               " ranks; the options ask for " + std::to_string(redundant_experts_) + " (eplb_redundant_experts) over " +
               std::to_string(expert_parallel_) + " (expert_parallel). A rebalance keeps the placement's shape");
  std::lock_guard<std::mutex> lk(mutex_);
  every_steps_ = every_steps;
  min_gain_ = min_gain;
  current_ = std::move(current);
}

bool ExpertLoadStats::rebalancing() const {
  std::lock_guard<std::mutex> lk(mutex_);
  return every_steps_ > 0;
}

std::optional<RebalanceDecision> ExpertLoadStats::rebalance_before(uint64_t step) {
  std::lock_guard<std::mutex> lk(mutex_);
  if (every_steps_ == 0) return std::nullopt;
  // Another rank of this step asked first: its decision (see the header for why it must not be recomputed).
  if (step == decided_step_) return decision_;
  DI_CHECK(step > decided_step_, "internal: EPLB rebalance decisions asked for step " + std::to_string(step) +
                                     " after step " + std::to_string(decided_step_));
  decided_step_ = step;
  decision_.reset();
  if (step <= 1 || (step - 1) % uint64_t(every_steps_) != 0 || !window_) return std::nullopt;
  const std::vector<std::vector<double>> load = window_->load();
  const parallel::ExpertPlacement& from = *current_;
  if (int(load.size()) != from.layers() || int(load.front().size()) != from.experts) return std::nullopt;
  double pairs = 0;
  for (const std::vector<double>& layer : load)
    for (double x : layer) pairs += x;
  if (pairs <= 0) return std::nullopt;
  RebalanceDecision d;
  d.step = step;
  // The planner's placement of the window (what moe_lb_eplb reports), with the slots of experts that stay on a rank
  // kept, so that the move is minimal (algorithms.md §2.2).
  d.placement = parallel::eplb_placement(load, expert_parallel_, redundant_experts_, &from);
  if (d.placement.phy2log == from.phy2log) return std::nullopt;
  d.moe_lb_before = parallel::moe_lb(load, from);
  d.moe_lb_after = parallel::moe_lb(load, d.placement);
  // Moving experts costs a pause of every rank (the weight exchange): only for a gain worth it.
  if (d.moe_lb_before - d.moe_lb_after < min_gain_ * d.moe_lb_before) return std::nullopt;
  d.slots_moved = parallel::rebalance_plan(from, d.placement).size();
  current_ = d.placement;
  ++rebalances_;
  slots_moved_ += d.slots_moved;
  decision_ = d;
  return decision_;
}

std::vector<std::vector<double>> ExpertLoadStats::load() const {
  std::lock_guard<std::mutex> lk(mutex_);
  return window_ ? window_->load() : std::vector<std::vector<double>>{};
}

uint64_t ExpertLoadStats::records() const {
  std::lock_guard<std::mutex> lk(mutex_);
  return records_;
}

}  // namespace deepinfer::runtime
