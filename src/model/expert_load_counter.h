// The CPU models' expert-load counter behind Model::set_expert_load_counting / take_expert_loads (EPLB,
// docs/parallel.md): routed (token, expert) pairs per MoE layer, accumulated until the engine drains them.
// Off by default: add() is then one relaxed atomic load.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

namespace deepinfer {

class ExpertLoadCounter {
 public:
  ExpertLoadCounter(int layers, int experts) : layers_(layers), experts_(experts) {}

  void set_enabled(bool on) {
    std::lock_guard<std::mutex> lk(mutex_);
    counts_.assign(on ? size_t(layers_) : 0, std::vector<int64_t>(on ? size_t(experts_) : 0, 0));
    enabled_.store(on, std::memory_order_relaxed);
  }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  // The experts one token was routed to at `layer`.
  void add(int layer, std::span<const int> experts) {
    if (!enabled()) return;
    std::lock_guard<std::mutex> lk(mutex_);
    if (counts_.empty() || layer < 0 || layer >= layers_) return;
    std::vector<int64_t>& row = counts_[size_t(layer)];
    for (int e : experts)
      if (e >= 0 && e < experts_) ++row[size_t(e)];
  }

  // The counts since the previous call (restarted); nullopt while off.
  std::optional<std::vector<std::vector<int64_t>>> take() {
    if (!enabled()) return std::nullopt;
    std::lock_guard<std::mutex> lk(mutex_);
    std::vector<std::vector<int64_t>> out(size_t(layers_), std::vector<int64_t>(size_t(experts_), 0));
    out.swap(counts_);
    return out;
  }

 private:
  int layers_, experts_;
  std::atomic<bool> enabled_{false};
  std::mutex mutex_;
  std::vector<std::vector<int64_t>> counts_;
};

}  // namespace deepinfer
