// Whole-model GPU benchmark of V4-Flash (issue 4; the async rows of issue 5 come later): a synthetic model with the
// V4-Flash widths (hidden 4096, 64 heads of 512, 256 experts top-6 of width 2048, index 64 x 128 top-512, window
// 128, CSA ratio 4 / HCA ratio 128) and random weights in the official formats, built in device memory with as many
// layers as fit next to the caches (--layers), then:
//  - the copy roofline of this run (device-to-device cudaMemcpyAsync, median of 5);
//  - decode step time at batch 1, 8, 64, 256 with 4K and 64K context (each sequence's caches assumed full to that
//    length), replayed from CUDA graphs, with the bytes the step must read (weights touched + KV read, in the formats
//    the engine stores) -> achieved GB/s and the fraction of the copy roofline; host time per step;
//  - prefill tokens/s of one 4K and one 32K prompt in chunks of --chunk rows;
//  - the decode loop at batch 64 and 256 (4K context) with greedy tokens sampled on the device, synchronous (the
//    host reads step N's tokens before it plans and launches N + 1) and asynchronous (N + 1 is launched with its
//    tokens resolved on the device, the host reads N's tokens while N + 1 runs; algorithms.md §5): tokens/s, host
//    time per step, and the device's idle fraction between steps (from events around every step).
// Layer mix: [SWA, SWA] then CSA / HCA alternating, as V4-Flash's compress_ratios [0, 0] + [4, 128] * 20 + [4].
//
// --family v41 runs the same table on V4.1-Flash widths (model-spec §1.2: hidden 5120, 64 heads of 512, q_lora 1280,
// o 8 x 1024, 384 experts top-6 of width 2304, index 32 x 128 top-512, candidate blocks 2048 x 8, window 128, FP8
// blocks 32) with the §1.2 layer roles: the first ceil(N/2) layers of the encoder (0, 1 SWA, 2 Full ratio 2, 3-7
// Reuse, 8 Full, ...) and the first floor(N/2) of the decoder (20 Full ratio 1 + candidate source, 21-23 Reuse, 24
// Reindex, ...), so that both halves' costs show at any N. No Engram layers: each table holds ~384M rows x 256 B
// (98 GB) and does not fit next to the model; the Engram kernel reads 24 rows per token and layer.
//
// usage: v4_decode --out results.json [--family v4|v41] [--layers N] [--quick] [--chunk ROWS] [--pdl on|off|both]
//        (prefill runs chunks of 256 and ROWS; layers default to 16 on V4, 10 on V4.1, the full table on a card
//        under 120 GB 10 / 6; --pdl: programmatic dependent launch for the whole run, default DEEPINFER_PDL (on);
//        `both` first times the batch-1 4K step from graphs with PDL off and on, alternating, then runs the rest
//        with it on; --profile-step B: one graph step of B rows at 4K between cudaProfilerStart / Stop and nothing
//        else, for tools/gpu/profile_decode.sh; --route-stamps:
//        the fused routing's phase stamps per MoE layer in the batch-1 4K step from its graph, and nothing else
//        (--route-stamps-warm: with each last block's rows routed twice, the second timed: their code warm);
//        --select-stamps: the same for the indexer's decode select per index source (--select-stamps-warm: with
//        each select's passes and emit run twice, the second stamped: their code warm); --fp4-stamps: the same
//        for the routed experts' MXFP4 stream per layer and product (w1|w3, w2); --fp8-stamps: the same for the
//        dense FP8 stream per launch (wq_a, wq_b, wkv, wo_b, ...) with the gaps between launches;
//        --zero-index-keys: the assumed contexts' index keys left zero, as every run before session 20 (default:
//        random, distinct as a written context leaves them; zero keys tie every indexer score, the decode select's
//        slowest case); --batch-invariant: the whole run in batch-invariant mode (cuda::set_batch_invariant, as
//        EngineOptions::batch_invariant sets it: every dispatcher takes its row-count-independent kernel; what the
//        mode costs against the default, issue 5); --batches 1,2,4,8: the decode step's batch sizes, default 1, 8,
//        64, 256)
// The KV caches follow DEEPINFER_KV_FORMAT (bf16 default; fp8: the packed records of layers/attention/kv_record.h,
// V4's 592-byte rows, V4.1's 528-byte MXFP8 window rows and 288-byte FP4 entries); the bytes per step count the
// formats' rows and the JSON names them (model.kv_format: the window rows', model.kv_entry_format: the compressed).
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda/check.h"
#include "cuda/launch.h"
#include "cuda/numerics_mode.h"
#include "cuda/stream_fp4_wgmma.h"
#include "layers/indexer/indexer_gpu.h"
#include "layers/moe/moe_gpu.h"
#include "layers/quant/fp8_gemm.h"
#include "model/config.h"
#include "model/v4/gpu/v4_gpu_model.h"
#include "model/v41/gpu/v41_gpu_model.h"
#include "v4_flash_config.h"

using nlohmann::json;
using namespace deepinfer;

namespace {

double copy_roofline_gbs() {
  const size_t bytes = size_t(2) << 30;
  void *a = nullptr, *b = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&a, bytes));
  DI_CUDA_CHECK(cudaMalloc(&b, bytes));
  DI_CUDA_CHECK(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> gbs;
  for (int i = 0; i < 6; ++i) {
    cudaEventRecord(e0);
    DI_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i > 0) gbs.push_back(2.0 * double(bytes) / (ms * 1e-3) / 1e9);  // read + write
  }
  cudaFree(a);
  cudaFree(b);
  std::sort(gbs.begin(), gbs.end());
  return gbs[gbs.size() / 2];
}

// The bytes one decode step must read at batch B and context `ctx`, in the checkpoint's formats (model-spec §5):
// every attention / router / shared-expert weight once, the routed experts the batch touches (uniform routing:
// E (1 - (1 - k/E)^B) distinct experts), the head, and per sequence the KV rows its attention reads (window, the
// top-k compressed rows on CSA, every visible entry on HCA) plus the index keys the indexer scores. window_row /
// entry_row: bytes of a window / compressed KV row, 2 * head_dim for the bf16 caches, kv_row_bytes of the packed
// records (DEEPINFER_KV_FORMAT=fp8, layers/attention/kv_record.h: V4 592 / 592, V4.1 528 / 288).
double decode_bytes(const ModelConfig& c, int B, int64_t ctx, double window_row, double entry_row) {
  const double H = c.hidden_size, D = c.head_dim, HD = double(c.num_heads) * D, Q = c.q_lora_rank;
  const double Z = double(c.o_groups) * c.o_lora_rank, I = c.moe_intermediate_size, E = c.n_routed_experts;
  const double hc = c.hc_mult, mixw = (2 + hc) * hc * hc * H * 4;
  const double expert = 3 * H * I / 2 + 3 * H * I / 32;  // MXFP4 codes + e8m0 scales
  const double distinct = E * (1 - std::pow(1 - double(c.n_experts_per_tok) / E, B));
  double total = double(c.vocab_size) * H * 2;  // head (bf16)
  for (const LayerPlan& l : c.layers) {
    double w = H * Q + Q * HD + H * D + Z * H;  // FP8 wq_a, wq_b, wkv, wo_b
    // wo_a: FP8 on disk, and what the batch-1/2 W8A16 GEMV reads. The bf16 copy the engine dequantizes for more
    // rows (layers/quant/w8a16_gemv.h) is its choice, not a byte the step must read; until session 24 this line
    // counted it (x2), which overstated every batch's fraction of the copy roofline by ~11 % (V4, 16 layers).
    w += HD * double(c.o_lora_rank);
    w += 2 * mixw + E * H * 2;                   // mHC sites, router gate
    w += 3 * H * I;                              // shared expert (FP8)
    w += std::min(distinct, E) * expert;
    double kv = double(std::min<int64_t>(ctx, c.sliding_window)) * window_row;
    if (l.attention == AttentionKind::CSA) {
      const double series = 2;
      w += 2 * series * D * H * 2;                                            // compressor wkv / wgate (bf16)
      w += double(c.index_n_heads) * c.index_head_dim * Q + c.index_n_heads * H * 2 +
           2 * series * c.index_head_dim * H * 2;                              // indexer
      const double entries = double(ctx / l.compress_ratio);
      kv += std::min<double>(entries, c.index_topk) * entry_row + entries * c.index_head_dim * 2;
    } else if (l.attention == AttentionKind::HCA) {
      w += 2 * D * H * 2;
      kv += double(ctx / l.compress_ratio) * entry_row;
    } else if (l.attention == AttentionKind::CSA2) {
      // V4.1 (model-spec §4): the Full layers' compressor (wkv, and wgate at ratio 2) and wk; the index sources'
      // wq_b and weights_proj, scoring every visible key of the group; every CSA2 layer reads the top-k rows.
      const double entries = double(ctx / l.compress_ratio);
      if (l.role == Csa2Role::Full) w += (l.compress_ratio > 1 ? 2 : 1) * D * H * 2 + double(c.index_head_dim) * D * 2;
      if (l.role == Csa2Role::Full || l.role == Csa2Role::Reindex) {
        w += double(c.index_n_heads) * c.index_head_dim * Q + c.index_n_heads * H * 2;
        kv += entries * c.index_head_dim * 2;
      }
      kv += std::min<double>(entries, c.index_topk) * entry_row;
    }
    total += w + B * kv;
  }
  return total;
}

struct Timer {
  cudaEvent_t a, b;
  Timer() {
    cudaEventCreate(&a);
    cudaEventCreate(&b);
  }
};

}  // namespace

