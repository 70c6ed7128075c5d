// DeepSeek-V4.1-Flash on one GPU (issues 4, 5, 7): the model-spec §4 forward with the V4 step machinery
// (model/gpu/step_rows.h: batched (slot, token, position) rows planned on the host, page tables per ratio,
// CUDA graphs per row count, side-stream branches, phase timing) and the V4.1 modules (CSA2 compressor and
// indexer, Engram; src/model/v41/gpu/README.md). Official numerics (NumericsOptions all on): bf16 activations,
// W8A8 FP8 GEMMs with 32-wide activation blocks, MXFP8 window KV, FP4 compressed KV and index keys stored as their
// exact bf16 values; with DEEPINFER_KV_FORMAT=fp8 (cuda::kv_format(), read when the model is built) the window and
// compressed KV are the packed records of model-spec §6 instead (layers/attention/kv_record.h kvrec41: 528 / 288
// instead of 1024 bytes a row), the logits the same bits (tests/gpu/model/test_v41_gpu_forward.cpp
// V41GpuForward.KvFormatsBitwise). The DSpark draft layers (mtp.*) are not run.
//
// Device memory per layer: the window pool [slots * window + max_rows, head_dim] (ring + per-step scratch rows, as
// V4); Full (KV source) layers also a paged compressed-KV pool and a paged index-key pool (one page table per
// ratio: the ratio-2 sources share one, the ratio-1 source has its own) and the ratio-2 open-group state. Reuse
// and Reindex layers own no cache besides their window: they read their group owner's pools.
//
// Several GPUs (issue 7, docs/parallel.md "V4.1"): as V4GpuModel, one V41GpuModel per rank with its own sequences,
// caches and Engram history (attention data parallelism) and a full copy of everything but the routed experts, which
// are split over the ranks of an expert-parallel group (the weights of a placement and rank; the group at
// construction). Only the MoE sublayer is a collective (model/gpu/step_model_base.h, layers/moe/moe_gpu.h "Expert
// parallelism"); the CSA2 compressors, indexers and top-k stay per rank, and each rank reads its own rows' Engram
// table rows (the tables are not split). So every rank steps together with the group's rows per rank M, and a rank
// without rows still steps. Context parallelism (prefill_context_parallel, docs/parallel.md "V4.1 context
// parallelism"): V4GpuModel's, through the same GpuStepModelBase plumbing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "layers/compressor/csa2_compressor_gpu.h"
#include "layers/engram/engram_gpu.h"
#include "layers/engram/ngram_hash.h"
#include "layers/indexer/csa2_indexer_gpu.h"
#include "layers/moe/moe_gpu.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/gpu/device_weights.h"
#include "model/gpu/step_model_base.h"
#include "model/model.h"
#include "model/v41/v41_common.h"
#include "parallel/collectives.h"
#include "parallel/eplb.h"

