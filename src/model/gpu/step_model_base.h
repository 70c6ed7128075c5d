// What V4GpuModel and V41GpuModel hold alike (model/gpu/step_model.h's GpuStepModel over the machinery of
// model/gpu/step_rows.h): the config, weights and capacity, the streams, cuBLAS handle, state arena, step rows,
// graphs and phase timer, in that order (construction order: the streams before everything that enqueues on them,
// destruction the reverse); each layer's caches (LayerCaches) and the per-row activations of a step (StepScratch);
// and a step of an expert-parallel group (docs/parallel.md "Expert parallelism: the exact gathered version"): the
// group, the step's rows per rank M, every rank's rows and tokens, the MoE sublayer as the group's collective, the
// graphs per (M, own rows); and the EPLB statistics (a device counter of the routed pairs per (layer, expert), while
// counting is on). The models add their own layer state and buffers by deriving from these.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/env_switch.h"
#include "core/error.h"
#include "cuda/blas.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/kernels.h"
#include "cuda/numerics_mode.h"
#include "cuda/random_fill.h"
#include "layers/moe/expert_counts.h"
#include "layers/moe/moe_gpu.h"
#include "layers/quant/fp8_gemm.h"
#include "model/config.h"
#include "model/gpu/device_weights.h"
#include "model/gpu/step_model.h"
#include "model/gpu/step_rows.h"
#include "parallel/collectives.h"
#include "parallel/context_split.h"
#include "parallel/eplb.h"
#include "parallel/expert_moves.h"
#include "parallel/expert_shard.h"

namespace deepinfer::gpu {

// Where a CSA / CSA2 layer's indexer query (its wq_b, weights_proj and the query finish: ~16 us of three latency-bound
// launches at batch 1) runs in a step. It reads only the query side (q_norm's FP8 rows) and u, and only the select
// reads its output, so the models may enqueue it anywhere between those (same kernels, same inputs: the same bits):
//  - First (the default since session 19): on the main stream right after q_norm, with the attention's wq_b and its
//    query norm / RoPE on the query branch (StepStreams::Branch::Query), joined before the attention core: the select
//    starts once the indexer's query and the compressed keys exist, and wq_b's weight stream runs beside the
//    latency-bound select. Run 111 (with the compressor branch): 16 V4-Flash layers at batch 1 2.700 / 2.721 ->
//    2.674 / 2.687 ms (-0.7 %), 10 V4.1-Flash layers 2.313 / 2.293 -> 2.288 / 2.295.
//  - BeforeJoin: on the main stream after the attention's query, before the side branch's join (session 11, run 71:
//    batch 1 -2.9 % against after the join, the form before it).
// Session 19 also measured the query on a branch of its own beside wq_b (run 108: +0.5 % alone, run 111: between
// the two above): its first kernel waited ~8 us for SM room behind wq_b's blocks (run 110's timeline); removed.
// Session 38 measured the indexer's wq_b before the query branch forks (so that it has the GPU to itself, not sharing
// it with the attention's wq_b: V4.1's took 22.9 us beside it in run 210's timeline), with index_inputs_early() on:
// V4.1 batch 1 -0.3 to -0.5 %, batch 8 +0.3 to +0.6 %, V4 neutral (runs 211-213; its select's blocks then wait for
// SM room behind wq_b, and one block per SM or spare SMs on the branch grid are not faster, run 212); removed.
// DEEPINFER_INDEX_QUERY=first|before_join (read once; set_index_query_place for tests and benches: a CUDA graph keeps
// the placement it was captured with).
enum class IndexQueryPlace { BeforeJoin, First };
inline EnvSwitch<IndexQueryPlace>& index_query_place_switch() {
  static EnvSwitch<IndexQueryPlace> place{"DEEPINFER_INDEX_QUERY", [](const char* v) {
    if (!v || env_equals(v, "first")) return IndexQueryPlace::First;
    if (env_equals(v, "before_join")) return IndexQueryPlace::BeforeJoin;
    throw Error(std::string("DEEPINFER_INDEX_QUERY=") + v + ": expected first or before_join");
  }};
  return place;
}
inline IndexQueryPlace index_query_place() { return index_query_place_switch().get(); }
inline void set_index_query_place(IndexQueryPlace p) { index_query_place_switch().set(p); }

// Whether V4's indexer inputs that read only u are computed off the query's chain (session 38). Run 209's timelines:
// on a V4 CSA layer the select started 28 us after the site's end, waiting for the index compressor, which ran after
// the KV compressor on the compressor branch, and for the head weights' GEMV, which ran on the main stream after the
// indexer's wq_b. On (the default): the head weights (weights_proj . u) at the head of the side branch, with a mark
// that the query's finish waits for; with compressor_branch() the index compressor on a branch of its own
// (StepStreams::Branch::IndexKeys, its own workspace; the query's cuBLAS handle, idle then) beside the KV
// compressor, with a mark that the select waits for, and the side / compressor joins after the select (before the
// attention, which reads the window rows and the compressed KV). Same kernels, same inputs: the same bits. Same-call A/Bs, batch 1
// (bench/results/gpu_h200_run209-214_COMMAND.md): run 211, 3 repeats, 2.301-2.319 -> 2.240-2.245 ms (-2.7 %; the index
// compressor first on the compressor branch instead of on its own: 2.269-2.273); run 214 2.304-2.307 -> 2.241-2.243,
// batch 8 -1.7 %. V4.1 (the head weights early before its CSA2 query's finish; its compressor is one push) measured
// neutral at batch 1 and +0.3 % at batch 8 (runs 210, 214): not applied there. DEEPINFER_INDEX_INPUTS_EARLY=0 keeps
// them on the query's chain (read once; set_index_inputs_early for tests; graphs keep what they were captured with).
inline EnvSwitch<bool>& index_inputs_early_switch() {
  static EnvSwitch<bool> on{"DEEPINFER_INDEX_INPUTS_EARLY", [](const char* v) { return !v || !env_equals(v, "0"); }};
  return on;
}
inline bool index_inputs_early() { return index_inputs_early_switch().get(); }
inline void set_index_inputs_early(bool on) { index_inputs_early_switch().set(on); }

// The grid of the decode stream GEMVs on a branch: the attention's wq_b where it runs on the query branch
// (IndexQueryPlace::First) and the MoE's shared expert on the side branch (shared_expert_grid below). The decode stream
// kernel keeps up to two blocks on every SM for the whole weight stream, so the other streams' small kernels wait for
// SM room (run 111's trace: the compressor branch's add_ape_kernel started 8.4 us after its GEMV pair, behind wq_b).
// One block per SM, same-call A/Bs (bench/results/gpu_h200_run114_COMMAND.md, _run115_): wq_b alone, V4 batch 1
// 2.671 / 2.683 -> 2.644 / 2.636 ms (run 114; 16 spare SMs instead: 2.651 / 2.655); with the shared expert too (run
// 115) V4 2.661 / 2.658 -> 2.632 / 2.631, batch 8 6.94 -> 6.84, V4.1 2.276 / 2.266 -> 2.224 / 2.222; the shared
// expert's part at batch 1 / 8: 2.644 / 2.639 -> 2.633 / 2.617, 6.92 -> 6.84. Batch 64 / 256 and prefill flat.
// DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM=N: at most N blocks per SM (0: the kernel's own, 2; unset: the model's default,
// GpuStepModelBase::branch_blocks_per_sm_: V4 1 as above, V4.1 2 since session 28's sweep, run 157: batch 1 2.008 ->
// 1.976-1.979 ms, batch 8 -0.5 %);
// DEEPINFER_BRANCH_GEMV_SPARE_SMS=N: one block fewer on N SMs (0, the default; e.g. 8: V4 wq_b's 2048 tiles in 256
// blocks of 8, the most any block takes at 264). cuda/kernels.h StreamGrid; the same bits at every grid.
// Read once; set_branch_gemv_grid for tests and benches (a CUDA graph keeps the grid it was captured with).
inline int branch_gemv_parse(const char* name, const char* v, long most, int unset) {
  if (!v) return unset;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || n < 0 || n > most)
    throw Error(std::string(name) + "=" + v + ": expected 0.." + std::to_string(most));
  return int(n);
}
inline EnvSwitch<int>& branch_gemv_blocks_per_sm_switch() {
  static EnvSwitch<int> n{"DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM", [](const char* v) {
    return branch_gemv_parse("DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM", v, 2, -1);
  }};
  return n;
}
inline EnvSwitch<int>& branch_gemv_spare_sms_switch() {
  static EnvSwitch<int> n{"DEEPINFER_BRANCH_GEMV_SPARE_SMS", [](const char* v) {
    return branch_gemv_parse("DEEPINFER_BRANCH_GEMV_SPARE_SMS", v, 1024, 0);
  }};
  return n;
}
// DEEPINFER_BRANCH_GEMV_SPARE_SMS_MULTIROW=N: the spare SMs of launches of more than one row instead (unset: 32).
// Run 216 (zero code): 16 spare SMs at every row count cost V4 batch 1 +0.5 % but gained batch 8 -1.2 %. Run 221
// (3 repeats, one-row launches unchanged): V4 batch 8 6.093-6.105 ms -> 5.960-5.971 (16) / 5.924-5.964 (32), batch 1
// and 64 flat; V4.1 batch 8 5.223-5.226 -> 5.209-5.211 / 5.205-5.228.
inline EnvSwitch<int>& branch_gemv_spare_sms_multirow_switch() {
  static EnvSwitch<int> n{"DEEPINFER_BRANCH_GEMV_SPARE_SMS_MULTIROW", [](const char* v) {
    return branch_gemv_parse("DEEPINFER_BRANCH_GEMV_SPARE_SMS_MULTIROW", v, 1024, 32);
  }};
  return n;
}
// The branch grid of a model whose own count is `model_blocks_per_sm`, for a launch of `rows` rows: the
// environment's (or set_branch_gemv_grid's) counts where they are set.
inline cuda::StreamGrid branch_gemv_grid(int model_blocks_per_sm, int64_t rows) {
  const int n = branch_gemv_blocks_per_sm_switch().get(), multirow = branch_gemv_spare_sms_multirow_switch().get();
  return {n < 0 ? model_blocks_per_sm : n,
          rows > 1 && multirow >= 0 ? multirow : branch_gemv_spare_sms_switch().get()};
}
inline void set_branch_gemv_grid(const cuda::StreamGrid& g) {  // at every row count
  branch_gemv_blocks_per_sm_switch().set(std::max(0, g.blocks_per_sm));
  branch_gemv_spare_sms_switch().set(std::max(0, g.spare_sms));
  branch_gemv_spare_sms_multirow_switch().set(-1);
}
inline void set_branch_gemv_spare_sms_multirow(int n) { branch_gemv_spare_sms_multirow_switch().set(std::max(-1, n)); }
// Whether the MoE's shared expert on the side branch takes the same grid (its two GEMVs run beside the routing, the
// FFN's latency chain: run 114's trace has the routing at 18.6 us in the step against ~9-10 alone).
// DEEPINFER_BRANCH_GEMV_SHARED_EXPERT=0 keeps its own grid; default on (run 115: batch 1 -0.4 %, batch 8 -1.1 %).
inline EnvSwitch<bool>& branch_gemv_shared_expert_switch() {
  static EnvSwitch<bool> on{"DEEPINFER_BRANCH_GEMV_SHARED_EXPERT", [](const char* v) { return !env_equals(v, "0"); }};
  return on;
}
inline cuda::StreamGrid shared_expert_grid(int model_blocks_per_sm, int64_t rows) {
  return branch_gemv_shared_expert_switch().get() ? branch_gemv_grid(model_blocks_per_sm, rows) : cuda::StreamGrid{};
}
inline void set_branch_gemv_shared_expert(bool on) { branch_gemv_shared_expert_switch().set(on); }

