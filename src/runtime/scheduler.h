// Continuous batching with chunked prefill, admission by state memory and preemption by recompute.
//
// Ownership (DESIGN.md principle 4): the scheduler owns the waiting queue and the running list; a
// Sequence owns its model state. Both live on the execution owner thread only.
//
// One step (schedule()):
//   1. memory: every running sequence reserves the state bytes of all its tokens; when the budget cannot
//      grow, the most recently admitted sequence is preempted (its state dropped, it returns to the front of
//      the waiting queue and recomputes prompt + output later);
//   2. tokens: running decodes first (1 token each), then running prefills (a chunk each), then admission
//      of waiting sequences in arrival order while the token budget, max_num_seqs and memory allow.
// A prefill chunk is min(pending, prefill_chunk, leftover budget); in batch-invariant mode it is always
// min(pending, prefill_chunk), so the chunks of a request do not depend on what else runs.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deepinfer/sampling_params.h"
#include "model/config.h"
#include "model/model.h"
#include "runtime/sampler.h"
#include "text/tokenizer.h"

namespace deepinfer {
struct StreamShared;
}

namespace deepinfer::runtime {

// What a sequence's state costs (the unit of EngineOptions::state_memory_bytes): the window rings are a
// fixed cost, compressed KV and index keys grow by one row every `ratio` tokens (model-spec §6).
struct StateCost {
  uint64_t fixed_bytes = 0;
  struct Growth {
    int ratio = 1;
    uint64_t row_bytes = 0;
  };
  std::vector<Growth> growth;
  uint64_t bytes_for(int64_t tokens) const;
  static StateCost from_config(const ModelConfig& config);
};

struct Sequence {
  uint64_t id = 0;
  uint32_t slot = 0;
  uint32_t generation = 0;
  uint64_t seed = 0;
  SamplingParams params;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;

  // Model state: tokens [0, computed) of prompt ++ output have been fed.
  std::unique_ptr<SequenceState> state;
  int64_t computed = 0;
  uint64_t reserved_bytes = 0;
  uint64_t admitted_order = 0;
  // Tokens counted for it in its data-parallel rank's load (RankContext::cached_tokens), returned when it ends.
  int64_t load_tokens = 0;

  PenaltyState penalties;
  // Text (with a tokenizer): everything decoded so far and how much of it has been sent.
  std::optional<StreamingDecoder> decoder;
  std::string text;
  size_t text_sent = 0;

  std::shared_ptr<StreamShared> channel;

  int64_t length() const { return int64_t(prompt.size() + output.size()); }
  int32_t token_at(int64_t i) const {
    return i < int64_t(prompt.size()) ? prompt[size_t(i)] : output[size_t(i - int64_t(prompt.size()))];
  }
  int64_t pending() const { return length() - computed; }
};

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t begin = 0;  // first token position fed
  int64_t count = 0;
  bool samples = false;  // the chunk reaches the end of the sequence: its last row is sampled
};

struct SchedulerLimits {
  int max_batch_tokens = 2048;
  int max_num_seqs = 64;
  int prefill_chunk = 512;
  uint64_t state_memory_bytes = 1ull << 30;
  bool batch_invariant = false;
};

class Scheduler {
 public:
  Scheduler(SchedulerLimits limits, StateCost cost) : limits_(limits), cost_(std::move(cost)) {}

  void add(std::unique_ptr<Sequence> seq) { waiting_.push_back(std::move(seq)); }
  // The chunks of the next step (empty when there is nothing to run).
  std::vector<ScheduledChunk> schedule();
  // Removes a sequence (finished, cancelled, failed) and releases its state and memory.
  std::unique_ptr<Sequence> remove(uint64_t id);
  Sequence* find(uint64_t id);

  bool idle() const { return waiting_.empty() && running_.empty(); }
  size_t waiting() const { return waiting_.size(); }
  size_t running() const { return running_.size(); }
  uint64_t bytes_in_use() const { return used_bytes_; }
  uint64_t preemptions() const { return preemptions_; }
  const StateCost& cost() const { return cost_; }
  // Every sequence still held (for shutdown).
  std::vector<uint64_t> all_ids() const;

 private:
  void preempt(size_t running_index);
  bool reserve(Sequence& seq);

  SchedulerLimits limits_;
  StateCost cost_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  uint64_t used_bytes_ = 0;
  uint64_t admissions_ = 0;
  uint64_t preemptions_ = 0;
};

}  // namespace deepinfer::runtime
