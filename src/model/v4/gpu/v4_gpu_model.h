// DeepSeek-V4-Flash on one GPU (issue 4): the weights resident in device memory in their checkpoint formats, the
// per-sequence caches in device pools, and a step that runs a batch of token rows through every layer with the
// CUDA kernels, enqueued on one stream without host synchronization (so a decode step can be a CUDA graph).
// Numerics are the official ones (model-spec §2, §8; NumericsOptions all on): bf16 activations, W8A8 FP8 GEMMs,
// FP8 window / compressed KV, FP4 index keys. tests/gpu/model/ compares it with the CPU reference forward.
// The KV caches hold the FP8 rows as bf16 values or, with DEEPINFER_KV_FORMAT=fp8 (cuda::kv_format(), read when the
// model is built), as packed records (layers/attention/kv_record.h: 592 instead of 1024 bytes a row); the logits
// are the same bits either way (tests/gpu/model/test_v4_gpu_forward.cpp V4GpuForward.KvFormatsBitwise).
//
// Device memory (model-spec §6 "Cached state"), per layer (model/gpu/step_model_base.h LayerCaches):
//  - window pool: [slots * window + max_rows] KV rows: a ring of `window` rows per slot, then one scratch row per
//    step row (cuda/step_kernels.h: a prefill chunk reads its own rows from the scratch rows);
//  - compressing layers: a paged pool of compressed KV rows, and the compressor's ring of open rows;
//  - CSA layers also: a paged pool of index keys (same page table as the layer's compressed KV) and the index
//    compressor's ring.
// Pages are `page_size` entries; one page table per compression ratio serves every layer of that ratio, because
// those layers always hold the same number of entries for a sequence.
//
// Several GPUs (issue 7, docs/parallel.md): one V4GpuModel per rank, each with its own sequences and caches
// (attention data parallelism) and a full copy of everything but the routed experts, which are split over the
// ranks of an expert-parallel group (the weights of a placement and rank; the group at construction). Every MoE
// layer is a collective of the group (layers/moe/moe_gpu.h "Expert parallelism"), so all ranks step together:
// each step names the rows per rank M that every rank of the group pads to, and a rank without rows still steps.
//
// Context parallelism (docs/parallel.md "Context parallelism"): prefill_context_parallel runs one long prompt over
// the ranks of a group. Every rank plans every row of each prefill step and runs the per-row state path (mHC
// collapse at the attention site, KV row, compressors, index keys, window commit) over all of them, in the one-GPU
// order, so its caches are the one-GPU caches; the query side, the attention core, the output projection and the
// FFN run only for the rank's contiguous share of the step's rows (parallel::step_query_split); the residual
// streams of the shares are all-gathered after every layer. Each row's arithmetic is the one-GPU row's, so in
// batch-invariant mode the logits are bitwise the one-GPU prefill's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "layers/compressor/compressor_gpu.h"
#include "layers/indexer/indexer_gpu.h"
#include "layers/moe/moe_gpu.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/gpu/device_weights.h"
#include "model/gpu/step_model_base.h"
#include "parallel/collectives.h"
#include "parallel/context_split.h"
#include "parallel/eplb.h"

namespace deepinfer::gpu {

struct V4GpuLayer : GpuBlockWeights {
  std::optional<cuda::CompressorGpu> compressor;
  std::optional<cuda::IndexerGpu> indexer;
  cuda::MoeGpu moe;
};

struct V4GpuWeights : GpuOuterWeights {
  const float* hc_head_fn = nullptr;
  const float* hc_head_base = nullptr;
  const float* hc_head_scale = nullptr;
  std::vector<V4GpuLayer> layers;
  // Expert parallelism: the placement the routed experts of `layers` are this rank's share of (no layers: one GPU);
  // GpuStepModelBase::rebalance_experts moves the weights and replaces it.
  parallel::ExpertPlacement expert_placement;
};

// Every tensor of the forward from an official checkpoint (validated by name, dtype and shape). With a placement
// (expert parallelism) only `rank`'s routed experts (parallel/expert_shard.h).
std::unique_ptr<V4GpuWeights> upload_v4_gpu_weights(const ModelConfig& config, const Checkpoint& ck,
                                                    bool show_progress,
                                                    const parallel::ExpertPlacement* placement = nullptr,
                                                    int rank = 0);
// Random weights of the config's shapes, generated on the device (the full-width benchmark model); with a
// placement, `rank`'s share of the same model (every routed expert has its own seed).
std::unique_ptr<V4GpuWeights> random_v4_gpu_weights(const ModelConfig& config, uint64_t seed,
                                                    const parallel::ExpertPlacement* placement = nullptr,
                                                    int rank = 0);

// The step machinery (rows, capacity, page tables, graphs, streams, timing) is shared with V4.1
// (model/gpu/step_rows.h); a negative token -k - 1 is "the token sample_greedy chose for row k of the previous
// step".
using V4GpuCapacity = StepCapacity;
using V4GpuRow = StepRow;

class V4GpuModel : public GpuStepModelBase<V4GpuWeights> {
 public:
  // `expert_group`: the expert-parallel group these weights are one rank's share of (null: one GPU). The
  // group's collectives run on stream(); the group must outlive the model.
  V4GpuModel(ModelConfig config, std::unique_ptr<V4GpuWeights> weights, const V4GpuCapacity& capacity,
             parallel::Collectives* expert_group = nullptr);
  ~V4GpuModel() override;

