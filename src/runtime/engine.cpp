// Engine, RequestStream and the engine loop (see engine_core.h for the threads and the step pipeline).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <sstream>

#include "grammar/structured.h"
#include "parallel/bootstrap.h"
#include "runtime/engine_core.h"
#include "runtime/process_group.h"

namespace deepinfer {

using runtime::Scheduler;
using runtime::ScheduledChunk;
using runtime::Sequence;

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::None: return "";
    case FinishReason::Finished: return "finished";
    case FinishReason::Stopped: return "stopped";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Rejected: return "rejected";
    case FinishReason::Error: return "error";
  }
  return "";
}

// ---------------------------------------------------------------------------------------------------------
// Options from the environment (DESIGN.md principle 5: the upstream knobs are documented engine options).

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower((unsigned char)c));
  return s;
}

bool env_bool(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  std::string s = lower(v);
  if (s == "1" || s == "true" || s == "on" || s == "yes") return true;
  if (s == "0" || s == "false" || s == "off" || s == "no") return false;
  throw Error(std::string(name) + ": '" + v + "' is not a boolean (1/0, true/false, on/off)");
}

}  // namespace

EngineOptions EngineOptions::from_env(EngineOptions o) {
  o.batch_invariant = env_bool("DEEPINFER_BATCH_INVARIANT", o.batch_invariant);
  if (const char* v = std::getenv("DEEPINFER_DEVICE"); v && *v) {
    std::string s = lower(v);
    if (s != "cpu" && s != "cuda") throw Error(std::string("DEEPINFER_DEVICE: '") + v + "' is not a device (cpu | cuda)");
    o.device = s;
  }
  if (const char* v = std::getenv("DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE"); v && *v) {
    std::string s = lower(v);
    if (s == "exact" || s == "none" || s == "off" || s == "0" || s == "false")
      o.prefill_truncation = PrefillTruncationMode::Exact;
    else if (s == "decoder" || s == "tail" || s == "decoder_tail" || s == "on" || s == "1" || s == "true")
      o.prefill_truncation = PrefillTruncationMode::DecoderTail;
    else
      throw Error(std::string("DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE: '") + v +
                  "' is not a mode (exact | decoder_tail; also off/on)");
  }
  if (const char* v = std::getenv("DEEPINFER_YOCO_PREFILL_KEEP_TOKENS"); v && *v) {
    char* end = nullptr;
    long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 1 || n > (1 << 30))
      throw Error(std::string("DEEPINFER_YOCO_PREFILL_KEEP_TOKENS: '") + v + "' is not a positive token count");
    o.prefill_keep_tokens = int(n);
  }
  return o;
}

// ---------------------------------------------------------------------------------------------------------
// RequestStream

RequestStream::RequestStream(std::shared_ptr<StreamShared> shared) : shared_(std::move(shared)) {}
RequestStream::~RequestStream() = default;
RequestStream::RequestStream(RequestStream&&) noexcept = default;
RequestStream& RequestStream::operator=(RequestStream&&) noexcept = default;

const RequestHandle& RequestStream::handle() const { return shared_->handle; }

bool RequestStream::done() const {
  std::lock_guard<std::mutex> lk(shared_->mutex);
  return shared_->terminal_taken;
}

bool RequestStream::next_for(Event& event, std::chrono::milliseconds timeout) {
  StreamShared& s = *shared_;
  if (s.synchronous)
    if (auto core = s.core.lock()) core->drive_until_event(s);
  std::unique_lock<std::mutex> lk(s.mutex);
  if (s.terminal_taken) return false;
  if (!s.cv.wait_for(lk, timeout, [&] { return !s.events.empty(); })) return false;
  event = std::move(s.events.front());
  s.events.pop_front();
  if (event.terminal()) s.terminal_taken = true;
  return true;
}

bool RequestStream::next(Event& event) {
  StreamShared& s = *shared_;
  if (s.synchronous)
    if (auto core = s.core.lock()) core->drive_until_event(s);
  std::unique_lock<std::mutex> lk(s.mutex);
  if (s.terminal_taken) return false;
  s.cv.wait(lk, [&] { return !s.events.empty(); });
  event = std::move(s.events.front());
  s.events.pop_front();
  if (event.terminal()) s.terminal_taken = true;
  return true;
}

void RequestStream::cancel() {
  if (shared_->cancel) {
    shared_->cancel();
    return;
  }
  if (auto core = shared_->core.lock()) core->cancel(shared_->handle);
}

