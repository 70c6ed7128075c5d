// The V4.1 CSA2 indexer on the GPU (model-spec.md §4 "Indexer (index sources)", layer roles §1.2), the CUDA twin
// of csa2_index_scores / select_candidate_blocks / select_index_topk (csa2_indexer.cpp). Its keys are the index
// keys that csa2_compressor_push writes for the group's Full layer (the owner's running key cache: the corrected
// behaviour of model-spec §4 "Known reference bug", because the caller always passes the owner's key pool); the
// selection names rows of that layer's compressed-KV pool, which shares the keys' paging.
#pragma once

#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>

#include "core/env_switch.h"
#include "cuda/kernels.h"
#include "layers/compressor/compressor_gpu.h"
#include "layers/indexer/indexer_gpu.h"

namespace deepinfer::cuda {

struct Csa2IndexerGpu {
  Fp8Linear wq_b;                      // [heads * dim, q_lora], FP8 with 32 x 32 blocks (V4.1)
  const bf16* weights_proj = nullptr;  // [heads, hidden]
  int heads = 0, dim = 0, topk = 0;    // index_n_heads (32), index_head_dim (128), index_topk (512)
  int64_t hidden = 0;
};

// What an index source selects (model-spec §4, §1.2 roles).
enum class Csa2Selection {
  TopK,             // Full layers 2, 8, 14: the top-k of every visible entry
  CandidateSource,  // layer 20: publishes the candidate blocks; its own top-k is not masked by them
  Reindex,          // layers 24 .. 36: the top-k of the visible entries inside the published candidate blocks
};

// The candidate blocks of each row of a step (a per-step transient, model-spec §6): block b covers the entries
// [b * block_size, (b + 1) * block_size). The candidate source writes them, the Reindex layers of the same step
// read them for the same rows.
struct CandidateBlocks {
  uint8_t* flags = nullptr;  // [rows, stride]: 1 for a candidate block, 0 otherwise (also past the visible ones)
  int stride = 0;            // at least ceil(max_entries / block_size)
  int block_size = 0;        // candidate_block_size (8)
  int topk_blocks = 0;       // candidate_topk_blocks (2048)
};

// Workspace of csa2_indexer_select: the fp32 scores of up to 128 rows at a time, max_entries apart.
// `max_entries` bounds the entries visible to one row, (max position + 1) / ratio (ratio 1 on the candidate
// source's group: the whole context); rows seeing more are cut to it.
size_t csa2_indexer_workspace_bytes(int rows, int max_entries);

// Index queries (csa2_index_scores' first half): q = wq_b . qr (qr_q [rows, q_lora] e4m3 / qr_s [rows, q_lora / 32]:
// the FP8 W8A8 input of model-spec §2, the same codes the attention's wq_b takes), per-head RoPE at the row's
// position on the last rope_dim channels, FP4 (ue8m0, block 32; no Hadamard in V4.1); head weights
// w = (weights_proj . x) * (dim * heads)^-1/2. x [rows, hidden] bf16 is the normalised attention input. q_out is the
// projection's fp32 scratch; the finished queries go to q_fp4 as bf16 (FP4 values, exact there).
void csa2_indexer_query(const uint8_t* qr_q, const float* qr_s, int64_t q_lora, const bf16* x,
                        const int32_t* positions, int rows, const Csa2IndexerGpu& w, const float* inv_freq,
                        int rope_dim, float* q_out /*[rows, heads*dim]*/, bf16* q_fp4 /*[rows, heads*dim]*/,
                        float* head_w /*[rows, heads]*/, cublasHandle_t blas, cudaStream_t stream);

// For each row: the scores sum_h w_h * relu(q_h . k_s) (q [rows, heads * dim] bf16, 16-byte aligned:
// csa2_indexer_query's q_fp4) of the visible keys s < (pos + 1) / ratio of its slot
// (at most the pool's per-slot capacity and max_entries), then per `selection` the candidate blocks (block score
// = max over its entries, the newest visible block forced in, the best topk_blocks kept, ties to the lower block)
// and the top `w.topk` entries (ties to the lower entry), written as rows of the keys' paging in ascending entry
// order into rows_out [rows, topk], -1 past the number selected. Every visible entry must have a page.
// `candidates` is unused for TopK, written for CandidateSource, read for Reindex. At decode (<= 8 rows) TopK and
// Reindex take one launch (scores, then the select by bins in the row's last score block: bench/gpu/NOTES.md "V4.1
// CSA2 indexer: decode select by bins", the only decode form since run 86), and so does the candidate source (its
// blocks selected by bins after its top-k, csa2_decode_candidates_kernel: bench/gpu/NOTES.md "V4.1 CSA2 indexer: the
// candidate source's decode select by bins", the only form since run 92; candidate_topk_blocks at most the decode
// kernel's shared copy of the keys, 17,600 at dim 128); otherwise and above 8 rows, the score kernel and one radix
// select block per row. Every form gives the same selection and flags, entry for entry.
void csa2_indexer_select(const bf16* q, const float* head_w, const int32_t* slots, const int32_t* positions,
                         int rows, const Csa2IndexerGpu& w, int ratio, const PagedPool& keys, int max_entries,
                         Csa2Selection selection, const CandidateBlocks& candidates, int32_t* rows_out,
                         void* workspace, cudaStream_t stream);

// The decode kernels' score blocks (bench/gpu/NOTES.md "Decode score shape"; "V4.1 CSA2 decode score shape"): the V4
// decode select's shapes (indexer_gpu.h IndexScoreShape) under their own switch, DEEPINFER_CSA2_SCORE_SHAPE=auto (the
// default since session 19) | 64x2 (every other CSA2 score kernel's shape) | 64x1 | 32x1, the values of V4's
// DEEPINFER_INDEX_SCORE_SHAPE with the same meaning (auto: per row 32-entry tiles where the row's ceil(n / 32) tiles
// fit its blocks, else the 64x2 split). Run 110, one row per call 64x2 / auto: TopK 19.54 / 17.36 us at 1024 entries,
// 21.58 / 19.45 at 2048, 28.09 / 25.98 at 4096, 66.33 / 67.59 at 16384; the candidate source 19.89 / 17.65, 20.93 /
// 18.70, 27.07 / 24.84, 61.60 / 61.20; 10 V4.1-Flash layers at 4K batch 1 within noise (run 108). Its own switch so
// that a V4.1 A/B leaves the V4 indexer alone. TopK, Reindex and the candidate source's decode kernels (<= 8 rows)
// alike; the split kernels (prefill) stay 64x2. The same scores bit for bit in every shape (score_entries: only which
// entries a warp and a thread cover changes, each entry's dot products and its double head sum are the same), so the
// same selection and candidate flags (the tests compare them). Read once, at the first select; set_csa2_score_shape
// overrides it (tests, benches). A CUDA graph replays the shape it was captured with.
inline EnvSwitch<IndexScoreShape>& csa2_score_shape_switch() {
  static EnvSwitch<IndexScoreShape> shape{"DEEPINFER_CSA2_SCORE_SHAPE", [](const char* v) {
    return index_score_shape_named(v, IndexScoreShape::Auto);
  }};
  return shape;
}
// The decode kernels' score staging is V4's switch, DEEPINFER_INDEX_QUERY_STAGING (indexer_gpu.h IndexScoreStaging),
// for every selection and score shape alike (the split kernels keep the loop staging).
inline IndexScoreShape csa2_score_shape() { return csa2_score_shape_switch().get(); }
inline void set_csa2_score_shape(IndexScoreShape shape) { csa2_score_shape_switch().set(shape); }

// Which block of a decode row selects (bench/gpu/NOTES.md "Session 35"): DEEPINFER_CSA2_SELECTOR=block (the default
// since run 196: one more block a row, which rehearses the select's code while the score blocks score, then waits for
// their arrivals, so its first run of the code is off the critical path; V4.1 batch 1 1.955-1.965 -> 1.939-1.952 ms,
// the selects' end 31.6 -> 24.8 us after their first score block's start) | ticket (the row's last score block to
// arrive selects). The same rows out either way (the tests compare them). For the batched staging at the auto and
// 64x2 shapes (V4.1's defaults), where the one more block a row keeps the grid within one wave (selector_fits,
// index_select_bins.cuh: since session 67 the ticket at 8 rows of a 4K context, 33 x 8 blocks instead of 34 x 8; runs
// 300-301, batch 8 -0.27 / -0.16 %); every other decode kernel keeps the ticket. Read once, at the first select;
// set_csa2_selector overrides it (tests, benches). A CUDA graph replays the form it was captured with.
enum class Csa2Selector : int { Ticket, Block };
inline EnvSwitch<Csa2Selector>& csa2_selector_switch() {
  static EnvSwitch<Csa2Selector> selector{"DEEPINFER_CSA2_SELECTOR", [](const char* v) {
    return env_equals(v, "ticket") ? Csa2Selector::Ticket : Csa2Selector::Block;
  }};
  return selector;
}
inline Csa2Selector csa2_selector() { return csa2_selector_switch().get(); }
inline void set_csa2_selector(Csa2Selector selector) { csa2_selector_switch().set(selector); }

}  // namespace deepinfer::cuda