// Whether a layer's compressors (V4: the KV compressor, then the indexer's on CSA layers; V4.1: the CSA2 pair in one
// push; each a GEMV pair, APE, entry and save: ~10-16 us of latency-bound launches at batch 1) run on their own
// stream (StepStreams::Branch::Compressor, with their own workspace and cuBLAS handle) instead of after the KV row on
// the side branch. The batch-1 timelines of session 19 (run 109) put the side branch (wkv, KV norm + RoPE, window
// rows, then the compressors) on the critical path of every compressed layer: the select or the visible-entry list
// waited for its last kernel. The compressors read only u and their own state; the main stream joins them with the
// side branch. Same kernels, same inputs: the same bits. On by default since session 19 (run 111: batch 1 V4
// 2.750 / 2.725 -> 2.703 / 2.698 ms, -1.7 %; V4.1 2.349 / 2.326 -> 2.300 / 2.307, -1.6 %; batch 8 -1.5 %, prefill
// +1.2 %); DEEPINFER_COMPRESSOR_BRANCH=0 keeps them on the side branch (read once; set_compressor_branch for tests;
// graphs keep what they were captured with).
inline EnvSwitch<bool>& compressor_branch_switch() {
  static EnvSwitch<bool> on{"DEEPINFER_COMPRESSOR_BRANCH", [](const char* v) { return !env_equals(v, "0"); }};
  return on;
}
inline bool compressor_branch() { return compressor_branch_switch().get(); }
inline void set_compressor_branch(bool on) { compressor_branch_switch().set(on); }

// What the CUDA kernels of both models are built for, checked before anything is allocated: the Flash attention
// block (cuda/kernels.h kAttnHeads heads of kAttnDim, the attention of `flash`: "V4-Flash"), mHC over hc_mult 4
// streams, FP8 weight blocks of `weight_block` (model-spec §5; 0: any) and FP8 GEMM inner dimensions that are
// multiples of 128. `who` names the model in the messages.
inline void check_kernel_shapes(const ModelConfig& c, const std::string& who, const std::string& flash,
                                int weight_block) {
  DI_CHECK(c.num_heads == cuda::kAttnHeads && c.head_dim == cuda::kAttnDim,
           who + ": the CUDA attention runs " + std::to_string(cuda::kAttnHeads) + " heads of " +
               std::to_string(cuda::kAttnDim) + " (" + flash + "); this config has " + std::to_string(c.num_heads) +
               " heads of " + std::to_string(c.head_dim) + " (use the CPU backend)");
  DI_CHECK(c.hc_mult == 4, who + ": the mHC kernels are built for hc_mult 4, config has " + std::to_string(c.hc_mult));
  DI_CHECK(weight_block == 0 || c.weight_block_size == weight_block,
           who + ": FP8 blocks of " + std::to_string(weight_block) + " expected (model-spec §5), config has " +
               std::to_string(c.weight_block_size));
  for (int64_t w : {int64_t(c.hidden_size), int64_t(c.q_lora_rank), int64_t(c.o_groups) * c.o_lora_rank})
    DI_CHECK(w % 128 == 0, who + ": the FP8 GEMMs need K % 128 == 0; hidden / q_lora / o_groups * o_lora = " +
                               std::to_string(w));
}