RequestOutput RequestStream::collect() {
  RequestOutput out;
  out.request_id = shared_->handle.id;
  out.prompt_token_ids = shared_->prompt_token_ids;
  Event e;
  while (next(e)) {
    out.token_ids.insert(out.token_ids.end(), e.token_ids.begin(), e.token_ids.end());
    out.text += e.text_delta;
    out.logprobs.insert(out.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
    if (e.terminal()) {
      out.finish_reason = e.reason;
      out.message = e.message;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// CPU executor

namespace {

// The tokens a scheduled chunk feeds (prompt ++ output from its begin).
std::vector<int32_t> chunk_tokens(const runtime::ScheduledChunk& c) {
  std::vector<int32_t> t(static_cast<size_t>(c.count));
  for (int64_t k = 0; k < c.count; ++k) t[size_t(k)] = c.seq->token_at(c.begin + k);
  return t;
}

}  // namespace

void runtime::BatchStepExecutor::execute(const Model& model, const std::vector<ScheduledChunk>& plan,
                                         const std::vector<std::function<TokenMask()>>& masks,
                                         std::vector<std::vector<float>>& last_logits,
                                         std::vector<std::string>& errors) {
  last_logits.assign(plan.size(), {});
  errors.assign(plan.size(), {});
  std::vector<std::vector<int32_t>> tokens(plan.size());
  std::vector<BatchChunk> chunks;
  std::vector<size_t> chunk_of_plan;
  for (size_t i = 0; i < plan.size(); ++i) {
    const ScheduledChunk& c = plan[i];
    Sequence& seq = *c.seq;
    try {
      if (!seq.state) seq.state = model.new_sequence();
    } catch (const std::exception& e) {
      errors[i] = std::string("model forward failed: ") + e.what();
      continue;
    }
    tokens[i] = chunk_tokens(c);
    chunks.push_back({seq.state.get(), tokens[i], c.samples, i < masks.size() ? masks[i] : nullptr});
    chunk_of_plan.push_back(i);
  }
  std::vector<std::vector<float>> out;
  try {
    model.forward_batch(chunks, out);
  } catch (const std::exception& e) {
    // One device step carries every chunk: a failure fails them all.
    for (size_t i : chunk_of_plan) errors[i] = std::string("model forward failed: ") + e.what();
    return;
  }
  for (size_t j = 0; j < chunk_of_plan.size(); ++j) last_logits[chunk_of_plan[j]] = std::move(out[j]);
}

// The CPU backend leaves the grammar masks to the host sampler.
void runtime::CpuStepExecutor::execute(const Model& model, const std::vector<ScheduledChunk>& plan,
                                       const std::vector<std::function<TokenMask()>>& /*masks*/,
                                       std::vector<std::vector<float>>& last_logits,
                                       std::vector<std::string>& errors) {
  last_logits.assign(plan.size(), {});
  errors.assign(plan.size(), {});
  const int64_t vocab = model.config().vocab_size;
  for (size_t i = 0; i < plan.size(); ++i) {
    const ScheduledChunk& c = plan[i];
    Sequence& seq = *c.seq;
    try {
      if (!seq.state) seq.state = model.new_sequence();
      const std::vector<int32_t> tokens = chunk_tokens(c);
      Tensor logits = model.forward(*seq.state, tokens);
      if (c.samples) {
        const float* row = logits.row(c.count - 1);
        last_logits[i].assign(row, row + vocab);
      }
    } catch (const std::exception& e) {
      errors[i] = std::string("model forward failed: ") + e.what();
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// EngineCore

EngineCore::EngineCore(EngineOptions options, std::unique_ptr<Model> model, std::unique_ptr<Tokenizer> tokenizer,
                       std::shared_ptr<runtime::RankContext> rank)
    : options_(std::move(options)), model_(std::move(model)), tokenizer_(std::move(tokenizer)), rank_(std::move(rank)) {
  cost_ = runtime::StateCost::from_config(model_->config());
  if (model_->runs_batches())
    executor_ = std::make_unique<runtime::BatchStepExecutor>();
  else
    executor_ = std::make_unique<runtime::CpuStepExecutor>();
  runtime::SchedulerLimits limits;
  limits.max_batch_tokens = options_.max_batch_tokens;
  limits.max_num_seqs = options_.max_num_seqs;
  limits.prefill_chunk = options_.prefill_chunk;
  limits.state_memory_bytes = options_.state_memory_bytes;
  limits.batch_invariant = options_.batch_invariant;
  scheduler_ = std::make_unique<Scheduler>(limits, cost_);
  DI_CHECK(!rank_ || options_.threaded, "internal: a data-parallel rank needs its own thread");
  init_expert_load_counting();
  if (options_.threaded) owner_ = std::thread([this] { rank_ ? rank_loop() : owner_loop(); });
}

EngineCore::~EngineCore() {
  if (owner_.joinable()) {
    {
      std::lock_guard<std::mutex> lk(inbox_mutex_);
      stopping_ = true;
    }
    inbox_cv_.notify_all();
    // A rank's loop leaves only with the whole group (at the next exchange), never alone.
    if (rank_) rank_->lockstep->request_stop();
    owner_.join();
  }
  // Every request still held gets its terminal event.
  std::lock_guard<std::mutex> lk(step_mutex_);
  drain_inbox();
  for (uint64_t id : scheduler_->all_ids()) finish(id, FinishReason::Cancelled, "the engine shut down");
}

EngineStats EngineCore::stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lk(stats_mutex_);
    s = stats_;
  }
  if (expert_loads_) expert_loads_->fill(s);
  return s;
}

void EngineCore::init_expert_load_counting() {
  const EngineOptions& o = options_;
  if (!runtime::check_expert_load_options(o, model_->config().n_routed_experts)) return;
  // The group's window is shared by its ranks: the placement it judges is the group's.
  expert_loads_ = rank_ ? rank_->expert_loads : nullptr;
  if (!expert_loads_)
    expert_loads_ = std::make_shared<runtime::ExpertLoadStats>(o.expert_parallel, o.eplb_window_steps,
                                                               o.eplb_redundant_experts);
  model_->set_expert_load_counting(true);
}

void EngineCore::record_expert_loads(uint64_t step) {
  std::optional<std::vector<std::vector<int64_t>>> counts = model_->take_expert_loads();
  if (!counts || counts->empty() || counts->front().empty()) return;
  if (!rank_ || !rank_->exchange_expert_loads) {
    expert_loads_->record(step, *counts);
    return;
  }
  // A process group: flat [layers * experts] for the wire; a layer of another width (none in the models) counts 0.
  runtime::StepExpertLoads mine;
  mine.step = step;
  mine.experts = int32_t(counts->front().size());
  mine.counts.assign(counts->size() * size_t(mine.experts), 0);
  for (size_t l = 0; l < counts->size(); ++l)
    if ((*counts)[l].size() == size_t(mine.experts))
      std::copy((*counts)[l].begin(), (*counts)[l].end(), mine.counts.begin() + int64_t(l) * mine.experts);
  // One step's counts between two exchanges (join_lockstep sends them); should there be older ones of the same shape,
  // the newer step takes them.
  if (!pending_loads_.empty() && pending_loads_.experts == mine.experts &&
      pending_loads_.counts.size() == mine.counts.size()) {
    pending_loads_.step = step;
    mine.add(pending_loads_);
  }
  pending_loads_ = std::move(mine);
}

void EngineCore::rebalance_experts_before(uint64_t step) {
  const std::optional<runtime::RebalanceDecision> d = expert_loads_->rebalance_before(step);
  if (!d) return;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    model_->rebalance_experts(d->placement);
  } catch (const std::exception& e) {
    // This rank's experts are no longer the group's placement, so no MoE result can be trusted: the group fails with
    // this message and stops at its next exchange (the rank's requests end with it). A failed move is fatal to the
    // group: on GPUs the other ranks may already wait in the move's collectives, which this rank never joins.
    const std::string message = "data-parallel rank " + std::to_string(rank_->rank) +
                                ": the EPLB rebalance before lockstep step " + std::to_string(step) +
                                " failed: " + e.what();
    std::fprintf(stderr, "[eplb] %s\n", message.c_str());
    rank_->lockstep->fail(message);
    return;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  step_wait_s_ += seconds;
  if (rank_->rank == 0)
    std::fprintf(stderr,
                 "[eplb] rebalance before lockstep step %llu: moe_lb %.4f -> %.4f expected, %zu expert slots moved, "
                 "%.3f s (rank 0)\n",
                 (unsigned long long)step, d->moe_lb_before, d->moe_lb_after, d->slots_moved, seconds);
}

EngineStats::Rank EngineCore::rank_stats() const {
  std::lock_guard<std::mutex> lk(stats_mutex_);
  EngineStats::Rank r = rank_stats_;
  r.prefill_tokens = stats_.prefill_tokens;
  r.decode_tokens = stats_.decode_tokens;
  return r;
}

std::string EngineCore::validate(const SamplingParams& p, const std::vector<int32_t>& prompt) const {
  const int64_t vocab = model_->config().vocab_size;
  auto num = [](double v) {
    std::ostringstream s;
    s << v;
    return s.str();
  };
  if (prompt.empty()) return "prompt_token_ids: the prompt is empty";
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab)
      return "prompt_token_ids[" + std::to_string(i) + "]: " + std::to_string(prompt[i]) +
             " is outside the vocabulary [0, " + std::to_string(vocab) + ")";
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    return "params.temperature: " + num(p.temperature) + " must be a finite number >= 0";
  if (!(p.top_p > 0 && p.top_p <= 1)) return "params.top_p: " + num(p.top_p) + " is outside (0, 1]";
  if (p.top_k < -1) return "params.top_k: " + std::to_string(p.top_k) + " must be -1, 0 (all) or positive";
  if (!(p.min_p >= 0 && p.min_p <= 1)) return "params.min_p: " + num(p.min_p) + " is outside [0, 1]";
  if (!(p.repetition_penalty > 0) || !std::isfinite(p.repetition_penalty))
    return "params.repetition_penalty: " + num(p.repetition_penalty) + " must be > 0";
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2))
    return "params.presence_penalty: " + num(p.presence_penalty) + " is outside [-2, 2]";
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2))
    return "params.frequency_penalty: " + num(p.frequency_penalty) + " is outside [-2, 2]";
  if (p.max_tokens < 1) return "params.max_tokens: " + std::to_string(p.max_tokens) + " must be >= 1";
  if (p.logprobs < -1 || p.logprobs > 20)
    return "params.logprobs: " + std::to_string(p.logprobs) + " is outside [-1, 20]";
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i)
    if (p.stop_token_ids[i] < 0 || p.stop_token_ids[i] >= vocab)
      return "params.stop_token_ids[" + std::to_string(i) + "]: " + std::to_string(p.stop_token_ids[i]) +
             " is outside the vocabulary [0, " + std::to_string(vocab) + ")";
  for (size_t i = 0; i < p.stop.size(); ++i)
    if (p.stop[i].empty()) return "params.stop[" + std::to_string(i) + "]: empty stop string";
  if (!p.stop.empty() && !tokenizer_)
    return "params.stop: stop strings need a tokenizer (EngineOptions.tokenizer)";
  const int64_t max_len = model_->config().max_position_embeddings;
  if (max_len > 0 && int64_t(prompt.size()) + p.max_tokens > max_len)
    return "params.max_tokens: prompt (" + std::to_string(prompt.size()) + " tokens) + max_tokens (" +
           std::to_string(p.max_tokens) + ") exceeds the model's maximum length (" + std::to_string(max_len) + ")";
  if (options_.max_model_len > 0 && int64_t(prompt.size()) + p.max_tokens > options_.max_model_len)
    return "params.max_tokens: prompt (" + std::to_string(prompt.size()) + " tokens) + max_tokens (" +
           std::to_string(p.max_tokens) + ") exceeds the engine's max_model_len (" +
           std::to_string(options_.max_model_len) + ")";
  uint64_t need = cost_.bytes_for(int64_t(prompt.size()) + p.max_tokens);
  if (need > options_.state_memory_bytes)
    return "params.max_tokens: prompt + max_tokens needs " + std::to_string(need) +
           " bytes of sequence state, more than the engine's state_memory_bytes (" +
           std::to_string(options_.state_memory_bytes) + ")";
  return {};
}