namespace deepinfer::gpu {

struct V41GpuLayer : GpuBlockWeights {  // 32 x 32 FP8 blocks (model-spec §5)
  std::optional<cuda::Csa2CompressorGpu> compressor;  // Full layers
  std::optional<cuda::Csa2IndexerGpu> indexer;        // Full and Reindex layers
  std::optional<cuda::EngramGpu> engram;              // Engram layers (runs before the layer)
  cuda::MoeGpu moe;
};

struct V41GpuWeights : GpuOuterWeights {
  std::vector<V41GpuLayer> layers;
  // Engram hashing on the host (model-spec §4 "Engram"): the layers' constants in engram_layer_ids order, the
  // token -> compressed id table and the pad id. Empty without Engram layers.
  std::vector<EngramLayerHash> engram_hashes;
  EngramTokenMap engram_token_map;
  // What keeps the host-side Engram tables alive: the pinned copies (the default: one per table in the process, per
  // checkpoint tensor or per size of the random weights' constant tables, shared by every model that holds it, e.g.
  // the ranks of an expert-parallel group run as threads), or with DEEPINFER_ENGRAM_TABLES=mapped the process's
  // registered mappings of the checkpoint shards (cuda/host_file_mapping.h: one copy per machine).
  std::vector<std::shared_ptr<const void>> shared_engram_tables;
  // Expert parallelism: the placement the routed experts of `layers` are this rank's share of (no layers: one GPU);
  // GpuStepModelBase::rebalance_experts moves the weights and replaces it.
  parallel::ExpertPlacement expert_placement;
};

// Every tensor of the backbone from an official V4.1 checkpoint (validated by name, dtype and shape); the Engram
// tables go to pinned host memory, one copy per process (V41GpuWeights::shared_engram_tables; the shards in place
// with DEEPINFER_ENGRAM_TABLES=mapped, device memory with =device), the token map comes from the checkpoint
// directory (kEngramTokenMapFile). With a placement (expert parallelism) only `rank`'s routed experts
// (parallel/expert_shard.h).
std::unique_ptr<V41GpuWeights> upload_v41_gpu_weights(const ModelConfig& config, const Checkpoint& ck,
                                                      bool show_progress,
                                                      const parallel::ExpertPlacement* placement = nullptr,
                                                      int rank = 0);
// Random weights of the config's shapes, generated on the device (the benchmark model); with a placement, `rank`'s
// share of the same model (every routed expert has its own seed). Engram layers get constant tables of the config's
// row counts where the checkpoint's would go (pinned host memory by default: one copy per process, see
// V41GpuWeights::shared_engram_tables) and an identity-like token map.
std::unique_ptr<V41GpuWeights> random_v41_gpu_weights(const ModelConfig& config, uint64_t seed,
                                                      const parallel::ExpertPlacement* placement = nullptr,
                                                      int rank = 0);

// Whether V4.1's mHC site mix runs on the step's mix branch (V41GpuModel::begin_site_mix): on unless
// DEEPINFER_V41_MIX_BRANCH=0 (read once); set_v41_site_mix_branch overrides it process-wide (tests; graphs captured
// under one setting keep it).
bool v41_site_mix_branch();
void set_v41_site_mix_branch(bool on);

class V41GpuModel : public GpuStepModelBase<V41GpuWeights> {
 public:
  // `replay` in DecoderTail mode turns on SWA bounded replay (model-spec §9) where the config allows it (as the CPU
  // model: otherwise a notice on stderr and the exact prefill): a slot's run of more than keep_tokens rows in a step
  // runs the layers after the candidate source on its last keep_tokens rows only, their window rings restarting at
  // the first kept row; the cut rows' logits are NaN. Such steps run eagerly (step_graph rejects them).
  // `expert_group`: the expert-parallel group these weights are one rank's share of (null: one GPU), as
  // V4GpuModel's; its collectives run on stream() and it must outlive the model.
  V41GpuModel(ModelConfig config, std::unique_ptr<V41GpuWeights> weights, const StepCapacity& capacity,
              const PrefillReplayOptions& replay = {}, parallel::Collectives* expert_group = nullptr);
  ~V41GpuModel() override;

  // As V4GpuModel::step / step_graph (the row contract of model/step_planner.h). With Engram layers every token
  // must be known on the host (the n-gram hash runs there): negative tokens are rejected.
  float* step(std::span<const StepRow> rows) override;
  float* step_graph(std::span<const StepRow> rows) override;
  // A step of an expert-parallel group, as V4GpuModel's: every rank calls it with the same rows_per_rank M (>= each
  // rank's rows), `rows` may be empty (the rank only joins the MoE collectives; nullptr is returned); the plain
  // step() / step_graph() pad to capacity().max_rows. One graph per (M, row count). With bounded replay a cut step
  // runs its decoder layers' MoE on the kept rows, inside the same M.
  float* step(std::span<const StepRow> rows, int rows_per_rank) override;
  float* step_graph(std::span<const StepRow> rows, int rows_per_rank) override;
  const int32_t* sample_greedy(int rows) override;
  bool resolves_tokens_on_device() const override { return weights_->engram_hashes.empty(); }