// A layer's caches in device memory (model-spec §6 "Cached state"): the window pool [slots * window + max_rows,
// head_dim] (a ring of `window` KV rows per slot, then one scratch row per step row: cuda/step_kernels.h); on layers
// that own compressed entries the paged compressed KV [pages * page_size, head_dim] and, where the layer indexes
// them, the paged index keys [pages * page_size, index_head_dim] of the same page table (page class ratio_class:
// StepRows::add_ratio, one table per compression ratio, because the layers of a ratio always hold the same number
// of entries for a sequence).
// window_format / entry_format: the rows of the window pool / of the compressed KV are bf16 [head_dim] (window, kv)
// or packed records of kv_row_bytes(format, head_dim) (window_records, kv_records; layers/attention/kv_record.h: V4's
// FP8 record in both pools, V4.1's MXFP8 window and FP4 entry records); the pointers of the other format stay null.
struct LayerCaches {
  bf16* window = nullptr;
  bf16* kv = nullptr;
  bf16* index_keys = nullptr;
  uint8_t* window_records = nullptr;
  uint8_t* kv_records = nullptr;
  cuda::KvFormat window_format = cuda::KvFormat::Bf16;
  cuda::KvFormat entry_format = cuda::KvFormat::Bf16;
  int ratio_class = -1;

  // The window pool / compressed KV as the kernels take them (row r at byte r * kv_row_bytes(format, head_dim)).
  void* window_rows() const {
    return window_format != cuda::KvFormat::Bf16 ? static_cast<void*>(window_records) : window;
  }
  void* kv_rows() const { return entry_format != cuda::KvFormat::Bf16 ? static_cast<void*>(kv_records) : kv; }
};

// The per-row buffers of a step that every V4 / V4.1 layer and the head use (model-spec §3, §4), sized for max_rows.
struct StepScratch {
  // The step's row arrays (StepRows, device memory).
  int32_t* tokens = nullptr;
  const int32_t *slots = nullptr, *positions = nullptr, *chunk_first = nullptr, *chunk_rows = nullptr;

  bf16* X = nullptr;           // [rows, hc, hidden]
  void* mix_ws = nullptr;      // the mHC site's partial sums and arrival counters (zeroed once)
  bf16* u = nullptr;           // [rows, hidden]
  uint8_t* uq = nullptr;       // [rows, hidden]
  float* us = nullptr;         // [rows, hidden / block]
  float* f32 = nullptr;        // [rows, f32 width]: GEMM outputs before their norm
  uint8_t* qrq = nullptr;      // [rows, q_lora]: q_norm(wq_a . u), FP8 for wq_b and the indexer
  float* qrs = nullptr;
  bf16* q = nullptr;           // [rows, heads * head_dim]
  bf16* kv = nullptr;          // [rows, head_dim]
  float* kv32 = nullptr;       // [rows, head_dim]: wkv's fp32 output (the side stream's own scratch)
  int32_t* window_list = nullptr;  // [rows, window]
  void* attn_ws = nullptr;
  bf16* o = nullptr;           // [rows, heads * head_dim]
  bf16* z = nullptr;           // [rows, o_groups * o_lora]
  uint8_t* zq = nullptr;
  float* zs = nullptr;
  bf16* y = nullptr;           // [rows, hidden]
  float* index_q = nullptr;    // [rows, index heads * index dim]: the index query's projection
  bf16* index_q_fp4 = nullptr;  // [rows, index heads * index dim]: the finished (FP4-valued) queries the select reads
  float* index_w = nullptr;    // [rows, index heads]
  void* module_ws = nullptr;   // the layer modules' workspace (used one at a time)
  uint32_t* moe_counters = nullptr;  // the MoE calls' kept counters (cuda::MoeGpu::counters), zero between calls
  void* compressor_ws = nullptr;  // the KV compressor's workspace on its own branch (compressor_branch())
  void* index_compressor_ws = nullptr;  // V4's index compressor's on its own branch (index_inputs_early())
  int32_t* sampled = nullptr;  // [rows]: sample_greedy's tokens
  bf16* h = nullptr;           // [rows, hidden]
  float* logits = nullptr;     // [rows, vocab]

  // Points the row arrays at `arrays` [StepPlanner::kRowArrays, max_rows] (StepRows's, or a compacted copy).
  void point_rows(int32_t* arrays, int max_rows) {
    const size_t R = size_t(max_rows);
    tokens = arrays + StepPlanner::kTokens * R;
    slots = arrays + StepPlanner::kSlots * R;
    positions = arrays + StepPlanner::kPositions * R;
    chunk_first = arrays + StepPlanner::kChunkFirst * R;
    chunk_rows = arrays + StepPlanner::kChunkRows * R;
  }
};

template <class Weights>
class GpuStepModelBase : public GpuStepModel {
 public:
  GpuStepModelBase(const GpuStepModelBase&) = delete;
  GpuStepModelBase& operator=(const GpuStepModelBase&) = delete;

  const ModelConfig& config() const override { return config_; }
  const StepCapacity& capacity() const override { return capacity_; }
  cudaStream_t stream() const override { return streams_.main(); }
  size_t weight_bytes() const { return weights_->arena.bytes(); }
  size_t state_bytes() const { return state_arena_.bytes(); }
  // The ranks of the expert-parallel group the weights are one share of (1: one GPU, every expert here).
  int expert_ranks() const { return expert_group_ ? expert_group_->world_size() : 1; }

  // Per-phase device time (benchmark breakdown): while on, step() records an event at every phase boundary
  // (not in graphs) and phase_times() sums the milliseconds per phase name over the steps since it was turned on.
  void set_phase_timing(bool on) { timing_.set(on); }
  std::vector<std::pair<std::string, double>> phase_times() { return timing_.times(stream()); }
  // Seconds the host spent blocked in step planning (waiting for a staging buffer the device still reads).
  double host_wait_seconds() const { return rows_.host_wait_seconds(); }

