// index_select_latency: where the ~22 us of the lightning indexer's decode select go at batch 1 (bench/gpu/
// NOTES.md "Decode select by bins").
//
// Why: at a batch-1 V4-Flash step, index_decode_select_kernel<true, false> (the default select by bins) is the
// largest single latency kernel of a CSA layer: its score blocks score the row's compressed entries (64 heads x
// 128, one block per 64-entry tile), then the row's last block to arrive selects the top 512. Nobody has measured
// how the time splits between the scoring and the last block's select. This runs the decode kernel through the
// public entry points (indexer_select; indexer_decode_select_phases for the stamps) on one decode row at V4-Flash
// shapes (64 heads x 128, top-k 512, ratio 4, pages of 64 entries scattered over the pool) with 1024, 2048, 16384
// and 19200 visible entries (4K, 8K, 64K and 76K contexts; 19200 is past the shared copy: the select reads its keys
// from L2), random FP4-valued queries and keys:
//   (a) per call, every decode form (old / bins / new): CUDA events over a CUDA graph of 20 launches,
//       10 graph replays per timing after one warm-up replay (latency_bench.h graph_us_per_call), median of 5;
//       then the bins and new forms at the other score shapes (DEEPINFER_INDEX_SCORE_SHAPE 64x1, 32x1, and the bins
//       form at auto; bench/gpu/NOTES.md "Decode score shape"), each checked to select what the default shape (64x2)
//       selects;
//   (b) the select by bins (the default form) at each score shape, one eager launch at a time, 20 launches after
//       one warm-up, medians: %globaltimer from the first score block's start to the last block's ticket and to its
//       emit (us), and the last block's clock64 between its marks (cycles): ticket -> keys staged, each radix pass,
//       the emit.
//   (c) the V4.1 CSA2 indexer's decode select (csa2_indexer_select at <= 8 rows: csa2_decode_select_kernel, and
//       csa2_decode_candidates_kernel for the candidate source) on the same keys and pages with the first 32 heads
//       (V4.1's index_n_heads), per call as (a), at each of its score shapes (DEEPINFER_CSA2_SCORE_SHAPE; bench/gpu/
//       NOTES.md "V4.1 CSA2 decode score shape"): TopK at ratio 2 and the candidate source at ratio 1 (blocks of 8,
//       2048 kept), n visible entries each, each shape checked to select what 64x2 selects.
// Each of (a)'s bins cases, (b) and (c) also with the score blocks' batched staging (DEEPINFER_INDEX_QUERY_STAGING=
// batched, keys "..._batched"; bench/gpu/NOTES.md "Query staging in one round trip"), checked the same way; (b)'s
// phases then add score block 0's own: clock64 cycles from its start to the queries staged, to the first tile's keys
// staged, to its scores written, and its scores written in us after the first score block started.
// The keys stay in L2 between launches (256 KB at 1024 entries, 4 MB at 16384); in the model's step they were
// written steps earlier and may come from HBM, so (a) is a lower bound for the score blocks' part.
// (d) --cold GB (default off): in a batch-1 V4 step the bins auto batched select takes 20.7 us with nothing beside it,
// against 12.9 us here (run 113's trace against run 112), and the MoE routing shows the same (bench/gpu/NOTES.md
// "Fused decode routing in the step: stamps and a TLB experiment"). The step streams ~62 GB of weights between two
// selects; --cold allocates a buffer of GB GiB (cold_translations.cuh) and before each measured call reads one value
// per page of it (--cold-stride KB, default 2048: one per 2 MB page), then its first --cold-stream MB (default 0)
// through L2, so that the select's translations (and with the stream, its L2 lines) are cold as in the step. Printed
// next to the warm keys with a "_cold" suffix, for the bins form at auto (loop and batched staging) and the CSA2 TopK
// at auto batched: (a) and (c) "..._us_per_call_cold" from a graph of 20 (cold, select) pairs minus a graph of 20 colds
// alone ("cold_us_per_call": that part alone), (b) "..._phases_cold" (the stamps need no subtraction: they start at
// the first score block's start), with the 21 runs' score_to_end_us ("score_to_end_us_runs": the first in the process
// was the special one in session 14's experiment). Row key "cold": the buffer, stride and stream in bytes. The default
// run (no --cold) measures and prints exactly as before.
//
// Usage: index_select_latency [--entries N[,N...]] [--cold GB [--cold-stride KB] [--cold-stream MB]]
//                             [--out results.json]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "cuda/check.h"
#include "layers/attention/decode_fused.h"
#include "layers/indexer/csa2_indexer_gpu.h"
#include "layers/indexer/indexer_gpu.h"
#include "cold_translations.cuh"
#include "latency_bench.h"