std::shared_ptr<const grammar::TokenizerInfo> EngineCore::grammar_vocab(bool dsml) const {
  std::lock_guard<std::mutex> lk(grammar_vocab_mutex_);
  auto& v = grammar_vocab_[dsml ? 1 : 0];
  if (!v) {
    std::vector<int32_t> text_added;
    if (dsml)
      for (size_t id = 0; id < tokenizer_->vocab_size(); ++id)
        if (tokenizer_->token_text(int32_t(id)).find("DSML") != std::string_view::npos) text_added.push_back(int32_t(id));
    v = grammar::TokenizerInfo::from_tokenizer(*tokenizer_, {model_->config().eos_token_id}, text_added);
  }
  return v;
}

std::unique_ptr<runtime::RequestGrammar> EngineCore::make_grammar(const SamplingParams& p, std::string& error) const {
  if (!tokenizer_) {
    error = "params.structured: structured output needs a tokenizer (EngineOptions.tokenizer)";
    return nullptr;
  }
  int32_t think_end = -1;
  if (p.structured.after_think) {
    think_end = tokenizer_->token_id("</think>");
    if (think_end < 0) {
      error = "params.structured.after_think: the tokenizer has no </think> token";
      return nullptr;
    }
  }
  try {
    grammar::Grammar g = grammar::compile_structured(p.structured);
    auto cg = grammar::compile_for(std::move(g), grammar_vocab(grammar::needs_dsml_tokens(p.structured)), false);
    return std::make_unique<runtime::RequestGrammar>(std::move(cg), think_end);
  } catch (const std::exception& e) {
    error = std::string("params.") + e.what();
    return nullptr;
  }
}

namespace {

// Hands an event to its stream: queued for the stream's reader, or given to its forward (a process group's request,
// StreamShared::forward). Nothing after the terminal event.
void deliver_event(StreamShared& s, Event event) {
  {
    std::lock_guard<std::mutex> lk(s.mutex);
    if (s.terminal_sent) return;  // never a second terminal event, nothing after it
    if (event.terminal()) s.terminal_sent = true;
    if (!s.forward) {
      s.events.push_back(std::move(event));
      s.cv.notify_all();
      return;
    }
  }
  s.forward(event);
}

}  // namespace

