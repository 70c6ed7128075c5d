// Attention data parallelism at the engine level (docs/data_parallel.md, docs/parallel.md "Attention data
// parallelism"): one engine over several ranks. Each rank is an EngineCore with its own Model, Scheduler and state
// pools, run by its own thread; the group in front of them
//   - admits: every request goes, at submission, to the rank with the least cached tokens, then the fewest
//     requests, then the lowest rank (admission_rank);
//   - keeps the ranks in lockstep: every step each rank plans its chunks, the ranks exchange their row counts
//     (Lockstep::exchange: an all-gather over a host barrier, or over TCP when the ranks are processes of
//     `deepinfer launch`, process_group.h), and each rank steps its model with its own rows and the group's rows
//     per rank (Model::set_group_rows), a rank without rows joining with none. A model whose MoE layers are
//     collectives over the ranks (the V4 GPU model's expert parallelism) needs exactly that: every rank in every
//     step, all with the same rows per rank.
// The ranks share nothing else but the EPLB statistics' window and its rebalancing decisions (expert_loads.h: the
// placement it judges is the group's, so its load sums the ranks'; ranks as processes each keep a copy, fed with the
// summed counts at every exchange): request ids are the group's (submission order, as the one-rank engine
// numbers them), a handle's slot names its rank (slot % ranks), and every stream is fed by the rank that runs it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "deepinfer/engine.h"
#include "model/model.h"

namespace deepinfer {
class EngineCore;
struct StreamShared;
}

namespace deepinfer::runtime {

class ExpertLoadStats;

// What admission knows of a rank: the tokens its requests hold or will hold once prefilled (prompt + output so far,
// of every request admitted and not yet ended) and how many requests those are.
struct RankLoad {
  int64_t cached_tokens = 0;
  int64_t requests = 0;
};

// The rank a new request goes to: least cached tokens, then fewest requests, then the lowest rank. Counting the
// prompts of requests not prefilled yet balances the prefills by tokens as well.
int admission_rank(std::span<const RankLoad> loads);

// Routed-expert counts of one lockstep step (EPLB across processes, docs/data_parallel.md "Ranks as processes"): a
// rank's, or summed, the group's. Empty: none.
struct StepExpertLoads {
  uint64_t step = 0;            // the lockstep step (with rows, counted from 1) they were counted in
  int32_t experts = 0;          // logical experts per layer
  std::vector<int64_t> counts;  // [layers * experts]
  bool empty() const { return counts.empty(); }
  // Adds `other` (same step and shape; throws deepinfer::Error naming what differs).
  void add(const StepExpertLoads& other);
};

// What one rank brings to a lockstep exchange.
struct LockstepRecord {
  int32_t rows = 0;         // rows it planned for this step (0: none)
  bool in_flight = false;   // an asynchronous step of its own is still unread
  uint64_t epoch = 0;       // the work epoch it read before draining its inbox (Lockstep::epoch)
  bool stop = false;        // it asks the group to stop (rank 0's shutdown; with threads, any rank's)
  // Ranks as processes with EPLB statistics: the counts its model reported since its previous exchange (the last
  // lockstep step's). A transport may hand them back already summed (the process group: rank 0 sends the sum in its
  // own record and none in the others), as the agreement only needs their sum.
  StepExpertLoads loads;
};

// How the ranks' records meet: an all-gather, one call per rank and step, every rank getting every record (element
// r: rank r's). Two implementations: the threads of one process (BarrierTransport, below) and the processes of
// `deepinfer launch` over TCP (ProcessGroup, process_group.h). The agreement is computed from the gathered records
// by Lockstep::agree, the same function on every rank and transport.
class LockstepTransport {
 public:
  virtual ~LockstepTransport() = default;
  // Blocks until every rank's record of this step is here. Throws deepinfer::Error when the group failed (a peer
  // process died, a timeout); the exchange then stops the group with that message.
  virtual std::vector<LockstepRecord> all_gather(int rank, const LockstepRecord& mine) = 0;
};

// The threads of one process: a host barrier.
class BarrierTransport : public LockstepTransport {
 public:
  explicit BarrierTransport(int ranks);
  std::vector<LockstepRecord> all_gather(int rank, const LockstepRecord& mine) override;