  // EPLB statistics (GpuStepModel; docs/parallel.md "EPLB"). While on, every MoE sublayer with rows of this rank adds
  // its own rows' routed expert ids (moe_routing_view: this rank's rows only, so under expert parallelism, where
  // every rank routes every rank's rows, the ranks' counts are disjoint shares of the group's pairs, as
  // docs/data_parallel.md requires) into counts [layers, experts] uint64 on the device: one more launch per MoE
  // layer, captured into the graphs of the counting set (step_graphs), so the graphs with counting off are the ones
  // without it. Turning it on (again) restarts the counts; turning it off keeps the buffer and launches nothing.
  void set_expert_load_counting(bool on) override {
    const size_t bytes = expert_count_entries() * sizeof(unsigned long long);
    const size_t rank_bytes = config_.layers.size() * sizeof(unsigned long long);
    if (on && !expert_counts_.get()) {
      DI_CHECK(weights_->layers.size() <= config_.layers.size() && config_.n_routed_experts > 0 &&
                   config_.n_routed_experts <= cuda::kMaxCountedExperts,
               who_ + ": expert-load counting over " + std::to_string(config_.n_routed_experts) + " experts and " +
                   std::to_string(weights_->layers.size()) + " MoE layers is not supported");
      expert_counts_ = cuda::DeviceBuffer(bytes);
      rank_pair_counts_ = cuda::DeviceBuffer(rank_bytes);
    }
    if (on) {
      DI_CUDA_CHECK(cudaMemsetAsync(expert_counts_.get(), 0, bytes, stream()));
      DI_CUDA_CHECK(cudaMemsetAsync(rank_pair_counts_.get(), 0, rank_bytes, stream()));
    }
    counting_ = on;
  }
  // The counts since the previous call (or since counting was turned on) [config.layers][n_routed_experts], as the
  // CPU models return them (model/expert_load_counter.h), restarted on the device; nullopt while off. A sync point:
  // waits for everything enqueued on stream() so far (the engine calls it between steps).
  std::optional<std::vector<std::vector<int64_t>>> take_expert_loads() override {
    if (!counting_) return std::nullopt;
    const size_t layers = config_.layers.size(), experts = size_t(config_.n_routed_experts);
    std::vector<int64_t> flat(layers * experts);
    const size_t bytes = flat.size() * sizeof(int64_t);
    DI_CUDA_CHECK(cudaMemcpyAsync(flat.data(), expert_counts_.get(), bytes, cudaMemcpyDeviceToHost, stream()));
    DI_CUDA_CHECK(cudaMemsetAsync(expert_counts_.get(), 0, bytes, stream()));
    DI_CUDA_CHECK(cudaStreamSynchronize(stream()));
    std::vector<std::vector<int64_t>> out(layers);
    for (size_t l = 0; l < layers; ++l)
      out[l].assign(flat.begin() + int64_t(l * experts), flat.begin() + int64_t((l + 1) * experts));
    return out;
  }
  bool expert_load_counting() const { return counting_; }
  // The routed pairs this rank's experts computed per MoE layer since the previous call (or since counting was turned
  // on) [config.layers], as the dispatch assigned them (redundant copies: parallel/replica_choice.h), restarted on the
  // device; nullopt while off or without a group. The live per-rank load: moe_lb = Σ_layers max over ranks / Σ mean
  // (parallel::moe_lb over the ranks' vectors). A sync point, as take_expert_loads.
  std::optional<std::vector<int64_t>> take_rank_pairs() {
    if (!counting_ || !expert_group_) return std::nullopt;
    std::vector<int64_t> out(config_.layers.size());
    const size_t bytes = out.size() * sizeof(int64_t);
    DI_CUDA_CHECK(cudaMemcpyAsync(out.data(), rank_pair_counts_.get(), bytes, cudaMemcpyDeviceToHost, stream()));
    DI_CUDA_CHECK(cudaMemsetAsync(rank_pair_counts_.get(), 0, bytes, stream()));
    DI_CUDA_CHECK(cudaStreamSynchronize(stream()));
    return out;
  }

  // Benchmarks (v4_ep_decode --skew): replaces the selection bias of every layer routed by score (MoeGpu::gate_bias:
  // it picks the top-k experts but does not weigh them, model-spec §3) with `bias` [n_routed_experts], so the routed
  // load can be skewed without touching any weight; the hash layers keep their tables. Returns the layers changed.
  // The bias is the model's own arena memory (const in MoeGpu for the kernels); synchronizes stream().
  int set_routing_bias(const std::vector<float>& bias) {
    DI_CHECK(bias.size() == size_t(config_.n_routed_experts),
             who_ + ": a routing bias of " + std::to_string(bias.size()) + " experts for " +
                 std::to_string(config_.n_routed_experts));
    int changed = 0;
    for (auto& L : weights_->layers) {
      if (!L.moe.gate_bias) continue;
      DI_CUDA_CHECK(cudaMemcpyAsync(const_cast<float*>(L.moe.gate_bias), bias.data(), bias.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, stream()));
      ++changed;
    }
    DI_CUDA_CHECK(cudaStreamSynchronize(stream()));
    return changed;
  }

  // Context parallelism (docs/parallel.md "Context parallelism"): the result of a model's prefill_context_parallel,
  // the last step's logits [rows, vocab] for every row of that step (the last row is the prompt's last token), on
  // every rank, valid until the next step.
  struct CpPrefill {
    float* logits = nullptr;
    int rows = 0;
  };
  // The alignment of a rank's first query row in a context-parallel step (16 rows: every per-row device array of a
  // share starts at least 64-byte aligned).
  static constexpr int kCpRowAlign = 16;
  // Forgets the sequence in `slot` (its pages are freed; the slot restarts at position 0).
  void drop_sequence(int slot) { rows_.release(slot); }

  // The placement the routed experts here are this rank's share of (empty on one GPU).
  const parallel::ExpertPlacement& expert_placement() const { return weights_->expert_placement; }

  // EPLB rebalancing between steps (docs/parallel.md "Rebalancing with weight moves", algorithms.md §2.2): every rank
  // of the group calls it with the same placement `to` (same shape as the current one; e.g. eplb_placement of the
  // group's summed load window with the current placement as `previous`, so that only changed slots move). The
  // minimal plan (rebalance_plan) is carried out layer by layer as one all-to-all-v of the moving experts' weights
  // (every MXFP4 blob a slot has: codes and scales, packed for decode or not) on stream(): each rank stages the
  // sources it sends and its copies inside the GPU, then the exchange, then writes the destinations, so every
  // source is read as it was; then the layer's replica table is rewritten in place. Every weight and table keeps its
  // address and size, so the captured step graphs stay valid (they read the new contents at their next replay) and
  // nothing is recaptured. Staging: two temporary device buffers of the most experts one layer sends / receives here.
  // Returns the number of experts this rank received from other ranks. Synchronizes stream().
  size_t rebalance_experts(const parallel::ExpertPlacement& to) {
    DI_CHECK(expert_group_, who_ + ": rebalancing experts needs an expert-parallel group");
    const parallel::ExpertPlacement& from = weights_->expert_placement;
    const int world = expert_ranks(), rank = expert_group_->rank();
    DI_CHECK(from.ranks == world && to.ranks == world,
             who_ + ": the placements are for " + std::to_string(from.ranks) + " / " + std::to_string(to.ranks) +
                 " ranks, the group has " + std::to_string(world));
    const std::vector<parallel::ExpertMove> moves = parallel::rebalance_plan(from, to);  // checks the shapes
    const size_t layers = weights_->layers.size();
    std::vector<parallel::RankExpertTransfers> transfers;
    size_t send_bytes = 0, recv_bytes = 0;
    for (size_t l = 0; l < layers; ++l) {
      transfers.push_back(parallel::rank_transfers(moves, int(l), rank, world, to.slots_per_rank));
      const size_t eb = expert_slot_bytes(weights_->layers[l].moe);
      send_bytes = std::max(send_bytes, transfers.back().sends() * eb);
      recv_bytes = std::max(recv_bytes, (transfers.back().receives() + transfers.back().local.size()) * eb);
    }
    cuda::DeviceBuffer send_buf(std::max<size_t>(send_bytes, 1)), recv_buf(std::max<size_t>(recv_bytes, 1));
    uint8_t* const send = send_buf.as<uint8_t>();
    uint8_t* const recv = recv_buf.as<uint8_t>();
    std::vector<parallel::ReplicaTable> tables;  // the host sources of the table uploads, alive until the sync
    size_t received = 0;
    for (size_t l = 0; l < layers; ++l) {
      cuda::MoeGpu& m = weights_->layers[l].moe;
      const parallel::RankExpertTransfers& t = transfers[l];
      const size_t eb = expert_slot_bytes(m);
      const size_t W = size_t(world);
      std::vector<size_t> send_counts(W), send_offsets(W), recv_counts(W), recv_offsets(W);
      size_t out = 0, in = 0;
      for (int r = 0; r < world; ++r) {
        send_offsets[size_t(r)] = out * eb;
        for (int32_t slot : t.send_slots[size_t(r)]) copy_expert_slot(m, slot, send + eb * out++, true);
        send_counts[size_t(r)] = t.send_slots[size_t(r)].size() * eb;
        recv_offsets[size_t(r)] = in * eb;
        recv_counts[size_t(r)] = t.recv_slots[size_t(r)].size() * eb;
        in += t.recv_slots[size_t(r)].size();
      }
      for (size_t i = 0; i < t.local.size(); ++i) copy_expert_slot(m, t.local[i].first, recv + eb * (in + i), true);
      expert_group_->all_to_all_v(send, send_counts.data(), send_offsets.data(), recv, recv_counts.data(),
                                  recv_offsets.data(), parallel::CommType::U8, stream());
      size_t at = 0;
      for (int r = 0; r < world; ++r)
        for (int32_t slot : t.recv_slots[size_t(r)]) copy_expert_slot(m, slot, recv + eb * at++, false);
      for (size_t i = 0; i < t.local.size(); ++i) copy_expert_slot(m, t.local[i].second, recv + eb * (in + i), false);
      received += in;
      // The new replica table into the layer's buffer (same capacity: replica_capacity of the same shape).
      tables.push_back(parallel::replica_table(to, int(l), m.replicas.max_replicas));
      const parallel::ReplicaTable& table = tables.back();
      DI_CUDA_CHECK(cudaMemcpyAsync(const_cast<int32_t*>(m.replicas.count), table.count.data(),
                                    table.count.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream()));
      DI_CUDA_CHECK(cudaMemcpyAsync(const_cast<int32_t*>(m.replicas.slots), table.slots.data(),
                                    table.slots.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream()));
    }
    DI_CUDA_CHECK(cudaStreamSynchronize(stream()));  // the staging buffers and host tables outlive their copies
    weights_->expert_placement = to;
    return received;
  }

