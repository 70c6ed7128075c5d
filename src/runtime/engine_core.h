// The engine loop behind include/deepinfer/engine.h.
//
// Threads and ownership (DESIGN.md principle 4):
//   - API threads (submit, cancel, streams) touch only the inbox, the slot table and the stream channels,
//     each under its own mutex; they validate requests (immutable model config + tokenizer) and reject
//     bad or overloaded ones before anything is allocated.
//   - The execution owner (the engine thread, or the caller of step() in synchronous mode, serialised by
//     step_mutex_) owns the scheduler, every Sequence and every model state; only it calls the model.
//
// The step is split into plan -> execute -> process so that the GPU backend can overlap them
// (algorithms.md §5): plan N+1 while the device runs N, with N's sampled tokens resolved on the device.
// The CPU executor runs each step to completion, so the loop below is the synchronous form of that
// pipeline; `StepExecutor` is the seam where the asynchronous one plugs in.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "deepinfer/engine.h"
#include "model/model.h"
#include "parallel/eplb.h"
#include "grammar/matcher.h"
#include "runtime/data_parallel.h"
#include "runtime/expert_loads.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"
#include "text/tokenizer.h"

namespace deepinfer {

class EngineCore;

// One request's event channel, shared by the engine (producer) and its RequestStream (consumer).
struct StreamShared {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<Event> events;
  bool terminal_sent = false;   // producer side: the one terminal event was pushed
  bool terminal_taken = false;  // consumer side: next() returned it
  RequestHandle handle;
  std::vector<int32_t> prompt_token_ids;
  // For cancel() and the synchronous mode's driving; weak, so a stream that outlives its engine only finds
  // it gone (its terminal event was delivered when the engine shut down).
  std::weak_ptr<EngineCore> core;
  bool synchronous = false;
  // A request that a process group's rank > 0 runs for rank 0 (process_group.h): its events go to `forward` (to rank
  // 0's stream of the request) instead of `events`. Called outside `mutex`, at most once after the terminal event.
  std::function<void(const Event&)> forward;
  // Rank 0's stream of a request that another process runs: cancel() goes through the group (a no-op once the
  // engine is gone), not through `core`, which does not hold the request.
  std::function<void()> cancel;
};

namespace runtime {

// Runs the model part of one step. Output: for every chunk that samples, the logits of its last row.
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  // Executes the step; on a failure of one sequence it records the message and goes on with the others.
  // masks[i] (may be empty) yields chunk i's grammar mask once the host has computed it.
  virtual void execute(const Model& model, const std::vector<ScheduledChunk>& plan,
                       const std::vector<std::function<TokenMask()>>& masks,
                       std::vector<std::vector<float>>& last_logits, std::vector<std::string>& errors) = 0;
};

// CPU backend: every sequence's forward is independent of the others (the batch is a loop), so a
// request's logits are bitwise the same alone or in any batch.
class CpuStepExecutor : public StepExecutor {
 public:
  void execute(const Model& model, const std::vector<ScheduledChunk>& plan,
               const std::vector<std::function<TokenMask()>>& masks, std::vector<std::vector<float>>& last_logits,
               std::vector<std::string>& errors) override;
};

// Device backends (Model::runs_batches): the whole step is one Model::forward_batch call.
class BatchStepExecutor : public StepExecutor {
 public:
  void execute(const Model& model, const std::vector<ScheduledChunk>& plan,
               const std::vector<std::function<TokenMask()>>& masks, std::vector<std::vector<float>>& last_logits,
               std::vector<std::string>& errors) override;
};

}  // namespace runtime

class EngineCore {
 public:
  // With `rank` the core is one rank of a data-parallel group (data_parallel.h): its thread steps in lockstep with
  // the other ranks' (rank_loop instead of owner_loop; options.threaded must be set).
  EngineCore(EngineOptions options, std::unique_ptr<Model> model, std::unique_ptr<Tokenizer> tokenizer,
             std::shared_ptr<runtime::RankContext> rank = nullptr);
  ~EngineCore();
  void set_self(std::weak_ptr<EngineCore> self) { self_ = std::move(self); }

  // `id`: the request id the data-parallel group assigned (0: the core numbers its requests itself).
  // `forward`: StreamShared::forward (a request of a process group's rank > 0).
  RequestStream submit(Request request, uint64_t id = 0, std::function<void(const Event&)> forward = nullptr);
  bool cancel(const RequestHandle& handle);
  bool step();  // one step on the calling thread (the synchronous mode, and the engine thread's loop body)
  // Synchronous mode: drive steps until `shared` has an event or the engine is idle.
  void drive_until_event(StreamShared& shared);

  const EngineOptions& options() const { return options_; }
  const Model& model() const { return *model_; }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  uint64_t state_bytes_for(int64_t tokens) const { return cost_.bytes_for(tokens); }
  EngineStats stats() const;
  // The rank's counts (a data-parallel rank; zeros otherwise).
  EngineStats::Rank rank_stats() const;

 private:
  struct Inbox {
    std::vector<std::unique_ptr<runtime::Sequence>> submitted;
    std::vector<RequestHandle> cancels;
    std::vector<std::pair<uint64_t, std::unique_ptr<runtime::RequestGrammar>>> grammars;
  };

  // Structured output: the request's grammar compiled at submit (nullptr + message on a bad spec).
  std::unique_ptr<runtime::RequestGrammar> make_grammar(const SamplingParams& params, std::string& error) const;
  std::shared_ptr<const grammar::TokenizerInfo> grammar_vocab(bool dsml) const;