namespace {

// --pdl both (bench/gpu/NOTES.md "PDL"): the batch-1 decode step at 4K context from CUDA graphs, PDL off and on in
// alternating rounds (each setting has its own graphs), median of the rounds' per-step times. Leaves PDL on.
bool pdl_both = false;

// --profile-step B: only one decode step of B rows at 4K context, replayed from its CUDA graph between
// cudaProfilerStart / Stop (after three warm-up replays), for `ncu --profile-from-start off --graph-profiling node`
// (tools/gpu/profile_decode.sh): every kernel of the step with its own time and DRAM bytes. 0: the normal run.
int profile_batch = 0;

template <class Step>
int profile_one_step(Step* model) {
  const int B = profile_batch;
  std::vector<gpu::V4GpuRow> rows(static_cast<size_t>(B));
  for (int s = 0; s < B; ++s) model->assume_length(s, 4096);
  for (int i = 0; i < 4; ++i) {
    for (int s = 0; s < B; ++s) rows[size_t(s)] = {s, int32_t(3 + (s * 7919 + i) % 120000), 4096};
    if (i == 3) DI_CUDA_CHECK(cudaProfilerStart());
    model->step_graph(rows);
    DI_CUDA_CHECK(cudaStreamSynchronize(model->stream()));
    if (i == 3) DI_CUDA_CHECK(cudaProfilerStop());
    for (int s = 0; s < B; ++s) model->assume_length(s, 4096);
  }
  std::printf("profiled one decode step: batch %d, 4K context, from its CUDA graph\n", B);
  return 0;
}

// The median of a stamp field over steps / layers (the upper one of an even count; NaN where nothing was recorded).
double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A record's write mark for replay_stamped_steps: a value that grows with every launch that writes the record, 0
// where none has (the route and select records' launch counts; the MXFP4 and dense FP8 streams' first block start,
// %globaltimer).
uint64_t& write_mark(cuda::RouteStampRecord& r) { return r.launches; }
uint64_t& write_mark(cuda::IndexSelectStampRecord& r) { return r.launches; }
unsigned long long& write_mark(cuda::Fp4StepStampRecord& r) { return r.start_ns; }
unsigned long long& write_mark(cuda::Fp8StepStampRecord& r) { return r.start_ns; }

// The batch-1 4K step replayed from its CUDA graph 3 times to warm up, then `steps` times, with a stamps switch on;
// read() (the records of every layer, slot order) after each replay; a record this replay did not write (its write
// mark unchanged) gets a write mark of 0. Returns the timed replays' records, [step][slot].
template <class Record, class Step, class Read>
std::vector<std::vector<Record>> replay_stamped_steps(Step* model, int steps, Read read) {
  const int warm = 3;
  std::vector<gpu::V4GpuRow> rows(1);
  std::vector<std::vector<Record>> seen;
  std::vector<unsigned long long> marks;
  for (int i = 0; i < warm + steps; ++i) {
    model->assume_length(0, 4096);
    rows[0] = {0, int32_t(3 + (i * 7919) % 120000), 4096};
    model->step_graph(rows);
    DI_CUDA_CHECK(cudaStreamSynchronize(model->stream()));
    std::vector<Record> records = read();
    marks.resize(records.size(), 0);
    if (i >= warm) {
      for (Record& r : records)
        if (write_mark(r) == marks[size_t(r.slot)]) write_mark(r) = 0;  // not written this step: left out below
      seen.push_back(records);
    }
    for (Record& r : records)
      marks[size_t(r.slot)] = std::max<unsigned long long>(marks[size_t(r.slot)], write_mark(r));
  }
  return seen;
}

// The globaltimer columns of a stream's phases table (cuda/launch_span.h LaunchSpan), shared by --fp4-stamps and
// --fp8-stamps: each column a name and its value in us (the second argument, SM cycles per us, unused here).
template <class Phases>
std::vector<std::pair<const char*, double (*)(const Phases&, double)>> span_fields() {
  return {{"span_us", [](const Phases& p, double) { return p.span_us; }},
          {"start_median_us", [](const Phases& p, double) { return p.start_median_us; }},
          {"start_last_us", [](const Phases& p, double) { return p.start_last_us; }},
          {"end_spread_us", [](const Phases& p, double) { return p.end_spread_us; }},
          {"block_us", [](const Phases& p, double) { return p.block_us; }}};
}

// The JSON of a stamps run (--route-stamps, --select-stamps, --fp4-stamps, --fp8-stamps): the batch-1 4K step replayed
// `steps` times (replay_stamped_steps), then the run's own fields.
json stamped_step_json(int steps, const json& fields) {
  json j = {{"batch", 1}, {"context", 4096}, {"steps", steps}, {"pdl", cuda::pdl_enabled()}};
  j.update(fields);
  return j;
}

// --route-stamps (bench/gpu/NOTES.md "Fused decode routing: phase stamps inside the model"): the fused routing's phase
// stamps inside the batch-1 decode step at 4K context, replayed from its CUDA graph (cuda::set_route_stamps: every MoE
// layer's routing launch runs the stamped kernel on its own record), 20 replays after 3 warm-ups, each replay's records
// read back. Per layer and over all layers, the median of each field next to the kernel alone (roofline
// --route-phases-only, bench/results/gpu_h200_run82_route_phases.json, rows=1). Nothing else runs.
bool route_stamps_only = false;
// --route-stamps-warm: the same with the warm rerun (cuda::set_route_stamps_warm: the last block routes its rows twice,
// ticket -> routed timing the second run).
bool route_stamps_warm = false;

template <class Step>
int route_stamps_step(Step* model, const ModelConfig& config, const std::string& out_path, json& out) {
  cuda::set_route_stamps(true);
  cuda::set_route_stamps_warm(route_stamps_warm);
  const int steps = 20;
  const std::vector<std::vector<cuda::RouteStampRecord>> seen =
      replay_stamped_steps<cuda::RouteStampRecord>(model, steps, cuda::moe_route_stamps_read);
  cuda::set_route_stamps(false);
  cuda::set_route_stamps_warm(false);
  if (route_stamps_warm)
    std::printf("route stamps with the warm rerun: ticket -> routed (ticket, routed, cyc_r) times the rows' second "
                "routing\n");
  // The fields, as RouteStampRecord names them (us after the first block's wait return; cycles of the last block).
  using Field = std::pair<const char*, double (*)(const cuda::RouteStampRecord&)>;
  const std::vector<Field> fields = {
      {"start_first_us", [](const cuda::RouteStampRecord& r) { return r.start_first; }},
      {"start_latest_us", [](const cuda::RouteStampRecord& r) { return r.start_latest; }},
      {"entry_latest_us", [](const cuda::RouteStampRecord& r) { return r.entry_latest; }},
      {"last_start_us", [](const cuda::RouteStampRecord& r) { return r.last_start; }},
      {"last_entry_us", [](const cuda::RouteStampRecord& r) { return r.last_entry; }},
      {"computed_us", [](const cuda::RouteStampRecord& r) { return r.phases[0]; }},
      {"ticket_us", [](const cuda::RouteStampRecord& r) { return r.phases[1]; }},
      {"routed_us", [](const cuda::RouteStampRecord& r) { return r.phases[2]; }},
      {"counted_us", [](const cuda::RouteStampRecord& r) { return r.phases[3]; }},
      {"scanned_us", [](const cuda::RouteStampRecord& r) { return r.phases[4]; }},
      {"end_us", [](const cuda::RouteStampRecord& r) { return r.phases[5]; }},
      {"cycles_routed", [](const cuda::RouteStampRecord& r) { return r.phases[6]; }},
      {"cycles_counted", [](const cuda::RouteStampRecord& r) { return r.phases[7]; }},
      {"cycles_scanned", [](const cuda::RouteStampRecord& r) { return r.phases[8]; }},
      {"cycles_end", [](const cuda::RouteStampRecord& r) { return r.phases[9]; }}};
  const size_t slots = seen.empty() ? 0 : seen.back().size();  // every record the last replay read
  // Slot order is the layers' first launch order: every layer of the synthetic model is an MoE layer.
  const bool by_layer = slots == config.layers.size();
  if (!by_layer)
    std::printf("route stamps: %zu records for %zu layers: the slots are not the layer indices\n", slots,
                config.layers.size());
  std::printf("\nroute stamps, batch 1, 4K context, graph replays (median of %d steps), us after the first block's "
              "wait return:\n%5s %5s %5s %12s | %6s %6s %6s %6s %6s | %6s %6s %6s %6s %6s %6s | %5s %5s %5s %5s\n",
              steps, "layer", "hash", "grid", "SMs 0/1st/last", "start", "st_max", "en_max", "l_st", "l_en", "comp",
              "ticket", "routed", "count", "scan", "end", "cyc_r", "cyc_c", "cyc_s", "cyc_e");
  json layers_json = json::array();
  std::vector<std::vector<double>> all(fields.size());
  auto print_row = [&](const std::string& name, const std::string& hash, const std::string& grid,
                       const std::string& sms, const std::vector<double>& m) {
    std::printf("%5s %5s %5s %12s |", name.c_str(), hash.c_str(), grid.c_str(), sms.c_str());
    for (size_t f = 0; f < m.size(); ++f) {
      std::printf(f < 11 ? " %6.2f" : " %5.0f", m[f]);
      if (f == 4 || f == 10) std::printf(" |");
    }
    std::printf("\n");
  };
  for (size_t slot = 0; slot < slots; ++slot) {
    std::vector<double> med;
    const cuda::RouteStampRecord* last = nullptr;
    int samples = 0;
    for (size_t f = 0; f < fields.size(); ++f) {
      std::vector<double> v;
      for (const auto& step : seen) {
        if (slot >= step.size() || step[slot].launches == 0) continue;
        v.push_back(fields[f].second(step[slot]));
        all[f].push_back(v.back());
        last = &step[slot];
      }
      samples = int(v.size());
      med.push_back(median(v));
    }
    const bool hash = by_layer && config.layers[slot].hash_moe;
    json row{{"slot", slot}, {"samples", samples}, {"hash", hash}};
    if (last) {
      row["grid"] = last->grid;
      row["sm_block0"] = last->sm_block0;
      row["sm_first_done"] = last->sm_first_done;
      row["sm_last"] = last->sm_last;
    }
    for (size_t f = 0; f < fields.size(); ++f) row[fields[f].first] = med[f];
    layers_json.push_back(row);
    print_row(std::to_string(slot), hash ? "yes" : "no", last ? std::to_string(last->grid) : "-",
              last ? std::to_string(last->sm_block0) + "/" + std::to_string(last->sm_first_done) + "/" +
                         std::to_string(last->sm_last)
                   : "-",
              med);
  }
  json overall;
  std::vector<double> overall_med;
  for (size_t f = 0; f < fields.size(); ++f) {
    overall_med.push_back(median(all[f]));
    overall[fields[f].first] = overall_med.back();
  }
  print_row("all", "", "", "", overall_med);
  // The routed phase (cyc_r) split at route_row_topk's marks, top-k layers (RouteStampRecord::routed_split).
  const char* split_names[] = {"loads", "scores", "picks", "stores_barrier"};
  std::vector<std::vector<double>> split_all(4);
  std::printf("\nrouted phase (cyc_r) of top-k layers split, SM cycles (median): after the ticket's fence the logits "
              "and\nbias loaded, the scores, the picks, the ids / weights stored and the block barrier:\n"
              "%5s %8s %8s %8s %8s\n",
              "layer", split_names[0], split_names[1], split_names[2], "st+bar");
  json split_json = json::array();
  for (size_t slot = 0; slot < slots; ++slot) {
    std::vector<std::vector<double>> v(4);
    for (const auto& step : seen)
      if (slot < step.size() && step[slot].routed_split.size() == 4)
        for (size_t i = 0; i < 4; ++i) v[i].push_back(step[slot].routed_split[i]);
    if (v[0].empty()) continue;  // a hash layer
    json row{{"slot", slot}};
    std::printf("%5zu", slot);
    for (size_t i = 0; i < 4; ++i) {
      const double m = median(v[i]);
      row[split_names[i]] = m;
      split_all[i].insert(split_all[i].end(), v[i].begin(), v[i].end());
      std::printf(" %8.0f", m);
    }
    std::printf("\n");
    split_json.push_back(row);
  }
  if (!split_all[0].empty()) {
    std::printf("%5s", "all");
    for (size_t i = 0; i < 4; ++i) std::printf(" %8.0f", median(split_all[i]));
    std::printf("\n");
  }
  // The kernel alone, eager, one row (run 82): computed, ticket, routed, counted, scanned, end us; cycles.
  const bool v41 = config.family == ModelFamily::V41;
  using Phases = std::vector<double>;
  const Phases alone_topk = v41 ? Phases{4.26, 5.12, 10.78, 11.20, 12.54, 13.34, 8089, 574, 1923, 1102}
                                : Phases{3.01, 3.71, 7.90, 8.29, 9.57, 10.37, 5938, 562, 1911, 1088};
  const Phases alone_hash = v41 ? Phases{4.29, 5.12, 9.57, 9.98, 11.33, 12.13, 6394, 632, 1953, 1101}
                                : Phases{3.07, 3.71, 8.26, 8.67, 10.02, 10.91, 6442, 640, 2070, 1096};
  for (const auto& [name, alone] : {std::pair{"topk", &alone_topk}, {"hash", &alone_hash}}) {
    std::vector<double> m(5, std::nan(""));
    m.insert(m.end(), alone->begin(), alone->end());
    print_row("alone", name, "", "run 82", m);
  }
  out["route_stamps"] = stamped_step_json(steps, {{"layers", layers_json},
                                                  {"median", overall},
                                                  {"routed_split_cycles", split_json},
                                                  {"alone_run82_rows1", {{"topk", alone_topk}, {"hash", alone_hash}}}});
  std::ofstream(out_path) << out.dump(2) << "\n";
  return 0;
}

// --select-stamps (bench/gpu/NOTES.md "Decode select: phase stamps inside the model"): the lightning indexer's decode
// select inside the batch-1 decode step at 4K context (1024 index entries), replayed from its CUDA graph
// (cuda::set_index_select_stamps: every CSA layer's select runs the phases kernel of index_select_latency, the same
// shape and staging as the step's, on its own record), 20 replays after 3 warm-ups, each replay's records read back.
// Per layer and over all layers, the median of each of index_select_latency's phase values (same keys and units),
// next to that bench's line for the kernel alone (bins_auto_batched phases, run 114), with the entries the row saw,
// the score blocks (active / grid), the spread of their starts and the radix passes run. --family v41: the CSA2
// indexer's decode select per index source (Full and Reindex layers; csa2_decode_select_phases_kernel, the same
// records; the candidate source's block selection after its top-k is not stamped), without an alone line. Nothing
// else runs.
bool select_stamps_only = false;
// --select-stamps-warm: the same with the warm rerun (cuda::set_index_select_stamps_warm: each select's passes and
// emit run twice, the second stamped; the difference to --select-stamps is their code's first fetch).
bool select_stamps_warm = false;
// --zero-index-keys: the assumed contexts' index keys left zero (the usage above).
bool zero_index_keys = false;
// --batch-invariant: the run in batch-invariant mode (the usage above).
bool batch_invariant = false;
// --batches 1,2,4,8: the decode step's batch sizes (default 1, 8, 64, 256), e.g. to find the row count from which a
// per-model launch choice pays (bench/gpu/NOTES.md "Session 45": the routed PDL).
std::vector<int> decode_batches{1, 8, 64, 256};

// "1,2,4,8" -> {1, 2, 4, 8}; empty on a malformed list or a batch outside 1..max_batch.
std::vector<int> parse_batches(const std::string& list, int max_batch) {
  std::vector<int> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long b = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || b < 1 || b > max_batch) return {};
    out.push_back(int(b));
  }
  return out;
}

