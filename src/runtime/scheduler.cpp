#include "runtime/scheduler.h"

#include <algorithm>

namespace deepinfer::runtime {

uint64_t StateCost::bytes_for(int64_t tokens) const {
  uint64_t bytes = fixed_bytes;
  for (const Growth& g : growth) bytes += uint64_t((tokens + g.ratio - 1) / g.ratio) * g.row_bytes;
  return bytes;
}

StateCost StateCost::from_config(const ModelConfig& c) {
  StateCost cost;
  const uint64_t f32 = sizeof(float);
  for (int l = 0; l < c.num_layers; ++l) {
    // Window ring: sliding_window KV rows of head_dim.
    cost.fixed_bytes += uint64_t(c.sliding_window) * uint64_t(c.head_dim) * f32;
    int ratio = l < int(c.compress_ratios.size()) ? c.compress_ratios[size_t(l)] : 0;
    if (ratio <= 0) continue;
    // Compressor partial groups (an overlapping compressor keeps two groups of kv + score rows).
    cost.fixed_bytes += 2ull * 2ull * uint64_t(ratio) * uint64_t(c.head_dim) * f32;
    uint64_t row = uint64_t(c.head_dim) * f32;
    if (c.index_head_dim > 0) row += uint64_t(c.index_head_dim) * f32;  // index keys (CSA / CSA2)
    cost.growth.push_back({ratio, row});
  }
  return cost;
}

bool Scheduler::reserve(Sequence& seq) {
  uint64_t want = cost_.bytes_for(seq.length());
  if (want <= seq.reserved_bytes) return true;
  uint64_t extra = want - seq.reserved_bytes;
  if (used_bytes_ + extra > limits_.state_memory_bytes) return false;
  used_bytes_ += extra;
  seq.reserved_bytes = want;
  return true;
}

void Scheduler::preempt(size_t i) {
  std::unique_ptr<Sequence> seq = std::move(running_[i]);
  running_.erase(running_.begin() + std::ptrdiff_t(i));
  // Recompute: drop the state; prompt ++ output is fed again as a prefill when readmitted.
  seq->state.reset();
  seq->computed = 0;
  used_bytes_ -= seq->reserved_bytes;
  seq->reserved_bytes = 0;
  ++preemptions_;
  waiting_.push_front(std::move(seq));
}

std::vector<ScheduledChunk> Scheduler::schedule() {
  // 1. Memory for the running sequences, oldest first; a shortfall preempts the newest.
  for (size_t i = 0; i < running_.size();) {
    Sequence& seq = *running_[i];
    bool ok = reserve(seq);
    while (!ok && running_.size() > i + 1) {
      preempt(running_.size() - 1);
      ok = reserve(seq);
    }
    if (!ok) {
      preempt(i);  // it is the newest itself; it comes back when memory frees up
      continue;
    }
    ++i;
  }

  // 2. Tokens: decodes, then prefill chunks, then admissions.
  std::vector<ScheduledChunk> plan;
  int64_t budget = limits_.max_batch_tokens;
  auto chunk_for = [&](const Sequence& seq) -> int64_t {
    int64_t n = std::min<int64_t>(seq.pending(), limits_.prefill_chunk);
    if (limits_.batch_invariant) return n <= budget ? n : 0;
    return std::min(n, budget);
  };
  auto add_chunk = [&](Sequence& seq, int64_t n) {
    plan.push_back({&seq, seq.computed, n, seq.computed + n == seq.length()});
    budget -= n;
  };
  for (auto& seq : running_)
    if (seq->pending() == 1 && budget > 0) add_chunk(*seq, 1);
  for (auto& seq : running_) {
    if (seq->pending() <= 1) continue;
    if (int64_t n = chunk_for(*seq); n > 0) add_chunk(*seq, n);
  }
  while (!waiting_.empty() && budget > 0 && running_.size() < size_t(limits_.max_num_seqs)) {
    Sequence& next = *waiting_.front();
    if (!reserve(next)) break;  // arrival order: nobody overtakes a sequence waiting for memory
    next.admitted_order = admissions_++;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    if (int64_t n = chunk_for(next); n > 0) add_chunk(next, n);
  }
  return plan;
}

std::unique_ptr<Sequence> Scheduler::remove(uint64_t id) {
  for (size_t i = 0; i < running_.size(); ++i)
    if (running_[i]->id == id) {
      std::unique_ptr<Sequence> seq = std::move(running_[i]);
      running_.erase(running_.begin() + std::ptrdiff_t(i));
      used_bytes_ -= seq->reserved_bytes;
      seq->reserved_bytes = 0;
      seq->state.reset();
      return seq;
    }
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
    if ((*it)->id == id) {
      std::unique_ptr<Sequence> seq = std::move(*it);
      waiting_.erase(it);
      return seq;
    }
  return nullptr;
}

Sequence* Scheduler::find(uint64_t id) {
  for (auto& s : running_)
    if (s->id == id) return s.get();
  for (auto& s : waiting_)
    if (s->id == id) return s.get();
  return nullptr;
}

std::vector<uint64_t> Scheduler::all_ids() const {
  std::vector<uint64_t> ids;
  for (auto& s : running_) ids.push_back(s->id);
  for (auto& s : waiting_) ids.push_back(s->id);
  return ids;
}

}  // namespace deepinfer::runtime