 private:
  const int ranks_;
  std::mutex mutex_;
  std::condition_variable arrived_cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;            // completed gathers
  std::vector<LockstepRecord> filling_;  // this gather's records
  std::vector<LockstepRecord> done_;     // the last completed gather's (stable until every rank called again)
};

// The per-step agreement of the ranks' engine loops (an exchange of each rank's plan over a LockstepTransport).
class Lockstep {
 public:
  // `transport` null: the ranks are threads of this process (a BarrierTransport). With a process group, each process
  // holds its own Lockstep; `follower` is set on ranks > 0, whose work epoch is rank 0's (observe_epoch).
  explicit Lockstep(int ranks, std::shared_ptr<LockstepTransport> transport = nullptr, bool follower = false);

  struct Agreement {
    int rows_per_rank = 0;    // the most rows any rank planned: every rank steps its model when > 0
    bool busy = false;        // some rank stepped or still has a step in flight: the loops go on at once
    bool stop = false;        // the group shuts down: every loop leaves after this exchange
    uint64_t work_epoch = 0;  // the oldest work epoch a rank read before planning (see wait_for_work)
    std::string failure;      // with stop: why the group failed (a peer process died, ...); empty on a clean stop
    StepExpertLoads loads;    // the sum of the records' loads (ranks as processes with EPLB statistics; else empty)
  };

  // The one place where the ranks' records become the agreement (every rank computes it from the same records).
  static Agreement agree(std::span<const LockstepRecord> records);

  // Every rank calls it once per step, after planning `rows` rows (0: none) and with `in_flight` when an
  // asynchronous step of its own is still unread; `epoch` is epoch() as read before the rank drained its inbox.
  // Blocks until every rank has called, and gives all of them the same agreement. A failed transport gives a
  // stopping agreement with its message (and every later exchange the same).
  // `loads`: the rank's expert-load counts since its previous exchange (ranks as processes; see LockstepRecord).
  Agreement exchange(int rank, int rows, bool in_flight, uint64_t epoch, StepExpertLoads loads = {});

  // New work (a submission or cancellation) reached some rank's inbox; called after the inbox push. Moves the work
  // epoch and publishes it (rank 0 of a process group: a Wake to every peer, set_epoch_publisher). A follower's
  // inbox is fed by rank 0, whose Wake follows the work: its epoch moves at observe_epoch only.
  void notify_work();
  // A follower: rank 0's epoch `epoch` (its Wake); everything rank 0 sent before it is in this rank's inbox.
  void observe_epoch(uint64_t epoch);
  void set_epoch_publisher(std::function<void(uint64_t epoch)> publish);
  uint64_t epoch() const;
  // After an idle agreement: blocks until work arrived since the agreement's epoch, or until stop. Every rank
  // waits on the same epoch, so they all come back to the next exchange: a submission that a rank's last plan
  // missed was pushed after that rank read its epoch, so it moved the epoch past the agreement's minimum. (Across
  // processes the epochs are rank 0's numbers: rank 0 moves them, the followers hear them in its Wake messages.)
  void wait_for_work(uint64_t seen_epoch);
  // Makes the next exchange a stopping one (all loops leave together; a loop alone would strand the others). Also
  // moves the epoch, so that idle ranks (other processes too) come to that exchange. On a follower (a process
  // group's rank > 0, which cannot end the group) it makes this rank leave with a failure instead.
  void request_stop();
  // The transport failed outside an exchange (a reader saw a peer's connection close): wakes an idle loop, whose
  // next exchange then stops the group with `message`.
  void fail(const std::string& message);
  // Blocks until an exchange has stopped the group; returns its failure (empty: a clean stop).
  std::string wait_stopped();
  // The failure that stopped or will stop the group (empty: none).
  std::string failure() const;
  int ranks() const { return ranks_; }