  std::string validate(const SamplingParams& params, const std::vector<int32_t>& prompt) const;
  void push_event(runtime::Sequence& seq, Event event);
  void finish(uint64_t id, FinishReason reason, std::string message = {});
  // Appends a sampled token (or, with `at`, fills the placeholder at output[at] of the asynchronous path); returns
  // the finish reason if it ends the request.
  FinishReason accept_token(runtime::Sequence& seq, int32_t token, TokenLogprob logprob,
                            std::optional<size_t> at = std::nullopt);
  // Asynchronous scheduling (algorithms.md §5): a step whose requests all sample without penalties, logprobs or
  // grammar is enqueued with Model::enqueue_sampled (the tokens chosen where the logits are); its tokens stay
  // placeholders (-k - 1 in the output, which the next step's rows pass to the model as "chunk k's token") until
  // the host has enqueued the next step, and are then filled in and processed (stop checks, events) one step late.
  // In batch-invariant mode only greedy requests qualify: a device backend's sampler may differ from the host's on
  // near-ties, and whether a step runs asynchronously depends on the other requests.
  bool async_eligible(const runtime::Sequence& seq) const;
  void record_step(size_t chunks, uint64_t prefill, uint64_t decode, bool async);
  // EPLB statistics: the model's routed-expert counts of the step just run into the window, as step `step` (the
  // engine's step; a data-parallel rank's: the lockstep step, so that the ranks' counts of one step add up).
  // On a rank of a process group (RankContext::exchange_expert_loads) the counts wait in pending_loads_ for the next
  // lockstep exchange, which sums every rank's and records the sum in every process's window copy (join_lockstep).
  void record_expert_loads(uint64_t step);
  // EPLB rebalancing (EngineOptions::eplb_rebalance_steps): right after the exchange that starts lockstep step
  // `step`, asks the group's decision (ExpertLoadStats::rebalance_before, the same on every rank) and, when there is
  // one, moves this rank's model to its placement (a collective: every rank does it between the same two steps).
  // Rank 0 logs one line per rebalance.
  void rebalance_experts_before(uint64_t step);
  // Constructor: checks the EPLB options, turns the model's counting on, and takes the window (a data-parallel
  // rank: the group's, RankContext::expert_loads; otherwise its own).
  void init_expert_load_counting();
  // Adds a step's host and wait time (and the model's device timeline) to the stats; a call of step() that ran
  // nothing adds nothing.
  void record_step_time(std::chrono::steady_clock::time_point start, uint64_t steps_before);
  bool async_step_possible();
  bool step_async(std::vector<runtime::ScheduledChunk>& plan);
  void resolve_inflight();
  void drain_inbox();
  void release_slot(const runtime::Sequence& seq);
  // A handle's slot in this core's tables, or UINT32_MAX when it is not this rank's (a data-parallel handle's slot
  // is local * ranks + rank, so that the group can route it).
  uint32_t local_slot(const RequestHandle& handle) const;
  // Data parallelism: agrees on the step with the other ranks and, when any rank has rows, tells the model the
  // group's rows per rank; a rank without rows of its own joins the model step with none. False: the group stops.
  bool join_lockstep(const std::vector<runtime::ScheduledChunk>& plan, uint64_t epoch);
  void owner_loop();
  void rank_loop();

  EngineOptions options_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  runtime::StateCost cost_;
  std::unique_ptr<runtime::StepExecutor> executor_;

  // Execution owner state.
  std::mutex step_mutex_;
  std::unique_ptr<runtime::Scheduler> scheduler_;
  // The asynchronous step in flight: its tokens and where their placeholders sit.
  struct InFlight {
    struct Placeholder {
      uint64_t id = 0;
      size_t output_index = 0;
      size_t chunk = 0;
    };
    std::unique_ptr<SampledStep> step;
    std::vector<Placeholder> placeholders;
  };
  std::optional<InFlight> inflight_;
  // Per-request grammars of running requests (by request id); only the execution owner touches them.
  std::unordered_map<uint64_t, std::unique_ptr<runtime::RequestGrammar>> grammars_;

  // The vocabulary as the grammar engine sees it (built on first use; [1]: DSML markers are text).
  mutable std::mutex grammar_vocab_mutex_;
  mutable std::shared_ptr<const grammar::TokenizerInfo> grammar_vocab_[2];

  // API-facing state.
  std::mutex inbox_mutex_;
  std::condition_variable inbox_cv_;
  Inbox inbox_;
  std::atomic<int64_t> waiting_{0};  // submitted, not yet admitted or ended (for overload rejection)
  std::atomic<uint64_t> next_id_{1};

  std::mutex slot_mutex_;
  std::vector<uint32_t> slot_generation_;
  std::vector<uint8_t> slot_busy_;
  std::vector<uint32_t> free_slots_;

  double step_wait_s_ = 0;  // this step's time in the model (EngineStats::model_wait_seconds; engine thread only)
  mutable std::mutex stats_mutex_;
  EngineStats stats_;
  // EPLB statistics (EngineOptions::expert_parallel > 1 and eplb_window_steps > 0; null otherwise): the window the
  // model's counts go to, this core's own or, on a data-parallel rank, the group's; stats() fills the moe_lb fields
  // from it.
  std::shared_ptr<runtime::ExpertLoadStats> expert_loads_;
  runtime::StepExpertLoads pending_loads_;  // a process group's rank: counts not yet sent (execution owner only)

  // Data parallelism (null with one rank): the rank, its last lockstep agreement (execution owner only) and its
  // counts (under stats_mutex_).
  std::shared_ptr<runtime::RankContext> rank_;
  runtime::Lockstep::Agreement agreement_;
  EngineStats::Rank rank_stats_;

  std::weak_ptr<EngineCore> self_;
  std::atomic<bool> stopping_{false};
  std::thread owner_;
};

}  // namespace deepinfer
