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
  s.eplb_window_steps = std::min<uint64_t>(steps, uint64_t(window_steps));
  s.eplb_window_pairs = uint64_t(pairs);
  if (pairs > 0) {
    const int layers = int(load.size()), experts = int(load.front().size());
    s.moe_lb_contiguous = parallel::moe_lb(load, parallel::contiguous_placement(layers, experts, expert_parallel_));
    s.moe_lb_eplb = parallel::moe_lb(load, parallel::eplb_placement(load, expert_parallel_, redundant_experts_));
  }
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