 protected:
  // `who` names the model in error messages ("v4 gpu model"). `expert_group`: the expert-parallel group the weights
  // are one rank's share of (null: one GPU); its collectives run on stream(); it must outlive the model.
  GpuStepModelBase(ModelConfig config, std::unique_ptr<Weights> weights, const StepCapacity& capacity,
                   const std::string& who, parallel::Collectives* expert_group = nullptr)
      : config_(std::move(config)),
        weights_(std::move(weights)),
        capacity_(capacity),
        rows_(capacity_, config_.vocab_size, who),
        expert_group_(expert_group),
        who_(who) {}

  void check_layer_count() const {
    DI_CHECK(int(weights_->layers.size()) == config_.num_layers,
             who_ + ": weights hold " + std::to_string(weights_->layers.size()) + " layers, config " +
                 std::to_string(config_.num_layers));
  }

  // The window pool of a layer (LayerCaches), in the state arena, in `window_format`; `entry_format` is the format
  // allocate_paged gives the layer's compressed KV (V4: one format for both; V4.1 packed: MXFP8 window, FP4 entries).
  void allocate_window(LayerCaches& caches, cuda::KvFormat window_format, cuda::KvFormat entry_format) {
    caches.window_format = window_format;
    caches.entry_format = entry_format;
    if (window_format != cuda::KvFormat::Bf16)
      caches.window_records = state_arena_.alloc<uint8_t>(window_pool_bytes(caches));
    else
      caches.window = state_arena_.alloc<bf16>(window_pool_size());
  }
  void allocate_window(LayerCaches& caches, cuda::KvFormat format = cuda::KvFormat::Bf16) {
    allocate_window(caches, format, format);
  }
  // The paged pools of a layer that owns the compressed entries of `ratio`: its page class, the compressed KV (in
  // the entry format allocate_window chose) and, with `index_keys`, the index keys.
  void allocate_paged(LayerCaches& caches, int ratio, bool index_keys) {
    caches.ratio_class = rows_.add_ratio(ratio, state_arena_);
    if (caches.entry_format != cuda::KvFormat::Bf16)
      caches.kv_records = state_arena_.alloc<uint8_t>(paged_kv_bytes(caches));
    else
      caches.kv = state_arena_.alloc<bf16>(paged_entries(caches) * size_t(config_.head_dim));
    if (index_keys)
      caches.index_keys = state_arena_.alloc<bf16>(paged_entries(caches) * size_t(config_.index_head_dim));
  }
  // Zeroed caches: a slot whose length was only assumed (benchmark) reads finite values (an all-zero record
  // decodes to zeros, kv_record.h).
  void zero_caches(const LayerCaches& caches, cudaStream_t st) {
    DI_CUDA_CHECK(cudaMemsetAsync(caches.window_rows(), 0, window_pool_bytes(caches), st));
    if (!caches.kv_rows()) return;
    const size_t entries = paged_entries(caches);
    DI_CUDA_CHECK(cudaMemsetAsync(caches.kv_rows(), 0, paged_kv_bytes(caches), st));
    if (caches.index_keys)
      DI_CUDA_CHECK(
          cudaMemsetAsync(caches.index_keys, 0, sizeof(bf16) * entries * size_t(config_.index_head_dim), st));
  }
  // Benchmarks that assume a context (assume_length) instead of writing it: the index keys random (normal, unit
  // variance), distinct as a written context leaves them. Zeroed keys tie every indexer score, the decode select's
  // slowest case (bench/gpu/NOTES.md "Session 20"). The KV rows stay zero: the attention's time does not depend on them.
  void randomize_index_keys(const LayerCaches& caches, uint64_t seed, cudaStream_t st) {
    if (caches.index_keys)
      cuda::fill_random_bf16(caches.index_keys, paged_entries(caches) * size_t(config_.index_head_dim), 0.0f, 1.0f,
                             seed, st);
  }

  // The StepScratch buffers in the state arena, for capacity().max_rows rows; `f32_width`: the widest fp32 GEMM
  // output a row keeps before its norm. The mHC workspace is zeroed on stream().
  void allocate_scratch(StepScratch& s, int64_t f32_width) {
    const ModelConfig& c = config_;
    DeviceArena& a = state_arena_;
    const int R = capacity_.max_rows, W = c.sliding_window, hc = c.hc_mult, block = c.weight_block_size;
    const int64_t H = c.hidden_size, D = c.head_dim, HD = int64_t(c.num_heads) * D;
    s.X = a.alloc<bf16>(size_t(R) * hc * H);
    const size_t mix_ws_bytes = cuda::hc_site_mix_workspace_bytes(R, hc, H);
    s.mix_ws = a.alloc<uint8_t>(mix_ws_bytes);
    DI_CUDA_CHECK(cudaMemsetAsync(s.mix_ws, 0, mix_ws_bytes, stream()));
    s.u = a.alloc<bf16>(size_t(R) * H);
    s.uq = a.alloc<uint8_t>(size_t(R) * H);
    s.us = a.alloc<float>(size_t(R) * H / block);
    s.f32 = a.alloc<float>(size_t(R) * f32_width);
    s.qrq = a.alloc<uint8_t>(size_t(R) * c.q_lora_rank);
    s.qrs = a.alloc<float>(size_t(R) * c.q_lora_rank / block);
    s.q = a.alloc<bf16>(size_t(R) * HD);
    s.kv = a.alloc<bf16>(size_t(R) * D);
    s.kv32 = a.alloc<float>(size_t(R) * D);
    s.window_list = a.alloc<int32_t>(size_t(R) * W);
    s.o = a.alloc<bf16>(size_t(R) * HD);
    const int64_t Z = int64_t(c.o_groups) * c.o_lora_rank;
    s.z = a.alloc<bf16>(size_t(R) * Z);
    s.zq = a.alloc<uint8_t>(size_t(R) * Z);
    s.zs = a.alloc<float>(size_t(R) * Z / block);
    s.y = a.alloc<bf16>(size_t(R) * H);
    s.sampled = a.alloc<int32_t>(size_t(R));
    s.h = a.alloc<bf16>(size_t(R) * H);
    s.logits = a.alloc<float>(size_t(R) * c.vocab_size);
    size_t counter_words = 1;
    for (const auto& L : weights_->layers) counter_words = std::max(counter_words, cuda::moe_counter_words(L.moe));
    s.moe_counters = a.alloc<uint32_t>(counter_words);
    DI_CUDA_CHECK(cudaMemsetAsync(s.moe_counters, 0, sizeof(uint32_t) * counter_words, stream()));  // then kept zero
  }
  // The index query and weights of the indexer (StepScratch::index_q / index_q_fp4 / index_w).
  void allocate_index_scratch(StepScratch& s) {
    const size_t R = size_t(capacity_.max_rows);
    s.index_q = state_arena_.alloc<float>(R * config_.index_n_heads * config_.index_head_dim);
    s.index_q_fp4 = state_arena_.alloc<bf16>(R * config_.index_n_heads * config_.index_head_dim);
    s.index_w = state_arena_.alloc<float>(R * config_.index_n_heads);
  }

