// The forward-pass contract shared by the V4 and V4.1 CPU reference models (model-spec.md §3, §4).
// A Model owns immutable weights; a SequenceState owns everything one sequence caches between calls
// (window rings, compressed KV, index keys, compressor partial groups, Engram history: model-spec §6).
// forward() appends tokens to a sequence: one call with the whole prompt is a prefill, several calls
// are a chunked prefill, calls with one token are decode steps. All three give the same logits.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/error.h"
#include "model/config.h"
#include "parallel/eplb.h"

namespace deepinfer {

// Numerics switches of the reference path (model-spec.md §2, §8). The defaults are the model's own
// semantics (the official inference code); turning parts off reproduces a reference that omits them:
//   HF transformers deepseek_v4 (fp32):  quantize_cache = false, quantize_activations = false, bf16 = false
//   NeMo Automodel deepseek_v41 (fp32):  quantize_cache = true,  quantize_activations = false, bf16 = false
struct NumericsOptions {
  // Quantize-dequantize of what the caches hold: window KV (FP8), compressed KV (FP8 on V4, FP4 e4m3-scaled
  // block 16 on V4.1), index keys and queries (FP4 ue8m0 block 32; on V4 after the Hadamard rotation).
  bool quantize_cache = true;
  // W8A8: FP8 block quantization of the input of every FP8 / FP4 weight GEMM (model-spec §2).
  bool quantize_activations = true;
  // Round activations to bf16 where the official reference holds them in bf16 (after norms, sublayer outputs, ...;
  // in the MoE the expert GEMMs' outputs and W2's input, swiglu_expert.h).
  bool bf16_activations = true;
};

// V4.1 SWA bounded replay ("YOCO prefill", model-spec §9; DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE /
// DEEPINFER_YOCO_PREFILL_KEEP_TOKENS). In DecoderTail mode a forward call of n > keep_tokens tokens runs the
// layers after the candidate source only on its last keep_tokens rows (approximate: the tail's first rows see
// windows cut at the tail start). Logits rows before the tail are not computed and hold quiet NaN; the last
// row is always computed. Ignored by V4; a V4.1 config that breaks the preconditions (an Engram layer or a KV
// source after the candidate source) falls back to Exact with a one-line notice on stderr.
struct PrefillReplayOptions {
  enum class Mode { Exact, DecoderTail };
  Mode mode = Mode::Exact;
  int keep_tokens = 140;  // must be >= sliding_window in DecoderTail mode
};

// What a device backend reserves at load (the GPU keeps every sequence's caches in fixed device pools).
struct DeviceCapacity {
  int sequences = 64;      // resident at once
  int max_context = 32768; // positions per sequence
  int max_rows = 2048;     // token rows per step
};

struct ModelOptions {
  NumericsOptions numerics;
  PrefillReplayOptions prefill_replay;
  // Progress lines on stderr while loading ("[load] layer 3/43 ...").
  bool show_progress = true;
  // "cpu" (the reference forward) or a registered device backend ("cuda": src/model/gpu/backend.h).
  std::string device = "cpu";
  DeviceCapacity capacity;
  // Device backends only: random weights of the config's shapes instead of the checkpoint (benchmarks of the
  // full-width model, whose weights no test machine holds; the directory then needs only config.json).
  bool random_weights = false;
  // Device backends only: batch-invariant kernels (EngineOptions::batch_invariant, algorithms.md §4): a row's
  // logits are bitwise the same whatever else the step carries. The CPU reference is so by construction.
  bool batch_invariant = false;
  // Device backends' data-parallel loaders only (src/model/gpu/data_parallel_nccl.cc): redundant expert slots per
  // layer of the placement the ranks' experts are built in (parallel::load_unaware_placement). Engine::create sets
  // it to EngineOptions::eplb_redundant_experts when the expert-parallel ranks are the data-parallel ones.
  int eplb_redundant_experts = 0;
};

// Everything one sequence caches between forward calls; created by Model::new_sequence().
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  // Tokens already consumed (the position of the next token).
  virtual int64_t length() const = 0;
};

// One sequence's part of a batched step.
// Structured output's token mask for a chunk's last row: the bitmask words (bit v % 32 of word v / 32 allows
// token v) and the vocabulary they cover, or {nullptr, 0} for none.
using TokenMask = std::pair<const uint32_t*, size_t>;

struct BatchChunk {
  SequenceState* state = nullptr;
  std::span<const int32_t> tokens;
  bool want_logits = false;  // return the logits of the chunk's last row
  // Optional: a device backend calls it after the step is enqueued (so the host computes the mask while the
  // device runs) and applies the mask to the logits on the device before they are read back (issue 6). The CPU
  // reference ignores it; the host sampler applies the same mask in any case.
  std::function<TokenMask()> mask;
};

// How Model::enqueue_sampled chooses a chunk's token (sampling_params.h step 3; the asynchronous path has no
// penalties, logprobs or grammar): temperature == 0 is greedy, otherwise softmax(logits / temperature) truncated
// by top_k, top_p and min_p, drawn with runtime::uniform_at(seed, position).
struct ChunkSampling {
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  uint64_t position = 0;  // the sampled token's position in its sequence: the generator's counter
};

// The tokens of a step enqueued by Model::enqueue_sampled: one per chunk (-1 for a chunk that does not sample).
// tokens() waits for the step where the backend runs asynchronously.
class SampledStep {
 public:
  virtual ~SampledStep() = default;
  virtual std::vector<int32_t> tokens() = 0;
};