RequestStream EngineCore::submit(Request request, uint64_t id, std::function<void(const Event&)> forward) {
  auto shared = std::make_shared<StreamShared>();
  shared->forward = std::move(forward);
  shared->core = self_;
  shared->synchronous = !options_.threaded;
  shared->handle.id = id ? id : next_id_.fetch_add(1);

  std::vector<int32_t> prompt;
  std::string error;
  if (!request.prompt.empty() && !request.prompt_token_ids.empty()) {
    error = "prompt: give either prompt (text) or prompt_token_ids, not both";
  } else if (!request.prompt.empty()) {
    if (!tokenizer_) {
      error = "prompt: text prompts need a tokenizer (EngineOptions.tokenizer); give prompt_token_ids";
    } else {
      try {
        prompt = tokenizer_->encode(request.prompt, true);
      } catch (const std::exception& e) {
        error = std::string("prompt: ") + e.what();
      }
    }
  } else {
    prompt = std::move(request.prompt_token_ids);
  }
  if (error.empty()) error = validate(request.params, prompt);
  std::unique_ptr<runtime::RequestGrammar> grammar;
  if (error.empty() && request.params.structured.active() && grammar::structured_applies(request.params.structured))
    grammar = make_grammar(request.params, error);
  shared->prompt_token_ids = prompt;

  auto reject = [&](std::string message) {
    {
      std::lock_guard<std::mutex> lk(stats_mutex_);
      ++stats_.rejected;
    }
    Event e;
    e.kind = Event::Kind::Finish;
    e.request_id = shared->handle.id;
    e.reason = FinishReason::Rejected;
    e.message = std::move(message);
    deliver_event(*shared, std::move(e));
    return RequestStream(shared);
  };
  if (!error.empty()) return reject(error);

  auto seq = std::make_unique<Sequence>();
  seq->id = shared->handle.id;
  seq->params = request.params;
  seq->seed = request.params.seed ? *request.params.seed
                                  : runtime::philox4x64_10({seq->id, 0, 0, 0}, {options_.seed, 1})[0];
  seq->prompt = std::move(prompt);
  seq->penalties.set_prompt(seq->prompt);
  if (tokenizer_) seq->decoder.emplace(*tokenizer_);
  seq->channel = shared;

  std::lock_guard<std::mutex> lk(inbox_mutex_);
  // Overload: rejected here, before a slot or any state exists.
  if (int64_t(inbox_.submitted.size()) + waiting_.load() >= options_.max_waiting)
    return reject("overloaded: " + std::to_string(options_.max_waiting) +
                  " requests are already waiting (EngineOptions.max_waiting)");
  {
    std::lock_guard<std::mutex> sl(slot_mutex_);
    uint32_t slot;
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
    } else {
      slot = uint32_t(slot_generation_.size());
      slot_generation_.push_back(0);
      slot_busy_.push_back(0);
    }
    slot_busy_[slot] = 1;
    seq->slot = slot;
    shared->handle.slot = rank_ ? slot * uint32_t(rank_->ranks) + uint32_t(rank_->rank) : slot;
    shared->handle.generation = slot_generation_[slot];
  }
  seq->generation = shared->handle.generation;
  if (rank_) {
    seq->load_tokens = int64_t(seq->prompt.size());
    rank_->cached_tokens += seq->load_tokens;
    ++rank_->requests;
    std::lock_guard<std::mutex> sl(stats_mutex_);
    ++rank_stats_.requests;
  }
  if (grammar) inbox_.grammars.emplace_back(seq->id, std::move(grammar));
  inbox_.submitted.push_back(std::move(seq));
  inbox_cv_.notify_all();
  if (rank_) rank_->lockstep->notify_work();
  return RequestStream(shared);
}

uint32_t EngineCore::local_slot(const RequestHandle& h) const {
  if (!rank_ || h.slot == UINT32_MAX) return h.slot;
  if (h.slot % uint32_t(rank_->ranks) != uint32_t(rank_->rank)) return UINT32_MAX;
  return h.slot / uint32_t(rank_->ranks);
}

bool EngineCore::cancel(const RequestHandle& h) {
  const uint32_t slot = local_slot(h);
  {
    std::lock_guard<std::mutex> sl(slot_mutex_);
    if (slot >= slot_generation_.size() || !slot_busy_[slot] || slot_generation_[slot] != h.generation)
      return false;  // stale: the request ended, and the slot may already belong to another one
  }
  std::lock_guard<std::mutex> lk(inbox_mutex_);
  inbox_.cancels.push_back(h);
  inbox_cv_.notify_all();
  if (rank_) rank_->lockstep->notify_work();
  return true;
}

void EngineCore::release_slot(const Sequence& seq) {
  std::lock_guard<std::mutex> sl(slot_mutex_);
  ++slot_generation_[seq.slot];  // any handle still naming this occupant is stale from now on
  slot_busy_[seq.slot] = 0;
  free_slots_.push_back(seq.slot);
}

void EngineCore::drain_inbox() {
  Inbox in;
  {
    std::lock_guard<std::mutex> lk(inbox_mutex_);
    std::swap(in, inbox_);
  }
  for (auto& [id, g] : in.grammars) grammars_[id] = std::move(g);
  for (auto& seq : in.submitted) scheduler_->add(std::move(seq));
  for (const RequestHandle& h : in.cancels) {
    Sequence* seq = scheduler_->find(h.id);
    // The generation check again: between cancel() and now the request may have ended.
    if (seq && seq->slot == local_slot(h) && seq->generation == h.generation)
      finish(h.id, FinishReason::Cancelled, "cancelled by the caller");
  }
  waiting_.store(int64_t(scheduler_->waiting()));
}

void EngineCore::push_event(Sequence& seq, Event event) {
  event.request_id = seq.id;
  deliver_event(*seq.channel, std::move(event));
}

void EngineCore::finish(uint64_t id, FinishReason reason, std::string message) {
  grammars_.erase(id);
  std::unique_ptr<Sequence> seq = scheduler_->remove(id);
  if (!seq) return;
  if (rank_) {
    rank_->cached_tokens -= seq->load_tokens;
    --rank_->requests;
  }
  Event e;
  e.kind = Event::Kind::Finish;
  e.reason = reason;
  e.message = std::move(message);
  // Text held back for a possible stop string is real output when the request ends another way.
  if (reason != FinishReason::Stopped || seq->text_sent == seq->text.size()) {
    if (seq->decoder && reason != FinishReason::Stopped) seq->text += seq->decoder->flush();
    e.text_delta = seq->text.substr(std::min(seq->text_sent, seq->text.size()));
  }
  release_slot(*seq);
  push_event(*seq, std::move(e));
}

FinishReason EngineCore::accept_token(Sequence& seq, int32_t token, TokenLogprob logprob, std::optional<size_t> at) {
  const SamplingParams& p = seq.params;
  if (at)
    seq.output[*at] = token;
  else
    seq.output.push_back(token);
  // Tokens produced up to this one (a later placeholder of the asynchronous path is not produced yet).
  const int64_t produced = at ? int64_t(*at) + 1 : int64_t(seq.output.size());
  seq.penalties.add_output(token);
  if (rank_) {
    ++seq.load_tokens;
    ++rank_->cached_tokens;
  }
  Event e;
  e.token_ids = {token};
  if (p.logprobs >= 0) e.logprobs.push_back(std::move(logprob));

  FinishReason reason = FinishReason::None;
  if (!p.ignore_eos && token == model_->config().eos_token_id) {
    reason = FinishReason::Finished;
  } else if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end()) {
    reason = FinishReason::Stopped;
  } else if (seq.decoder) {
    seq.text += seq.decoder->push(token);
    // Stop strings: the earliest match at or after what was already sent ends the text there.
    size_t cut = std::string::npos;
    for (const std::string& s : p.stop) {
      size_t from = seq.text_sent;
      size_t at = seq.text.find(s, from);
      if (at != std::string::npos) cut = std::min(cut, at);
    }
    if (cut != std::string::npos) {
      seq.text.resize(cut);
      reason = FinishReason::Stopped;
      e.text_delta = seq.text.substr(seq.text_sent);
      seq.text_sent = seq.text.size();
    } else {
      // Hold back the longest tail that could still become a stop string.
      size_t hold = 0;
      const size_t unsent = seq.text.size() - seq.text_sent;
      for (const std::string& s : p.stop)
        for (size_t k = std::min(s.size() - 1, unsent); k > hold; --k)
          if (seq.text.compare(seq.text.size() - k, k, s, 0, k) == 0) {
            hold = k;
            break;
          }
      size_t upto = seq.text.size() - hold;
      e.text_delta = seq.text.substr(seq.text_sent, upto - seq.text_sent);
      seq.text_sent = upto;
    }
  }
  if (reason == FinishReason::None) {
    const int64_t max_len = model_->config().max_position_embeddings;
    if (produced >= p.max_tokens || (max_len > 0 && int64_t(seq.prompt.size()) + produced >= max_len))
      reason = FinishReason::Length;
  }
  push_event(seq, std::move(e));
  return reason;
}