  // The arg-max token of each of the last step's `rows` rows into s.sampled (GpuStepModel::sample_greedy).
  const int32_t* greedy_tokens(const StepScratch& s, int rows) {
    DI_CHECK(rows > 0 && rows <= capacity_.max_rows, who_ + ": sample_greedy row count out of range");
    cuda::argmax_rows(s.logits, rows, config_.vocab_size, s.sampled, stream());
    return s.sampled;
  }

  void phase(const char* name) { timing_.mark(name, stream()); }  // closes the current phase (timing mode only)

  // The cuBLAS handle of the indexer's query: query_blas_, since it runs before the side branch's join, which holds
  // blas_ until then (a handle's workspace serves one stream at a time).
  cublasHandle_t index_query_blas() const { return query_blas_.get(); }
  // The query branch (StepStreams::Branch::Query): forked from the main stream's work so far, its stream returned;
  // IndexQueryPlace::First runs the attention's wq_b and query norm / RoPE there.
  cudaStream_t fork_query_branch() {
    streams_.fork(StepStreams::Branch::Query);
    return streams_.stream(StepStreams::Branch::Query);
  }
  void join_query_branch() { streams_.join(StepStreams::Branch::Query); }
  // Where a layer's compressors are enqueued (compressor_branch()): their stream, workspace and cuBLAS handle. On
  // the branch, forked here (after the attention site, which wrote u) and joined by join_compressor() before what
  // reads their output; else the side branch's, after its KV row.
  struct CompressorPlace {
    cudaStream_t stream;
    void* workspace;
    cublasHandle_t blas;
  };
  CompressorPlace begin_compressor(const StepScratch& s) {
    if (!compressor_branch()) return {streams_.stream(StepStreams::Branch::Side), s.module_ws, blas_.get()};
    streams_.fork(StepStreams::Branch::Compressor);
    return {streams_.stream(StepStreams::Branch::Compressor), s.compressor_ws, compressor_blas_.get()};
  }
  void join_compressor() {
    if (compressor_branch()) streams_.join(StepStreams::Branch::Compressor);
  }
  // V4's index compressor on its own branch (index_inputs_early()), forked here (after the attention site). Its
  // cuBLAS handle is the indexer query's: with the index inputs early the query's head weights take blas_ on the side
  // branch, so query_blas_ has no other user until the branch's join after the select.
  CompressorPlace begin_index_keys(const StepScratch& s) {
    streams_.fork(StepStreams::Branch::IndexKeys);
    return {streams_.stream(StepStreams::Branch::IndexKeys), s.index_compressor_ws, query_blas_.get()};
  }

  // ---- Expert parallelism (docs/parallel.md "Expert parallelism: the exact gathered version", layers/moe/moe_gpu.h
  // "Expert parallelism"). Every MoE layer is a collective of the group, so all ranks step together: each step names
  // the rows per rank M every rank pads to, and a rank without rows still steps (it joins every MoE layer with none).