template <class Step>
int select_stamps_step(Step* model, const ModelConfig& config, const std::string& out_path, json& out) {
  cuda::set_index_select_stamps(true);
  cuda::set_index_select_stamps_warm(select_stamps_warm);
  const int steps = 20;
  const std::vector<std::vector<cuda::IndexSelectStampRecord>> seen =
      replay_stamped_steps<cuda::IndexSelectStampRecord>(model, steps, cuda::indexer_select_stamps_read);
  cuda::set_index_select_stamps(false);
  cuda::set_index_select_stamps_warm(false);
  constexpr size_t kNames = sizeof(cuda::kSelectPhaseNames) / sizeof(cuda::kSelectPhaseNames[0]);
  // Slot order is the index sources' first launch order: V4's layers with an indexer (compress ratio 4), V4.1's Full
  // and Reindex layers.
  const bool v41 = config.family == ModelFamily::V41;
  std::vector<int> sources;
  for (size_t l = 0; l < config.layers.size(); ++l) {
    const LayerPlan& p = config.layers[l];
    const bool selects = v41 ? p.role == Csa2Role::Full || p.role == Csa2Role::Reindex : p.compress_ratio == 4;
    if (selects) sources.push_back(int(l));
  }
  const size_t slots = seen.empty() ? 0 : seen.back().size();  // every record the last replay read
  const bool by_layer = slots == sources.size();
  if (!by_layer)
    std::printf("select stamps: %zu records for %zu index sources: the slots are not those layers in order\n", slots,
                sources.size());
  std::printf("\nselect stamps%s, batch 1, 4K context, graph replays (median of %d steps), shape %s, staging %s; the "
              "values as index_select_latency prints them:\n",
              select_stamps_warm ? " (warm rerun: passes and emit of a second run; keys_cycles holds the first)" : "",
              steps,
              cuda::index_score_shape() == cuda::IndexScoreShape::Auto ? "auto"
                                                                        : "not auto (DEEPINFER_INDEX_SCORE_SHAPE)",
              cuda::index_score_staging() == cuda::IndexScoreStaging::Batched ? "batched" : "loop");
  // One line: the phases, the last block's cycles after its ticket (the sum of keys .. emit, as the bench prints).
  auto print_phases = [&](const std::string& head, const std::vector<double>& m) {
    std::printf("  %-34s:", head.c_str());
    double select_cycles = 0;
    for (size_t f = 0; f < kNames; ++f) {
      std::printf(f < 2 || f == 11 ? " %s %.2f" : " %s %.0f", cuda::kSelectPhaseNames[f], m[f]);
      if (f >= 2 && f < 8) select_cycles += m[f];
    }
    std::printf(" | last block after its ticket %.0f cycles\n", select_cycles);
  };
  json layers_json = json::array();
  std::vector<std::vector<double>> all(kNames);
  for (size_t slot = 0; slot < slots; ++slot) {
    std::vector<std::vector<double>> v(kNames);
    std::vector<double> spread, staged, scored_first, scored_latest, passes;
    const cuda::IndexSelectStampRecord* last = nullptr;
    for (const auto& step : seen) {
      if (slot >= step.size() || step[slot].launches == 0) continue;
      const cuda::IndexSelectStampRecord& r = step[slot];
      for (size_t f = 0; f < kNames; ++f) {
        v[f].push_back(r.phases[f]);
        all[f].push_back(r.phases[f]);
      }
      spread.push_back(r.start_spread_us);
      staged.push_back(r.staged_latest_us);
      scored_first.push_back(r.scored_first_us);
      scored_latest.push_back(r.scored_latest_us);
      // Radix passes run: the pass stamps the early stop left at 0 are the passes skipped.
      passes.push_back(
          double(std::count_if(r.phases.begin() + 3, r.phases.begin() + 7, [](double c) { return c > 0; })));
      last = &r;
    }
    std::vector<double> med;
    for (size_t f = 0; f < kNames; ++f) med.push_back(median(v[f]));
    const int layer = by_layer ? sources[slot] : -1;
    json row{{"slot", slot}, {"layer", layer}, {"samples", v[0].size()}};
    if (last) {
      row["entries"] = last->entries;
      row["active_blocks"] = last->active;
      row["grid"] = last->grid;
    }
    row["start_spread_us"] = median(spread);
    row["staged_latest_us"] = median(staged);
    row["scored_first_us"] = median(scored_first);
    row["scored_latest_us"] = median(scored_latest);
    row["passes_median"] = median(passes);
    row["passes_max"] = passes.empty() ? 0.0 : *std::max_element(passes.begin(), passes.end());
    for (size_t f = 0; f < kNames; ++f) row[cuda::kSelectPhaseNames[f]] = med[f];
    layers_json.push_back(row);
    // The score blocks after the first's start (us): the last start (spread), the last queries staged, the first
    // and the last scores done.
    char head[160];
    std::snprintf(head, sizeof(head),
                  "layer %d n %d blocks %d/%d spread %.2f staged %.2f scored %.2f-%.2f us passes %.0f-%.0f", layer,
                  last ? last->entries : 0, last ? last->active : 0, last ? last->grid : 0, median(spread),
                  median(staged), median(scored_first), median(scored_latest),
                  passes.empty() ? 0.0 : *std::min_element(passes.begin(), passes.end()),
                  passes.empty() ? 0.0 : *std::max_element(passes.begin(), passes.end()));
    print_phases(head, med);
  }
  json overall;
  std::vector<double> overall_med;
  for (size_t f = 0; f < kNames; ++f) {
    overall_med.push_back(median(all[f]));
    overall[cuda::kSelectPhaseNames[f]] = overall_med.back();
  }
  print_phases("all layers", overall_med);
  json stamps{{"layers", layers_json}, {"median", overall}};
  if (!v41) {
    // The kernel alone, eager, one row of 1024 random entries (run 114, index_select_latency "bins_auto_batched
    // phases").
    const std::vector<double> alone{6.88, 12.22, 1608, 2591, 2619, 0, 0, 3618, 3305, 420, 7901, 5.98};
    print_phases("alone (run 114, bins_auto_batched)", alone);
    stamps["alone_run114_bins_auto_batched"] = alone;
  }
  out["select_stamps"] = stamped_step_json(steps, stamps);
  std::ofstream(out_path) << out.dump(2) << "\n";
  return 0;
}

