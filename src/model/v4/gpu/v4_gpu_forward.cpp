#include "model/v4/gpu/v4_gpu_forward.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <filesystem>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/kernels.h"
#include "cuda/numerics_mode.h"
#include "model/v41/gpu/v41_gpu_model.h"

namespace deepinfer::gpu {

// A slot of the device pools; the slot returns to the model when the sequence is dropped.
class GpuSequence : public SequenceState {
 public:
  GpuSequence(const V4GpuForward* owner, int slot) : owner_(owner), slot_(slot) {}
  ~GpuSequence() override { owner_->release(slot_); }
  int64_t length() const override { return length_; }

  const V4GpuForward* owner_;
  int slot_;
  int64_t length_ = 0;
};

namespace {

// Makes a rank's device current for one call and restores the caller's (-1: one GPU, nothing changes).
class DeviceScope {
 public:
  explicit DeviceScope(int device) : device_(device) {
    if (device_ < 0) return;
    DI_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device_) DI_CUDA_CHECK(cudaSetDevice(device_));
  }
  ~DeviceScope() {
    if (device_ >= 0 && previous_ >= 0 && previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int device_;
  int previous_ = -1;
};

}  // namespace

GroupTeardown::~GroupTeardown() { destroy_all(); }

void GroupTeardown::release(std::unique_ptr<parallel::Collectives> comm, int device) {
  std::lock_guard<std::mutex> lk(mutex_);
  held_.emplace_back(std::move(comm), device);
  if (++arrived_ == ranks_) destroy_all();
}

void GroupTeardown::destroy_all() {
  std::vector<std::thread> threads;
  for (auto& [comm, device] : held_) {
    if (!comm) continue;
    threads.emplace_back([&comm = comm, device = device] {
      cudaSetDevice(device);
      comm.reset();
    });
  }
  for (auto& t : threads) t.join();
  held_.clear();
}

V4GpuForward::V4GpuForward(std::unique_ptr<GpuStepModel> model, std::unique_ptr<parallel::Collectives> group,
                           int device, std::shared_ptr<GroupTeardown> teardown)
    : V4GpuForward(std::move(model)) {
  group_ = std::move(group);
  teardown_ = std::move(teardown);
  device_ = device;
  DI_CHECK(group_ != nullptr && teardown_ != nullptr && model_->expert_ranks() == group_->world_size(),
           "v4 gpu model: a data-parallel rank needs a GPU step model built with its expert-parallel group");
}

int V4GpuForward::group_rows_tier(int rows_per_rank, int max_rows) {
  int t = rows_per_rank;
  if (t <= 8) {
    t = t <= 1 ? 1 : t <= 2 ? 2 : t <= 4 ? 4 : 8;
  } else if (t <= 256) {
    t = (t + 15) / 16 * 16;
  }
  return std::max(rows_per_rank, std::min(t, max_rows));
}

int V4GpuForward::group_step_rows(size_t own_rows) const {
  const int max_rows = model_->capacity().max_rows;
  // The same checks on every rank (M is the group's): a failure here fails the step on every rank alike.
  DI_CHECK(group_rows_ >= 1 && group_rows_ <= max_rows,
           "v4 gpu model: data-parallel step with rows per rank " + std::to_string(group_rows_) +
               " (set_group_rows before every step; at most max_rows = " + std::to_string(max_rows) + ")");
  DI_CHECK(int64_t(own_rows) <= int64_t(group_rows_),
           "v4 gpu model: a data-parallel rank planned " + std::to_string(own_rows) + " rows, more than the group's " +
               std::to_string(group_rows_) + " rows per rank");
  return group_rows_tier(group_rows_, max_rows);
}

float* V4GpuForward::step_rows(std::span<const V4GpuRow> rows, bool graph) const {
  if (!group_) return graph ? model_->step_graph(rows) : model_->step(rows);
  const int m = group_step_rows(rows.size());
  ++group_steps_joined_;
  return graph ? model_->step_graph(rows, m) : model_->step(rows, m);
}

void V4GpuForward::join_group_without_rows() const {
  if (!group_) return;
  ++group_steps_joined_;  // this step's part is settled, joined or not
  const int max_rows = model_->capacity().max_rows;
  if (group_rows_ < 1 || group_rows_ > max_rows) return;  // an M every rank rejects: no rank steps
  try {
    model_->step({}, group_rows_tier(group_rows_, max_rows));
  } catch (const std::exception&) {
    // The rank's own error is the one reported.
  }
}

std::optional<DeviceTime> V4GpuForward::device_time() const {
  DeviceScope scope(device_);
  return timeline_.totals();
}

void V4GpuForward::set_expert_load_counting(bool on) const {
  DeviceScope scope(device_);
  model_->set_expert_load_counting(on);
}

std::optional<std::vector<std::vector<int64_t>>> V4GpuForward::take_expert_loads() const {
  DeviceScope scope(device_);
  return model_->take_expert_loads();
}

namespace {

// The placement and the weight moves live in GpuStepModelBase<Weights> (not in the GpuStepModel interface): the
// base of the two GPU models this adapter wraps, V4GpuModel and V41GpuModel.
template <class Fn>
auto with_step_model_base(GpuStepModel& model, Fn fn) {
  if (auto* v4 = dynamic_cast<GpuStepModelBase<V4GpuWeights>*>(&model)) return fn(*v4);
  if (auto* v41 = dynamic_cast<GpuStepModelBase<V41GpuWeights>*>(&model)) return fn(*v41);
  throw Error("V4GpuForward: the GPU model is neither V4GpuModel nor V41GpuModel; it cannot place its experts");
}

}  // namespace

std::optional<parallel::ExpertPlacement> V4GpuForward::expert_placement() const {
  if (!group_) return std::nullopt;  // one GPU holds every expert
  return with_step_model_base(*model_, [](auto& m) { return std::optional<parallel::ExpertPlacement>(m.expert_placement()); });
}

size_t V4GpuForward::rebalance_experts(const parallel::ExpertPlacement& to) const {
  if (!group_) return Model::rebalance_experts(to);  // throws: one GPU holds every expert
  DeviceScope scope(device_);
  return with_step_model_base(*model_, [&](auto& m) { return m.rebalance_experts(to); });
}

V4GpuForward::V4GpuForward(std::unique_ptr<GpuStepModel> model) : model_(std::move(model)) {
  const char* sampling = std::getenv("DEEPINFER_GPU_ASYNC_SAMPLING");
  device_sampling_ = !(sampling && std::string(sampling) == "0");
  for (int s = model_->capacity().slots - 1; s >= 0; --s) free_slots_.push_back(s);
  sample_rows_dev_ = cuda::DeviceBuffer(sizeof(cuda::SampleRow) * size_t(model_->capacity().max_rows));
  sample_tokens_dev_ = cuda::DeviceBuffer(sizeof(int32_t) * size_t(model_->capacity().max_rows));
  for (int i = 0; i < 2; ++i) {
    DI_CUDA_CHECK(cudaMallocHost(&greedy_host_[i], sizeof(int32_t) * size_t(model_->capacity().max_rows)));
    DI_CUDA_CHECK(cudaMallocHost(&draws_host_[i], sizeof(cuda::SampleRow) * size_t(model_->capacity().max_rows)));
    DI_CUDA_CHECK(cudaEventCreateWithFlags(&greedy_ready_[i], cudaEventDisableTiming));
  }
}

V4GpuForward::~V4GpuForward() {
  // A rank's model is destroyed by whichever thread drops it: its device first, and everything on the device
  // released here, under it (the group after the model that uses it).
  int previous = -1;
  if (device_ >= 0 && cudaGetDevice(&previous) == cudaSuccess && previous != device_) cudaSetDevice(device_);
  if (model_) cudaStreamSynchronize(model_->stream());
  for (int i = 0; i < 2; ++i) {
    if (greedy_host_[i]) cudaFreeHost(greedy_host_[i]);
    if (draws_host_[i]) cudaFreeHost(draws_host_[i]);
    if (greedy_ready_[i]) cudaEventDestroy(greedy_ready_[i]);
  }
  if (device_ >= 0) {
    sample_rows_dev_ = cuda::DeviceBuffer();
    sample_tokens_dev_ = cuda::DeviceBuffer();
    mask_words_dev_ = cuda::DeviceBuffer();
    mask_rows_dev_ = cuda::DeviceBuffer();
    model_.reset();  // its graphs (which captured the group's collectives) first
    if (teardown_)
      teardown_->release(std::move(group_), device_);  // destroyed with the other ranks' (a collective)
    group_.reset();
    if (previous >= 0 && previous != device_) cudaSetDevice(previous);
  }
}

namespace {

// The tokens of one enqueued step: ready when its copy into the pinned buffer has run.
class GpuSampledStep : public SampledStep {
 public:
  GpuSampledStep(cudaEvent_t ready, const int32_t* host, std::vector<int32_t> last_rows)
      : ready_(ready), host_(host), last_rows_(std::move(last_rows)) {}
  std::vector<int32_t> tokens() override {
    if (ready_) DI_CUDA_CHECK(cudaEventSynchronize(ready_));
    std::vector<int32_t> t(last_rows_.size(), -1);
    for (size_t i = 0; i < t.size(); ++i)
      if (last_rows_[i] >= 0) t[i] = host_[last_rows_[i]];
    return t;
  }