// The device's time across the steps a backend ran so far (issue 5): busy = from a step's first device operation
// to its last; idle = the gaps between one step's end and the next step's start (the device waiting for the host,
// including stretches where the engine had no work).
struct DeviceTime {
  double busy_s = 0;
  double idle_s = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // Throws deepinfer::Error when the backend has no room for another sequence.
  virtual std::unique_ptr<SequenceState> new_sequence() const = 0;
  // Consumes `tokens` at positions state.length() ... and returns fp32 logits [tokens.size(), vocab].
  virtual Tensor forward(SequenceState& state, std::span<const int32_t> tokens) const = 0;

  // Feeds every chunk (each chunk's sequence at most once) and sets last_logits[i] to the last row's logits of
  // the chunks that want them (others are left empty). A device backend runs them as one step; the default
  // feeds them one after another through forward(), so the CPU reference stays bitwise batch-independent.
  virtual void forward_batch(std::span<const BatchChunk> chunks, std::vector<std::vector<float>>& last_logits) const;
  // True when forward_batch is a real batched step (the engine then gives it the whole step at once).
  virtual bool runs_batches() const { return false; }

  // The asynchronous scheduler's step (algorithms.md §5): feeds the chunks like forward_batch and chooses each
  // wanting chunk's token (sampling[i] for chunks[i]) where the logits are, returning only the tokens. A chunk token
  // -k - 1 stands for the token chunk k of the previous enqueue_sampled call chose, so the next step can be
  // enqueued before the host has read this one's tokens (the GPU resolves it on the device, and samples with
  // cuda::sample_rows, whose tokens differ from the host sampler's on near-ties). The default runs forward_batch
  // at once, samples with the host sampler and resolves those tokens on the host (the CPU: no overlap, the
  // synchronous engine's tokens).
  virtual std::unique_ptr<SampledStep> enqueue_sampled(std::span<const BatchChunk> chunks,
                                                       std::span<const ChunkSampling> sampling) const;

  // Whether enqueue_sampled may carry chunks that sample with temperature > 0 (otherwise the engine runs steps
  // with such requests synchronously, through the host sampler). The default draws with the host sampler itself.
  virtual bool samples_asynchronously() const { return true; }

  // Attention data parallelism (docs/data_parallel.md): a model whose layers hold collectives over a group of ranks
  // (the expert-parallel MoE) steps on every rank together, each with the group's rows per rank (the largest row
  // count of the step over the ranks). The data-parallel engine calls this on every rank before each lockstep step,
  // then forward_batch or enqueue_sampled with the rank's own chunks, with none on a rank that has no rows in the
  // step (it still joins the collectives). One-rank engines never call it; a model without collectives ignores it.
  virtual void set_group_rows(int rows_per_rank) const { (void)rows_per_rank; }

  // The device timeline of the steps whose work has completed; nullopt where the model runs on the host.
  virtual std::optional<DeviceTime> device_time() const { return std::nullopt; }

  // EPLB statistics (docs/parallel.md "EPLB"): once counting is on, the model counts the routed (token, expert)
  // pairs of every MoE layer (the top-k pairs; hash-routed layers too) and take_expert_loads() returns the counts
  // since its last call [layer][logical expert] and restarts them. nullopt: the model does not count (the default,
  // the GPU backends for now) or counting is off. Off until set_expert_load_counting(true): a one-rank engine
  // without an EPLB window pays nothing. The CPU models implement it (model/expert_load_counter.h).
  virtual void set_expert_load_counting(bool on) const { (void)on; }
  virtual std::optional<std::vector<std::vector<int64_t>>> take_expert_loads() const { return std::nullopt; }

  // Expert parallelism (docs/parallel.md "EPLB", "Rebalancing with weight moves"): the placement of the routed experts
  // this model holds one rank's share of. nullopt (the default): the model holds every expert (the CPU reference
  // models, one GPU), so there is nothing to place or move.
  virtual std::optional<parallel::ExpertPlacement> expert_placement() const { return std::nullopt; }
  // Moves the experts to placement `to` (same shape as expert_placement(): ranks, experts, slots per rank, layers)
  // between two steps. A collective of the group: every rank calls it with the same `to` between the same two
  // lockstep steps (the data-parallel engine does, EngineOptions::eplb_rebalance_steps). Returns the experts this
  // rank received from other ranks. The default throws: a model without expert parallelism holds every expert, and
  // the engine never calls it on such a model (Engine::create rejects eplb_rebalance_steps for it).
  virtual size_t rebalance_experts(const parallel::ExpertPlacement& to) const {
    (void)to;
    throw Error("rebalance_experts: this model holds every expert (no expert parallelism): nothing to move");
  }

 private:
  mutable std::vector<int32_t> previous_sampled_;  // the default enqueue_sampled's tokens of its previous call
};

// Device backends register a loader under their name (the CUDA one: gpu::register_cuda_backend()); load_model
// dispatches on ModelOptions::device.
using DeviceModelLoader = std::function<std::unique_ptr<Model>(const std::string& dir, const ModelOptions& options)>;
void register_device_backend(const std::string& device, DeviceModelLoader loader);

// Reads config.json and the checkpoint in `dir` and builds the family's model. Throws deepinfer::Error
// with a message naming the file / tensor / field for any problem.
std::unique_ptr<Model> load_model(const std::string& dir, const ModelOptions& options = {});

}  // namespace deepinfer