// --fp4-stamps (bench/gpu/NOTES.md "The MXFP4 stream's stamps inside the step"): the routed experts' MXFP4 stream on
// wgmma (cuda/stream_fp4_wgmma.cuh) inside the batch-1 decode step at 4K context, replayed from its CUDA graph
// (cuda::set_stream_fp4_step_stamps: every launch runs the stamped kernel on its own record, one per layer and
// product), 10 replays after 3 warm-ups, each replay's records read back. Per layer and product (w1|w3, w2), the
// median over replays of roofline --fp4-phases' values (the launch's globaltimer span, its blocks' start and end
// spreads, per block medians of the phases in us at the SM clock the device reports), then the medians over layers,
// next to that bench's lines for the kernel alone (run 126, batch 1). Why: in the step the w1|w3 launch takes 20-25 us
// and w2 ~12.5 us (run 127's trace) where the kernel alone spans 22.5 / 13.7 us with ~16 / ~10.5 us blocks; the stamps
// say whether the step's blocks start late (SMs held by the shared expert on the side stream), wait longer for the
// routing (PDL), or land their data later (HBM shared with the side stream). Nothing else runs.
bool fp4_stamps_only = false;

template <class Step>
int fp4_stamps_step(Step* model, const ModelConfig& config, const std::string& out_path, json& out) {
  cuda::set_stream_fp4_step_stamps(true);
  const int steps = 10;
  const std::vector<std::vector<cuda::Fp4StepStampRecord>> seen =
      replay_stamped_steps<cuda::Fp4StepStampRecord>(model, steps, cuda::stream_fp4_step_stamps_read);
  cuda::set_stream_fp4_step_stamps(false);
  int clock_khz = 0;
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const double cyc_us = clock_khz / 1e3;  // SM cycles per us, as roofline --fp4-phases converts them
  // The fields: globaltimer us, then per block medians in us at cyc_us (the counts as counts). landed / stored after
  // the wait: the first stage landed and the last item stored after the consumers' PDL wait (in the step the blocks
  // start before the routing has finished; the kernel alone waits ~0.36 us). gap: w2's first block start after the
  // same layer's w1|w3 launch's last end (w2 records only).
  using Phases = cuda::Fp4LaunchPhases;
  using Field = std::pair<const char*, double (*)(const Phases&, double)>;
  std::vector<Field> fields = span_fields<Phases>();
  fields.insert(fields.end(), {
      {"cons_waited_us", [](const Phases& p, double c) { return p.cons_waited / c; }},
      {"first_staged_us", [](const Phases& p, double c) { return p.first_staged / c; }},
      {"first_data_us", [](const Phases& p, double c) { return p.first_data / c; }},
      {"cons_end_us", [](const Phases& p, double c) { return p.cons_end / c; }},
      {"landed_after_wait_us", [](const Phases& p, double c) { return (p.first_data - p.cons_waited) / c; }},
      {"stored_after_wait_us", [](const Phases& p, double c) { return (p.cons_end - p.cons_waited) / c; }},
      {"full_wait_us", [](const Phases& p, double c) { return p.full_wait / c; }},
      {"stages", [](const Phases& p, double) { return p.stages; }},
      {"busy_per_stage_us",
       [](const Phases& p, double c) {
         return (p.cons_end - p.first_data - p.full_wait) / c / std::max(p.stages, 1.0);
       }},
      {"stage_b_us", [](const Phases& p, double c) { return p.stage_b / c; }},
      {"items", [](const Phases& p, double) { return p.items; }},
      {"prod_waited_us", [](const Phases& p, double c) { return p.prod_waited / c; }},
      {"prod_end_us", [](const Phases& p, double c) { return p.prod_end / c; }},
      {"empty_wait_us", [](const Phases& p, double c) { return p.empty_wait / c; }},
      {"b_entry_us", [](const Phases& p, double c) { return p.b_entry / c; }},
      {"b_zeroed_us", [](const Phases& p, double c) { return p.b_zeroed / c; }},
      {"b_codes_us", [](const Phases& p, double c) { return p.b_codes / c; }},
      {"b_scales_us", [](const Phases& p, double c) { return p.b_scales / c; }}});
  const size_t kGap = fields.size();  // the gap's column, after the fields
  const int64_t inter = config.moe_intermediate_size;
  // By k first: in V4-Flash w2's n (the hidden size, 4096) equals w1|w3's 2 x 2048 (run 128 labelled every row w13).
  auto product = [&](const cuda::Fp4StepStampRecord& r) {
    return r.k == inter ? "w2" : r.n == 2 * inter ? "w13" : "?";
  };
  // Slot order is the launches' first order: every layer of the synthetic model has routed experts, w1|w3 then w2.
  const size_t slots = seen.empty() ? 0 : seen.back().size();  // every record the last replay read
  bool by_layer = slots == 2 * config.layers.size();
  for (size_t slot = 0; by_layer && slot < slots; ++slot)
    by_layer = std::string(product(seen.back()[slot])) == (slot % 2 == 0 ? "w13" : "w2");
  if (slots == 0)
    std::printf("fp4 stamps: no records (the routed products did not run on the wgmma stream: DEEPINFER_STREAM_FP4, "
                "batch-invariant mode?)\n");
  else if (!by_layer)
    std::printf("fp4 stamps: %zu records for %zu layers: the slots are not w1|w3, w2 of each layer in order\n", slots,
                config.layers.size());
  std::printf("\nMXFP4 stream stamps, batch 1, 4K context, graph replays (median of %d steps), SM clock %.0f MHz; us "
              "(globaltimer: span .. block; the rest SM cycles at that clock):\n"
              "%5s %4s %5s | %6s %6s %6s %6s %6s | %6s %6s %6s %6s %6s %6s | %6s %4s %6s %6s %4s | %6s %6s %6s | "
              "%6s %6s %6s %6s | %6s\n",
              steps, cyc_us, "layer", "prod", "grid", "span", "st_med", "st_last", "en_spr", "block", "waited",
              "staged", "landed", "stored", "l-wait", "s-wait", "fullw", "stg", "busy/s", "stageb", "item", "p_wait",
              "p_end", "emptyw", "b_ent", "b_zero", "b_code", "b_scal", "gap");
  auto print_row = [&](const std::string& layer, const std::string& prod, const std::string& grid,
                       const std::vector<double>& m) {
    std::printf("%5s %4s %5s |", layer.c_str(), prod.c_str(), grid.c_str());
    for (size_t f = 0; f < m.size(); ++f) {
      const std::string name = f < kGap ? fields[f].first : "gap";
      std::printf(name == "stages" || name == "items" ? " %4.0f" : " %6.2f", m[f]);
      if (f == 4 || f == 10 || f == 15 || f == 18 || f == 22) std::printf(" |");
    }
    std::printf("\n");
  };
  json layers_json = json::array();
  std::map<std::string, std::vector<std::vector<double>>> all;  // per product, per column: every layer's median
  for (size_t slot = 0; slot < slots; ++slot) {
    std::vector<std::vector<double>> v(kGap + 1);
    const cuda::Fp4StepStampRecord* last = nullptr;
    for (const auto& step : seen) {
      if (slot >= step.size() || step[slot].start_ns == 0) continue;
      const cuda::Fp4StepStampRecord& r = step[slot];
      const Phases p = cuda::fp4_launch_phases(r.stamps.data(), r.blocks);
      for (size_t f = 0; f < kGap; ++f) v[f].push_back(fields[f].second(p, cyc_us));
      if (by_layer && slot % 2 == 1 && step[slot - 1].start_ns != 0) {  // w2 after its layer's w1|w3
        const cuda::Fp4StepStampRecord& w13 = step[slot - 1];
        const Phases q = cuda::fp4_launch_phases(w13.stamps.data(), w13.blocks);
        v[kGap].push_back(double(int64_t(r.start_ns - w13.start_ns)) * 1e-3 - q.span_us);
      }
      last = &r;
    }
    std::vector<double> med;
    for (const auto& values : v) med.push_back(median(values));
    const std::string prod = last ? product(*last) : "?";
    const int layer = by_layer ? int(slot / 2) : -1;
    json row{{"slot", slot}, {"layer", layer}, {"product", prod}, {"samples", v[0].size()}};
    if (last) {
      row["grid"] = last->blocks;
      row["n"] = last->n;
      row["k"] = last->k;
    }
    for (size_t f = 0; f < kGap; ++f) row[fields[f].first] = med[f];
    if (!v[kGap].empty()) row["gap_after_w13_us"] = med[kGap];
    layers_json.push_back(row);
    auto& per = all[prod];
    per.resize(kGap + 1);
    for (size_t f = 0; f <= kGap; ++f)
      if (!std::isnan(med[f])) per[f].push_back(med[f]);
    print_row(std::to_string(layer), prod, last ? std::to_string(last->blocks) : "-", med);
  }
  json overall;
  for (const auto& [prod, per] : all) {
    std::vector<double> m;
    for (size_t f = 0; f <= kGap; ++f) {
      m.push_back(median(per[f]));
      overall[prod][f < kGap ? fields[f].first : "gap_after_w13_us"] = m.back();
    }
    print_row("all", prod, "", m);
  }
  // The kernel alone, eager, batch 1 (run 126, roofline --fp4-phases), in the columns above (NaN: not printed there).
  const bool v41 = config.family == ModelFamily::V41;
  const double nan = std::nan("");
  using Row = std::vector<double>;
  const Row alone_w13 = v41 ? Row{29.95, 0.06, 0.13, 6.66, nan, 0.36, 4.66, 5.70, 20.95, 5.34, 20.59, 0.77, 15, 0.966,
                                  3.95, 3, 0.57, 16.15, 3.53, nan}
                            : Row{22.50, 0.10, 0.16, 0.77, nan, 0.36, 3.49, 4.60, 16.05, 4.24, 15.69, 0.62, 12, 0.903,
                                  2.76, 3, 0.60, 11.82, 1.30, nan};
  const Row alone_w2 = v41 ? Row{19.23, 0.06, 0.13, 1.79, nan, 0.35, 3.67, 4.44, 15.68, 4.09, 15.33, 0.56, 12, 0.890,
                                 2.93, 4, 0.57, 11.72, 1.77, nan}
                           : Row{13.70, 0.10, 0.16, 1.02, nan, 0.36, 3.24, 4.08, 10.50, 3.72, 10.14, 0.29, 6, 1.022,
                                 2.51, 3, 0.63, 5.96, 0.23, nan};
  print_row("alone", "w13", "126", alone_w13);
  print_row("alone", "w2", "126", alone_w2);
  out["fp4_stamps"] =
      stamped_step_json(steps, {{"sm_clock_mhz", cyc_us}, {"layers", layers_json}, {"median", overall}});
  json alone;
  for (const auto& [prod, row] : {std::pair{"w13", &alone_w13}, {"w2", &alone_w2}})
    for (size_t f = 0; f < kGap; ++f)
      if (!std::isnan((*row)[f])) alone[prod][fields[f].first] = (*row)[f];
  out["fp4_stamps"]["alone_run126_batch1"] = alone;
  std::ofstream(out_path) << out.dump(2) << "\n";
  return 0;
}