 private:
  cudaEvent_t ready_;
  const int32_t* host_;
  std::vector<int32_t> last_rows_;
};

}  // namespace

std::unique_ptr<SampledStep> V4GpuForward::enqueue_sampled(std::span<const BatchChunk> chunks,
                                                          std::span<const ChunkSampling> sampling) const {
  // Rows whose tokens the host must know (V4.1's Engram hashing): the synchronous default, host sampler, its step
  // through forward_batch (in a group: run()'s one group step). A check of the default that fails before that step
  // (a token naming no sampled token) must still join the group's step, as below.
  if (!model_->resolves_tokens_on_device()) {
    const uint64_t joined = group_steps_joined_;
    try {
      return Model::enqueue_sampled(chunks, sampling);
    } catch (...) {
      if (group_steps_joined_ == joined) {
        DeviceScope scope(device_);
        join_group_without_rows();
      }
      throw;
    }
  }
  DeviceScope scope(device_);
  GpuStepModel& m = *model_;
  std::vector<V4GpuRow> rows;
  std::vector<int32_t> last_rows(chunks.size(), -1);
  std::vector<GpuSequence*> seqs;
  bool decode_only = true;
  // In a group, a check that fails on this rank alone still joins the group's step (without rows) before the
  // error goes to the engine: the other ranks are in its collectives.
  try {
    DI_CHECK(sampling.size() == chunks.size(), "v4 gpu model: " + std::to_string(sampling.size()) +
                                                   " sampling entries for " + std::to_string(chunks.size()) +
                                                   " chunks");
    for (size_t i = 0; i < chunks.size(); ++i) {
      auto* s = dynamic_cast<GpuSequence*>(chunks[i].state);
      DI_CHECK(s != nullptr && s->owner_ == this, "v4 gpu model: the sequence state was not created by this model");
      seqs.push_back(s);
      decode_only = decode_only && chunks[i].tokens.size() == 1;
      for (size_t t = 0; t < chunks[i].tokens.size(); ++t) {
        int32_t token = chunks[i].tokens[t];
        if (token < 0) {
          // Chunk k's token of the previous step = the sampled value of that chunk's last row there.
          const size_t k = size_t(-int64_t(token) - 1);
          DI_CHECK(k < previous_rows_.size() && previous_rows_[k] >= 0,
                   "v4 gpu model: token " + std::to_string(token) + " names no sampled token of the previous step");
          token = -previous_rows_[k] - 1;
        }
        rows.push_back({s->slot_, token, int32_t(s->length_ + int64_t(t))});
      }
      if (chunks[i].want_logits && !chunks[i].tokens.empty()) last_rows[i] = int32_t(rows.size()) - 1;
    }
    DI_CHECK(int(rows.size()) <= m.capacity().max_rows,
             "v4 gpu model: an asynchronous step takes at most max_rows = " + std::to_string(m.capacity().max_rows) +
                 " rows (EngineOptions.max_batch_tokens), got " + std::to_string(rows.size()));
    if (group_) group_step_rows(rows.size());  // checked before any sequence moves on
  } catch (...) {
    join_group_without_rows();
    throw;
  }
  for (size_t i = 0; i < chunks.size(); ++i) seqs[i]->length_ += int64_t(chunks[i].tokens.size());
  if (rows.empty()) {
    // A data-parallel rank without rows still joins the group's step (its MoE collectives), eagerly.
    if (group_) step_rows(rows, false);
    return std::make_unique<GpuSampledStep>(nullptr, nullptr, std::move(last_rows));
  }
  // DEEPINFER_GPU_GRAPHS=0 keeps decode steps eager (debugging: graph replay must give the same tokens).
  static const bool graphs = [] {
    const char* v = std::getenv("DEEPINFER_GPU_GRAPHS");
    return !(v && std::string(v) == "0");
  }();
  timeline_.begin(m.stream());
  float* logits = step_rows(rows, decode_only && graphs);
  // Seeded rows: drawn on the device, then made their row's arg-max so that sample_greedy writes every chunk's
  // token where the next step resolves it (the logits of those rows are not read back on this path).
  std::vector<cuda::SampleRow> draws;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkSampling& p = sampling[i];
    if (last_rows[i] < 0 || p.temperature == 0.0f) continue;
    draws.push_back({last_rows[i], p.temperature, p.top_k, p.top_p, p.min_p, p.seed, p.position});
  }
  const int b = greedy_next_;
  greedy_next_ ^= 1;
  if (!draws.empty()) {
    // The pinned parameter buffer b was last copied from by the step that recorded greedy_ready_[b] (two calls
    // ago, normally long done): wait for it before overwriting it. A pinned source keeps the copy asynchronous.
    DI_CUDA_CHECK(cudaEventSynchronize(greedy_ready_[b]));
    std::copy(draws.begin(), draws.end(), draws_host_[b]);
    DI_CUDA_CHECK(cudaMemcpyAsync(sample_rows_dev_.get(), draws_host_[b], sizeof(cuda::SampleRow) * draws.size(),
                                  cudaMemcpyHostToDevice, m.stream()));
    const int64_t V = m.config().vocab_size;
    cuda::sample_rows(logits, V, sample_rows_dev_.as<cuda::SampleRow>(), int(draws.size()),
                      sample_tokens_dev_.as<int32_t>(), m.stream());
    cuda::mark_sampled_tokens(logits, V, sample_rows_dev_.as<cuda::SampleRow>(), sample_tokens_dev_.as<int32_t>(),
                              int(draws.size()), m.stream());
  }
  const int32_t* sampled = m.sample_greedy(int(rows.size()));
  DI_CUDA_CHECK(cudaMemcpyAsync(greedy_host_[b], sampled, sizeof(int32_t) * rows.size(), cudaMemcpyDeviceToHost,
                                m.stream()));
  DI_CUDA_CHECK(cudaEventRecord(greedy_ready_[b], m.stream()));
  timeline_.end(m.stream());
  previous_rows_ = last_rows;
  return std::make_unique<GpuSampledStep>(greedy_ready_[b], greedy_host_[b], std::move(last_rows));
}

std::unique_ptr<SequenceState> V4GpuForward::new_sequence() const {
  std::lock_guard<std::mutex> lk(slots_mutex_);
  DI_CHECK(!free_slots_.empty(), "v4 gpu model: all " + std::to_string(model_->capacity().slots) +
                                     " sequence slots are in use (raise max_num_seqs)");
  const int slot = free_slots_.back();
  free_slots_.pop_back();
  return std::make_unique<GpuSequence>(this, slot);
}

void V4GpuForward::release(int slot) const {
  std::lock_guard<std::mutex> lk(slots_mutex_);
  free_slots_.push_back(slot);
}

void V4GpuForward::run(std::span<const BatchChunk> chunks, bool all_rows, std::vector<std::vector<float>>& out) const {
  GpuStepModel& m = *model_;
  const int64_t V = m.config().vocab_size;
  const int max_rows = m.capacity().max_rows;
  out.assign(chunks.size(), {});
  DeviceScope scope(device_);
  std::vector<GpuSequence*> seqs;
  size_t total_rows = 0;
  for (const BatchChunk& c : chunks) total_rows += c.tokens.size();
  // A group step is exactly one model step on every rank: the rank's rows must fit the group's rows per rank
  // (the engine plans at most max_batch_tokens = max_rows rows); a rank without rows joins with none.
  try {
    if (group_) group_step_rows(total_rows);
    for (const BatchChunk& c : chunks) {
      auto* s = dynamic_cast<GpuSequence*>(c.state);
      DI_CHECK(s != nullptr && s->owner_ == this, "v4 gpu model: the sequence state was not created by this model");
      DI_CHECK(s->length_ + int64_t(c.tokens.size()) <= m.capacity().max_context,
               "v4 gpu model: the sequence would reach " + std::to_string(s->length_ + int64_t(c.tokens.size())) +
                   " positions, past max_model_len " + std::to_string(m.capacity().max_context));
      seqs.push_back(s);
    }
  } catch (...) {
    join_group_without_rows();  // the other ranks of a group are in this step's collectives
    throw;
  }
  if (group_ && total_rows == 0) {
    timeline_.begin(m.stream());
    step_rows({}, false);
    timeline_.end(m.stream());
    DI_CUDA_CHECK(cudaStreamSynchronize(m.stream()));
    return;
  }
  // Fill steps of up to max_rows rows, chunk after chunk; a chunk that does not fit continues in the next step.
  std::vector<int64_t> base(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) base[i] = seqs[i]->length_;
  std::vector<V4GpuRow> rows;
  std::vector<std::pair<size_t, int64_t>> origin;  // (chunk, token index in the chunk) of every row of the step
  size_t ci = 0;
  int64_t k = 0;
  timeline_.begin(m.stream());
  for (;;) {
    rows.clear();
    origin.clear();
    while (ci < chunks.size() && int(rows.size()) < max_rows) {
      if (k == int64_t(chunks[ci].tokens.size())) {
        ++ci;
        k = 0;
        continue;
      }
      rows.push_back({seqs[ci]->slot_, chunks[ci].tokens[size_t(k)], int32_t(base[ci] + k)});
      origin.push_back({ci, k});
      ++k;
    }
    if (rows.empty()) break;
    float* logits = step_rows(rows, false);
    for (const auto& [chunk, t] : origin) seqs[chunk]->length_ = base[chunk] + t + 1;
    apply_masks(chunks, origin, logits);
    // Bring back only the rows that are wanted: every row for forward(), else the last row of each chunk that
    // samples (a 2048-row prefill step would otherwise copy a gigabyte of logits for a handful of rows). The
    // destinations are sized first: no vector may move while a copy into it is in flight.
    std::vector<int64_t> wanted;
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto [chunk, t] = origin[r];
      if (all_rows || (t == int64_t(chunks[chunk].tokens.size()) - 1 && chunks[chunk].want_logits))
        wanted.push_back(int64_t(r));
    }
    std::vector<size_t> fill(chunks.size());
    for (size_t c = 0; c < chunks.size(); ++c) fill[c] = out[c].size();
    for (int64_t r : wanted) out[origin[size_t(r)].first].resize(out[origin[size_t(r)].first].size() + size_t(V));
    for (int64_t r : wanted) {
      const size_t chunk = origin[size_t(r)].first;
      DI_CUDA_CHECK(cudaMemcpyAsync(out[chunk].data() + fill[chunk], logits + r * V, sizeof(float) * size_t(V),
                                    cudaMemcpyDeviceToHost, m.stream()));
      fill[chunk] += size_t(V);
    }
    DI_CUDA_CHECK(cudaStreamSynchronize(m.stream()));
  }
  timeline_.end(m.stream());
}