 private:
  const int ranks_;
  const bool follower_;
  std::shared_ptr<LockstepTransport> transport_;
  std::function<void(uint64_t)> publish_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable stopped_cv_;
  uint64_t epoch_ = 0;
  bool stop_ = false;
  bool stopped_ = false;  // an exchange returned stop
  std::string failure_;
};

// One rank's membership, shared by its EngineCore and the group.
struct RankContext {
  int rank = 0;
  int ranks = 1;
  std::shared_ptr<Lockstep> lockstep;
  // Admission's view of the rank, kept by the rank's core: + prompt at submission, + 1 per accepted token,
  // - everything counted for a request when it ends.
  std::atomic<int64_t> cached_tokens{0};
  std::atomic<int64_t> requests{0};
  // The group's EPLB statistics, one window for all ranks (null when EngineOptions ask for none): each rank adds
  // its model's counts of a lockstep step under that step's number (Lockstep agreements with rows, counted from 1).
  std::shared_ptr<ExpertLoadStats> expert_loads;
  // Ranks as processes: each process holds its own copy of the group's window. A rank then sends its model's counts
  // of a step with its next lockstep record, and every process records the agreement's sum (Agreement::loads) under
  // that step, so the copies stay equal (and with them every EPLB decision, ExpertLoadStats::rebalance_before).
  bool exchange_expert_loads = false;
};

class ProcessGroup;

// The ranks and the admission in front of them (Engine holds one when EngineOptions::data_parallel > 1).
class DataParallelGroup : public std::enable_shared_from_this<DataParallelGroup> {
 public:
  // `options` are the engine's, already validated; `load_model(rank)` builds the rank's model copy.
  DataParallelGroup(const EngineOptions& options, const std::function<std::unique_ptr<Model>(int rank)>& load_model);
  // One rank of a group of processes (EngineOptions::process_group, `deepinfer launch`): this process holds rank
  // `group->rank()` only, with `model`. Rank 0 admits every request: it runs it itself or forwards it to the owning
  // process, whose events come back to rank 0's stream of it. The other ranks serve (serve()).
  DataParallelGroup(const EngineOptions& options, std::shared_ptr<ProcessGroup> group, std::unique_ptr<Model> model);
  ~DataParallelGroup();

  RequestStream submit(Request request);
  bool cancel(const RequestHandle& handle);
  EngineStats stats() const;
  int ranks() const { return ranks_; }
  // This process's cores: every rank with threads, its own rank with a process group (rank(0) is then that one).
  const std::shared_ptr<EngineCore>& rank(int r) const { return cores_[size_t(r)]; }
  // A process group: rank > 0 blocks until rank 0 ends the group; rank 0 ends it (every process's loop leaves at
  // the next exchange) and waits for that. Throws deepinfer::Error with the failure when the group failed (a peer
  // process died, a timeout). With threads: nothing to do.
  void serve();
  // A process group: this process's rank; 0 with threads.
  int process_rank() const;
  // The group's EPLB window (null when the options ask for no statistics).
  const std::shared_ptr<ExpertLoadStats>& expert_loads() const { return expert_loads_; }

 private:
  std::shared_ptr<Lockstep> lockstep_;
  std::shared_ptr<ExpertLoadStats> expert_loads_;
  std::vector<std::shared_ptr<RankContext>> contexts_;
  std::vector<std::shared_ptr<EngineCore>> cores_;
  // Admission: the choice and the rank's submit under one lock, so concurrent submissions each see the loads the
  // previous ones left, and request ids follow submission order.
  std::mutex admission_mutex_;
  uint64_t next_id_ = 1;
  const int ranks_;