namespace {

using json = nlohmann::json;
using deepinfer::bench::ColdTranslations;
using deepinfer::bench::median;
using deepinfer::cuda::IndexDecodeForm;
using deepinfer::cuda::IndexScoreShape;
using deepinfer::cuda::IndexScoreStaging;

constexpr int kHeads = 64, kDim = 128, kTopk = 512, kRatio = 4, kPageSize = 64;
constexpr int kCsa2Heads = 32, kCsa2BlockSize = 8, kCsa2TopkBlocks = 2048;  // V4.1's CSA2 indexer (model-spec §4)

// FP4 (e2m1) values times a power-of-two scale per 32, as the queries and keys are after their finish (model-spec
// §3): exact in bf16.
std::vector<float> fp4_rows(std::mt19937& rng, size_t count) {
  static const float kFp4[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::uniform_int_distribution<int> value(0, 15), scale(-4, 0);
  std::vector<float> v(count);
  float s = 1.0f;
  for (size_t i = 0; i < count; ++i) {
    if (i % 32 == 0) s = std::ldexp(1.0f, scale(rng));
    const int c = value(rng);
    v[i] = (c & 8 ? -1.0f : 1.0f) * kFp4[c & 7] * s;
  }
  return v;
}

template <class T>
T* device_copy(const std::vector<T>& h) {
  T* d = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&d, sizeof(T) * h.size()));
  DI_CUDA_CHECK(cudaMemcpy(d, h.data(), sizeof(T) * h.size(), cudaMemcpyHostToDevice));
  return d;
}

const char* form_name(IndexDecodeForm f) {
  switch (f) {
    case IndexDecodeForm::Old: return "old";
    case IndexDecodeForm::Bins: return "bins";
    case IndexDecodeForm::New: return "new";
  }
  return "?";
}

const char* shape_name(IndexScoreShape s) {
  switch (s) {
    case IndexScoreShape::Tile64x2: return "64x2";
    case IndexScoreShape::Tile64x1: return "64x1";
    case IndexScoreShape::Tile32x1: return "32x1";
    case IndexScoreShape::Auto: return "auto";
  }
  return "?";
}

// "" for the loop staging (the default), "_batched" for the batched one.
std::string staging_suffix(IndexScoreStaging staging) {
  return staging == IndexScoreStaging::Batched ? "_batched" : "";
}

// (d)'s per-call time with `cold` before each call (20 pairs minus 20 colds, as (a)): row[key + "_us_per_call_cold"],
// row["cold_us_per_call"] the cold part alone, one line printed.
void measure_cold(const ColdTranslations& cold, const std::string& key, json& row, cudaStream_t stream,
                  const std::function<void()>& enqueue) {
  constexpr int kCalls = 20;
  double cold_us = 0.0;
  const double us = deepinfer::bench::cold_us_per_call(stream, cold, kCalls, 10, 5, enqueue, &cold_us);
  row[key + "_us_per_call_cold"] = us;
  row["cold_us_per_call"] = cold_us;
  std::printf("  %-18s %7.2f us per call (graph of %d (cold, call) pairs minus %d colds: %.2f us each)\n",
              (key + "_cold").c_str(), us, kCalls, kCalls, cold_us);
}