void V4GpuForward::apply_masks(std::span<const BatchChunk> chunks,
                               const std::vector<std::pair<size_t, int64_t>>& origin, float* logits) const {
  const GpuStepModel& m = *model_;
  std::vector<int32_t> rows;
  std::vector<uint32_t> words;
  int64_t mask_words = 0, mask_vocab = -1;
  for (size_t r = 0; r < origin.size(); ++r) {
    const auto [chunk, t] = origin[r];
    const BatchChunk& c = chunks[chunk];
    if (!c.want_logits || !c.mask || t != int64_t(c.tokens.size()) - 1) continue;
    // Called now, with the step already running on the device: the host's mask work overlaps it.
    const TokenMask mask = c.mask();
    if (!mask.first) continue;
    const int64_t w = int64_t((mask.second + 31) / 32);
    DI_CHECK(mask_vocab < 0 || (int64_t(mask.second) == mask_vocab),
             "v4 gpu model: the grammar masks of one step cover different vocabularies");
    mask_vocab = int64_t(mask.second);
    mask_words = w;
    rows.push_back(int32_t(r));
    words.insert(words.end(), mask.first, mask.first + w);
  }
  if (rows.empty()) return;
  if (mask_words_dev_.bytes() < words.size() * sizeof(uint32_t))
    mask_words_dev_ = cuda::DeviceBuffer(words.size() * sizeof(uint32_t));
  if (mask_rows_dev_.bytes() < rows.size() * sizeof(int32_t))
    mask_rows_dev_ = cuda::DeviceBuffer(size_t(m.capacity().max_rows) * sizeof(int32_t));
  // Pageable sources: staged before the calls return, stream-ordered after the step.
  DI_CUDA_CHECK(cudaMemcpyAsync(mask_words_dev_.get(), words.data(), words.size() * sizeof(uint32_t),
                                cudaMemcpyHostToDevice, m.stream()));
  DI_CUDA_CHECK(cudaMemcpyAsync(mask_rows_dev_.get(), rows.data(), rows.size() * sizeof(int32_t),
                                cudaMemcpyHostToDevice, m.stream()));
  cuda::apply_token_bitmask(logits, m.config().vocab_size, mask_rows_dev_.as<int32_t>(),
                            int(rows.size()), mask_words_dev_.as<uint32_t>(), mask_words, mask_vocab, m.stream());
}