  // EngineOptions::eplb_rebalance_steps: checks that `model` places its experts over the group's ranks and starts the
  // window's rebalancing from that placement.
  void enable_rebalancing(const EngineOptions& options, const Model& model);

  // A process group (null: the ranks are threads of this process).
  std::shared_ptr<ProcessGroup> process_;
  void on_message(int from, int type, const std::string& payload);
  void on_failure(const std::string& message);
  // Rank 0: the requests other processes run, by id, and their ranks' loads as admission counts them (the same
  // counts a rank's core keeps: + prompt at submission, + each token, - all of it at the end).
  struct Remote {
    std::shared_ptr<StreamShared> stream;
    int rank = 0;
    int64_t load_tokens = 0;
  };
  mutable std::mutex remote_mutex_;
  std::unordered_map<uint64_t, Remote> remote_;
  std::string remote_failure_;  // set with the failure: no request goes to another process after it
  std::vector<RankLoad> remote_loads_;
  std::vector<uint64_t> remote_admitted_;
  // Rank > 0: the handles of the requests it runs for rank 0, by id (for rank 0's Cancel); an entry goes at the
  // request's terminal event. Shared with each request's forward callback, which the core calls from its own thread
  // and may still call after this group is gone (a failed group's core outlives it in Engine: session 10 found the
  // use after free with ASan, a peer killed mid-run).
  struct Served {
    std::mutex mutex;
    std::unordered_map<uint64_t, std::optional<RequestHandle>> handles;
  };
  std::shared_ptr<Served> served_ = std::make_shared<Served>();
};

// Device backends whose models are collectives over the ranks (the CUDA backend's V4 GPU model with expert
// parallelism, one GPU per rank) build all the ranks' models in one call: every rank's communicator joins only
// when all of them do, so the ranks must load concurrently. Returns `ranks` models, model r for rank r. Engine::create
// uses the loader registered for EngineOptions::device when data_parallel > 1 and the device is not "cpu".
using GroupModelLoader =
    std::function<std::vector<std::unique_ptr<Model>>(const std::string& dir, const ModelOptions& options, int ranks)>;
void register_data_parallel_backend(const std::string& device, GroupModelLoader loader);
// The loader registered for `device`, or an empty function.
GroupModelLoader data_parallel_backend(const std::string& device);

// A process group's rank on a device backend (EngineOptions::process_group, device not "cpu"; the CUDA backend's V4 /
// V4.1 GPU model with expert parallelism over NCCL): builds this process's model only, as rank `rank` of `ranks`, on
// CUDA device `device` (LOCAL_RANK). `share` passes rank 0's blob (the NCCL unique id) to every rank: rank 0 calls it
// with its blob, the others with an empty one, and every rank gets rank 0's; each rank calls it exactly once.
using ShareBlob = std::function<std::vector<uint8_t>(std::span<const uint8_t> blob)>;
using RankModelLoader = std::function<std::unique_ptr<Model>(const std::string& dir, const ModelOptions& options,
                                                             int rank, int ranks, int device, const ShareBlob& share)>;
void register_process_rank_backend(const std::string& device, RankModelLoader loader);
// The loader registered for `device`, or an empty function.
RankModelLoader process_rank_backend(const std::string& device);

// Builds a data-parallel Engine over `options.data_parallel` ranks (Engine::create's path for data_parallel > 1;
// tests pass their own models). `options` must be validated (Engine::create's checks).
std::unique_ptr<Engine> make_data_parallel_engine(const EngineOptions& options,
                                                  const std::function<std::unique_ptr<Model>(int rank)>& load_model);

// This process's rank of a process group as an Engine (Engine::create's path for EngineOptions::process_group).
std::unique_ptr<Engine> make_process_group_engine(const EngineOptions& options, std::shared_ptr<ProcessGroup> group,
                                                  std::unique_ptr<Model> model);

}  // namespace deepinfer::runtime