void EngineCore::record_step(size_t chunks, uint64_t prefill, uint64_t decode, bool async) {
  // Only this thread writes the step counters: reading them unlocked here is safe.
  if (expert_loads_) record_expert_loads(rank_ ? rank_stats_.steps : stats_.steps + 1);
  std::lock_guard<std::mutex> sl(stats_mutex_);
  ++stats_.steps;
  stats_.async_steps += async;
  stats_.prefill_tokens += prefill;
  stats_.decode_tokens += decode;
  stats_.preemptions = scheduler_->preemptions();
  stats_.max_running = std::max<uint64_t>(stats_.max_running, chunks);
  stats_.state_bytes_in_use = scheduler_->bytes_in_use();
  stats_.state_bytes_peak = std::max(stats_.state_bytes_peak, stats_.state_bytes_in_use);
}

bool EngineCore::async_eligible(const Sequence& seq) const {
  const SamplingParams& p = seq.params;
  return (p.temperature == 0.0f || (!options_.batch_invariant && model_->samples_asynchronously())) &&
         p.repetition_penalty == 1.0f &&
         p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f && p.logprobs < 0 && grammars_.count(seq.id) == 0;
}

bool EngineCore::async_step_possible() {
  if (!options_.async_scheduling) return false;
  for (uint64_t id : scheduler_->all_ids()) {
    const Sequence* seq = scheduler_->find(id);
    if (seq && !async_eligible(*seq)) return false;
  }
  return true;
}

void EngineCore::resolve_inflight() {
  if (!inflight_) return;
  InFlight f = std::move(*inflight_);
  inflight_.reset();
  std::vector<int32_t> tokens;
  std::string failure;
  const auto wait0 = std::chrono::steady_clock::now();
  try {
    tokens = f.step->tokens();
  } catch (const std::exception& e) {
    failure = std::string("model forward failed: ") + e.what();
  }
  step_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - wait0).count();
  for (const InFlight::Placeholder& ph : f.placeholders) {
    Sequence* seq = scheduler_->find(ph.id);
    // Finished or cancelled since: its placeholder (and the row computed after it) is dropped with it.
    if (!seq || ph.output_index >= seq->output.size()) continue;
    if (!failure.empty()) {
      finish(ph.id, FinishReason::Error, failure);
      continue;
    }
    const int32_t token = tokens[ph.chunk];
    FinishReason reason;
    try {
      reason = accept_token(*seq, token, TokenLogprob{}, ph.output_index);
    } catch (const std::exception& e) {
      finish(ph.id, FinishReason::Error, std::string("detokenizing the output failed: ") + e.what());
      continue;
    }
    if (reason != FinishReason::None) finish(ph.id, reason);
  }
}

bool EngineCore::step_async(std::vector<ScheduledChunk>& plan) {
  // The chunks' tokens, with the placeholders of the step in flight passed through as -k - 1.
  std::vector<std::vector<int32_t>> tokens(plan.size());
  std::vector<BatchChunk> chunks;
  std::vector<ChunkSampling> sampling;
  std::vector<size_t> plan_of_chunk;
  for (size_t i = 0; i < plan.size(); ++i) {
    Sequence& seq = *plan[i].seq;
    try {
      if (!seq.state) seq.state = model_->new_sequence();
    } catch (const std::exception& e) {
      finish(seq.id, FinishReason::Error, std::string("model forward failed: ") + e.what());
      continue;
    }
    tokens[i] = chunk_tokens(plan[i]);
    chunks.push_back({seq.state.get(), tokens[i], plan[i].samples, nullptr});
    // The token sampled here takes position seq.length(), as in the synchronous step (its placeholder is not in
    // the output yet).
    sampling.push_back({seq.params.temperature, seq.params.top_k, seq.params.top_p, seq.params.min_p, seq.seed,
                        uint64_t(seq.length())});
    plan_of_chunk.push_back(i);
  }
  InFlight next;
  // A host model computes the whole step inside enqueue_sampled: that is model time, not the engine's own.
  const auto enqueue0 = std::chrono::steady_clock::now();
  try {
    next.step = model_->enqueue_sampled(chunks, sampling);
    if (!model_->device_time())
      step_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - enqueue0).count();
  } catch (const std::exception& e) {
    for (size_t i : plan_of_chunk) finish(plan[i].seq->id, FinishReason::Error, std::string("model forward failed: ") + e.what());
    resolve_inflight();
    return true;
  }
  uint64_t prefill = 0, decode = 0;
  for (size_t j = 0; j < plan_of_chunk.size(); ++j) {
    Sequence& seq = *plan[plan_of_chunk[j]].seq;
    const ScheduledChunk& c = plan[plan_of_chunk[j]];
    seq.computed += c.count;
    (c.count == 1 && seq.computed > int64_t(seq.prompt.size()) ? decode : prefill) += uint64_t(c.count);
    if (!c.samples) continue;
    next.placeholders.push_back({seq.id, seq.output.size(), j});
    seq.output.push_back(-int32_t(j) - 1);
    // The placeholder that completes max_tokens needs no row of its own: mark it computed so that the scheduler
    // does not feed it (the request ends when it resolves).
    if (int64_t(seq.output.size()) >= seq.params.max_tokens) seq.computed = seq.length();
  }
  // The previous step's tokens, read while this one runs.
  resolve_inflight();
  inflight_ = std::move(next);
  record_step(plan.size(), prefill, decode, true);
  return true;
}

void EngineCore::record_step_time(std::chrono::steady_clock::time_point start, uint64_t steps_before) {
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::optional<DeviceTime> device = model_->device_time();
  std::lock_guard<std::mutex> sl(stats_mutex_);
  if (stats_.steps == steps_before) return;
  stats_.host_seconds += std::max(0.0, total - step_wait_s_);
  stats_.model_wait_seconds += step_wait_s_;
  if (device) {
    stats_.device_busy_seconds = device->busy_s;
    stats_.device_idle_seconds = device->idle_s;
  }
}