Tensor V4GpuForward::forward(SequenceState& state, std::span<const int32_t> tokens) const {
  const int64_t V = config().vocab_size;
  Tensor logits({int64_t(tokens.size()), V});
  if (tokens.empty()) return logits;
  BatchChunk chunk{&state, tokens, true, nullptr};
  std::vector<std::vector<float>> out;
  run(std::span<const BatchChunk>(&chunk, 1), true, out);
  std::copy(out[0].begin(), out[0].end(), logits.ptr());
  return logits;
}

void V4GpuForward::forward_batch(std::span<const BatchChunk> chunks, std::vector<std::vector<float>>& last_logits) const {
  run(chunks, false, last_logits);
}

StepCapacity gpu_load_capacity(const ModelOptions& options, const std::string& who) {
  const NumericsOptions& n = options.numerics;
  DI_CHECK(n.quantize_cache && n.quantize_activations && n.bf16_activations,
           who + ": the CUDA backend runs the official numerics only (numerics = official)");
  // Before the model is built: the kernels' workspace sizes (attention splits) depend on the mode.
  cuda::set_batch_invariant(options.batch_invariant);
  StepCapacity cap;
  cap.slots = options.capacity.sequences;
  cap.max_context = options.capacity.max_context;
  cap.max_rows = options.capacity.max_rows;
  return cap;
}