  // The row formats of the window rings and the compressed KV (fixed at construction from cuda::kv_format()):
  // bf16 / bf16, or Mxfp8 / Fp4 records.
  cuda::KvFormat window_format() const { return window_format_; }
  cuda::KvFormat entry_format() const { return entry_format_; }

  // The benchmark's long-context decode without a prefill (V4GpuModel::assume_length); the slot's Engram history
  // stays empty (the hash then treats the earlier positions as missing).
  void assume_length(int slot, int32_t length);
  // As V4GpuModel::fill_index_keys_random (the CSA2 layers' index keys).
  void fill_index_keys_random(uint64_t seed);

  // Context-parallel prefill of a new sequence in `slot` over the ranks of `cp_group` (docs/parallel.md "Context
  // parallelism"), as V4GpuModel::prefill_context_parallel (the same GpuStepModelBase plumbing): every rank plans
  // every row of each step and runs the state path (Engram, the attention-site mHC, the window KV row, the CSA2
  // compressors' entries and index keys, the window commit) over all of them; the query side (wq_a / wq_b, the CSA2
  // indexer query and selection, candidate blocks, top-k), the attention core, wo and the FFN site only for the
  // rank's share; after every layer the shares' residual streams and FFN-site mix (the next site's lagged collapse
  // and the head read every row's) are all-gathered. Every rank calls it with the same slot, tokens and chunk; with
  // an expert-parallel group cp_group must be that group. Bounded replay: a chunk may not cut a run (chunk_rows <=
  // keep_tokens). Eager; afterwards every rank holds the sequence's caches and Engram history (the others call
  // drop_sequence). Returns the last step's logits on every rank.
  CpPrefill prefill_context_parallel(int slot, std::span<const int32_t> tokens, parallel::Collectives& cp_group,
                                     int chunk_rows = 0);