bool EngineCore::step() {
  std::lock_guard<std::mutex> lk(step_mutex_);
  const auto start = std::chrono::steady_clock::now();
  step_wait_s_ = 0;
  uint64_t steps_before;
  {
    std::lock_guard<std::mutex> sl(stats_mutex_);
    steps_before = stats_.steps;
  }
  struct TimeStep {
    EngineCore& core;
    std::chrono::steady_clock::time_point start;
    uint64_t steps_before;
    ~TimeStep() { core.record_step_time(start, steps_before); }
  } time_step{*this, start, steps_before};
  // Data parallelism: the work epoch before the inbox is read (Lockstep::wait_for_work).
  const uint64_t epoch = rank_ ? rank_->lockstep->epoch() : 0;
  drain_inbox();
  const bool async = async_step_possible();
  // A synchronous step needs every token on the host: finish the step in flight first.
  if (!async) resolve_inflight();
  std::vector<ScheduledChunk> plan = scheduler_->schedule();
  waiting_.store(int64_t(scheduler_->waiting()));
  if (rank_ && !join_lockstep(plan, epoch)) return false;
  if (plan.empty()) {
    if (!inflight_) return false;
    resolve_inflight();
    return true;
  }
  if (async) return step_async(plan);

  // Grammar masks for the rows this step samples, computed on a helper thread while the model runs (the
  // GPU backend's seam: the host fills the masks of step t+1 while the device runs step t).
  std::vector<runtime::RequestGrammar*> constrained(plan.size(), nullptr);
  bool any_constrained = false;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (!plan[i].samples) continue;
    auto it = grammars_.find(plan[i].seq->id);
    if (it != grammars_.end() && it->second->constrained()) {
      constrained[i] = it->second.get();
      any_constrained = true;
    }
  }
  std::vector<std::string> mask_errors(plan.size());
  auto prepare_masks = [&] {
    for (size_t i = 0; i < plan.size(); ++i) {
      if (!constrained[i]) continue;
      try {
        constrained[i]->prepare();
      } catch (const std::exception& e) {
        mask_errors[i] = std::string("computing the grammar mask failed: ") + e.what();
      }
    }
  };
  std::shared_future<void> masks;
  if (any_constrained) masks = std::async(std::launch::async, prepare_masks).share();
  // A device backend asks for a chunk's mask once the step is enqueued and applies it on the device.
  std::vector<std::function<TokenMask()>> device_masks(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    if (!constrained[i]) continue;
    device_masks[i] = [&, i]() -> TokenMask {
      masks.wait();
      if (!mask_errors[i].empty()) return {nullptr, 0};
      return {constrained[i]->mask().data(), constrained[i]->mask_vocab()};
    };
  }

  std::vector<std::vector<float>> logits;
  std::vector<std::string> errors;
  const auto forward0 = std::chrono::steady_clock::now();
  executor_->execute(*model_, plan, device_masks, logits, errors);
  step_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - forward0).count();
  if (masks.valid()) masks.get();

  uint64_t prefill = 0, decode = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    Sequence& seq = *plan[i].seq;
    const uint64_t id = seq.id;
    if (!errors[i].empty() || !mask_errors[i].empty()) {
      finish(id, FinishReason::Error, errors[i].empty() ? mask_errors[i] : errors[i]);
      continue;
    }
    seq.computed += plan[i].count;
    (plan[i].count == 1 && seq.computed > int64_t(seq.prompt.size()) ? decode : prefill) += uint64_t(plan[i].count);
    if (!plan[i].samples) continue;
    // The token sampled here takes position seq.length(): the generator's counter (batch-independent).
    runtime::RequestGrammar* g = constrained[i];
    runtime::SampleResult r;
    try {
      r = runtime::sample(logits[i], seq.params, seq.penalties, seq.seed, uint64_t(seq.length()),
                          g ? g->mask().data() : nullptr, g ? g->mask_vocab() : 0);
    } catch (const std::exception& e) {
      finish(id, FinishReason::Error, std::string("sampling failed: ") + e.what());
      continue;
    }
    runtime::RequestGrammar* tracked = nullptr;
    if (auto it = grammars_.find(id); it != grammars_.end()) tracked = it->second.get();
    if (tracked && !tracked->accept(r.token)) {
      finish(id, FinishReason::Error, "internal: the grammar rejected the sampled token " + std::to_string(r.token));
      continue;
    }
    const bool grammar_done = tracked && tracked->terminated();
    FinishReason reason;
    try {
      reason = accept_token(seq, r.token, std::move(r.logprob));
    } catch (const std::exception& e) {  // e.g. a sampled id the tokenizer cannot decode
      finish(id, FinishReason::Error, std::string("detokenizing the output failed: ") + e.what());
      continue;
    }
    // The grammar took its stop token (EOS): the output is complete even with ignore_eos.
    if (reason == FinishReason::None && grammar_done) reason = FinishReason::Finished;
    if (reason != FinishReason::None) finish(id, reason);
  }
  record_step(plan.size(), prefill, decode, false);
  return true;
}

void EngineCore::drive_until_event(StreamShared& s) {
  for (;;) {
    {
      std::lock_guard<std::mutex> lk(s.mutex);
      if (!s.events.empty() || s.terminal_taken) return;
    }
    if (!step()) {
      std::lock_guard<std::mutex> lk(s.mutex);
      if (s.events.empty() && !s.terminal_taken) {
        // Cannot happen for an accepted request (each one ends with a terminal event); answer, not hang.
        Event e;
        e.kind = Event::Kind::Finish;
        e.request_id = s.handle.id;
        e.reason = FinishReason::Error;
        e.message = "internal: the engine is idle but the request has not ended";
        s.events.push_back(std::move(e));
        s.terminal_sent = true;
      }
      return;
    }
  }
}

