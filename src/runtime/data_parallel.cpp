// Attention data parallelism at the engine level (see data_parallel.h).
#include "runtime/data_parallel.h"

#include <algorithm>
#include <map>
#include <string>

#include "deepinfer/errors.h"
#include "runtime/engine_core.h"
#include "runtime/expert_loads.h"
#include "runtime/process_group.h"

namespace deepinfer::runtime {

int admission_rank(std::span<const RankLoad> loads) {
  DI_CHECK(!loads.empty(), "admission_rank: no ranks");
  int best = 0;
  for (int r = 1; r < int(loads.size()); ++r) {
    const RankLoad& a = loads[size_t(r)];
    const RankLoad& b = loads[size_t(best)];
    // Strictly better only: a tie keeps the lower rank.
    if (a.cached_tokens < b.cached_tokens || (a.cached_tokens == b.cached_tokens && a.requests < b.requests)) best = r;
  }
  return best;
}

void StepExpertLoads::add(const StepExpertLoads& o) {
  if (o.empty()) return;
  if (empty()) {
    *this = o;
    return;
  }
  DI_CHECK(o.step == step && o.experts == experts && o.counts.size() == counts.size(),
           "data-parallel ranks disagree on their expert loads: step " + std::to_string(step) + " vs " +
               std::to_string(o.step) + ", " + std::to_string(counts.size()) + " vs " + std::to_string(o.counts.size()) +
               " counts of " + std::to_string(experts) + " vs " + std::to_string(o.experts) + " experts");
  for (size_t i = 0; i < counts.size(); ++i) counts[i] += o.counts[i];
}

// ---------------------------------------------------------------------------------------------------------
// Lockstep

BarrierTransport::BarrierTransport(int ranks) : ranks_(ranks), filling_(size_t(ranks)) {
  DI_CHECK(ranks >= 1, "BarrierTransport: ranks must be >= 1");
}

std::vector<LockstepRecord> BarrierTransport::all_gather(int rank, const LockstepRecord& mine) {
  std::unique_lock<std::mutex> lk(mutex_);
  filling_[size_t(rank)] = mine;
  if (++arrived_ == ranks_) {
    done_ = filling_;
    arrived_ = 0;
    ++generation_;
    arrived_cv_.notify_all();
  } else {
    const uint64_t generation = generation_;
    arrived_cv_.wait(lk, [&] { return generation_ != generation; });
  }
  // Nobody can complete the next gather before this rank calls again: done_ is this gather's.
  return done_;
}

Lockstep::Lockstep(int ranks, std::shared_ptr<LockstepTransport> transport, bool follower)
    : ranks_(ranks), follower_(follower), transport_(std::move(transport)) {
  DI_CHECK(ranks >= 1, "Lockstep: ranks must be >= 1");
  if (!transport_) transport_ = std::make_shared<BarrierTransport>(ranks);
}

Lockstep::Agreement Lockstep::agree(std::span<const LockstepRecord> records) {
  DI_CHECK(!records.empty(), "Lockstep::agree: no records");
  Agreement a;
  bool any_in_flight = false;
  a.work_epoch = records.front().epoch;
  for (const LockstepRecord& r : records) {
    a.rows_per_rank = std::max(a.rows_per_rank, int(r.rows));
    any_in_flight = any_in_flight || r.in_flight;
    a.work_epoch = std::min(a.work_epoch, r.epoch);
    a.stop = a.stop || r.stop;
    a.loads.add(r.loads);
  }
  a.busy = a.rows_per_rank > 0 || any_in_flight;
  return a;
}

Lockstep::Agreement Lockstep::exchange(int rank, int rows, bool in_flight, uint64_t epoch, StepExpertLoads loads) {
  LockstepRecord mine;
  mine.rows = rows;
  mine.in_flight = in_flight;
  mine.epoch = epoch;
  mine.loads = std::move(loads);
  std::string failure;
  {
    std::lock_guard<std::mutex> lk(mutex_);
    mine.stop = stop_;
    failure = failure_;
  }
  Agreement a;
  if (failure.empty()) {
    try {
      const std::vector<LockstepRecord> records = transport_->all_gather(rank, mine);
      DI_CHECK(int(records.size()) == ranks_, "Lockstep: the transport gathered " + std::to_string(records.size()) +
                                                  " records for " + std::to_string(ranks_) + " ranks");
      a = agree(records);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  std::lock_guard<std::mutex> lk(mutex_);
  if (!failure.empty()) {
    // A failed group cannot agree on anything any more: this rank stops, and its peers learn it from the transport.
    a = Agreement{};
    a.stop = true;
    if (failure_.empty()) failure_ = failure;
    a.failure = failure_;
  }
  if (a.stop) {
    stopped_ = true;
    stopped_cv_.notify_all();
  }
  return a;
}

void Lockstep::notify_work() {
  uint64_t epoch;
  {
    std::lock_guard<std::mutex> lk(mutex_);
    if (follower_) return;  // rank 0's Wake moves this rank's epoch, after the work it sent
    epoch = ++epoch_;
  }
  work_cv_.notify_all();
  if (publish_) publish_(epoch);
}

void Lockstep::observe_epoch(uint64_t epoch) {
  {
    std::lock_guard<std::mutex> lk(mutex_);
    epoch_ = std::max(epoch_, epoch);
  }
  work_cv_.notify_all();
}

void Lockstep::set_epoch_publisher(std::function<void(uint64_t)> publish) { publish_ = std::move(publish); }

uint64_t Lockstep::epoch() const {
  std::lock_guard<std::mutex> lk(mutex_);
  return epoch_;
}

void Lockstep::wait_for_work(uint64_t seen_epoch) {
  std::unique_lock<std::mutex> lk(mutex_);
  work_cv_.wait(lk, [&] { return stop_ || !failure_.empty() || epoch_ != seen_epoch; });
}

void Lockstep::request_stop() {
  uint64_t epoch;
  {
    std::lock_guard<std::mutex> lk(mutex_);
    if (follower_) {
      // Only rank 0 ends a process group (it holds the callers' streams). A rank > 0 leaving before that (its engine
      // destroyed early) leaves alone: no further exchange, its connection closes, and rank 0 reports it gone.
      if (!stopped_ && failure_.empty()) failure_ = "this rank's engine shut down before rank 0 ended the group";
      work_cv_.notify_all();
      return;
    }
    if (stopped_) return;  // the group has stopped already (Engine::serve, then the destructor): nobody to wake
    stop_ = true;
    epoch = ++epoch_;
  }
  work_cv_.notify_all();
  if (publish_) publish_(epoch);
}

void Lockstep::fail(const std::string& message) {
  {
    std::lock_guard<std::mutex> lk(mutex_);
    if (failure_.empty()) failure_ = message;
  }
  work_cv_.notify_all();
}

std::string Lockstep::wait_stopped() {
  std::unique_lock<std::mutex> lk(mutex_);
  stopped_cv_.wait(lk, [&] { return stopped_; });
  return failure_;
}

std::string Lockstep::failure() const {
  std::lock_guard<std::mutex> lk(mutex_);
  return failure_;
}

// ---------------------------------------------------------------------------------------------------------
// DataParallelGroup

DataParallelGroup::DataParallelGroup(const EngineOptions& options,
                                     const std::function<std::unique_ptr<Model>(int rank)>& load_model)
    : lockstep_(std::make_shared<Lockstep>(options.data_parallel)), ranks_(options.data_parallel) {
  DI_CHECK(options.data_parallel >= 1, "EngineOptions.data_parallel: must be >= 1");
  EngineOptions rank_options = options;
  rank_options.threaded = true;  // every rank's loop is its own thread (EP collectives block per rank)
  // Every model first: a rank's loop starts with its core and waits for all the others at its first exchange, so a
  // load that fails must fail before any loop runs.
  std::vector<std::unique_ptr<Model>> models;
  // Each rank detokenizes its own requests' outputs on its own thread: a tokenizer each.
  std::vector<std::unique_ptr<Tokenizer>> tokenizers;
  for (int r = 0; r < options.data_parallel; ++r) {
    models.push_back(load_model(r));
    tokenizers.push_back(options.tokenizer.empty() ? nullptr
                                                   : std::make_unique<Tokenizer>(Tokenizer::from_file(options.tokenizer)));
  }
  // One EPLB window for the whole group when the options ask for statistics (checked here as each core checks them).
  DI_CHECK(models.front() != nullptr, "EngineOptions.data_parallel: rank 0's model is missing");
  if (check_expert_load_options(options, models.front()->config().n_routed_experts))
    expert_loads_ = std::make_shared<ExpertLoadStats>(options.expert_parallel, options.eplb_window_steps,
                                                      options.eplb_redundant_experts);
  if (options.eplb_rebalance_steps > 0) {
    // Every rank must start from the same placement (the loaders give each rank its share of one placement).
    const std::optional<parallel::ExpertPlacement> first = models.front()->expert_placement();
    auto same = [&](const std::optional<parallel::ExpertPlacement>& p) {
      return p.has_value() == first.has_value() &&
             (!p || (p->ranks == first->ranks && p->experts == first->experts &&
                     p->slots_per_rank == first->slots_per_rank && p->phy2log == first->phy2log));
    };
    for (int r = 1; r < options.data_parallel; ++r)
      DI_CHECK(models[size_t(r)] && same(models[size_t(r)]->expert_placement()),
               "EngineOptions.eplb_rebalance_steps: rank " + std::to_string(r) +
                   "'s model holds another expert placement than rank 0's");
    enable_rebalancing(options, *models.front());
  }
  for (int r = 0; r < options.data_parallel; ++r) {
    auto context = std::make_shared<RankContext>();
    context->rank = r;
    context->ranks = options.data_parallel;
    context->lockstep = lockstep_;
    context->expert_loads = expert_loads_;
    auto core = std::make_shared<EngineCore>(rank_options, std::move(models[size_t(r)]), std::move(tokenizers[size_t(r)]), context);
    core->set_self(core);
    contexts_.push_back(std::move(context));
    cores_.push_back(std::move(core));
  }
}

DataParallelGroup::DataParallelGroup(const EngineOptions& options, std::shared_ptr<ProcessGroup> group,
                                     std::unique_ptr<Model> model)
    : ranks_(options.data_parallel), process_(std::move(group)) {
  DI_CHECK(process_ && process_->world() == options.data_parallel,
           "EngineOptions.data_parallel: " + std::to_string(options.data_parallel) + " ranks, but the process group "
           "has " + std::to_string(process_ ? process_->world() : 0) + " processes (WORLD_SIZE)");
  DI_CHECK(model != nullptr, "EngineOptions.data_parallel: this process's model is missing");
  const int me = process_->rank();
  lockstep_ = std::make_shared<Lockstep>(ranks_, process_, /*follower=*/me > 0);
  // Rank 0 announces new work to every process (a Wake after the Submit or Cancel it sent), so that idle ranks come
  // to the next exchange. A failed send is the group's failure, which the reader reports too.
  if (me == 0)
    lockstep_->set_epoch_publisher([group = process_.get()](uint64_t epoch) {
      std::string payload(8, '\0');
      for (int i = 0; i < 8; ++i) payload[size_t(i)] = char(epoch >> (56 - 8 * i));
      try {
        group->broadcast(ProcessGroup::Message::Wake, payload);
      } catch (const std::exception&) {
      }
    });
  EngineOptions rank_options = options;
  rank_options.threaded = true;
  std::unique_ptr<Tokenizer> tokenizer =
      options.tokenizer.empty() ? nullptr : std::make_unique<Tokenizer>(Tokenizer::from_file(options.tokenizer));
  // Each process keeps a copy of the group's window, fed at every exchange with the sum of every rank's counts of
  // the last step (RankContext::exchange_expert_loads), so the copies are equal and so is every rebalance decision.
  if (check_expert_load_options(options, model->config().n_routed_experts))
    expert_loads_ = std::make_shared<ExpertLoadStats>(options.expert_parallel, options.eplb_window_steps,
                                                      options.eplb_redundant_experts);
  if (options.eplb_rebalance_steps > 0) enable_rebalancing(options, *model);
  auto context = std::make_shared<RankContext>();
  context->rank = me;
  context->ranks = ranks_;
  context->lockstep = lockstep_;
  context->expert_loads = expert_loads_;
  context->exchange_expert_loads = true;
  remote_loads_.resize(size_t(ranks_));
  remote_admitted_.resize(size_t(ranks_));
  auto core = std::make_shared<EngineCore>(rank_options, std::move(model), std::move(tokenizer), context);
  core->set_self(core);
  contexts_.push_back(std::move(context));
  cores_.push_back(std::move(core));
  // The readers after the core: rank 0's first Submit may already wait on the connection, and its handler needs the
  // core. (The core's loop may reach its first exchange before; it waits there for the reader's answer.)
  process_->start([this](int from, ProcessGroup::Message type, const std::string& payload) {
                    on_message(from, int(type), payload);
                  },
                  [this](const std::string& message) { on_failure(message); });
}

void DataParallelGroup::on_message(int from, int type, const std::string& payload) {
  using M = ProcessGroup::Message;
  try {
    if (process_->rank() == 0 && M(type) == M::Event) {
      Event e = decode_event(payload);
      std::shared_ptr<StreamShared> stream;
      {
        std::lock_guard<std::mutex> lk(remote_mutex_);
        auto it = remote_.find(e.request_id);
        if (it == remote_.end() || it->second.rank != from) return;  // ended already (a failure answered it)
        RankLoad& load = remote_loads_[size_t(from)];
        stream = it->second.stream;
        if (e.terminal()) {
          load.cached_tokens -= it->second.load_tokens;
          --load.requests;
          remote_.erase(it);
        } else {
          it->second.load_tokens += int64_t(e.token_ids.size());
          load.cached_tokens += int64_t(e.token_ids.size());
        }
      }
      {
        std::lock_guard<std::mutex> lk(stream->mutex);
        if (stream->terminal_sent) return;
        if (e.terminal()) stream->terminal_sent = true;
        stream->events.push_back(std::move(e));
      }
      stream->cv.notify_all();
    } else if (process_->rank() > 0 && M(type) == M::Submit) {
      uint64_t id = 0;
      Request request = decode_request(payload, id);
      // The entry before the submit: the request may end (and its forward erase the entry) before submit returns.
      {
        std::lock_guard<std::mutex> lk(served_->mutex);
        served_->handles[id];
      }
      // The callback owns what it touches (the table, the connections): the core may call it after this group is
      // gone (data_parallel.h, Served).
      auto forward = [served = served_, process = process_, id](const Event& e) {
        if (e.terminal()) {
          std::lock_guard<std::mutex> lk(served->mutex);
          served->handles.erase(id);
        }
        try {
          process->send(0, M::Event, encode_event(e));
        } catch (const std::exception&) {
          // Rank 0 is gone: the reader reports the failure, and the loop stops at its next exchange.
        }
      };
      RequestStream stream = cores_[0]->submit(std::move(request), id, forward);
      std::lock_guard<std::mutex> lk(served_->mutex);
      if (auto it = served_->handles.find(id); it != served_->handles.end()) it->second = stream.handle();
    } else if (process_->rank() > 0 && M(type) == M::Cancel) {
      const uint64_t id = std::stoull(payload);
      std::optional<RequestHandle> handle;
      {
        std::lock_guard<std::mutex> lk(served_->mutex);
        if (auto it = served_->handles.find(id); it != served_->handles.end()) handle = it->second;
      }
      if (handle) cores_[0]->cancel(*handle);
    } else if (process_->rank() > 0 && M(type) == M::Wake) {
      DI_CHECK(payload.size() == 8, "a Wake of " + std::to_string(payload.size()) + " bytes");
      uint64_t epoch = 0;
      for (char c : payload) epoch = (epoch << 8) | uint8_t(c);
      lockstep_->observe_epoch(epoch);
    } else {
      throw Error("unexpected message type " + std::to_string(type));
    }
  } catch (const std::exception& e) {
    // A message this process cannot read means the processes disagree (different builds?): the group fails.
    on_failure("data-parallel rank " + std::to_string(process_->rank()) + ": bad message from rank " +
               std::to_string(from) + ": " + e.what());
  }
}

void DataParallelGroup::on_failure(const std::string& message) {
  // The loop stops at its next exchange (waking it when idle) and fails this rank's own requests there.
  lockstep_->fail(message);
  if (process_->rank() != 0) return;
  // Rank 0 answers the requests other processes were running: they cannot finish any more.
  std::unordered_map<uint64_t, Remote> lost;
  {
    std::lock_guard<std::mutex> lk(remote_mutex_);
    if (remote_failure_.empty()) remote_failure_ = message;
    lost.swap(remote_);
    for (RankLoad& l : remote_loads_) l = RankLoad{};
  }
  for (auto& [id, remote] : lost) {
    Event e;
    e.kind = Event::Kind::Finish;
    e.request_id = id;
    e.reason = FinishReason::Error;
    e.message = "the data-parallel group failed: " + message;
    {
      std::lock_guard<std::mutex> lk(remote.stream->mutex);
      if (remote.stream->terminal_sent) continue;
      remote.stream->terminal_sent = true;
      remote.stream->events.push_back(std::move(e));
    }
    remote.stream->cv.notify_all();
  }
}

void DataParallelGroup::enable_rebalancing(const EngineOptions& options, const Model& model) {
  // check_expert_load_options has checked the options (rebalancing needs statistics, so the window exists).
  DI_CHECK(expert_loads_ != nullptr, "internal: EPLB rebalancing without an expert-load window");
  std::optional<parallel::ExpertPlacement> placement = model.expert_placement();
  DI_CHECK(placement.has_value(),
           "EngineOptions.eplb_rebalance_steps: the model holds every expert (the CPU reference models do); "
           "rebalancing needs a model whose experts are placed over the ranks (--device cuda with --data-parallel N)");
  DI_CHECK(placement->ranks == ranks_, "EngineOptions.eplb_rebalance_steps: the model's expert placement is over " +
                                           std::to_string(placement->ranks) + " ranks, the group has " +
                                           std::to_string(ranks_));
  expert_loads_->enable_rebalancing(options.eplb_rebalance_steps, options.eplb_rebalance_min_gain,
                                    std::move(*placement));
}

int DataParallelGroup::process_rank() const { return process_ ? process_->rank() : 0; }

void DataParallelGroup::serve() {
  if (!process_) return;
  if (process_->rank() == 0) lockstep_->request_stop();
  const std::string failure = lockstep_->wait_stopped();
  if (!failure.empty()) throw Error(failure);
}

DataParallelGroup::~DataParallelGroup() {
  // Every loop leaves at the same exchange; each core then ends the requests it still holds.
  lockstep_->request_stop();
  if (process_) {
    // This process's loop first passes the stopping exchange (it needs the connections), then the readers go
    // (they call into this group), then the core (whose last events' forwards then fail quietly).
    lockstep_->wait_stopped();
    process_->close();
  }
  cores_.clear();
}

RequestStream DataParallelGroup::submit(Request request) {
  std::lock_guard<std::mutex> lk(admission_mutex_);
  if (!process_) {
    std::vector<RankLoad> loads(contexts_.size());
    for (size_t r = 0; r < contexts_.size(); ++r)
      loads[r] = {contexts_[r]->cached_tokens.load(), contexts_[r]->requests.load()};
    const int rank = admission_rank(loads);
    // A rejected request takes its id too, as on one rank (ids follow submission order either way).
    return cores_[size_t(rank)]->submit(std::move(request), next_id_++);
  }
  DI_CHECK(process_->rank() == 0, "Engine::submit: with a process group only rank 0 takes requests (rank " +
                                      std::to_string(process_->rank()) + " serves)");
  const uint64_t id = next_id_++;
  // Rank 0's stream of the request, whoever runs it.
  auto stream = std::make_shared<StreamShared>();
  stream->core = cores_[0];
  stream->handle.id = id;
  auto finished = [&](FinishReason reason, std::string message) {
    Event e;
    e.kind = Event::Kind::Finish;
    e.request_id = id;
    e.reason = reason;
    e.message = std::move(message);
    stream->events.push_back(std::move(e));
    stream->terminal_sent = true;
    return RequestStream(stream);
  };
  if (const std::string failure = lockstep_->failure(); !failure.empty())
    return finished(FinishReason::Error, "the data-parallel group failed: " + failure);
  int rank;
  {
    std::lock_guard<std::mutex> rl(remote_mutex_);
    std::vector<RankLoad> loads = remote_loads_;
    loads[0] = {contexts_[0]->cached_tokens.load(), contexts_[0]->requests.load()};
    rank = admission_rank(loads);
  }
  if (rank == 0) return cores_[0]->submit(std::move(request), id);
  // The prompt as the owning rank's core will read it (its validation is the owner's; a prompt it cannot encode or
  // that gives text and ids both is rejected there, with no prompt ids).
  std::vector<int32_t> prompt = request.prompt_token_ids;
  if (!request.prompt.empty()) {
    prompt.clear();
    if (request.prompt_token_ids.empty() && cores_[0]->tokenizer()) try {
        prompt = cores_[0]->tokenizer()->encode(request.prompt, true);
      } catch (const std::exception&) {
      }
  }
  stream->prompt_token_ids = prompt;
  // The handle names the owning rank (slot % ranks) so that cancel() routes it; rank 0 keeps no slot for it.
  stream->handle.slot = uint32_t(rank);
  stream->cancel = [group = weak_from_this(), handle = stream->handle] {
    if (auto g = group.lock()) g->cancel(handle);
  };
  {
    std::lock_guard<std::mutex> rl(remote_mutex_);
    // A failure since the check above already answered the requests it knew of: answer this one here.
    if (!remote_failure_.empty()) return finished(FinishReason::Error, "the data-parallel group failed: " + remote_failure_);
    remote_[id] = Remote{stream, rank, int64_t(prompt.size())};
    remote_loads_[size_t(rank)].cached_tokens += int64_t(prompt.size());
    ++remote_loads_[size_t(rank)].requests;
    ++remote_admitted_[size_t(rank)];
  }
  try {
    process_->send(rank, ProcessGroup::Message::Submit, encode_request(id, request));
  } catch (const std::exception& e) {
    on_failure(process_->failure().empty() ? std::string(e.what()) : process_->failure());
    return RequestStream(stream);  // on_failure answered it
  }
  lockstep_->notify_work();  // the Wake after the Submit: the owner has the request when its epoch moves
  return RequestStream(stream);
}

bool DataParallelGroup::cancel(const RequestHandle& handle) {
  if (handle.slot == UINT32_MAX) return false;  // rejected: no rank holds it
  const int rank = int(handle.slot % uint32_t(ranks_));
  if (!process_) return cores_[size_t(rank)]->cancel(handle);
  if (rank == 0) return cores_[0]->cancel(handle);
  {
    std::lock_guard<std::mutex> rl(remote_mutex_);
    auto it = remote_.find(handle.id);
    if (it == remote_.end() || it->second.rank != rank) return false;  // ended
  }
  try {
    process_->send(rank, ProcessGroup::Message::Cancel, std::to_string(handle.id));
  } catch (const std::exception&) {
    return false;  // the group failed: the request ends with that failure
  }
  lockstep_->notify_work();
  return true;
}

EngineStats DataParallelGroup::stats() const {
  EngineStats total;
  for (const auto& core : cores_) {
    const EngineStats s = core->stats();
    const EngineStats::Rank r = core->rank_stats();
    // Counted like the steps (one per lockstep step, not per rank): the most any rank ran asynchronously, so that
    // "async of steps" stays a fraction of the group's steps.
    total.async_steps = std::max(total.async_steps, s.async_steps);
    total.prefill_tokens += s.prefill_tokens;
    total.decode_tokens += s.decode_tokens;
    total.preemptions += s.preemptions;
    total.rejected += s.rejected;
    total.max_running = std::max(total.max_running, s.max_running);
    total.host_seconds += s.host_seconds;
    total.model_wait_seconds += s.model_wait_seconds;
    total.device_busy_seconds += s.device_busy_seconds;
    total.device_idle_seconds += s.device_idle_seconds;
    total.state_bytes_in_use += s.state_bytes_in_use;
    total.state_bytes_peak = std::max(total.state_bytes_peak, s.state_bytes_peak);
    // Every rank joins every step: the group's steps are any rank's (the most, should a read fall mid-step).
    total.steps = std::max(total.steps, r.steps);
    total.ranks.push_back(r);
  }
  // A process group: rank 0 knows of the other processes only how many requests it gave them (their own counts stay
  // in their processes).
  if (process_ && process_->rank() == 0) {
    std::lock_guard<std::mutex> rl(remote_mutex_);
    for (int r = 1; r < ranks_; ++r) {
      EngineStats::Rank entry;
      entry.requests = remote_admitted_[size_t(r)];
      total.ranks.push_back(entry);
    }
  }
  // One window for the group (the ranks' counts of a step add up in it), read once.
  if (expert_loads_) expert_loads_->fill(total);
  return total;
}

namespace {
std::mutex& group_backends_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, GroupModelLoader>& group_backends() {
  static std::map<std::string, GroupModelLoader> b;
  return b;
}
}  // namespace

std::map<std::string, RankModelLoader>& rank_backends() {
  static std::map<std::string, RankModelLoader> b;
  return b;
}

void register_process_rank_backend(const std::string& device, RankModelLoader loader) {
  std::lock_guard<std::mutex> lk(group_backends_mutex());
  rank_backends()[device] = std::move(loader);
}

RankModelLoader process_rank_backend(const std::string& device) {
  std::lock_guard<std::mutex> lk(group_backends_mutex());
  auto it = rank_backends().find(device);
  return it == rank_backends().end() ? RankModelLoader() : it->second;
}

void register_data_parallel_backend(const std::string& device, GroupModelLoader loader) {
  std::lock_guard<std::mutex> lk(group_backends_mutex());
  group_backends()[device] = std::move(loader);
}

GroupModelLoader data_parallel_backend(const std::string& device) {
  std::lock_guard<std::mutex> lk(group_backends_mutex());
  auto it = group_backends().find(device);
  return it == group_backends().end() ? GroupModelLoader() : it->second;
}

std::unique_ptr<Engine> make_process_group_engine(const EngineOptions& options, std::shared_ptr<ProcessGroup> group,
                                                  std::unique_ptr<Model> model) {
  auto dp = std::make_shared<DataParallelGroup>(options, std::move(group), std::move(model));
  std::shared_ptr<EngineCore> own = dp->rank(0);
  return std::make_unique<Engine>(std::move(own), std::move(dp));
}

std::unique_ptr<Engine> make_data_parallel_engine(const EngineOptions& options,
                                                  const std::function<std::unique_ptr<Model>(int rank)>& load_model) {
  auto group = std::make_shared<DataParallelGroup>(options, load_model);
  std::shared_ptr<EngineCore> rank0 = group->rank(0);
  return std::make_unique<Engine>(std::move(rank0), std::move(group));
}

}  // namespace deepinfer::runtime