 private:
  struct Pools;
  struct Scratch;
  // The host side of a step before its kernels: the row counts (GpuStepModelBase::begin_group_step), the rows' plan
  // and upload, the Engram row ids, the kept rows (nothing of that for an expert-parallel rank without rows).
  void prepare(std::span<const StepRow> rows, int rows_per_rank);
  void stage_engram_rows(std::span<const StepRow> rows);
  void stage_kept_rows(std::span<const StepRow> rows);
  void enqueue(int rows);
  // Bounded replay: moves the kept rows' streams, lagged mix, top-k and candidate flags to the front and points
  // the step at the kept rows' arrays; after the head, the kept rows' logits back to their rows (NaN elsewhere).
  void compact_kept_rows();
  void expand_kept_logits(int rows);
  // Site s (attention of layer l: 2l, FFN: 2l + 1) mixes into mix[s % 2] and collapses with the previous site's
  // pre (model-spec §4 "Single-pass mHC"); the first site's previous pre is one-hot stream 0.
  const float* previous_mix(int site) const;
  // Because of that lag a site's mix is read only by the expand at its sublayer's end, so it runs on the mix branch
  // beside the whole sublayer, forked after the site's entry (session 13: the batch-1 timeline had the mix kernel,
  // ~10.5 us, first in each site's serial chain). begin_site_mix forks the branch and returns the stream the mix goes
  // on; end_site_mix joins it (before leave_site, or on a return that skips it). Same kernels, same inputs: the same
  // bits. DEEPINFER_V41_MIX_BRANCH=0 (read once; set_v41_site_mix_branch for tests) keeps the mix on the main
  // stream, the form before.
  cudaStream_t begin_site_mix();
  void end_site_mix();
  // A site's entry on rows [q0, q0 + rows), one launch (cuda::hc_lagged_site_pre; bench/gpu/NOTES.md "V4.1 site entry
  // in one launch"): the previous sublayer's expand, which leave_site deferred (the expand's mix row is the one the
  // collapse takes its pre from: the one-site lag), the collapse into u, the site's norm and, with uq (the attention
  // site), the FP8 codes of u at kV41Block; then the site's mix forks (begin_site_mix: it reads the expanded streams).
  // Whatever reads or writes X in between (Engram, the bounded-replay moves, the context-parallel gather) first runs
  // the deferred expand on its own (flush_expand), as does an entry on other rows; the head takes the last one.
  // leave_site (after end_site_mix) records the sublayer's expand. It replaced a chain of four launches (expand,
  // collapse, norm, codes): session 14 run 86, V4.1-Flash 10 layers, batch 1 2.51 -> 2.49 ms and batch 8 5.87 -> 5.82
  // ms per step (-1 %), batch 64 / 256 and prefill within noise.
  // The FFN's leave_site may carry y as the MoE's parts (moe_forward's defer, cuda::moe_site_combine): the entry
  // then sums them where it reads y (cuda::hc_lagged_site_pre's y_parts), and flush_expand combines them first.
  void enter_site(int site, int q0, int rows, const cuda::HcSite& params, const bf16* norm_weight, bf16* u,
                  uint8_t* uq, float* us);
  void leave_site(bf16* X, const bf16* y, const float* mix, int rows, const cuda::MoeCombineParts& y_parts = {});
  struct PendingExpand {  // leave_site's deferred expand; rows == 0: none
    bf16* X = nullptr;
    const bf16* y = nullptr;
    const float* mix = nullptr;
    int rows = 0;
    cuda::MoeCombineParts y_parts;  // set: y is still the MoE's parts
  };
  // The deferred expand for these rows (rows == 0 where there is none: then any other one is flushed first).
  PendingExpand take_expand(const bf16* X, const float* mix, int rows);
  void flush_expand();
  // The layer's attention: the state path over all `rows`, the query side for rows [q0, q0 + qn) (all of them
  // outside context parallelism); the FFN site for rows [q0, q0 + qn).
  void attention(int layer, int rows, int q0, int qn);
  void ffn(int layer, int q0, int qn);
  // Context parallelism: every rank's share of X and of the FFN-site mix into every rank's (after each layer).
  void cp_gather_layer();
  void head(int rows, float* logits);

  cuda::KvFormat window_format_ = cuda::KvFormat::Bf16;
  cuda::KvFormat entry_format_ = cuda::KvFormat::Bf16;
  std::unique_ptr<Pools> pools_;
  std::unique_ptr<Scratch> scratch_;
  PendingExpand pending_expand_;
  // Engram n-gram history per slot (model-spec §6): the compressed ids of the last max_ngram - 1 tokens, oldest
  // first, and the staging of the step's row ids [engram layers, rows, hash heads].
  std::vector<std::vector<int64_t>> engram_history_;
  PinnedStaging engram_staging_;
  double engram_wait_s_ = 0;
  // SWA bounded replay (model-spec §9): keep_tokens_ > 0 when on; decoder_begin_ = the first layer after the
  // candidate source. Per step, the kept rows as runs (first row, first kept row in the compacted order, count);
  // per slot, the decoder layers' first window position (0, or the first kept row of the slot's last cut run).
  struct KeptRun {
    int from = 0, to = 0, count = 0;
  };
  int keep_tokens_ = 0;
  int decoder_begin_ = -1;
  std::vector<KeptRun> kept_runs_;
  int kept_rows_ = 0;
  std::vector<int32_t> window_base_;
  PinnedStaging kept_staging_;  // [5, max_rows] compacted row arrays, then window_base_ [slots]
  double kept_wait_s_ = 0;
};

// Loads a V4.1 checkpoint (or random weights, ModelOptions::random_weights) onto the GPU behind the engine adapter
// V4GpuForward, with the capacity and the bounded replay options (prefill_replay) of `options`. The data-parallel
// engine's ranks load through model/gpu/data_parallel_nccl.cc (one model per GPU with its share of the experts).
std::unique_ptr<Model> load_v41_gpu_model(const std::string& dir, const ModelOptions& options);

}  // namespace deepinfer::gpu