bool EngineCore::join_lockstep(const std::vector<ScheduledChunk>& plan, uint64_t epoch) {
  int64_t rows = 0;
  for (const ScheduledChunk& c : plan) rows += c.count;
  runtime::StepExpertLoads loads;
  std::swap(loads, pending_loads_);  // empty unless this rank is a process with EPLB statistics
  agreement_ = rank_->lockstep->exchange(rank_->rank, int(rows), inflight_.has_value(), epoch, std::move(loads));
  // Ranks as processes: every process records the same sum under the same step (its copy of the group's window).
  if (!agreement_.loads.empty() && expert_loads_) {
    const runtime::StepExpertLoads& sum = agreement_.loads;
    std::vector<std::vector<int64_t>> table(sum.counts.size() / size_t(sum.experts));
    for (size_t l = 0; l < table.size(); ++l)
      table[l].assign(sum.counts.begin() + int64_t(l) * sum.experts, sum.counts.begin() + int64_t(l + 1) * sum.experts);
    expert_loads_->record(sum.step, table);
  }
  if (agreement_.stop) return false;
  if (agreement_.rows_per_rank == 0) return true;  // no rank steps its model
  uint64_t step;
  {
    std::lock_guard<std::mutex> sl(stats_mutex_);
    step = ++rank_stats_.steps;
    rank_stats_.empty_steps += plan.empty();
  }
  // Between the previous lockstep step and this one, on every rank (the weight moves are collectives).
  if (expert_loads_) rebalance_experts_before(step);
  model_->set_group_rows(agreement_.rows_per_rank);
  if (!plan.empty()) return true;  // the step's own forward follows (executor or enqueue_sampled)
  // No rows here, but a model with collectives needs every rank in every step.
  const auto join0 = std::chrono::steady_clock::now();
  try {
    std::vector<std::vector<float>> none;
    model_->forward_batch({}, none);
  } catch (const std::exception& e) {
    // No request of this rank to fail; the ranks with rows see the step's failure in their own forward.
    std::fprintf(stderr, "[engine] rank %d: joining a step without rows failed: %s\n", rank_->rank, e.what());
  }
  step_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - join0).count();
  // A model whose share of the group's pairs does not depend on its own rows (its experts' pairs of every rank's
  // rows) counts in a step without rows too: its counts belong to this lockstep step.
  if (expert_loads_) record_expert_loads(rank_stats_.steps);
  return true;
}

void EngineCore::rank_loop() {
  for (;;) {
    step();
    if (agreement_.stop) {
      // A failed group (a peer process died) steps no more: this rank's requests end now with the failure, so that
      // their callers learn why instead of waiting for the engine's shutdown.
      // So does every request that reaches this rank later (a submission racing the failure), until the engine goes.
      while (!agreement_.failure.empty()) {
        {
          std::lock_guard<std::mutex> lk(step_mutex_);
          drain_inbox();
          for (uint64_t id : scheduler_->all_ids())
            finish(id, FinishReason::Error, "the data-parallel group failed: " + agreement_.failure);
        }
        std::unique_lock<std::mutex> lk(inbox_mutex_);
        inbox_cv_.wait(lk, [&] { return stopping_.load() || !inbox_.submitted.empty() || !inbox_.cancels.empty(); });
        if (stopping_) break;
      }
      return;
    }
    if (!agreement_.busy) rank_->lockstep->wait_for_work(agreement_.work_epoch);
  }
}

void EngineCore::owner_loop() {
  bool busy = false;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(inbox_mutex_);
      inbox_cv_.wait(lk, [&] {
        return stopping_.load() || busy || !inbox_.submitted.empty() || !inbox_.cancels.empty();
      });
      if (stopping_) return;
    }
    busy = step();
  }
}

// ---------------------------------------------------------------------------------------------------------
// Engine

namespace {

NumericsOptions numerics_from_name(const std::string& name) {
  NumericsOptions n;
  if (name == "official") return n;
  if (name == "fp32") return {false, false, false};
  if (name == "fp32-cache-quant") return {true, false, false};
  throw Error("EngineOptions.numerics: unknown mode '" + name + "' (official, fp32, fp32-cache-quant)");
}

}  // namespace