  // Every layer's experts are one rank's share (MoeGpu::replicas) exactly when there is a group; `loaders` names
  // the model's weight loaders that take a placement (for the message).
  void check_expert_shards(const std::string& loaders) const {
    const int world = expert_ranks();
    DI_CHECK(world == 1 || (weights_->expert_placement.ranks == world &&
                            size_t(weights_->expert_placement.layers()) == weights_->layers.size()),
             who_ + ": the weights' expert placement is for " + std::to_string(weights_->expert_placement.ranks) +
                 " ranks, the group has " + std::to_string(world));
    for (const auto& L : weights_->layers)
      DI_CHECK((world > 1) == (L.moe.replicas.slots != nullptr),
               (world > 1 ? who_ + ": an expert-parallel group needs one rank's share of the experts (" + loaders +
                                " with a placement)"
                          : who_ + ": the weights hold one rank's share of the experts but there is no group"));
  }
  // The MoE workspace of the model's layers for max_rows rows per rank (with the group's gathered rows).
  size_t moe_workspace_bytes() const {
    size_t bytes = 0;
    for (const auto& L : weights_->layers)
      bytes = std::max(bytes, cuda::moe_workspace_bytes(capacity_.max_rows, L.moe, expert_ranks()));
    return bytes;
  }
  // The buffers of cuda::moe_share_rows in the state arena (with a group only).
  void allocate_group_rows() {
    if (!expert_group_) return;
    const size_t R = size_t(capacity_.max_rows), world = size_t(expert_ranks());
    group_staging_ = state_arena_.alloc<int32_t>(R + 1);
    group_rows_ = state_arena_.alloc<int32_t>(world);
    group_tokens_ = state_arena_.alloc<int32_t>(world * R);
  }
  // A step's row counts, before the model plans its rows: `rows` of this rank, `rows_per_rank` the group's M (every
  // rank the same; the plain step() passes capacity().max_rows). Sets rows_per_rank_ (M, or the rows on one GPU).
  void begin_group_step(size_t rows, int rows_per_rank) {
    DI_CHECK(expert_group_ || rows > 0,
             who_ + ": a step without rows (only an expert-parallel rank joins its group's step with none)");
    DI_CHECK(int64_t(rows) <= rows_per_rank && rows_per_rank <= capacity_.max_rows,
             who_ + ": " + std::to_string(rows) + " rows, group rows per rank " + std::to_string(rows_per_rank) +
                 ", capacity " + std::to_string(capacity_.max_rows));
    rows_per_rank_ = expert_group_ ? rows_per_rank : int(rows);
  }
  // The graphs of this step: one set per M under expert parallelism (the collectives' sizes are part of a graph),
  // each holding one graph per own row count; graphs_ on one GPU. With expert-load counting on, another set of each
  // (their steps hold the counter launches), so that the graphs with counting off stay the ones without them.
  StepGraphs& step_graphs() {
    if (!expert_group_) return counting_ ? counting_graphs_ : graphs_;
    const std::pair<int, bool> key(rows_per_rank_, counting_);
    auto it = std::find_if(group_graphs_.begin(), group_graphs_.end(),
                           [&](const auto& g) { return g.first == key; });
    if (it == group_graphs_.end()) {
      group_graphs_.emplace_back(key, std::make_unique<StepGraphs>());
      it = group_graphs_.end() - 1;
    }
    return *it->second;
  }
  // Once per step, before the MoE layers (a collective): every rank's row count and token ids, the `rows` rows of
  // this rank starting at `tokens` (the hash layers route every rank's rows by token).
  void share_group_rows(const int32_t* tokens, int rows) {
    if (expert_group_)
      cuda::moe_share_rows(*expert_group_, tokens, rows, rows_per_rank_, group_staging_, group_rows_, group_tokens_,
                           stream());
  }
  // The MoE sublayer of rows [q0, q0 + n) of s.u into s.y, the group's collective under expert parallelism (n may
  // then be 0). The shared expert runs on the side stream beside the routing and the routed experts. `layer`: the
  // layer index (config().layers), whose counter row the routed pairs of the n rows go to while counting. defer:
  // moe_forward's (the output left as the combine's parts for the caller's next mHC site; layers/moe/moe_gpu.h).
  void moe_sublayer(const cuda::MoeGpu& w, const StepScratch& s, int q0, int n, int layer,
                    cuda::MoeCombineParts* defer = nullptr) {
    if (n == 0 && !expert_group_) return;  // nothing to compute and no collective to join
    const int64_t H = config_.hidden_size;
    cuda::SideStream side = streams_.side_branch();
    side.grid = shared_expert_grid(branch_blocks_per_sm_, n);
    cuda::MoeExpertParallel ep;
    if (expert_group_) {
      ep.group = expert_group_;
      ep.rows_per_rank = rows_per_rank_;
      ep.rank_rows = group_rows_;
      ep.tokens = group_tokens_;
    }
    cuda::MoeGpu call = w;
    call.counters = s.moe_counters;  // the layers' calls run one after another on stream(): one set serves them all
    cuda::moe_forward(s.u + int64_t(q0) * H, s.tokens + q0, n, call, s.y + int64_t(q0) * H, s.module_ws, blas_.get(),
                      stream(), &side, expert_group_ ? &ep : nullptr, defer);
    if (counting_) {
      // The routing ids this call left in the workspace, read on stream() before any later module reuses it: this
      // rank's n rows into the expert counts; under expert parallelism also the pairs of every rank's rows that this
      // rank computed (the same PairOwner as the dispatch), also when it has no rows of its own.
      DI_CHECK(layer >= 0 && size_t(layer) < config_.layers.size(), who_ + ": MoE layer index out of range");
      const cuda::MoeExpertParallel* group = expert_group_ ? &ep : nullptr;
      const cuda::MoeRoutingView view = cuda::moe_routing_view(s.module_ws, n, w, group);
      if (n > 0)
        cuda::count_routed_experts(view.experts, int64_t(n) * w.top_k, w.experts,
                                   expert_counts_.as<unsigned long long>() + size_t(layer) * size_t(w.experts),
                                   stream());
      if (group)
        cuda::count_rank_pairs(view.group_experts, int64_t(expert_ranks()) * rows_per_rank_ * w.top_k,
                               cuda::moe_pair_owner(w, group),
                               rank_pair_counts_.as<unsigned long long>() + size_t(layer), stream());
    }
  }
  // A rank without rows this step: its part of every MoE layer's collectives, nothing else.
  void join_group_moe_layers(const StepScratch& s) {
    for (size_t l = 0; l < weights_->layers.size(); ++l) moe_sublayer(weights_->layers[l].moe, s, 0, 0, int(l));
  }

  // ---- Context parallelism (docs/parallel.md "Context parallelism"), the plumbing V4 and V4.1 share: every rank of
  // the group plans every row of each prefill step and runs the per-row state path over all of them; the query side
  // and the FFN run for the rank's contiguous share [q_first_, q_first_ + q_rows_) (parallel::step_query_split);
  // the model's enqueue gathers the shares' residual streams (and whatever else later sites read of every row) with
  // cp_gather_rows after every layer.

  // The prefill of a new sequence (positions 0 .. tokens.size() - 1) in `slot`, in steps of `chunk_rows` rows (0:
  // capacity().max_rows): per step, `plan(rows)` plans the step's rows (StepRows::plan and the model's host
  // staging), then `enqueue(n)` runs it with the step's split set; `logits` is the model's logits buffer.
  template <class Plan, class Enqueue>
  CpPrefill context_parallel_prefill(int slot, std::span<const int32_t> tokens, parallel::Collectives& group,
                                     int chunk_rows, float* logits, Plan&& plan, Enqueue&& enqueue) {
    const int R = capacity_.max_rows;
    const int chunk = chunk_rows > 0 ? chunk_rows : R;
    DI_CHECK(!tokens.empty(), who_ + ": a context-parallel prefill of no tokens");
    DI_CHECK(chunk <= R, who_ + ": context-parallel chunk of " + std::to_string(chunk) + " rows, capacity " +
                             std::to_string(R));
    DI_CHECK(!expert_group_ || expert_group_ == &group,
             who_ + ": under expert parallelism the context-parallel group must be the expert group");
    for (int32_t t : tokens)
      DI_CHECK(t >= 0 && t < config_.vocab_size,
               who_ + ": context-parallel prefill token " + std::to_string(t) + " outside [0, vocab)");
    const int world = group.world_size(), rank = group.rank();
    if (!cp_gather_) {
      cp_gather_ = state_arena_.alloc<bf16>(size_t(world) * R * config_.hc_mult * config_.hidden_size);
      cp_gather_world_ = world;
    }
    DI_CHECK(world <= cp_gather_world_, who_ + ": a context-parallel group of " + std::to_string(world) +
                                            " ranks after one of " + std::to_string(cp_gather_world_));
    CpPrefill out;
    std::vector<StepRow> rows;
    for (size_t start = 0; start < tokens.size(); start += size_t(chunk)) {
      const int n = int(std::min(tokens.size() - start, size_t(chunk)));
      rows.clear();
      for (int i = 0; i < n; ++i) rows.push_back({slot, tokens[start + size_t(i)], int32_t(start) + i});
      // Every rank plans every row: the pages, row arrays and caches are the one-GPU step's.
      plan(std::span<const StepRow>(rows));
      cp_ranges_ = parallel::step_query_split(n, world, kCpRowAlign);
      int M = 0;
      for (const parallel::TokenRange& q : cp_ranges_) M = std::max(M, int(q.size()));
      q_first_ = int(cp_ranges_[size_t(rank)].begin);
      q_rows_ = int(cp_ranges_[size_t(rank)].size());
      rows_per_rank_ = M;
      cp_group_ = &group;
      phase("");
      try {
        enqueue(n);
      } catch (...) {
        cp_group_ = nullptr;
        throw;
      }
      cp_group_ = nullptr;
      out = CpPrefill{logits, n};
    }
    return out;
  }
  // Rank r's rows cp_ranges_[r] of the per-row buffer `rows` (`row_elems` elements of `type` a row, at most
  // hc_mult * hidden bf16 a row) into every rank's buffer, through one all-gather of [world, M, row] (M = the
  // largest share), each rank's share at the front of its segment.
  void cp_gather_rows(void* rows, size_t row_elems, parallel::CommType type) {
    parallel::Collectives& g = *cp_group_;
    const int world = g.world_size(), rank = g.rank();
    const size_t row = row_elems * comm_type_bytes(type);
    DI_CHECK(row <= sizeof(bf16) * size_t(config_.hc_mult) * size_t(config_.hidden_size),
             who_ + ": a context-parallel gather of rows wider than the residual streams");
    const size_t M = size_t(rows_per_rank_);
    auto* const base = static_cast<uint8_t*>(rows);
    auto* const gathered = reinterpret_cast<uint8_t*>(cp_gather_);
    cudaStream_t st = stream();
    uint8_t* mine = gathered + size_t(rank) * M * row;
    if (q_rows_ > 0)
      DI_CUDA_CHECK(cudaMemcpyAsync(mine, base + size_t(q_first_) * row, size_t(q_rows_) * row,
                                    cudaMemcpyDeviceToDevice, st));
    g.all_gather(mine, gathered, M * row_elems, type, st);
    for (int r = 0; r < world; ++r) {
      const parallel::TokenRange& q = cp_ranges_[size_t(r)];
      if (r == rank || q.size() == 0) continue;
      DI_CUDA_CHECK(cudaMemcpyAsync(base + size_t(q.begin) * row, gathered + size_t(r) * M * row,
                                    size_t(q.size()) * row, cudaMemcpyDeviceToDevice, st));
    }
  }
  static size_t comm_type_bytes(parallel::CommType type) {
    switch (type) {
      case parallel::CommType::U8: return 1;
      case parallel::CommType::BF16: return 2;
      case parallel::CommType::I32:
      case parallel::CommType::F32: return 4;
      case parallel::CommType::I64: return 8;
    }
    return 1;
  }