json measure(int n, const ColdTranslations& cold, cudaStream_t stream) {
  namespace cu = deepinfer::cuda;
  std::mt19937 rng(1234 + n);
  const int max_pages = (n + kPageSize - 1) / kPageSize + 16;  // the slot's capacity past n, as in a live pool
  const int pool_pages = max_pages + 64;                       // other slots' pages in between
  std::vector<int32_t> pages(static_cast<size_t>(pool_pages));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  pages.resize(static_cast<size_t>(max_pages));  // slot 0's page table
  const std::vector<float> keys_f = fp4_rows(rng, size_t(pool_pages) * kPageSize * kDim);
  std::vector<uint16_t> keys_h(keys_f.size());
  for (size_t i = 0; i < keys_f.size(); ++i) keys_h[i] = deepinfer::float_to_bf16(keys_f[i]);
  const std::vector<float> q_f = fp4_rows(rng, size_t(kHeads) * kDim);  // FP4 values: exact in bf16
  std::vector<uint16_t> q_h(q_f.size());
  for (size_t i = 0; i < q_f.size(); ++i) q_h[i] = deepinfer::float_to_bf16(q_f[i]);
  std::normal_distribution<float> wdist(0.0f, 0.05f);
  std::vector<float> w_h(kHeads);
  for (float& x : w_h) x = wdist(rng);

  uint16_t* keys = device_copy(keys_h);
  int32_t* table = device_copy(pages);
  cu::bf16* q = reinterpret_cast<cu::bf16*>(device_copy(q_h));
  float* head_w = device_copy(w_h);
  int32_t* slots = device_copy(std::vector<int32_t>{0});
  int32_t* positions = device_copy(std::vector<int32_t>{n * kRatio - 1});  // (pos + 1) / ratio = n visible
  int32_t* out = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&out, sizeof(int32_t) * kTopk));
  cu::IndexerGpu w;
  w.heads = kHeads;
  w.dim = kDim;
  w.topk = kTopk;
  w.compressor.ratio = kRatio;
  const cu::PagedPool pool{reinterpret_cast<cu::bf16*>(keys), table, max_pages, kPageSize, kDim};
  void* ws = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&ws, cu::indexer_workspace_bytes(1, max_pages * kPageSize, w)));
  auto select = [&] { cu::indexer_select(q, head_w, slots, positions, 1, w, pool, out, ws, stream); };

  json row = {{"entries", n}, {"heads", kHeads}, {"dim", kDim}, {"topk", kTopk}, {"rows", 1}};
  if (cold.on())
    row["cold"] = {{"bytes", cold.bytes()}, {"stride_bytes", cold.stride_bytes()}, {"stream_bytes", cold.stream_bytes()}};
  std::printf("n = %d entries (one row, %d heads x %d, top-%d):\n", n, kHeads, kDim, kTopk);

  // (a) per call from a graph of 20 launches: every form at the default score shape, then the bins and new forms at
  // the other shapes (keys "<form>_<shape>_..."), then the bins form with the batched staging (keys
  // "bins[_<shape>]_batched_..."). Every form, shape and staging selects the same entries (the GPU tests check it
  // properly); "_same_as_old" compares with the old form at 64x2.
  cu::set_decode_fused(true);
  std::vector<int32_t> reference;
  constexpr IndexScoreStaging kLoop = IndexScoreStaging::Loop, kBatched = IndexScoreStaging::Batched;
  struct Case {
    IndexDecodeForm form;
    IndexScoreShape shape;
    IndexScoreStaging staging;
  };
  const Case cases[] = {{IndexDecodeForm::Old, IndexScoreShape::Tile64x2, kLoop},
                        {IndexDecodeForm::Bins, IndexScoreShape::Tile64x2, kLoop},
                        {IndexDecodeForm::New, IndexScoreShape::Tile64x2, kLoop},
                        {IndexDecodeForm::Bins, IndexScoreShape::Tile64x1, kLoop},
                        {IndexDecodeForm::Bins, IndexScoreShape::Tile32x1, kLoop},
                        {IndexDecodeForm::New, IndexScoreShape::Tile32x1, kLoop},
                        {IndexDecodeForm::Bins, IndexScoreShape::Auto, kLoop},
                        {IndexDecodeForm::Bins, IndexScoreShape::Tile64x2, kBatched},
                        {IndexDecodeForm::Bins, IndexScoreShape::Tile32x1, kBatched},
                        {IndexDecodeForm::Bins, IndexScoreShape::Auto, kBatched}};
  for (const auto& [form, shape, staging] : cases) {
    cu::set_index_decode_form(form);
    cu::set_index_score_shape(shape);
    cu::set_index_score_staging(staging);
    select();
    DI_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<int32_t> got(kTopk);
    DI_CUDA_CHECK(cudaMemcpy(got.data(), out, sizeof(int32_t) * kTopk, cudaMemcpyDeviceToHost));
    if (reference.empty()) reference = got;
    const bool same = got == reference;
    constexpr int kCalls = 20;
    const double us = deepinfer::bench::graph_us_per_call(stream, kCalls, 10, 5, select);
    const std::string key = std::string(form_name(form)) +
                            (shape == IndexScoreShape::Tile64x2 ? "" : std::string("_") + shape_name(shape)) +
                            staging_suffix(staging);
    row[key + "_us_per_call"] = us;
    row[key + "_same_as_old"] = same;
    std::printf("  %-18s %7.2f us per call (graph of %d)%s\n", key.c_str(), us, kCalls,
                same ? "" : "  SELECTION DIFFERS FROM old");
    if (cold.on() && form == IndexDecodeForm::Bins && shape == IndexScoreShape::Auto)
      measure_cold(cold, key, row, stream, select);
  }
  cu::set_index_score_shape(IndexScoreShape::Tile64x2);
  cu::set_index_score_staging(kLoop);

  // (b) the phases of the select by bins at each score shape and staging (keys "bins_phases", "bins_<shape>_phases",
  // "bins[_<shape>]_batched_phases"), each stamped run's selection checked against (a)'s. The last block's phases
  // (names[2, 8): its select after the ticket), then score block 0's (names[8, 12)).
  const char* names[] = {"score_to_ticket_us",    "score_to_end_us",    "keys_cycles",         "pass1_cycles",
                         "pass2_cycles",          "pass3_cycles",       "pass4_cycles",        "emit_cycles",
                         "block0_queries_cycles", "block0_keys_cycles", "block0_score_cycles", "block0_scored_us"};
  constexpr size_t kNames = sizeof(names) / sizeof(names[0]);
  std::vector<std::pair<IndexScoreShape, IndexScoreStaging>> phase_cases;
  for (IndexScoreStaging staging : {kLoop, kBatched})
    for (IndexScoreShape shape : {IndexScoreShape::Tile64x2, IndexScoreShape::Tile64x1, IndexScoreShape::Tile32x1,
                                  IndexScoreShape::Auto})
      phase_cases.emplace_back(shape, staging);
  // 21 stamped runs (each after `cold` with cold_runs), the medians of the last 20 as row[key + phases_key], printed.
  auto phase_runs = [&](const std::string& key, const char* phases_key, bool cold_runs) {
    std::vector<std::vector<double>> v(kNames);
    std::vector<double> score_to_end_runs;
    bool same = true;
    for (int run = 0; run < 21; ++run) {
      if (cold_runs) cold.enqueue(stream);
      const std::vector<double> p =
          cu::indexer_decode_select_phases(q, head_w, slots, positions, 1, w, pool, out, ws, stream);
      std::vector<int32_t> got(kTopk);
      DI_CUDA_CHECK(cudaMemcpy(got.data(), out, sizeof(int32_t) * kTopk, cudaMemcpyDeviceToHost));
      same &= got == reference;
      score_to_end_runs.push_back(p[1]);
      if (run == 0) continue;  // warms L2 and the SMs
      for (size_t i = 0; i < p.size() && i < v.size(); ++i) v[i].push_back(p[i]);
    }
    json phases;
    double select_cycles = 0;
    std::printf("  %-18s %s:", key.c_str(), phases_key);
    for (size_t i = 0; i < v.size(); ++i) {
      const double m = median(v[i]);
      phases[names[i]] = m;
      if (i >= 2 && i < 8) select_cycles += m;
      std::printf(i < 2 || i == 11 ? " %s %.2f" : " %s %.0f", names[i], m);
    }
    phases["select_cycles"] = select_cycles;
    phases["same_as_old"] = same;
    if (cold_runs) phases["score_to_end_us_runs"] = score_to_end_runs;
    std::printf(" | last block after its ticket %.0f cycles%s\n", select_cycles,
                same ? "" : "  SELECTION DIFFERS FROM old");
    row[key + "_" + phases_key] = phases;
  };
  for (const auto& [shape, staging] : phase_cases) {
    cu::set_index_score_shape(shape);
    cu::set_index_score_staging(staging);
    const std::string key = std::string(form_name(IndexDecodeForm::Bins)) +
                            (shape == IndexScoreShape::Tile64x2 ? "" : std::string("_") + shape_name(shape)) +
                            staging_suffix(staging);
    phase_runs(key, "phases", false);
    if (cold.on() && shape == IndexScoreShape::Auto) phase_runs(key, "phases_cold", true);
  }
  cu::set_index_score_shape(IndexScoreShape::Tile64x2);
  cu::set_index_score_staging(kLoop);

  // (c) the CSA2 decode select at each score shape and staging (keys "csa2_<selection>_<shape>[_batched]_us_per_call");
  // the same queries' first 32 heads, weights and keys.
  {
    cu::Csa2IndexerGpu c;
    c.heads = kCsa2Heads;
    c.dim = kDim;
    c.topk = kTopk;
    const int max_entries = max_pages * kPageSize;
    cu::CandidateBlocks blocks;
    blocks.stride = (max_entries + kCsa2BlockSize - 1) / kCsa2BlockSize;
    blocks.block_size = kCsa2BlockSize;
    blocks.topk_blocks = kCsa2TopkBlocks;
    DI_CUDA_CHECK(cudaMalloc(&blocks.flags, size_t(blocks.stride)));
    DI_CUDA_CHECK(cudaMemset(blocks.flags, 0, size_t(blocks.stride)));  // TopK leaves them; the source writes them
    void* csa2_ws = nullptr;
    DI_CUDA_CHECK(cudaMalloc(&csa2_ws, cu::csa2_indexer_workspace_bytes(1, max_entries)));
    int32_t* csa2_positions[2] = {device_copy(std::vector<int32_t>{n * 2 - 1}), device_copy(std::vector<int32_t>{n - 1})};
    const std::pair<cu::Csa2Selection, int> selections[] = {{cu::Csa2Selection::TopK, 2},
                                                            {cu::Csa2Selection::CandidateSource, 1}};
    for (const auto& [sel, ratio] : selections) {
      const char* sel_name = sel == cu::Csa2Selection::TopK ? "topk" : "candidates";
      auto csa2_select = [&, sel = sel, ratio = ratio] {
        cu::csa2_indexer_select(q, head_w, slots, csa2_positions[ratio == 2 ? 0 : 1], 1, c, ratio, pool, max_entries,
                                sel, blocks, out, csa2_ws, stream);
      };
      std::vector<int32_t> csa2_reference;
      std::vector<std::pair<IndexScoreShape, IndexScoreStaging>> csa2_cases;
      for (IndexScoreStaging staging : {kLoop, kBatched})
        for (IndexScoreShape shape : {IndexScoreShape::Tile64x2, IndexScoreShape::Auto, IndexScoreShape::Tile32x1,
                                      IndexScoreShape::Tile64x1})
          csa2_cases.emplace_back(shape, staging);
      for (const auto& [shape, staging] : csa2_cases) {
        cu::set_csa2_score_shape(shape);
        cu::set_index_score_staging(staging);
        csa2_select();
        DI_CUDA_CHECK(cudaStreamSynchronize(stream));
        std::vector<int32_t> got(size_t(kTopk) + size_t(blocks.stride));  // rows_out, then the candidate flags
        DI_CUDA_CHECK(cudaMemcpy(got.data(), out, sizeof(int32_t) * kTopk, cudaMemcpyDeviceToHost));
        std::vector<uint8_t> flags(size_t(blocks.stride));
        DI_CUDA_CHECK(cudaMemcpy(flags.data(), blocks.flags, flags.size(), cudaMemcpyDeviceToHost));
        std::copy(flags.begin(), flags.end(), got.begin() + kTopk);
        if (csa2_reference.empty()) csa2_reference = got;
        const bool same = got == csa2_reference;
        constexpr int kCalls = 20;
        const double us = deepinfer::bench::graph_us_per_call(stream, kCalls, 10, 5, csa2_select);
        const std::string key = std::string("csa2_") + sel_name + "_" + shape_name(shape) + staging_suffix(staging);
        row[key + "_us_per_call"] = us;
        row[key + "_same_as_64x2"] = same;
        std::printf("  %-30s %7.2f us per call (graph of %d)%s\n", key.c_str(), us, kCalls,
                    same ? "" : "  SELECTION DIFFERS FROM 64x2");
        if (cold.on() && sel == cu::Csa2Selection::TopK && shape == IndexScoreShape::Auto && staging == kBatched)
          measure_cold(cold, key, row, stream, csa2_select);
      }
    }
    cu::set_csa2_score_shape(IndexScoreShape::Tile64x2);
    cu::set_index_score_staging(kLoop);
    cudaFree(csa2_positions[1]);
    cudaFree(csa2_positions[0]);
    cudaFree(csa2_ws);
    cudaFree(blocks.flags);
  }

  cudaFree(ws);
  cudaFree(out);
  cudaFree(positions);
  cudaFree(slots);
  cudaFree(head_w);
  cudaFree(q);
  cudaFree(table);
  cudaFree(keys);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> entries{1024, 2048, 16384, 19200};
  // --entries N[,N...]: the visible entry counts (each above top-k).
  auto entries_option = [&](int i) {
    if (std::strcmp(argv[i], "--entries") || i + 1 >= argc) return -1;
    entries.clear();
    for (const char* p = argv[i + 1]; *p;) {
      char* end = nullptr;
      const long v = std::strtol(p, &end, 10);
      if (end == p || v <= kTopk) {
        std::fprintf(stderr, "--entries: counts above top-k (%d), comma-separated\n", kTopk);
        return -1;
      }
      entries.push_back(int(v));
      p = *end == ',' ? end + 1 : end;
    }
    return i + 1;
  };
  // --cold GB [--cold-stride KB] [--cold-stream MB]: (d).
  double cold_gib = 0.0, cold_stride_kib = 2048.0, cold_stream_mib = 0.0;
  auto option = [&](int i) {
    if (!std::strcmp(argv[i], "--entries")) return entries_option(i);
    const std::pair<const char*, double*> cold_options[] = {
        {"--cold", &cold_gib}, {"--cold-stride", &cold_stride_kib}, {"--cold-stream", &cold_stream_mib}};
    for (const auto& [name, value] : cold_options) {
      if (std::strcmp(argv[i], name) || i + 1 >= argc) continue;
      char* end = nullptr;
      *value = std::strtod(argv[i + 1], &end);
      if (end == argv[i + 1] || *end || *value < 0) {
        std::fprintf(stderr, "%s: a number >= 0\n", name);
        return -1;
      }
      return i + 1;
    }
    return -1;
  };
  return deepinfer::bench::run_latency_bench(
      argc, argv, "index_select_latency",
      "the lightning indexer's decode select for one row: (a) us per call of every form from a CUDA graph of 20 calls, "
      "and of the bins and new forms at the score shapes 64x1 and 32x1 and the bins form at auto "
      "(DEEPINFER_INDEX_SCORE_SHAPE); "
      "(b) the select by bins at each score shape: %globaltimer from the first score block to the last block's ticket "
      "and end, and the last block's clock64 between its phase marks, medians of 20 eager launches; "
      "(c) the V4.1 CSA2 decode select (TopK, candidate source) per call at each DEEPINFER_CSA2_SCORE_SHAPE; "
      "(a)'s bins cases, (b) and (c) also with DEEPINFER_INDEX_QUERY_STAGING=batched (keys ..._batched)",
      [&](const cudaDeviceProp&) {
        std::printf("  the lightning indexer's decode select, one row\n");
        cudaStream_t stream;
        DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        ColdTranslations off;
        std::unique_ptr<ColdTranslations> cold;
        if (cold_gib > 0) {
          cold = std::make_unique<ColdTranslations>(cold_gib, size_t(cold_stride_kib * 1024),
                                                    size_t(cold_stream_mib * 1024 * 1024));
          std::printf("  --cold: %.2f GiB, one read per %zu bytes, then %zu bytes through L2, before each cold call\n",
                      double(cold->bytes()) / double(size_t(1) << 30), cold->stride_bytes(), cold->stream_bytes());
        }
        json rows = json::array();
        for (int n : entries) rows.push_back(measure(n, cold ? *cold : off, stream));
        DI_CUDA_CHECK(cudaStreamDestroy(stream));
        return rows;
      },
      option, "[--entries N[,N...]] [--cold GB [--cold-stride KB] [--cold-stream MB]] ");
}