std::unique_ptr<Engine> Engine::create(const EngineOptions& in) {
  EngineOptions o = in;
  if (o.device != "cpu") {
    // A device backend reserves its caches at load: max_num_seqs slots of max_model_len positions each. Admission
    // is then bounded by those (max_num_seqs, the length check in validate), not by the CPU state-byte budget.
    if (o.max_model_len == 0) o.max_model_len = 32768;
    if (o.state_memory_bytes == 0) o.state_memory_bytes = ~0ull >> 1;
  }
  if (o.state_memory_bytes == 0) o.state_memory_bytes = 1ull << 30;
  DI_CHECK(o.max_batch_tokens >= 1, "EngineOptions.max_batch_tokens: must be >= 1");
  DI_CHECK(o.max_num_seqs >= 1, "EngineOptions.max_num_seqs: must be >= 1");
  DI_CHECK(o.prefill_chunk >= 1 && o.prefill_chunk <= o.max_batch_tokens,
           "EngineOptions.prefill_chunk: must be in [1, max_batch_tokens]");
  DI_CHECK(o.max_waiting >= 1, "EngineOptions.max_waiting: must be >= 1");
  DI_CHECK(o.data_parallel >= 1,
           "EngineOptions.data_parallel: " + std::to_string(o.data_parallel) + " ranks; must be >= 1 (1 = one rank)");
  if (o.data_parallel > 1) {
    DI_CHECK(o.threaded, "EngineOptions.data_parallel: the data-parallel engine runs one thread per rank; the "
                         "synchronous mode (threaded = false) needs data_parallel = 1");
  }
  // On the CPU the ranks are model copies; a device backend builds the whole group at once (one GPU per rank, the
  // V4 GPU model with expert parallelism over NCCL: src/model/gpu/backend.cpp).
  runtime::GroupModelLoader group_loader;
  if (o.data_parallel > 1 && o.device != "cpu" && !o.process_group) {
    group_loader = runtime::data_parallel_backend(o.device);
    DI_CHECK(group_loader != nullptr,
             "EngineOptions.data_parallel: " + std::to_string(o.data_parallel) + " ranks on device '" + o.device +
                 "' is not supported yet in this build: data parallelism on the GPU needs NCCL (cmake/nccl.cmake) "
                 "and the CUDA backend");
  }
  // Batch-invariant chunks are never shortened, so a step must fit every decode plus one whole chunk.
  DI_CHECK(!o.batch_invariant || o.max_batch_tokens >= o.prefill_chunk + o.max_num_seqs - 1,
           "EngineOptions.max_batch_tokens: batch-invariant mode needs max_batch_tokens >= prefill_chunk + "
           "max_num_seqs - 1 (" + std::to_string(o.prefill_chunk + o.max_num_seqs - 1) + ")");
  ModelOptions mo;
  mo.numerics = numerics_from_name(o.numerics);
  mo.show_progress = o.show_progress;
  mo.device = o.device;
  mo.random_weights = o.random_weights;
  mo.batch_invariant = o.batch_invariant;
  // A GPU group builds its experts with the redundant slots EPLB plans with when its ranks are the expert-parallel
  // ones (else eplb_redundant_experts only shapes the statistics' hypothetical placement).
  if (o.data_parallel > 1 && o.expert_parallel == o.data_parallel) mo.eplb_redundant_experts = o.eplb_redundant_experts;
  mo.capacity.sequences = o.max_num_seqs;
  mo.capacity.max_context = o.max_model_len;
  mo.capacity.max_rows = o.max_batch_tokens;
  mo.prefill_replay = {o.prefill_truncation == PrefillTruncationMode::DecoderTail ? PrefillReplayOptions::Mode::DecoderTail : PrefillReplayOptions::Mode::Exact, o.prefill_keep_tokens};
  auto load = [&] {
    std::unique_ptr<Model> model = load_model(o.model, mo);
    if (o.prefill_truncation == PrefillTruncationMode::DecoderTail)
      DI_CHECK(o.prefill_keep_tokens >= model->config().sliding_window,
               "DEEPINFER_YOCO_PREFILL_KEEP_TOKENS / EngineOptions.prefill_keep_tokens: " +
                   std::to_string(o.prefill_keep_tokens) + " is shorter than the sliding window (" +
                   std::to_string(model->config().sliding_window) + ")");
    return model;
  };
  if (o.process_group) {
    // This process is one rank: connect the group first (fast, and a missing peer is reported before a long load),
    // then load this rank's model only (on a device: rank r's share of the experts, its communicator joining the
    // other processes' with the id rank 0 shares over the group's connections).
    const parallel::BootstrapConfig config = parallel::BootstrapConfig::from_env();
    DI_CHECK(config.world_size == o.data_parallel,
             "EngineOptions.process_group: data_parallel is " + std::to_string(o.data_parallel) + " but WORLD_SIZE is " +
                 std::to_string(config.world_size) + " (run `deepinfer launch --nproc N` with --data-parallel N)");
    runtime::RankModelLoader rank_loader;
    if (o.device != "cpu") {
      rank_loader = runtime::process_rank_backend(o.device);
      DI_CHECK(rank_loader != nullptr, "EngineOptions.process_group: ranks as processes on device '" + o.device +
                                           "' need NCCL (cmake/nccl.cmake) and a binary linked with deepinfer_gpu_dp");
    }
    // The exchange timeout covers a rank's model load at the first exchange; a dead peer is seen at once anyway.
    auto group = std::make_shared<runtime::ProcessGroup>(config, /*exchange_timeout_s=*/600);
    std::unique_ptr<Model> model;
    if (rank_loader) {
      const char* local = std::getenv("LOCAL_RANK");  // `deepinfer launch` / torchrun: this process's GPU
      const int device = local && *local ? std::atoi(local) : config.rank;
      model = rank_loader(o.model, mo, config.rank, config.world_size, device,
                          [&](std::span<const uint8_t> blob) { return group->share_blob(blob); });
      DI_CHECK(model && (o.prefill_truncation != PrefillTruncationMode::DecoderTail ||
                         o.prefill_keep_tokens >= model->config().sliding_window),
               "EngineOptions.process_group: the rank's model is missing, or DEEPINFER_YOCO_PREFILL_KEEP_TOKENS / "
               "EngineOptions.prefill_keep_tokens is shorter than the sliding window");
    } else {
      model = load();
    }
    return runtime::make_process_group_engine(o, std::move(group), std::move(model));
  }
  if (o.data_parallel > 1 && group_loader) {
    // Every rank's model at once (their communicators join together), then handed to the ranks in order.
    std::vector<std::unique_ptr<Model>> models = group_loader(o.model, mo, o.data_parallel);
    DI_CHECK(int(models.size()) == o.data_parallel,
             "EngineOptions.data_parallel: the '" + o.device + "' backend built " + std::to_string(models.size()) +
                 " models for " + std::to_string(o.data_parallel) + " ranks");
    for (const auto& m : models)
      DI_CHECK(m && (o.prefill_truncation != PrefillTruncationMode::DecoderTail ||
                     o.prefill_keep_tokens >= m->config().sliding_window),
               "EngineOptions.data_parallel: a rank's model is missing, or DEEPINFER_YOCO_PREFILL_KEEP_TOKENS / "
               "EngineOptions.prefill_keep_tokens is shorter than the sliding window");
    return runtime::make_data_parallel_engine(o, [&](int r) { return std::move(models[size_t(r)]); });
  }
  if (o.data_parallel > 1) return runtime::make_data_parallel_engine(o, [&](int) { return load(); });
  std::unique_ptr<Model> model = load();
  std::unique_ptr<Tokenizer> tokenizer;
  if (!o.tokenizer.empty()) tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_file(o.tokenizer));
  auto core = std::make_shared<EngineCore>(o, std::move(model), std::move(tokenizer));
  core->set_self(core);
  return std::make_unique<Engine>(std::move(core));
}

Engine::Engine(std::shared_ptr<EngineCore> core) : core_(std::move(core)) {}
Engine::Engine(std::shared_ptr<EngineCore> core, std::shared_ptr<runtime::DataParallelGroup> group)
    : core_(std::move(core)), group_(std::move(group)) {}
// The group first: it stops every rank's loop together (rank 0's core, shared with core_, ends after it).
Engine::~Engine() { group_.reset(); }

RequestStream Engine::submit(Request request) {
  return group_ ? group_->submit(std::move(request)) : core_->submit(std::move(request));
}
bool Engine::cancel(const RequestHandle& handle) { return group_ ? group_->cancel(handle) : core_->cancel(handle); }
bool Engine::step() { return core_->options().threaded ? false : core_->step(); }
int Engine::group_rank() const { return group_ ? group_->process_rank() : 0; }
void Engine::serve() {
  if (group_) group_->serve();
}

std::vector<RequestOutput> Engine::generate(std::vector<Request> requests) {
  std::vector<RequestStream> streams;
  streams.reserve(requests.size());
  for (Request& r : requests) streams.push_back(submit(std::move(r)));
  std::vector<RequestOutput> out;
  out.reserve(streams.size());
  for (RequestStream& s : streams) out.push_back(s.collect());
  return out;
}

const EngineOptions& Engine::options() const { return core_->options(); }
int64_t Engine::vocab_size() const { return core_->model().config().vocab_size; }
int Engine::eos_token_id() const { return core_->model().config().eos_token_id; }
int64_t Engine::max_model_len() const {
  const int64_t model = core_->model().config().max_position_embeddings;
  const int64_t engine = core_->options().max_model_len;
  return engine > 0 && (model <= 0 || engine < model) ? engine : model;
}
bool Engine::has_tokenizer() const { return core_->tokenizer() != nullptr; }
uint64_t Engine::state_bytes_for(int64_t tokens) const { return core_->state_bytes_for(tokens); }
EngineStats Engine::stats() const { return group_ ? group_->stats() : core_->stats(); }

std::vector<int32_t> Engine::encode(const std::string& text, bool allow_special) const {
  DI_CHECK(core_->tokenizer(), "encode: the engine has no tokenizer (EngineOptions.tokenizer)");
  return core_->tokenizer()->encode(text, allow_special);
}

std::string Engine::decode(const std::vector<int32_t>& ids) const {
  DI_CHECK(core_->tokenizer(), "decode: the engine has no tokenizer (EngineOptions.tokenizer)");
  return core_->tokenizer()->decode(ids);
}

}  // namespace deepinfer
