// The engine: owns a model (and optionally a tokenizer), accepts requests from any thread and answers each
// with a stream of events. This header, request.h, sampling_params.h, events.h and errors.h are the whole
// public contract (DESIGN.md "A narrow public API"); the CLI and the Python bindings use nothing else.
//
// Threads: every model call happens on one execution owner. With `threaded` (the default) that is the
// engine's own thread and submit() / cancel() / streams may be used from any thread. Without it (the
// synchronous debugging mode) nothing runs in the background: step() runs one scheduler step on the calling
// thread, and a stream's next() drives steps itself until it has an event.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deepinfer/errors.h"
#include "deepinfer/events.h"
#include "deepinfer/request.h"
#include "deepinfer/sampling_params.h"

namespace deepinfer {

// V4.1 SWA bounded replay at prefill (algorithms.md §6, model-spec §9).
enum class PrefillTruncationMode {
  Exact,        // every decoder layer runs on every prompt row (the exact full prefill)
  DecoderTail,  // decoder layers run only on the last keep_tokens rows of a prefill (approximate)
};

struct EngineOptions {
  // Model directory (config.json + safetensors) and, optionally, a tokenizer.json for text prompts, text
  // deltas and stop strings.
  std::string model;
  std::string tokenizer;
  // "official" (the model's numerics), "fp32" (as HF deepseek_v4), "fp32-cache-quant" (as NeMo deepseek_v41).
  std::string numerics = "official";
  bool show_progress = false;
  // Where the model runs (DEEPINFER_DEVICE): "cpu" (the reference forward) or "cuda" (one GPU, official
  // numerics only; available when the binary was built with nvcc and links the CUDA backend).
  std::string device = "cpu";
  // Longest sequence (prompt + output) a request may reach; longer requests are rejected at submit. The GPU
  // reserves its caches for it (0 = 32768 there); on the CPU 0 means no limit beyond the state budget.
  int max_model_len = 0;
  // GPU benchmarks: random weights of config.json's shapes instead of the checkpoint (the directory needs only
  // config.json; tools/gpu/flash_config.py writes V4-Flash configs with as many layers as fit).
  bool random_weights = false;

  // Scheduler. Tokens fed to the model per step (decode tokens + prefill chunks), sequences per step, and
  // the largest prefill chunk of one request in one step.
  int max_batch_tokens = 2048;
  int max_num_seqs = 64;
  int prefill_chunk = 512;
  // Memory for per-sequence state (window rings, compressed KV, index keys, ...), in bytes. Admission
  // reserves a sequence's state before it runs; a decode step that cannot grow preempts the most recently
  // admitted sequence (its state is dropped and recomputed later). 0 = 1 GiB on the CPU, no byte limit on a
  // device backend (its caches are reserved at load for max_num_seqs x max_model_len).
  uint64_t state_memory_bytes = 0;
  // Requests waiting for admission; a submit beyond it is rejected ("overloaded") before any allocation.
  int max_waiting = 4096;

  // One execution owner thread (true) or the synchronous debugging mode (false, see above).
  bool threaded = true;
  // Asynchronous overlap of host scheduling with device execution (algorithms.md §5): while every running request
  // samples without penalties, logprobs or a grammar (greedy, or seeded temperature / top-k / top-p / min-p
  // sampling outside batch-invariant mode), step N + 1 is enqueued with its tokens chosen where the logits are
  // (Model::enqueue_sampled) before the host reads step N's tokens; other steps run synchronously. The GPU
  // overlaps (its sampler agrees with the host's except on near-ties); the CPU backend runs the same bookkeeping
  // with no overlap (same tokens).
  bool async_scheduling = true;
  // Batch-invariant mode (algorithms.md §4, DEEPINFER_BATCH_INVARIANT=1): a request's numerics do not
  // depend on what else runs. Besides the kernels' fixed reduction orders, the scheduler then cuts every
  // request's prefill into the same chunks (prefill_chunk) whatever the batch, instead of filling the
  // step's leftover token budget.
  bool batch_invariant = false;

  // SWA bounded replay (DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE, DEEPINFER_YOCO_PREFILL_KEEP_TOKENS).
  PrefillTruncationMode prefill_truncation = PrefillTruncationMode::Exact;
  int prefill_keep_tokens = 140;

  // Seed of the generators of requests that give no seed of their own.
  uint64_t seed = 0;