Checkpoint open_gpu_checkpoint(const std::string& dir, const ModelOptions& options) {
  LoadProgress progress;
  if (options.show_progress)
    progress = [](int done, int total, const std::string& file) {
      if (done < total) std::fprintf(stderr, "[load] shard %d/%d %s\n", done + 1, total, file.c_str());
    };
  return Checkpoint::open(dir, progress);
}

std::unique_ptr<Model> load_v4_gpu_model(const std::string& dir, const ModelOptions& options) {
  namespace fs = std::filesystem;
  ModelConfig config = load_model_config((fs::path(dir) / "config.json").string());
  DI_CHECK(options.prefill_replay.mode == PrefillReplayOptions::Mode::Exact || config.family != ModelFamily::V4,
           "v4 gpu model: bounded replay is a V4.1 feature");
  const StepCapacity cap = gpu_load_capacity(options, "v4 gpu model");
  std::unique_ptr<V4GpuWeights> weights = load_gpu_weights(
      dir, config, options, [](const ModelConfig& c, uint64_t seed) { return random_v4_gpu_weights(c, seed); },
      [](const ModelConfig& c, const Checkpoint& ck, bool progress) { return upload_v4_gpu_weights(c, ck, progress); });
  return std::make_unique<V4GpuForward>(std::make_unique<V4GpuModel>(config, std::move(weights), cap));
}

}  // namespace deepinfer::gpu