// --fp8-stamps (bench/gpu/NOTES.md "Dense FP8 stream stamps inside the step"): the dense FP8 decode stream
// (cuda/stream_gemm.cuh stream_gemm_kernel: wq_a, wq_b, wkv, wo_b, the indexer's wq_b, the shared expert where it runs
// on its own launches) inside the batch-1 decode step at 4K context, replayed from its CUDA graph
// (cuda::set_stream_fp8_step_stamps: every launch runs the stamped kernel on its own record, one per weight), 10
// replays after 3 warm-ups, each replay's records read back. Per launch the median over replays of roofline
// --fp8-phases' values (cuda::fp8_launch_phases: the globaltimer span, its blocks' start and end spreads, per block
// medians of the phases in us at the SM clock the device reports), and the gaps from the previous stamped launch's
// last block end to this launch's first block start (gap: the previous record in step order, whatever its stream;
// gap_s: the previous one on the same stream; negative: this launch's blocks started before that one's last ended,
// the PDL overlap on one stream). Rows in step order for the first layers, then per product the medians over every
// layer; the kernel alone is roofline --fp8-phases. Nothing else runs.
bool fp8_stamps_only = false;

template <class Step>
int fp8_stamps_step(Step* model, const ModelConfig& config, const std::string& out_path, json& out) {
  using Record = cuda::Fp8StepStampRecord;
  cuda::set_stream_fp8_step_stamps(true);
  const int steps = 10;
  const std::vector<std::vector<Record>> seen =
      replay_stamped_steps<Record>(model, steps, cuda::stream_fp8_step_stamps_read);
  cuda::set_stream_fp8_step_stamps(false);
  int clock_khz = 0;
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const double cyc_us = clock_khz / 1e3;  // SM cycles per us, as roofline --fp4-phases and --fp8-stamps convert them
  // The fields: globaltimer us, then per block medians in us at cyc_us (the counts as counts). busy/stage: consumer
  // warp 0's time per stage from the first stage landed to the last tile stored, less its full-barrier waits and
  // the reductions (roofline --fp8-phases' busy). run_mhz: the blocks' own clock (JSON only).
  using Phases = cuda::Fp8LaunchPhases;
  using Field = std::pair<const char*, double (*)(const Phases&, double)>;
  std::vector<Field> fields = span_fields<Phases>();
  fields.insert(fields.end(), {
      {"cons_waited_us", [](const Phases& p, double c) { return p.slot[cuda::kFp8StConsWaited] / c; }},
      {"first_staged_us", [](const Phases& p, double c) { return p.slot[cuda::kFp8StFirstStaged] / c; }},
      {"stage_rows_us", [](const Phases& p, double c) { return p.slot[cuda::kFp8StStageRowsCycles] / c; }},
      {"first_data_us", [](const Phases& p, double c) { return p.slot[cuda::kFp8StFirstData] / c; }},
      {"full_wait_us", [](const Phases& p, double c) { return p.slot[cuda::kFp8StFullWaitCycles] / c; }},
      {"cons_end_us", [](const Phases& p, double c) { return p.slot[cuda::kFp8StConsEnd] / c; }},
      {"stages", [](const Phases& p, double) { return p.slot[cuda::kFp8StStages]; }},
      {"busy_per_stage_us",
       [](const Phases& p, double c) {
         return (p.slot[cuda::kFp8StConsEnd] - p.slot[cuda::kFp8StFirstData] - p.slot[cuda::kFp8StFullWaitCycles] -
                 p.slot[cuda::kFp8StReduceCycles]) /
                c / std::max(p.slot[cuda::kFp8StStages], 1.0);
       }},
      {"reduce_us", [](const Phases& p, double c) { return p.slot[cuda::kFp8StReduceCycles] / c; }},
      {"quant_first_unit_us", [](const Phases& p, double c) { return p.slot[cuda::kFp8StQuantFirstUnit] / c; }},
      {"quant_loop_end_us", [](const Phases& p, double c) { return p.slot[cuda::kFp8StQuantLoopEnd] / c; }},
      {"prod_end_us", [](const Phases& p, double c) { return p.slot[cuda::kFp8StProdEnd] / c; }},
      {"empty_wait_us", [](const Phases& p, double c) { return p.slot[cuda::kFp8StEmptyWaitCycles] / c; }},
      {"items", [](const Phases& p, double) { return p.slot[cuda::kFp8StItems]; }},
      {"run_mhz", [](const Phases& p, double) { return p.clock_mhz; }}});
  const size_t kGap = fields.size(), kGapS = kGap + 1, kCols = kGap + 2;  // the gaps' columns, after the fields
  // The products by shape, from the config (model-spec §1: wq_a [q_lora, hidden], wq_b [heads x head_dim, q_lora], wkv
  // [head_dim, hidden], wo_b [hidden, o_groups x o_lora], the indexer's wq_b [index heads x index_head_dim, q_lora],
  // the shared expert's w1|w3 [2 x shared_inter, hidden] and w2 [hidden, shared_inter]); +q: the quantizing prologue's
  // form (fp8_gemm_bf16), +r: the RoPE epilogue's (fp8_gemm_rope); else "nN/kK".
  const int64_t H = config.hidden_size, QL = config.q_lora_rank, D = config.head_dim,
                HD = int64_t(config.num_heads) * config.head_dim, Z = int64_t(config.o_groups) * config.o_lora_rank,
                IQ = int64_t(config.index_n_heads) * config.index_head_dim,
                SI = int64_t(config.n_shared_experts) * config.moe_intermediate_size;
  auto product = [&](const Record& r) {
    std::string name = r.n == QL && r.k == H    ? "wq_a"
                       : r.n == HD && r.k == QL ? "wq_b"
                       : r.n == D && r.k == H   ? "wkv"
                       : r.n == H && r.k == Z   ? "wo_b"
                       : r.n == IQ && r.k == QL ? "idx_q"
                       : r.n == 2 * SI && r.k == H ? "sh13"
                       : r.n == H && r.k == SI  ? "sh2"
                                                : "n" + std::to_string(r.n) + "/k" + std::to_string(r.k);
    return name + (r.quant_x ? "+q" : "") + (r.rope ? "+r" : "");
  };
  const size_t slots = seen.empty() ? 0 : seen.back().size();  // every record the last replay read
  // Layers: slot order is the launches' first order, and each layer's first dense FP8 product (slot 0's: wkv,
  // launched on the side branch before the query) starts the next layer.
  std::vector<int> layer_of(slots, 0);
  for (size_t slot = 0, layer = 0; slot < slots; ++slot) {
    if (slot > 0 && product(seen.back()[slot]) == product(seen.back()[0])) ++layer;
    layer_of[slot] = int(layer);
  }
  if (slots == 0)
    std::printf("fp8 stamps: no records (no dense FP8 product ran on stream_gemm_kernel: batch-invariant mode?)\n");
  const int full_layers = 3;  // layers printed launch by launch
  std::printf("\nDense FP8 stream stamps, batch 1, 4K context, graph replays (median of %d steps), SM clock %.0f MHz; "
              "%zu launches over %d layers; us (globaltimer: span .. block, gap; the rest SM cycles at that clock; "
              "gap / gap_s: this start after the previous stamped launch's end / the previous one on this stream's; "
              "q1st / qloop: the quantizing prologue's (+q) first unit quantized / loop left, consumer thread 0):\n"
              "%4s %5s %-9s %5s %5s %4s | %6s %6s %6s %6s %6s | %6s %6s %6s %6s %6s %6s %4s %6s %6s %6s %6s | %6s "
              "%6s | %4s | %6s %6s\n",
              steps, cyc_us, slots, slots ? layer_of.back() + 1 : 0, "slot", "layer", "product", "n", "k", "grid",
              "span", "st_med", "st_last", "en_spr", "block", "waited", "staged", "stg_rw", "landed", "fullw",
              "stored", "stg", "busy/s", "reduce", "q1st", "qloop", "p_end", "emptyw", "item", "gap", "gap_s");
  auto print_row = [&](const std::string& slot, const std::string& layer, const std::string& prod, const std::string& n,
                       const std::string& k, const std::string& grid, const std::vector<double>& m) {
    std::printf("%4s %5s %-9s %5s %5s %4s |", slot.c_str(), layer.c_str(), prod.c_str(), n.c_str(), k.c_str(),
                grid.c_str());
    for (size_t f = 0; f < m.size(); ++f) {
      if (f < kGap && std::string(fields[f].first) == "run_mhz") continue;  // JSON only
      const std::string name = f < kGap ? fields[f].first : "gap";
      std::printf(name == "stages" || name == "items" ? " %4.0f" : " %6.2f", m[f]);
      if (name == "block_us" || name == "quant_loop_end_us" || name == "empty_wait_us" || name == "items")
        std::printf(" |");
    }
    std::printf("\n");
  };
  json launches_json = json::array();
  std::vector<std::string> order;                                 // the products in first-launch order
  std::map<std::string, std::vector<std::vector<double>>> all;    // per product, per column: every layer's median
  for (size_t slot = 0; slot < slots; ++slot) {
    std::vector<std::vector<double>> v(kCols);
    const Record* last = nullptr;
    for (const auto& step : seen) {
      if (slot >= step.size() || step[slot].start_ns == 0) continue;
      const Record& r = step[slot];
      const Phases p = cuda::fp8_launch_phases(r.stamps.data(), r.blocks);
      for (size_t f = 0; f < kGap; ++f) v[f].push_back(fields[f].second(p, cyc_us));
      if (slot > 0 && step[slot - 1].start_ns != 0)  // written this replay (replay_stamped_steps zeroes the others)
        v[kGap].push_back(double(int64_t(r.start_ns - step[slot - 1].end_ns)) * 1e-3);
      for (size_t prev = slot; prev-- > 0;)
        if (step[prev].stream == r.stream) {
          if (step[prev].start_ns != 0) v[kGapS].push_back(double(int64_t(r.start_ns - step[prev].end_ns)) * 1e-3);
          break;
        }
      last = &r;
    }
    std::vector<double> med;
    for (const auto& values : v) med.push_back(median(values));
    const Record& shape = seen.back()[slot];
    const std::string prod = product(shape);
    json row{{"slot", slot},        {"layer", layer_of[slot]}, {"product", prod},           {"n", shape.n},
             {"k", shape.k},        {"rows", shape.rows},      {"quant_x", shape.quant_x}, {"rope", shape.rope},
             {"grid", shape.blocks}, {"samples", v[0].size()}};
    for (size_t f = 0; f < kGap; ++f) row[fields[f].first] = med[f];
    row["gap_us"] = med[kGap];
    row["gap_same_stream_us"] = med[kGapS];
    launches_json.push_back(row);
    if (!all.count(prod)) order.push_back(prod);
    auto& per = all[prod];
    per.resize(kCols);
    for (size_t f = 0; f < kCols; ++f)
      if (!std::isnan(med[f])) per[f].push_back(med[f]);
    if (layer_of[slot] < full_layers)
      print_row(std::to_string(slot), std::to_string(layer_of[slot]), prod, std::to_string(shape.n),
                std::to_string(shape.k), last ? std::to_string(last->blocks) : "-", med);
  }
  json overall;
  for (const std::string& prod : order) {
    const auto& per = all[prod];
    std::vector<double> m;
    for (size_t f = 0; f < kCols; ++f) {
      m.push_back(median(per[f]));
      overall[prod][f < kGap ? fields[f].first : f == kGap ? "gap_us" : "gap_same_stream_us"] = m.back();
    }
    overall[prod]["layers"] = per[0].size();
    print_row("all", "x" + std::to_string(per[0].size()), prod, "", "", "", m);
  }
  out["fp8_stamps"] =
      stamped_step_json(steps, {{"sm_clock_mhz", cyc_us}, {"launches", launches_json}, {"median", overall}});
  std::ofstream(out_path) << out.dump(2) << "\n";
  return 0;
}

