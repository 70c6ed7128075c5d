// Attention data parallelism at the engine level (see data_parallel.h).
#include "runtime/data_parallel.h"

#include <algorithm>
#include <map>
#include <string>

#include "deepinfer/errors.h"
#include "runtime/engine_core.h"
#include "runtime/expert_loads.h"

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

// ---------------------------------------------------------------------------------------------------------
// Lockstep

Lockstep::Lockstep(int ranks) : ranks_(ranks) { DI_CHECK(ranks >= 1, "Lockstep: ranks must be >= 1"); }

Lockstep::Agreement Lockstep::exchange(int /*rank*/, int rows, bool in_flight, uint64_t epoch) {
  std::unique_lock<std::mutex> lk(mutex_);
  if (arrived_ == 0) {
    max_rows_ = 0;
    any_in_flight_ = false;
    min_epoch_ = epoch;
  }
  max_rows_ = std::max(max_rows_, rows);
  any_in_flight_ = any_in_flight_ || in_flight;
  min_epoch_ = std::min(min_epoch_, epoch);
  if (++arrived_ == ranks_) {
    agreement_.rows_per_rank = max_rows_;
    agreement_.busy = max_rows_ > 0 || any_in_flight_;
    agreement_.stop = stop_;
    agreement_.work_epoch = min_epoch_;
    arrived_ = 0;
    ++generation_;
    arrived_cv_.notify_all();
  } else {
    const uint64_t generation = generation_;
    arrived_cv_.wait(lk, [&] { return generation_ != generation; });
  }
  // Nobody can complete the next exchange before this rank calls again: agreement_ is this exchange's.
  return agreement_;
}

void Lockstep::notify_work() {
  {
    std::lock_guard<std::mutex> lk(mutex_);
    ++epoch_;
  }
  work_cv_.notify_all();
}

uint64_t Lockstep::epoch() const {
  std::lock_guard<std::mutex> lk(mutex_);
  return epoch_;
}

void Lockstep::wait_for_work(uint64_t seen_epoch) {
  std::unique_lock<std::mutex> lk(mutex_);
  work_cv_.wait(lk, [&] { return stop_ || epoch_ != seen_epoch; });
}

void Lockstep::request_stop() {
  {
    std::lock_guard<std::mutex> lk(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
}

// ---------------------------------------------------------------------------------------------------------
// DataParallelGroup

DataParallelGroup::DataParallelGroup(const EngineOptions& options,
                                     const std::function<std::unique_ptr<Model>(int rank)>& load_model)
    : lockstep_(std::make_shared<Lockstep>(options.data_parallel)) {
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

DataParallelGroup::~DataParallelGroup() {
  // Every loop leaves at the same exchange; each core then ends the requests it still holds.
  lockstep_->request_stop();
  cores_.clear();
}

RequestStream DataParallelGroup::submit(Request request) {
  std::lock_guard<std::mutex> lk(admission_mutex_);
  std::vector<RankLoad> loads(contexts_.size());
  for (size_t r = 0; r < contexts_.size(); ++r)
    loads[r] = {contexts_[r]->cached_tokens.load(), contexts_[r]->requests.load()};
  const int rank = admission_rank(loads);
  // A rejected request takes its id too, as on one rank (ids follow submission order either way).
  return cores_[size_t(rank)]->submit(std::move(request), next_id_++);
}

bool DataParallelGroup::cancel(const RequestHandle& handle) {
  if (handle.slot == UINT32_MAX) return false;  // rejected: no rank holds it
  return cores_[handle.slot % cores_.size()]->cancel(handle);
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

void register_data_parallel_backend(const std::string& device, GroupModelLoader loader) {
  std::lock_guard<std::mutex> lk(group_backends_mutex());
  group_backends()[device] = std::move(loader);
}

GroupModelLoader data_parallel_backend(const std::string& device) {
  std::lock_guard<std::mutex> lk(group_backends_mutex());
  auto it = group_backends().find(device);
  return it == group_backends().end() ? GroupModelLoader() : it->second;
}

std::unique_ptr<Engine> make_data_parallel_engine(const EngineOptions& options,
                                                  const std::function<std::unique_ptr<Model>(int rank)>& load_model) {
  auto group = std::make_shared<DataParallelGroup>(options, load_model);
  std::shared_ptr<EngineCore> rank0 = group->rank(0);
  return std::make_unique<Engine>(std::move(rank0), std::move(group));
}

}  // namespace deepinfer::runtime