  // Attention data parallelism (docs/data_parallel.md): ranks, each with its own model copy, scheduler and state
  // pools, stepping in lockstep; a request runs on the rank admission assigns it. 1 = the one-rank engine. The CPU
  // runs the ranks as threads of this process (needs `threaded`); on the GPU rank r runs on device r with its share
  // of the experts and an NCCL group (a build with NCCL: deepinfer_gpu_dp, docs/data_parallel.md "On the GPU").
  // The per-rank limits (max_num_seqs, max_batch_tokens, state_memory_bytes, max_waiting) apply to each rank.
  int data_parallel = 1;
  // The ranks are processes (`deepinfer launch --nproc N`, docs/data_parallel.md "Ranks as processes"): this process
  // is rank RANK of WORLD_SIZE = data_parallel and holds only its own model; the processes meet at MASTER_ADDR:
  // MASTER_PORT. Rank 0 takes every request (submit) and forwards it to the owning process; the others serve().
  bool process_group = false;

  // EPLB statistics (docs/parallel.md "EPLB"): with expert_parallel > 1 and eplb_window_steps > 0 the engine counts
  // the routed (token, expert) pairs of every MoE layer over its last eplb_window_steps steps (models that report
  // them: the CPU models and the GPU models' device counters) and reports in EngineStats the moe_lb of
  // expert_parallel ranks, for the contiguous placement and for the EPLB placement with eplb_redundant_experts extra
  // slots per layer. With data_parallel = expert_parallel > 1 on GPUs the ranks also load those slots (the
  // load-unaware placement, parallel::load_unaware_placement). With one rank (the default) or a window of 0 nothing
  // is counted. n_routed_experts and n_routed_experts + eplb_redundant_experts must split evenly over
  // expert_parallel.
  int expert_parallel = 1;
  int eplb_window_steps = 128;
  int eplb_redundant_experts = 0;
  // EPLB rebalancing (docs/parallel.md "EPLB", "The engine's rebalancing"): every eplb_rebalance_steps lockstep steps
  // with rows (0 = off), the data-parallel group plans the EPLB placement of its window (the placement moe_lb_eplb
  // reports, eplb_redundant_experts extra slots, aligned to the current one so that only changed slots move) and
  // every rank's model moves its experts there (Model::rebalance_experts) between the same two lockstep steps. The
  // move is skipped when the new placement equals the current one or when it lowers the window's moe_lb by less than
  // eplb_rebalance_min_gain (relative: (before - after) / before). Needs data_parallel = expert_parallel > 1, a
  // window, and a model that places its experts over the ranks (the GPU models; the CPU reference holds every expert).
  int eplb_rebalance_steps = 0;
  double eplb_rebalance_min_gain = 0.02;

  // Applies the DEEPINFER_* environment variables on top of `base` (DESIGN.md principle 5). Throws
  // deepinfer::Error naming the variable when one has a value it does not accept.
  static EngineOptions from_env(EngineOptions base);
  static EngineOptions from_env() { return from_env(EngineOptions()); }
};

// The final answer to one request, folded from its events.
struct RequestOutput {
  uint64_t request_id = 0;
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<TokenLogprob> logprobs;
  FinishReason finish_reason = FinishReason::None;
  std::string message;  // for Rejected / Error
};

struct StreamShared;  // implementation detail (src/runtime/)

// The events of one request, in order. Safe to use from any one thread at a time.
class RequestStream {
 public:
  explicit RequestStream(std::shared_ptr<StreamShared> shared);
  ~RequestStream();
  RequestStream(RequestStream&&) noexcept;
  RequestStream& operator=(RequestStream&&) noexcept;

  const RequestHandle& handle() const;
  uint64_t id() const { return handle().id; }
  // Blocks until the next event; false once the terminal event has been returned.
  bool next(Event& event);
  // Like next(), but gives up after `timeout` (false also when nothing came in time; see done()).
  bool next_for(Event& event, std::chrono::milliseconds timeout);
  // True once the terminal event has been returned by next().
  bool done() const;
  // Requests cancellation (a no-op if the request already ended).
  void cancel();
  // Reads every remaining event and folds them.
  RequestOutput collect();

 private:
  std::shared_ptr<StreamShared> shared_;
};

struct EngineStats {
  uint64_t steps = 0;
  uint64_t async_steps = 0;     // steps enqueued before the previous step's tokens were read (algorithms.md §5)
  uint64_t prefill_tokens = 0;  // tokens fed as prefill (including recompute after preemption)
  uint64_t decode_tokens = 0;
  uint64_t preemptions = 0;
  uint64_t rejected = 0;
  uint64_t max_running = 0;  // most sequences in one step
  // Where the steps' time goes (algorithms.md §5): the engine thread's own work (scheduling, staging and launching,
  // sampling on the host) vs its time in the model (a host model's forward, a synchronous device forward, waiting
  // for the tokens of the step in flight); on a device backend also the device's busy time and its idle gaps
  // between steps (Model::device_time).
  double host_seconds = 0;
  double model_wait_seconds = 0;
  double device_busy_seconds = 0;
  double device_idle_seconds = 0;
  uint64_t state_bytes_in_use = 0;
  uint64_t state_bytes_peak = 0;