// FNV-1a (64-bit) over the bytes of `count` device floats, as 16 hex digits.
std::string logits_digest(const float* device_logits, size_t count) {
  std::vector<float> host(count);
  DI_CUDA_CHECK(cudaMemcpy(host.data(), device_logits, count * sizeof(float), cudaMemcpyDeviceToHost));
  uint64_t h = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(host.data());
  for (size_t i = 0; i < count * sizeof(float); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

template <class Step>
void compare_pdl(Step* model, json& out) {
  // Every step re-runs position 4096 of slot 0 (the capacity of --quick holds only 64 more positions).
  std::vector<gpu::V4GpuRow> rows(1);
  int32_t token = 3;
  auto step = [&] {
    model->assume_length(0, 4096);
    rows[0] = {0, token, 4096};
    token = 3 + (token * 7919 + 1) % 120000;
    model->step_graph(rows);
  };
  cudaEvent_t a, b;
  DI_CUDA_CHECK(cudaEventCreate(&a));
  DI_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> ms[2];
  for (int round = 0; round < 5; ++round) {
    for (int pdl = 0; pdl < 2; ++pdl) {
      cuda::set_pdl(pdl == 1);
      for (int i = 0; i < 3; ++i) step();  // capture (first round) + warm-up
      const int steps = 20;
      DI_CUDA_CHECK(cudaEventRecord(a, model->stream()));
      for (int i = 0; i < steps; ++i) step();
      DI_CUDA_CHECK(cudaEventRecord(b, model->stream()));
      DI_CUDA_CHECK(cudaEventSynchronize(b));
      float t = 0;
      DI_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
      ms[pdl].push_back(double(t) / steps);
    }
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cuda::set_pdl(true);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double off = median(ms[0]), on = median(ms[1]);
  std::printf("\nPDL, batch 1, 4K context, step ms from graphs (median of 5 alternating rounds of 20 steps): off %.3f, "
              "on %.3f, saving %.1f us/step (%.1f %%)\n",
              off, on, (off - on) * 1e3, 100 * (off - on) / off);
  out["pdl_batch1_4k"] = {{"step_ms_off", off}, {"step_ms_on", on}, {"rounds_off", ms[0]}, {"rounds_on", ms[1]}};
  std::fflush(stdout);
}

// Everything after the model is built; `Step` is gpu::V4GpuModel or gpu::V41GpuModel (the same step interface).
template <class Step>
int run(Step&& built, const ModelConfig& config, const StepCapacity& cap, std::chrono::steady_clock::time_point t0,
        bool quick, int chunk, double copy_gbs, const std::string& out_path, json& out) {
  Step* model = &built;
  const int layers = config.num_layers;
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("model: %d layers, weights %.1f GB, caches + scratch %.1f GB (built in %.1f s)\n", layers,
              double(model->weight_bytes()) / 1e9, double(model->state_bytes()) / 1e9, build_s);
  // The KV row formats the model allocated (DEEPINFER_KV_FORMAT): V4 one format for the window and compressed rows,
  // V4.1 its window and entry formats.
  cuda::KvFormat window_format = cuda::KvFormat::Bf16, entry_format = cuda::KvFormat::Bf16;
  if constexpr (std::is_same_v<std::decay_t<Step>, gpu::V4GpuModel>) {
    window_format = entry_format = model->kv_format();
  } else {
    window_format = model->window_format();
    entry_format = model->entry_format();
  }
  const double window_row = cuda::kv_row_bytes(window_format, int(config.head_dim));
  const double entry_row = cuda::kv_row_bytes(entry_format, int(config.head_dim));
  std::printf("KV caches: window %s rows of %.0f bytes, compressed %s rows of %.0f bytes\n",
              cuda::kv_format_name(window_format), window_row, cuda::kv_format_name(entry_format), entry_row);
  out["model"] = {{"layers", layers}, {"weights_GB", double(model->weight_bytes()) / 1e9},
                  {"state_GB", double(model->state_bytes()) / 1e9}, {"slots", cap.slots},
                  {"max_context", cap.max_context}, {"kv_format", cuda::kv_format_name(window_format)},
                  {"kv_entry_format", cuda::kv_format_name(entry_format)}};

  // The assumed contexts' index keys: random unless --zero-index-keys (all-zero keys tie every indexer score: the
  // decode select's slowest case, not a context's).
  if (!zero_index_keys) model->fill_index_keys_random(11);
  DI_CUDA_CHECK(cudaStreamSynchronize(model->stream()));
  out["model"]["index_keys"] = zero_index_keys ? "zero" : "random";
  out["model"]["batch_invariant"] = batch_invariant;
  if (profile_batch > 0) return profile_one_step(model);
  if (route_stamps_only) return route_stamps_step(model, config, out_path, out);
  if (select_stamps_only) return select_stamps_step(model, config, out_path, out);
  if (fp4_stamps_only) return fp4_stamps_step(model, config, out_path, out);
  if (fp8_stamps_only) return fp8_stamps_step(model, config, out_path, out);
  if (pdl_both) compare_pdl(model, out);
  Timer timer;
  std::vector<int64_t> contexts = quick ? std::vector<int64_t>{4096} : std::vector<int64_t>{4096, 65536};
  std::printf("\n%-8s %-6s %10s %10s %10s %9s %12s\n", "context", "batch", "step ms", "GB/step", "GB/s", "roofline",
              "host us/step");
  for (int64_t ctx : contexts) {
    for (int B : decode_batches) {
      json row{{"context", ctx}, {"batch", B}};
      try {
        for (int s = 0; s < B; ++s) model->assume_length(s, int32_t(ctx));
        std::vector<gpu::V4GpuRow> rows(static_cast<size_t>(B));
        int32_t pos = int32_t(ctx);
        auto next_rows = [&] {
          for (int s = 0; s < B; ++s) rows[size_t(s)] = {s, int32_t(3 + (s * 7919 + pos) % 120000), pos};
          ++pos;
        };
        for (int i = 0; i < 3; ++i) {  // capture + warm-up
          next_rows();
          model->step_graph(rows);
        }
        DI_CUDA_CHECK(cudaStreamSynchronize(model->stream()));
        const int steps = quick ? 5 : 10;
        double host_us = 0;
        const double wait0 = model->host_wait_seconds();
        cudaEventRecord(timer.a, model->stream());
        const float* logits = nullptr;
        for (int i = 0; i < steps; ++i) {
          next_rows();
          auto h0 = std::chrono::steady_clock::now();
          logits = model->step_graph(rows);
          host_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count();
        }
        cudaEventRecord(timer.b, model->stream());
        DI_CUDA_CHECK(cudaEventSynchronize(timer.b));
        float ms = 0;
        cudaEventElapsedTime(&ms, timer.a, timer.b);
        const double step_ms = ms / steps;
        const double bytes = decode_bytes(config, B, ctx, window_row, entry_row);
        const double gbs = bytes / (step_ms * 1e-3) / 1e9;
        row["step_ms"] = step_ms;
        row["bytes_per_step"] = bytes;
        row["GBps"] = gbs;
        row["fraction_of_copy_roofline"] = gbs / copy_gbs;
        host_us -= (model->host_wait_seconds() - wait0) * 1e6;  // planning and launch, not waiting for the device
        row["host_us_per_step"] = host_us / steps;
        row["tokens_per_s"] = B / (step_ms * 1e-3);
        // The last step's logits as one hash: two builds that should compute the same bits (a change of code that
        // keeps every operation) print the same digest for the same batch (the weights, caches and tokens are the
        // same seeded inputs in every run).
        row["logits_fnv1a64"] = logits_digest(logits, size_t(B) * size_t(config.vocab_size));
        std::printf("%-8lld %-6d %10.3f %10.2f %10.0f %8.1f%% %12.1f\n", (long long)ctx, B, step_ms, bytes / 1e9, gbs,
                    100 * gbs / copy_gbs, host_us / steps);
      } catch (const std::exception& e) {
        row["error"] = e.what();
        std::printf("%-8lld %-6d failed: %s\n", (long long)ctx, B, e.what());
      }
      out["decode"].push_back(row);
      std::fflush(stdout);
    }
  }

  // Where a decode step's time goes: per-phase device time from events between the phases of eager steps
  // (the events add a little time of their own; the graph rows above are the reference).
  for (int B : {1, 64}) {
    json row{{"batch", B}, {"context", 4096}};
    try {
      for (int s = 0; s < B; ++s) model->assume_length(s, 4096);
      std::vector<gpu::V4GpuRow> rows(static_cast<size_t>(B));
      for (int i = 0; i < 4; ++i) {
        for (int s = 0; s < B; ++s) rows[size_t(s)] = {s, int32_t(3 + s * 31 + i), 4096 + i};
        model->set_phase_timing(i > 0);  // the first step warms up
        model->step(rows);
      }
      auto phases = model->phase_times();
      model->set_phase_timing(false);
      std::sort(phases.begin(), phases.end(), [](auto& a, auto& b) { return a.second > b.second; });
      double total = 0;
      for (auto& [name, ms] : phases) total += ms;
      std::printf("\nphase breakdown, batch %d, 4K context (ms per step, eager): total %.3f\n", B, total / 3);
      for (auto& [name, ms] : phases) {
        std::printf("  %-24s %8.3f  %5.1f%%\n", name.c_str(), ms / 3, 100 * ms / total);
        row["phases_ms"][name] = ms / 3;
      }
    } catch (const std::exception& e) {
      row["error"] = e.what();
    }
    out["phase_breakdown"].push_back(row);
  }

  std::printf("\n%-8s %-6s %10s %12s\n", "prompt", "chunk", "seconds", "tokens/s");
  std::vector<int> chunks{256};
  if (chunk != 256) chunks.push_back(chunk);
  for (int step_rows : chunks) {
    for (int64_t len : quick ? std::vector<int64_t>{4096} : std::vector<int64_t>{4096, 32768}) {
      json row{{"prompt", len}, {"chunk", step_rows}};
      try {
        std::vector<gpu::V4GpuRow> rows;
        auto prefill = [&] {
          for (int64_t p0 = 0; p0 < len; p0 += step_rows) {
            rows.clear();
            for (int64_t p = p0; p < std::min<int64_t>(len, p0 + step_rows); ++p)
              rows.push_back({0, int32_t(3 + (p * 104729) % 120000), int32_t(p)});
            model->step_graph(rows);
          }
        };
        // Once untimed first: the step graphs of these row counts are captured then (a prompt of one or two steps
        // would otherwise time the capture), and the timed pass restarts slot 0 from position 0.
        prefill();
        cudaEventRecord(timer.a, model->stream());
        prefill();
        cudaEventRecord(timer.b, model->stream());
        DI_CUDA_CHECK(cudaEventSynchronize(timer.b));
        float ms = 0;
        cudaEventElapsedTime(&ms, timer.a, timer.b);
        row["seconds"] = ms * 1e-3;
        row["tokens_per_s"] = double(len) / (ms * 1e-3);
        std::printf("%-8lld %-6d %10.3f %12.0f\n", (long long)len, step_rows, ms * 1e-3, double(len) / (ms * 1e-3));
      } catch (const std::exception& e) {
        row["error"] = e.what();
        std::printf("%-8lld %-6d failed: %s\n", (long long)len, step_rows, e.what());
      }
      out["prefill"].push_back(row);
      std::fflush(stdout);
    }
  }

  std::printf("\n%-6s %-6s %12s %14s %12s\n", "batch", "mode", "tokens/s", "host us/step", "idle %");
  for (int B : {64, 256}) {
    for (bool async : {false, true}) {
      json row{{"batch", B}, {"context", 4096}, {"async", async}};
      try {
        const int steps = quick ? 8 : 24;
        for (int s = 0; s < B; ++s) model->assume_length(s, 4096);
        std::vector<gpu::V4GpuRow> rows(static_cast<size_t>(B));
        std::vector<cudaEvent_t> begin(static_cast<size_t>(steps)), end(static_cast<size_t>(steps));
        for (int i = 0; i < steps; ++i) {
          cudaEventCreate(&begin[size_t(i)]);
          cudaEventCreate(&end[size_t(i)]);
        }
        int32_t* tokens_host[2];
        for (auto& t : tokens_host) DI_CUDA_CHECK(cudaMallocHost(&t, sizeof(int32_t) * B));
        cudaEvent_t copied[2];
        for (auto& e : copied) cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
        std::vector<int32_t> last(size_t(B), 5);
        int64_t checksum = 0;
        double host_us = 0;
        // Warm-up (and graph capture) outside the measurement.
        for (int s = 0; s < B; ++s) rows[size_t(s)] = {s, 5, 4096};
        model->step_graph(rows);
        model->sample_greedy(B);
        DI_CUDA_CHECK(cudaStreamSynchronize(model->stream()));
        auto w0 = std::chrono::steady_clock::now();
        const double wait0 = model->host_wait_seconds();
        double token_wait_us = 0;
        for (int i = 0; i < steps; ++i) {
          auto h0 = std::chrono::steady_clock::now();
          const int32_t pos = 4097 + i;
          for (int s = 0; s < B; ++s) rows[size_t(s)] = {s, async ? -(s + 1) : last[size_t(s)], pos};
          cudaEventRecord(begin[size_t(i)], model->stream());
          model->step_graph(rows);
          const int32_t* sampled = model->sample_greedy(B);
          cudaEventRecord(end[size_t(i)], model->stream());
          DI_CUDA_CHECK(cudaMemcpyAsync(tokens_host[i % 2], sampled, sizeof(int32_t) * B, cudaMemcpyDeviceToHost,
                                        model->stream()));
          cudaEventRecord(copied[i % 2], model->stream());
          // Synchronous: wait for this step's tokens. Asynchronous: for the previous step's, while this one runs.
          const int done = async ? i - 1 : i;
          if (done >= 0) {
            auto t0 = std::chrono::steady_clock::now();
            cudaEventSynchronize(copied[done % 2]);
            token_wait_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
            for (int s = 0; s < B; ++s) {
              last[size_t(s)] = tokens_host[done % 2][s];
              checksum += last[size_t(s)];
            }
          }
          host_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count();
        }
        DI_CUDA_CHECK(cudaStreamSynchronize(model->stream()));
        const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
        // Host work only: the time blocked on the device (staging buffers, tokens) is not host work.
        host_us -= (model->host_wait_seconds() - wait0) * 1e6 + token_wait_us;
        double busy_ms = 0;
        for (int i = 0; i < steps; ++i) {
          float ms = 0;
          cudaEventElapsedTime(&ms, begin[size_t(i)], end[size_t(i)]);
          busy_ms += ms;
        }
        float span_ms = 0;
        cudaEventElapsedTime(&span_ms, begin[0], end[size_t(steps - 1)]);
        const double idle = 1.0 - busy_ms / span_ms;
        row["steps"] = steps;
        row["tokens_per_s"] = double(B) * steps / wall_s;
        row["host_us_per_step"] = host_us / steps;
        row["device_idle_fraction"] = idle;
        row["token_checksum"] = checksum;
        std::printf("%-6d %-6s %12.0f %14.1f %11.2f%%\n", B, async ? "async" : "sync", double(B) * steps / wall_s,
                    host_us / steps, 100 * idle);
        for (auto& t : tokens_host) cudaFreeHost(t);
        for (int i = 0; i < steps; ++i) {
          cudaEventDestroy(begin[size_t(i)]);
          cudaEventDestroy(end[size_t(i)]);
        }
      } catch (const std::exception& e) {
        row["error"] = e.what();
        std::printf("%-6d %-6s failed: %s\n", B, async ? "async" : "sync", e.what());
      }
      out["decode_loop"].push_back(row);
    }
  }
  std::ofstream(out_path) << out.dump(2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path = "v4_decode.json";
  int layers = 0, chunk = 256;  // layers 0: the family's default
  bool quick = false;
  std::string family = "v4";
  std::string pdl_mode;  // "": DEEPINFER_PDL decides
  std::string batches_arg;  // "": the default decode batches
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) out_path = argv[++i];
    else if (a == "--layers" && i + 1 < argc) layers = std::stoi(argv[++i]);
    else if (a == "--chunk" && i + 1 < argc) chunk = std::stoi(argv[++i]);
    else if (a == "--quick") quick = true;
    else if (a == "--family" && i + 1 < argc) family = argv[++i];
    else if (a == "--pdl" && i + 1 < argc) pdl_mode = argv[++i];
    else if (a == "--profile-step" && i + 1 < argc) profile_batch = std::stoi(argv[++i]);
    else if (a == "--route-stamps") route_stamps_only = true;
    else if (a == "--route-stamps-warm") route_stamps_only = route_stamps_warm = true;
    else if (a == "--select-stamps") select_stamps_only = true;
    else if (a == "--select-stamps-warm") select_stamps_only = select_stamps_warm = true;
    else if (a == "--fp4-stamps") fp4_stamps_only = true;
    else if (a == "--fp8-stamps") fp8_stamps_only = true;
    else if (a == "--zero-index-keys") zero_index_keys = true;
    else if (a == "--batch-invariant") batch_invariant = true;
    else if (a == "--batches" && i + 1 < argc) {
      batches_arg = argv[++i];
      decode_batches = parse_batches(batches_arg, 256);
      if (decode_batches.empty()) {
        std::fprintf(stderr, "v4_decode: --batches takes a comma-separated list of batches of 1 to 256 rows, got '%s'\n",
                     batches_arg.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: v4_decode --out results.json [--family v4|v41] [--layers N] [--quick] "
                           "[--chunk 256] [--pdl on|off|both] [--profile-step BATCH] [--route-stamps] [--route-stamps-warm] "
                           "[--select-stamps] [--select-stamps-warm] [--fp4-stamps] [--fp8-stamps] "
                           "[--zero-index-keys] [--batch-invariant] [--batches 1,8,64,256]\n");
      return 2;
    }
  }
  if (pdl_mode != "" && pdl_mode != "on" && pdl_mode != "off" && pdl_mode != "both") {
    std::fprintf(stderr, "v4_decode: --pdl is on, off or both, got '%s'\n", pdl_mode.c_str());
    return 2;
  }
  if (profile_batch < 0 || profile_batch > 256) {
    std::fprintf(stderr, "v4_decode: --profile-step takes a batch of 1 to 256 rows, got %d\n", profile_batch);
    return 2;
  }
  if (pdl_mode == "on" || pdl_mode == "off") cuda::set_pdl(pdl_mode == "on");
  // Before the model is built and any graph captured: the dispatchers read the mode when they choose a kernel.
  if (batch_invariant) cuda::set_batch_invariant(true);
  pdl_both = pdl_mode == "both";
  if (family != "v4" && family != "v41") {
    std::fprintf(stderr, "v4_decode: --family is v4 or v41, got '%s'\n", family.c_str());
    return 2;
  }
  // V4.1 at 256 slots x 64K: ~7.5 GB of weights per layer, and the bf16 pools of a ratio-2 / ratio-1 source hold
  // 10.7 / 21.5 GB; 10 layers (5 encoder, 5 decoder) fit the H200 with both. V4's 16 layers take 62 GB of weights
  // and 43 GB of caches (run 58). The full table on a card under 120 GB (the H100's 80) gets 10 / 6 layers, ~66 /
  // ~68 GB (run 265 ran out of memory with 16 / 10 there); --quick (4K contexts only) keeps 16 / 10 on any card, so
  // its batch-1 fractions stay comparable from run to run.
  if (layers == 0) {
    size_t free_bytes = 0, total_bytes = 0;
    DI_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const bool large = quick || total_bytes >= (size_t(120) << 30);
    layers = family == "v41" ? (large ? 10 : 6) : (large ? 16 : 10);
  }
  json out;
  out["command"] = std::string("v4_decode --family ") + family + (quick ? " --quick" : "") + " --layers " +
                   std::to_string(layers) + " --chunk " + std::to_string(chunk) +
                   (pdl_both ? " --pdl both" : cuda::pdl_enabled() ? " --pdl on" : " --pdl off") +
                   (route_stamps_warm ? " --route-stamps-warm" : route_stamps_only ? " --route-stamps" : "") +
                   (select_stamps_warm ? " --select-stamps-warm" : select_stamps_only ? " --select-stamps" : "") +
                   (fp4_stamps_only ? " --fp4-stamps" : "") + (fp8_stamps_only ? " --fp8-stamps" : "") +
                   (zero_index_keys ? " --zero-index-keys" : "") + (batch_invariant ? " --batch-invariant" : "") +
                   (batches_arg.empty() ? "" : " --batches " + batches_arg);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  out["device"] = prop.name;
  const double copy_gbs = copy_roofline_gbs();
  out["roofline"] = {{"copy_GBps", copy_gbs}};
  std::printf("device: %s, copy roofline %.0f GB/s\n", prop.name, copy_gbs);

  ModelConfig config = parse_model_config(family == "v41" ? flash41_config(layers) : flash_config(layers));
  const int max_batch = 256;
  const int64_t max_ctx = 65536 + 64;
  gpu::V4GpuCapacity cap;
  cap.slots = max_batch;
  cap.max_context = int(quick ? 4096 + 64 : std::max<int64_t>(max_ctx, 32768));
  cap.max_rows = std::max(max_batch, chunk);
  auto t0 = std::chrono::steady_clock::now();
  try {
    if (family == "v41")
      return run(gpu::V41GpuModel(config, gpu::random_v41_gpu_weights(config, 7), cap), config, cap, t0, quick, chunk,
                 copy_gbs, out_path, out);
    return run(gpu::V4GpuModel(config, gpu::random_v4_gpu_weights(config, 7), cap), config, cap, t0, quick, chunk,
               copy_gbs, out_path, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "v4_decode: %s\n", e.what());
    return 1;
  }
}
