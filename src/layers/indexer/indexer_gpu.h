// The V4 lightning indexer on the GPU (model-spec.md §3 "Lightning indexer", CSA layers), the CUDA twin of
// lightning_index_query / lightning_top_entries (lightning_indexer.cpp) with the official numerics (Hadamard +
// FP4 queries and keys). Its index keys come from compressor_push with EntryFormat::IndexFp4 over the indexer's
// own compressor; the selection names rows of the layer's compressed KV pool, which shares the keys' paging.
#pragma once

#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/env_switch.h"
#include "cuda/kernels.h"
#include "layers/compressor/compressor_gpu.h"

namespace deepinfer::cuda {

struct IndexerGpu {
  Fp8Linear wq_b;                       // [heads * dim, q_lora], FP8 block 128
  const bf16* weights_proj = nullptr;   // [heads, hidden]
  int heads = 0, dim = 0, topk = 0;
  CompressorGpu compressor;             // overlapping, ratio 4, dim = index dim; compressor.hidden is the model's
};

// Workspace of indexer_select (indexer_query needs none).
// `max_entries` bounds the entries visible to one row, (max position + 1) / ratio, e.g.
// ceil(max_context / ratio): the select keeps the scores of every entry a row sees, packed row after row.
size_t indexer_workspace_bytes(int rows, int max_entries, const IndexerGpu& w);

// Index queries: q = wq_b . qr (qr_q [rows, q_lora] e4m3 / qr_s [rows, q_lora / 128]: the FP8-quantized q_lora
// activations that the attention's wq_b also takes), per-head RoPE at the row's position on the last rope_dim
// channels, Hadamard + FP4 (ue8m0, block 32); head weights w = (weights_proj . u) * heads^-1/2 * dim^-1/2.
// u [rows, hidden] bf16 is the normalised attention input; inv_freq [rope_dim / 2] the layer's frequencies. q_out is
// the projection's fp32 scratch; the finished queries go to q_fp4 as bf16 (FP4 values, exact there), what
// indexer_select reads.
void indexer_query(const uint8_t* qr_q, const float* qr_s, int64_t q_lora, const bf16* u, const int32_t* positions,
                   int rows, const IndexerGpu& w, const float* inv_freq, int rope_dim, float* q_out /*[rows, heads*dim]*/,
                   bf16* q_fp4 /*[rows, heads*dim]*/, float* head_w /*[rows, heads]*/, cublasHandle_t blas,
                   cudaStream_t stream);
// indexer_query in three parts, so that a step can place them apart: indexer_query_project writes q_out = wq_b . qr,
// indexer_head_weights head_w = weights_proj . u (unscaled: it reads only u, so it can run beside the q_lora chain),
// and indexer_query_finish, once both are done (it waits on `stream` for `weights_ready` first where that is not
// nullptr: an event recorded after the head weights on another stream), finishes them as indexer_query does. The same
// kernels on the same inputs: the same bits.
void indexer_query_project(const uint8_t* qr_q, const float* qr_s, int64_t q_lora, int rows, const IndexerGpu& w,
                           float* q_out, cudaStream_t stream);
void indexer_head_weights(const bf16* u, int rows, const IndexerGpu& w, float* head_w /*[rows, heads]*/,
                          cublasHandle_t blas, cudaStream_t stream);
void indexer_query_finish(const float* q_out, bf16* q_fp4, float* head_w, const int32_t* positions, int rows,
                          const IndexerGpu& w, const float* inv_freq, int rope_dim, cudaEvent_t weights_ready,
                          cudaStream_t stream);

// For each row: score the visible index keys of its slot (entries e < (pos + 1) / ratio, at most the pool's
// per-slot capacity) with sum_h w_h * relu(q_h . k_e) (q [rows, heads * dim] bf16, 16-byte aligned: indexer_query's
// q_fp4), keep the top `topk` (equal scores: lower entry id), and
// write their rows in the keys' paging (the compressed KV pool of the layer shares it) in ascending entry order
// into rows_out [rows, topk]; -1 fills the places past the number selected (fewer visible than topk: all
// visible, ascending). Every visible entry must have a page. Up to 8 rows with decode_fused() (default on) it is
// one launch (scores and top-k; arrival counts in a per-device array, so two calls must not overlap on one
// device), otherwise three; the selection is the same.
void indexer_select(const bf16* q, const float* head_w, const int32_t* slots, const int32_t* positions, int rows,
                    const IndexerGpu& w, const PagedPool& keys, int32_t* rows_out, void* workspace,
                    cudaStream_t stream);

// The decode kernel's form (bench/gpu/NOTES.md "Decode select by bins"): DEEPINFER_INDEX_SELECT=old runs the radix
// select shared with the split path; =bins (the default since H200 run 48: per call 23.6 -> 18.9 us at 2048 entries,
// 119.8 -> 96.2 at 19,200, unchanged at 1024) the select by bins; =new the select by bins and the score tiles'
// batched global loads (slower at 1024 entries: 23.9 us). The same selection entry for entry in every form by
// construction (the tests compare them), so the switch is for A/B timing. Read once, at the first select
// (core/env_switch.h); set_index_decode_form overrides it (tests). A CUDA graph replays the form it was captured with.
enum class IndexDecodeForm : int { Old, Bins, New };
inline EnvSwitch<IndexDecodeForm>& index_decode_form_switch() {
  static EnvSwitch<IndexDecodeForm> form{"DEEPINFER_INDEX_SELECT", [](const char* v) {
    if (env_equals(v, "new")) return IndexDecodeForm::New;
    if (env_equals(v, "old")) return IndexDecodeForm::Old;
    return IndexDecodeForm::Bins;
  }};
  return form;
}
inline IndexDecodeForm index_decode_form() { return index_decode_form_switch().get(); }
inline void set_index_decode_form(IndexDecodeForm form) { index_decode_form_switch().set(form); }

// The decode kernel's score blocks (bench/gpu/NOTES.md "Decode score shape"): entries a tile x tiles a score_entries
// call (index_scoring.cuh ScoreShape). DEEPINFER_INDEX_SCORE_SHAPE=auto (the default, below) | 64x2 (every other score
// kernel's shape) | 32x1 | 64x1;
// 32x1: a row's entries split into 32-entry tiles, up to twice the score blocks (32 instead of 16 at 1024 entries),
// each thread 4 heads x 2 entries instead of 4 x 4; 64x1: the queries staged again for every tile (the decode kernel
// already runs one 64-entry tile a block while a row has at most kDecodeBlocks / rows tiles, so 64x1 differs from
// 64x2 only past that: e.g. 8 rows of more than 33 tiles). The decode kernel (<= 8 rows) only, in the bins and new
// forms (old, the radix select: 64x2 always). The same scores bit for bit in every shape (score_entries), so the
// same selection (the tests compare them); the switch is for A/B timing. Read once, at the first select;
// set_index_score_shape overrides it (tests, benches). A CUDA graph replays the shape it was captured with.
// auto: the grid of 32x1; per row on the device, 32-entry tiles where the row's ceil(n / 32) tiles fit its blocks
// (one tile a block), else the 64x2 split (run 103: 32x1 wins at 1024 / 2048 entries, loses at 16384 where its
// blocks take two tiles each). The default since run 106: per call 18.69 -> 16.76 us at 1024 entries, 20.28 ->
// 18.29 at 2048, 57.14 -> 57.22 at 16384; 16 V4-Flash layers at 4K batch 1 -0.5 %, batch 8 -0.6 %.
// The V4.1 CSA2 indexer's decode kernels take the same shapes under their own switch, DEEPINFER_CSA2_SCORE_SHAPE
// (csa2_indexer_gpu.h), whose default stays 64x2 until measured.
enum class IndexScoreShape : int { Tile64x2, Tile64x1, Tile32x1, Auto };
// A score-shape switch's value: 64x2 | 64x1 | 32x1 | auto, `otherwise` when unset or anything else.
inline IndexScoreShape index_score_shape_named(const char* v, IndexScoreShape otherwise) {
  if (env_equals(v, "64x2")) return IndexScoreShape::Tile64x2;
  if (env_equals(v, "64x1")) return IndexScoreShape::Tile64x1;
  if (env_equals(v, "32x1")) return IndexScoreShape::Tile32x1;
  if (env_equals(v, "auto")) return IndexScoreShape::Auto;
  return otherwise;
}
// Entries a score tile of the shape's launch grid (ShapeTiles, shape_score_blocks: index_select_bins.cuh); auto: the
// grid of 32x1.
inline int shape_tile_entries(IndexScoreShape shape) {
  return shape == IndexScoreShape::Tile32x1 || shape == IndexScoreShape::Auto ? 32 : 64;
}
inline EnvSwitch<IndexScoreShape>& index_score_shape_switch() {
  static EnvSwitch<IndexScoreShape> shape{"DEEPINFER_INDEX_SCORE_SHAPE", [](const char* v) {
    return index_score_shape_named(v, IndexScoreShape::Auto);
  }};
  return shape;
}
inline IndexScoreShape index_score_shape() { return index_score_shape_switch().get(); }
inline void set_index_score_shape(IndexScoreShape shape) { index_score_shape_switch().set(shape); }

// The decode kernels' score staging (bench/gpu/NOTES.md "Query staging in one round trip"; index_scoring.cuh
// StagedQueries, StagedKeys): DEEPINFER_INDEX_QUERY_STAGING=batched (the default since session 19; anything else
// reads as batched) | loop. batched: a score block's queries (8 16-byte loads a thread at dim 128), head weights and first
// tile's keys (the page-table row, then 16-byte key loads) all in flight before the first store: ~2 round trips to L2
// instead of the loop's ~8 for the queries and 2 per key vector. The same values at the same shared addresses, so the
// same scores bit for bit and the same selection (the tests compare them). The V4 decode select in the bins form
// (DEEPINFER_INDEX_SELECT=bins, every score shape) and the V4.1 CSA2 decode kernels (TopK, Reindex, the candidate
// source, every DEEPINFER_CSA2_SCORE_SHAPE); not the old and new forms (new batches its own loads) nor the split
// (prefill) score kernels. Read once, at the first select; set_index_score_staging overrides it (tests, benches). A
// CUDA graph replays the staging it was captured with. Run 112, one row per call loop / batched (auto shape): V4 16.79
// / 12.89 us at 1024 entries (score_to_ticket 10.72 / 6.91 us), 18.31 / 14.44 at 2048, 57.36 / 52.30 at 16384; CSA2
// TopK 17.41 / 13.48 and the candidate source 17.63 / 15.03 at 1024. Whole model at 4K batch 1 (same call): V4 2.668 /
// 2.677 -> 2.670 / 2.679 ms (flat), V4.1 2.299 / 2.304 -> 2.287 / 2.295 (-0.4 %).
enum class IndexScoreStaging : int { Loop, Batched };
inline EnvSwitch<IndexScoreStaging>& index_score_staging_switch() {
  static EnvSwitch<IndexScoreStaging> staging{"DEEPINFER_INDEX_QUERY_STAGING", [](const char* v) {
    return env_equals(v, "loop") ? IndexScoreStaging::Loop : IndexScoreStaging::Batched;
  }};
  return staging;
}
inline IndexScoreStaging index_score_staging() { return index_score_staging_switch().get(); }
inline void set_index_score_staging(IndexScoreStaging staging) { index_score_staging_switch().set(staging); }

// Which block of a decode row selects (bench/gpu/NOTES.md "Session 66"; index_select_bins.cuh selector_select, V4.1's
// DEEPINFER_CSA2_SELECTOR): DEEPINFER_INDEX_SELECTOR=block (the default since session 66, runs 298-299: V4 batch 1
// -0.85 / -0.4 %; one more block a row, which
// rehearses the select's code while the score blocks score, then waits for their arrivals, so its first run of the code
// is off the critical path, where run 291's V4 trace has the CSA layers' select, 6.1-8.4 us past the query branch's
// wq_b) | ticket (the row's last score block to arrive selects). The same rows out either way (the tests compare them).
// The bins form with the batched staging at the auto shape (the defaults), where the one more block a row keeps the
// grid within one wave (at 4K context: up to 7 rows); every other decode launch keeps the ticket.
// Read once, at the first select; set_index_selector overrides it (tests, benches). A CUDA graph replays the form it
// was captured with.
enum class IndexSelector : int { Ticket, Block };
inline EnvSwitch<IndexSelector>& index_selector_switch() {
  static EnvSwitch<IndexSelector> selector{"DEEPINFER_INDEX_SELECTOR", [](const char* v) {
    return env_equals(v, "ticket") ? IndexSelector::Ticket : IndexSelector::Block;
  }};
  return selector;
}
inline IndexSelector index_selector() { return index_selector_switch().get(); }
inline void set_index_selector(IndexSelector selector) { index_selector_switch().set(selector); }

// How the selector form's later radix passes count (index_select_bins.cuh LaterPasses; bench/gpu/NOTES.md "Session
// 66"): DEEPINFER_INDEX_LATER_PASSES=plain (the default: one shared atomic per key; V4's pass 2 in the step 2.43 ->
// 1.63 K cycles, run 298) | match (one atomic per distinct bin a warp, as every other select counts). The same counts,
// so the same rows. V4's selector form (DEEPINFER_INDEX_SELECTOR=block). Read once; set_index_later_passes overrides
// it (tests, benches).
enum class IndexLaterPasses : int { Match, Plain };
inline EnvSwitch<IndexLaterPasses>& index_later_passes_switch() {
  static EnvSwitch<IndexLaterPasses> passes{"DEEPINFER_INDEX_LATER_PASSES", [](const char* v) {
    return env_equals(v, "match") ? IndexLaterPasses::Match : IndexLaterPasses::Plain;
  }};
  return passes;
}
inline IndexLaterPasses index_later_passes() { return index_later_passes_switch().get(); }
inline void set_index_later_passes(IndexLaterPasses passes) { index_later_passes_switch().set(passes); }

// Diagnostics for benchmarks (bench/gpu/index_select_latency.cu): indexer_select's decode kernel of `rows` (1..8)
// rows in the bins form (IndexDecodeForm::Bins, the default), the score shape index_score_shape() and the staging
// index_score_staging() select, in the selector form where indexer_select takes it (index_selector()), once on
// `stream`, eager, with phase stamps of row 0 (rows past it run unstamped), then a stream synchronize. Same arguments
// and result (rows_out) as indexer_select.
// Returns, in microseconds after the first block of row 0 started (%globaltimer, ticks of ~1 us on some GPUs): [0]
// row 0's selecting block holds its ticket (the selector form: has seen every arrival), [1] its selection is written;
// then that block's SM clock cycles
// between its marks: [2] ticket -> keys (the scores copied into shared memory as keys), [3..6] -> the end of radix
// pass 1..4 (0 for passes the early stop skipped), [7] -> the emit done; then row 0's score block 0 (its last
// score_entries call's marks; one call a block at one row up to 264 tiles): its SM clock cycles [8] from its start to
// the queries staged (batched: the queries stored, the keys' loads issued), [9] -> the first tile's keys staged, [10]
// -> its scores written (the channel loop, head sums, partials; before its arrival), and [11] in microseconds after
// the first score block started (as [0]), its scores written. Each mark of block 0 follows a barrier (the stamps
// kernel only). Not capturable (it allocates and synchronizes).
// The names of its values, as bench/gpu/index_select_latency.cu prints them (v4_decode --select-stamps uses them).
inline constexpr const char* kSelectPhaseNames[12] = {
    "score_to_ticket_us",    "score_to_end_us",    "keys_cycles",         "pass1_cycles",
    "pass2_cycles",          "pass3_cycles",       "pass4_cycles",        "emit_cycles",
    "block0_queries_cycles", "block0_keys_cycles", "block0_score_cycles", "block0_scored_us"};
std::vector<double> indexer_decode_select_phases(const bf16* q, const float* head_w, const int32_t* slots,
                                                 const int32_t* positions, int rows, const IndexerGpu& w,
                                                 const PagedPool& keys, int32_t* rows_out, void* workspace,
                                                 cudaStream_t stream);

// The same phase stamps inside the model's decode step (bench/gpu/NOTES.md "Decode select: phase stamps inside the
// model"; the select alone takes 12.2-12.8 us per call at 1024 entries, index_select_latency, where the batch-1 V4
// step's launches take 20.7 us). With index_select_stamps() on, every decode select of indexer_select (eager or
// captured) in the bins form runs the phases kernel of indexer_decode_select_phases (the same shape and staging, the
// same select code; the production kernels are untouched) on its layer's record, row 0's stamps, overwritten at each
// launch: the slots are the layers' indexers (weights_proj names the layer) in the order of their first stamped
// launch on the device (the model's CSA layer order when the switch is set before the first step), at most 256. Same
// selection either way. DEEPINFER_INDEX_SELECT_STAMPS=1 sets it process-wide, read once; set_index_select_stamps
// overrides it (v4_decode --select-stamps; switching on allocates the current device's records, so call it before a
// capture). Off, a decode select costs one relaxed atomic load more. The V4.1 CSA2 indexer's decode select
// (csa2_indexer_select) does the same on the same records (csa2_decode_select_phases_kernel; the stamps are
// select_stamps.cuh's for both), one per index source.
bool index_select_stamps();
void set_index_select_stamps(bool on);
// The warm rerun of the stamped selects (v4_decode --select-stamps-warm; bench/gpu/NOTES.md "Session 34"): with it
// on, each stamped launch's last block runs its select (the radix passes and the emit) twice on the same keys and
// stamps the second run, whose code is then in the SM's instruction cache; the difference to the plain stamps is
// the first run's instruction fetch. Both runs write the same rows. DEEPINFER_INDEX_SELECT_STAMPS=warm sets both
// switches process-wide; read at each stamped launch (a captured launch keeps the value it was captured with).
bool index_select_stamps_warm();
void set_index_select_stamps_warm(bool on);
// One layer's record as the last stamped launch left it.
struct IndexSelectStampRecord {
  int slot = 0;
  uint64_t launches = 0;  // stamped launches closed on this record (0: never written)
  int grid = 0;           // score blocks of row 0's launch (gridDim.x)
  int active = 0;         // of which active (the arrival count: ShapeTiles::active)
  int entries = 0;        // entries row 0 saw (n)
  double start_spread_us = 0;  // the latest active block's start after the first's (score blocks the SMs took late)
  // After the first active block's start: the last queries staged, the first and the last scores done among the
  // active score blocks (which block, and which phase, sets the ticket).
  double staged_latest_us = 0, scored_first_us = 0, scored_latest_us = 0;
  std::vector<double> phases;  // indexer_decode_select_phases' 12 values, the same units
};
// The current device's records, slot order; call with the stamped launches complete (e.g. the stream synchronized:
// it copies on the legacy stream).
std::vector<IndexSelectStampRecord> indexer_select_stamps_read();

}  // namespace deepinfer::cuda
