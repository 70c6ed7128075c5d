// Memory planner for one V4 / V4.1 model spread over several GPUs (issue 7, docs/parallel.md): where every
// tensor class lives, in the official formats' bytes (model-spec §5), what each rank reserves for a step, and how
// many tokens of cached state (model-spec §6) fit next to it.
//
// The layout is the one of docs/parallel.md: attention runs data-parallel (every rank holds the full attention,
// router, shared-expert, mHC and embedding weights), routed experts are sharded over an expert-parallel group of
// ep_size ranks with EPLB's redundant copies (algorithms.md §2), and the Engram tables sit in pinned host memory
// (one copy per machine) or, row-sharded, in device memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace deepinfer::parallel {

// How the per-sequence caches are stored.
enum class KvStorage {
  Bf16,    // what V4GpuModel stores today: bf16 window rows, compressed entries and index keys
  Packed,  // the official record formats of model-spec §6 (V4: 584 B FP8+bf16 rows, V4.1: MXFP8 / FP4)
};

struct ParallelLayout {
  int gpus = 1;
  int64_t gpu_memory_bytes = int64_t(140) << 30;  // H200: 143,771 MiB reported, ~140 GiB
  int ep_size = 0;                                 // ranks of one expert-parallel group; 0 = all GPUs
  int redundant_experts = 0;  // extra physical expert slots per MoE layer (EPLB), a multiple of ep_size
  bool engram_on_host = true;
  bool include_draft = true;  // the MTP (V4) / DSpark (V4.1) draft layers are resident
  bool engine_copies = true;  // the extra weight copies the GPU model keeps today (decode order, bf16 wo_a)
  KvStorage kv_storage = KvStorage::Bf16;
  int sequences_per_rank = 64;     // sequences whose caches a rank holds at once (attention DP)
  int max_rows_per_rank = 256;     // token rows of one step on a rank (sizes the step workspace)
  int64_t runtime_reserve_bytes = int64_t(4) << 30;  // CUDA context, cuBLAS, NCCL channels, allocator slack
};

enum class Placement {
  Replicated,     // a full copy on every rank
  ExpertSharded,  // routed experts: (experts + redundant) / ep_size slots per layer on each rank
  RowSharded,     // Engram tables in device memory: rows split evenly over all GPUs
  Host,           // pinned host memory, one copy per machine
};

struct TensorClassPlan {
  std::string name;
  std::string format;
  Placement placement = Placement::Replicated;
  int64_t model_bytes = 0;  // one copy of the model's tensors of this class (0 for the engine's own copies)
  int64_t rank_bytes = 0;   // device bytes on each rank
  int64_t host_bytes = 0;   // pinned host bytes per machine
};

struct KvPlan {
  int64_t sequence_bytes = 0;  // fixed per sequence: window rings + compressor rings of every layer
  double token_bytes = 0;      // growth per token: compressed KV + index keys (one entry per `ratio` tokens)
  int64_t tokens_per_rank = 0; // tokens that fit on a rank with sequences_per_rank sequences resident
};

struct MemoryPlan {
  std::string model_type;
  int layers = 0, draft_layers = 0;
  ParallelLayout layout;  // as given, ep_size resolved
  int64_t expert_bytes = 0;        // one routed expert (w1, w3, w2 with their scales; draft experts alike)
  int expert_slots_per_rank = 0;   // physical routed-expert slots of one layer on one rank
  std::vector<TensorClassPlan> classes;
  int64_t weight_bytes_per_rank = 0;
  int64_t host_bytes = 0;
  int64_t step_workspace_bytes = 0;      // per-step activations of max_rows_per_rank rows
  int64_t dispatch_buffer_bytes = 0;     // EP dispatch / combine buffers, sized for the worst case
  int64_t window_scratch_bytes = 0;      // per layer max_rows scratch rows behind the window rings
  int64_t kv_budget_bytes = 0;           // what is left for caches (negative when the weights do not fit)
  KvPlan kv;
  bool fits = false;
  std::string problem;  // why it does not fit (empty when it does)
};

// The bytes of one routed expert in the checkpoint format (MXFP4 codes + one e8m0 per 32 along K).
int64_t routed_expert_bytes(const ModelConfig& config);

// Throws deepinfer::Error for an impossible layout (ep_size not dividing the GPU count, redundant experts not a
// multiple of ep_size, non-positive sizes). A layout whose model does not fit is a plan with fits == false.
MemoryPlan plan_memory(const ModelConfig& config, const ParallelLayout& layout);

// The human-readable table `deepinfer plan` prints.
std::string format_memory_plan(const MemoryPlan& plan);

const char* placement_name(Placement p);

}  // namespace deepinfer::parallel