  // Runs the rows through the model and returns the device pointer of their fp32 logits [rows, vocab], valid
  // until the next step; work enqueued after it on stream() may edit them (the device grammar masks). Enqueued on stream(); nothing waits. Rows of a slot must be consecutive with
  // consecutive positions, continuing the slot's sequence (position 0 starts a new sequence in the slot and
  // drops its pages). Throws deepinfer::Error for a bad slot / position / token or too many rows.
  float* step(std::span<const V4GpuRow> rows) override;
  // The same step replayed from a CUDA graph: the kernels of a step depend on the host only through the row
  // count (the row arrays and page tables are device buffers the planning fills), so one graph per row count
  // serves every decode step of that batch size. The first call for a row count captures it.
  float* step_graph(std::span<const V4GpuRow> rows) override;
  // A step of an expert-parallel group: every rank calls it with the same rows_per_rank (>= each rank's rows;
  // the collectives carry that many rows per rank), `rows` may be empty (the rank only takes part in the MoE
  // collectives; nullptr is returned). The plain step() / step_graph() pad to capacity().max_rows, so under
  // expert parallelism all ranks must use the same form. One graph per (rows_per_rank, row count).
  float* step(std::span<const V4GpuRow> rows, int rows_per_rank);
  float* step_graph(std::span<const V4GpuRow> rows, int rows_per_rank);

  // Greedy tokens of the last step's rows into a device buffer (the next step's negative tokens read it);
  // enqueued on stream(), returns the device pointer of the [rows] int32 tokens.
  const int32_t* sample_greedy(int rows) override;

  // Pretends that `slot` already holds `length` positions (its pages reserved, cache contents whatever the
  // pools hold): the benchmark's way to decode at a long context without prefilling it.
  void assume_length(int slot, int32_t length);
  // The benchmark's assumed contexts with random index keys instead of zeros (GpuStepModelBase::randomize_index_keys:
  // zeroed keys tie every indexer score); enqueued on stream(), every slot's pages.
  void fill_index_keys_random(uint64_t seed);

  // Context-parallel prefill of a new sequence (positions 0 .. tokens.size() - 1, token ids >= 0) in `slot`, in
  // steps of `chunk_rows` rows (0: capacity().max_rows), the steps a one-GPU prefill of the same chunks takes.
  // Every rank of `cp_group` calls it with the same slot, tokens and chunk; with an expert-parallel group the
  // cp_group must be that group (the MoE of each rank's share is its exchange, rows per rank = the largest share);
  // without one the MoE is local (the weights hold every expert). Eager (no graphs); enqueued on stream().
  // Afterwards every rank holds the sequence's complete caches (its home rank decodes on with step(); the others
  // call drop_sequence). Returns the last step's logits (GpuStepModelBase::CpPrefill), [rows, vocab] for every row of
  // that step (the last row is the prompt's last token) on every rank, valid until the next step. The split and
  // gather plumbing is GpuStepModelBase's (context_parallel_prefill, cp_gather_rows), shared with V4.1.
  CpPrefill prefill_context_parallel(int slot, std::span<const int32_t> tokens, parallel::Collectives& cp_group,
                                     int chunk_rows = 0);

  // The row format of the KV caches (fixed at construction from cuda::kv_format()).
  cuda::KvFormat kv_format() const { return kv_format_; }

 private:
  struct Pools;
  struct Scratch;
  // Checks a step's row counts, sets rows_per_rank_ and plans its rows (none: an expert-parallel rank without work).
  void plan_step(std::span<const V4GpuRow> rows, int rows_per_rank);
  // A step of `rows` rows; the query side and the FFN run for rows [q_first_, q_first_ + q_rows_) under context
  // parallelism (GpuStepModelBase::cp_group_ set), for all of them otherwise.
  void enqueue(int rows);
  // The layer's attention: the state path (KV row, compressors, window commit) over all `rows`, the query side for
  // rows [q0, q0 + qn).
  void attention(int layer, int rows, int q0, int qn);
  void ffn(int layer, int q0, int qn);
  // Context parallelism: every rank's share of the residual streams X into every rank's X (after each layer).
  void cp_gather_streams();
  void head(int rows);

  cuda::KvFormat kv_format_ = cuda::KvFormat::Bf16;
  // The last ffn()'s MoE output before its combine, where moe_forward left it so for the next attention site
  // (cuda::moe_site_combine); unset: the output is in the scratch's y. Host values, consumed by the next attention().
  cuda::MoeCombineParts ffn_parts_;
  std::unique_ptr<Pools> pools_;
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace deepinfer::gpu