  // EPLB (EngineOptions::expert_parallel, eplb_window_steps): moe_lb = (sum over MoE layers of the slowest rank's
  // routed pairs) / (sum of the ranks' mean) over the window's steps, >= 1, for expert e on rank e / (experts /
  // ranks) and for the EPLB placement of the window's load with eplb_redundant_experts extra slots. 1 when nothing
  // is counted (one rank, window 0, a model that does not report its routing, an empty window).
  double moe_lb_contiguous = 1.0;
  double moe_lb_eplb = 1.0;
  uint64_t eplb_window_steps = 0;  // steps in the window now (<= EngineOptions::eplb_window_steps)
  uint64_t eplb_window_pairs = 0;  // routed pairs in the window, summed over layers
  // EPLB rebalancing (EngineOptions::eplb_rebalance_steps > 0): the window's moe_lb on the placement the group's models
  // hold now (before any rebalance: the placement they were loaded with), the rebalances so far and the expert slots
  // they rewrote (over all layers and ranks). 1 / 0 / 0 without rebalancing.
  double moe_lb_placed = 1.0;
  uint64_t eplb_rebalances = 0;
  uint64_t eplb_slots_moved = 0;

  // Data-parallel engines (EngineOptions::data_parallel > 1): one entry per rank; empty with one rank. The fields
  // above then sum the ranks', except steps (the group's lockstep steps), max_running and state_bytes_peak (the
  // largest rank's).
  struct Rank {
    uint64_t requests = 0;        // admitted to this rank
    uint64_t steps = 0;           // lockstep steps it took part in (always the group's: every rank joins every step)
    uint64_t empty_steps = 0;     // of those, the ones it joined without rows of its own
    uint64_t prefill_tokens = 0;
    uint64_t decode_tokens = 0;
  };
  std::vector<Rank> ranks;
};

class EngineCore;  // implementation (src/runtime/engine_core.h)
namespace runtime {
class DataParallelGroup;  // implementation (src/runtime/data_parallel.h)
}

class Engine {
 public:
  // Loads the model (and tokenizer). Throws deepinfer::Error for a bad directory, file or option.
  static std::unique_ptr<Engine> create(const EngineOptions& options);
  ~Engine();

  // Accepts a request from any thread. Never throws for a bad request: the stream then holds one Rejected
  // event naming the bad field.
  RequestStream submit(Request request);
  // Cancels the request named by `handle`; false when it is stale (the request already ended or its slot
  // now belongs to another request) or was rejected.
  bool cancel(const RequestHandle& handle);

  // Submits all, waits for all (drives the steps itself in synchronous mode); outputs in input order.
  std::vector<RequestOutput> generate(std::vector<Request> requests);

  // Synchronous mode only: one scheduler step on the calling thread; false when there was nothing to do.
  bool step();

  // EngineOptions::process_group: this process's rank (0 takes the requests); 0 otherwise.
  int group_rank() const;
  // EngineOptions::process_group: a rank > 0 serves until rank 0 ends the group; rank 0 ends it (after its requests
  // are done). Throws deepinfer::Error naming the failure when the group failed (a peer process died, a timeout).
  // Returns at once without a process group.
  void serve();

  const EngineOptions& options() const;
  int64_t vocab_size() const;
  int eos_token_id() const;
  // The longest sequence a request may reach: EngineOptions::max_model_len when set, else the model's limit.
  int64_t max_model_len() const;
  bool has_tokenizer() const;
  // Tokenizer helpers (throw deepinfer::Error without a tokenizer).
  std::vector<int32_t> encode(const std::string& text, bool allow_special = true) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  // Chat prompt: `messages_json` is a JSON array of {"role": "system"|"user"|"assistant", "content": ...};
  // rendered with the model's V4 / V4.1 template (thinking or not) and encoded with template text as special
  // tokens and message text as plain BPE (serving.md §1.3). Throws deepinfer::Error naming the bad message.
  std::vector<int32_t> encode_chat(const std::string& messages_json, bool thinking = false) const;
  // Splits generated chat text into reasoning and answer (the output parser, serving.md §1.4).
  struct ChatText {
    std::string reasoning;
    std::string content;
  };
  ChatText parse_chat(const std::string& text, bool thinking = false) const;
  // State bytes a sequence of `tokens` tokens holds (the unit of the state memory budget).
  uint64_t state_bytes_for(int64_t tokens) const;
  EngineStats stats() const;

  explicit Engine(std::shared_ptr<EngineCore> core);
  // A data-parallel engine: `core` is rank 0 (the model's and tokenizer's queries), `group` takes the requests.
  Engine(std::shared_ptr<EngineCore> core, std::shared_ptr<runtime::DataParallelGroup> group);

 private:
  std::shared_ptr<EngineCore> core_;
  std::shared_ptr<runtime::DataParallelGroup> group_;  // null with one rank
};

}  // namespace deepinfer
