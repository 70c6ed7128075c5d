// Attention data parallelism at the engine level (docs/data_parallel.md, docs/parallel.md "Attention data
// parallelism"): one engine over several ranks. Each rank is an EngineCore with its own Model, Scheduler and state
// pools, run by its own thread; the group in front of them
//   - admits: every request goes, at submission, to the rank with the least cached tokens, then the fewest
//     requests, then the lowest rank (admission_rank);
//   - keeps the ranks in lockstep: every step each rank plans its chunks, the ranks exchange their row counts
//     (Lockstep::exchange, a host barrier), and each rank steps its model with its own rows and the group's rows
//     per rank (Model::set_group_rows), a rank without rows joining with none. A model whose MoE layers are
//     collectives over the ranks (the V4 GPU model's expert parallelism) needs exactly that: every rank in every
//     step, all with the same rows per rank.
// The ranks share nothing else but the EPLB statistics' window (expert_loads.h: the placement it judges is the
// group's, so its load sums the ranks'): request ids are the group's (submission order, as the one-rank engine
// numbers them), a handle's slot names its rank (slot % ranks), and every stream is fed by the rank that runs it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "deepinfer/engine.h"
#include "model/model.h"

namespace deepinfer {
class EngineCore;
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

// The per-step agreement of the ranks' engine loops (a host barrier with an exchange of each rank's plan).
class Lockstep {
 public:
  explicit Lockstep(int ranks);

  struct Agreement {
    int rows_per_rank = 0;    // the most rows any rank planned: every rank steps its model when > 0
    bool busy = false;        // some rank stepped or still has a step in flight: the loops go on at once
    bool stop = false;        // the group shuts down: every loop leaves after this exchange
    uint64_t work_epoch = 0;  // the oldest work epoch a rank read before planning (see wait_for_work)
  };

  // Every rank calls it once per step, after planning `rows` rows (0: none) and with `in_flight` when an
  // asynchronous step of its own is still unread; `epoch` is epoch() as read before the rank drained its inbox.
  // Blocks until every rank has called, and gives all of them the same agreement.
  Agreement exchange(int rank, int rows, bool in_flight, uint64_t epoch);

  // New work (a submission or cancellation) reached some rank's inbox; called after the inbox push.
  void notify_work();
  uint64_t epoch() const;
  // After an idle agreement: blocks until work arrived since the agreement's epoch, or until stop. Every rank
  // waits on the same epoch, so they all come back to the next exchange: a submission that a rank's last plan
  // missed was pushed after that rank read its epoch, so it moved the epoch past the agreement's minimum.
  void wait_for_work(uint64_t seen_epoch);
  // Makes the next exchange a stopping one (all loops leave together; a loop alone would strand the others).
  void request_stop();
  int ranks() const { return ranks_; }

 private:
  const int ranks_;
  mutable std::mutex mutex_;
  std::condition_variable arrived_cv_;
  std::condition_variable work_cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;  // completed exchanges
  int max_rows_ = 0;
  bool any_in_flight_ = false;
  uint64_t min_epoch_ = 0;
  Agreement agreement_;  // the last completed exchange's (stable until every rank has called again)
  uint64_t epoch_ = 0;
  bool stop_ = false;
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
};

// The ranks and the admission in front of them (Engine holds one when EngineOptions::data_parallel > 1).
class DataParallelGroup {
 public:
  // `options` are the engine's, already validated; `load_model(rank)` builds the rank's model copy.
  DataParallelGroup(const EngineOptions& options, const std::function<std::unique_ptr<Model>(int rank)>& load_model);
  ~DataParallelGroup();

  RequestStream submit(Request request);
  bool cancel(const RequestHandle& handle);
  EngineStats stats() const;
  int ranks() const { return int(cores_.size()); }
  const std::shared_ptr<EngineCore>& rank(int r) const { return cores_[size_t(r)]; }
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

// Builds a data-parallel Engine over `options.data_parallel` ranks (Engine::create's path for data_parallel > 1;
// tests pass their own models). `options` must be validated (Engine::create's checks).
std::unique_ptr<Engine> make_data_parallel_engine(const EngineOptions& options,
                                                  const std::function<std::unique_ptr<Model>(int rank)>& load_model);

}  // namespace deepinfer::runtime