  // The branch GEMVs' grid (branch_gemv_grid: wq_b on the query branch, the shared expert beside the routing) at this
  // model's own blocks per SM, which a derived model may change in its constructor, for a launch of `rows` rows.
  cuda::StreamGrid branch_grid(int64_t rows) const { return branch_gemv_grid(branch_blocks_per_sm_, rows); }

  ModelConfig config_;
  int branch_blocks_per_sm_ = 1;  // branch_gemv_grid's count where the environment sets none
  std::unique_ptr<Weights> weights_;
  StepCapacity capacity_;
  StepStreams streams_;  // first constructed, last destroyed: everything below enqueues on its streams
  cuda::BlasHandle blas_;
  // The indexer's query's while the side branch holds blas_ (index_query_blas), or V4's index compressor's
  // (begin_index_keys).
  cuda::BlasHandle query_blas_;
  cuda::BlasHandle compressor_blas_;  // the KV compressor's on its own branch (begin_compressor)
  DeviceArena state_arena_;
  StepRows rows_;
  StepGraphs graphs_;
  PhaseTimer timing_;
  parallel::Collectives* expert_group_ = nullptr;
  int rows_per_rank_ = 0;  // the current step's M (expert parallelism), its rows on one GPU
  // The current context-parallel step (null outside one): its group, every rank's query rows, this rank's; the
  // all-gather buffer [world, max_rows, hc, hidden] bf16 (allocated by the first context-parallel prefill).
  parallel::Collectives* cp_group_ = nullptr;
  std::vector<parallel::TokenRange> cp_ranges_;
  int q_first_ = 0, q_rows_ = 0;
  bf16* cp_gather_ = nullptr;
  int cp_gather_world_ = 0;

 private:
  size_t expert_count_entries() const { return config_.layers.size() * size_t(std::max(config_.n_routed_experts, 0)); }

  // The per-slot blobs of a layer's routed experts (MXFP4 codes and e8m0 scales of w1|w3 and w2, in the checkpoint
  // layout and / or packed for decode, whichever the weights hold): slot s of a blob of `bytes` per slot at
  // base + s * bytes (cuda/kernels.h Fp4Experts).
  struct ExpertBlob {
    uint8_t* base;
    size_t bytes;
  };
  static std::vector<ExpertBlob> expert_blobs(const cuda::MoeGpu& m) {
    std::vector<ExpertBlob> blobs;
    // The weights are this model's own arena memory; MoeGpu names them const for the kernels that only read them.
    auto add = [&](const uint8_t* p, size_t bytes) {
      if (p) blobs.push_back({const_cast<uint8_t*>(p), bytes});
    };
    for (const cuda::Fp4Experts* e : {&m.w13, &m.w2}) {
      add(e->weight, size_t(e->n * e->k / 2));
      add(e->scale, size_t(e->n * e->k / 32));
      add(e->packed_weight, cuda::mxfp4_packed_weight_bytes(1, e->n, e->k));
      add(e->packed_scale, cuda::mxfp4_packed_scale_bytes(1, e->n, e->k));
    }
    return blobs;
  }
  static size_t expert_slot_bytes(const cuda::MoeGpu& m) {
    size_t bytes = 0;
    for (const ExpertBlob& b : expert_blobs(m)) bytes += b.bytes;
    return bytes;
  }
  // Slot `slot`'s blobs to (out = true) or from (out = false) `staged`, one after another, on stream().
  void copy_expert_slot(const cuda::MoeGpu& m, int32_t slot, uint8_t* staged, bool out) {
    DI_CHECK(slot >= 0 && slot < m.w13.experts, who_ + ": expert slot " + std::to_string(slot) + " outside [0, " +
                                                    std::to_string(m.w13.experts) + ")");
    for (const ExpertBlob& b : expert_blobs(m)) {
      uint8_t* at = b.base + size_t(slot) * b.bytes;
      DI_CUDA_CHECK(cudaMemcpyAsync(out ? staged : at, out ? at : staged, b.bytes, cudaMemcpyDeviceToDevice, stream()));
      staged += b.bytes;
    }
  }

  size_t window_pool_size() const {
    return size_t((int64_t(capacity_.slots) * config_.sliding_window + capacity_.max_rows) * config_.head_dim);
  }
  size_t window_row_bytes(const LayerCaches& caches) const {
    return size_t(cuda::kv_row_bytes(caches.window_format, int(config_.head_dim)));
  }
  size_t entry_row_bytes(const LayerCaches& caches) const {
    return size_t(cuda::kv_row_bytes(caches.entry_format, int(config_.head_dim)));
  }
  size_t window_pool_bytes(const LayerCaches& caches) const {
    return size_t(int64_t(capacity_.slots) * config_.sliding_window + capacity_.max_rows) * window_row_bytes(caches);
  }
  size_t paged_kv_bytes(const LayerCaches& caches) const { return paged_entries(caches) * entry_row_bytes(caches); }
  size_t paged_entries(const LayerCaches& caches) const {
    return size_t(capacity_.slots) * rows_.max_pages(caches.ratio_class) * capacity_.page_size;
  }

  // Expert parallelism: cuda::moe_share_rows's staging [max_rows + 1] and its results, every rank's row count
  // [world] and token ids [world * max_rows]; the graphs by M.
  int32_t* group_staging_ = nullptr;
  int32_t* group_rows_ = nullptr;
  int32_t* group_tokens_ = nullptr;
  std::vector<std::pair<std::pair<int, bool>, std::unique_ptr<StepGraphs>>> group_graphs_;
  // EPLB statistics: on or off, the one-GPU graphs of the counting steps, and the counts [config.layers, experts]
  // (allocated when counting is first turned on).
  bool counting_ = false;
  StepGraphs counting_graphs_;
  cuda::DeviceBuffer expert_counts_;
  cuda::DeviceBuffer rank_pair_counts_;  // [config.layers] uint64: pairs this rank's experts computed (with a group)
  const std::string who_;
};

}  // namespace deepinfer::gpu
