// The V4 MoE FFN sublayer on the GPU (model-spec.md §3 "MoE", §2 W8A8), see moe_gpu.h. The GEMMs are the
// kernels of kernels.h (route_topk, fp8_quantize, fp8_gemm, mxfp4_grouped_gemm[_swiglu|_prefill]) and decode v8
// (cuda/stream_gemm.cuh) for the shared expert; this file adds the glue: the batch-invariant router logits, the
// hash-layer routing, the device-side dispatch into expert order, the clamped SwiGLU with its FP8
// requantization, and the fixed-order combine.
//
// Launches (issue 4). Decode with up to kFusedRouteRows rows: the ticket zeroed (nothing with the caller's kept
// counters, MoeGpu::counters; else zero_counters_kernel or a memset node), one routing
// kernel (router logits, x in FP8, then in its last block the top-k or hash routing, the dispatch and the GEMM
// groups), w1|w3 reading x's FP8 rows through the slot -> row map (no gathered copy), w2 with the SwiGLU and its
// quantization in its activation prologue (decode v8), the combine; the shared expert is w1|w3 and w2 with the
// SwiGLU prologue (decode v8). Where a fused form does not apply (more rows, the checkpoint or v7 layouts) the
// separate kernels below run instead, with the same arithmetic, so a row's bits do not depend on which ran.
//
// Dispatch. Each row r brings top_k (row, slot) pairs p = r * top_k + k. They are sorted by expert with a stable
// counting sort, so that the slots of an expert are contiguous and, inside an expert, ordered by p (ascending row,
// then k) whatever the GPU's scheduling: slot(p) = the expert's first slot + the number of earlier pairs of the
// same expert, a function of the selected experts only. With few rows the routing kernel's last block computes it
// directly (decode_route_kernel); otherwise three small kernels:
//   count   one block per tile of 256 pairs: the tile's histogram over the experts (integer atomics in shared
//           memory: the counts do not depend on their order);
//   scan    one block: per expert the exclusive prefix over the tiles (in place), the expert's first slot
//           (exclusive prefix over the experts), and the GEMM groups;
//   scatter one block per tile: a pair's slot = expert start + earlier tiles' count + the number of earlier pairs
//           of the same expert in its own tile (a plain scan of the tile in shared memory).
// GEMM groups. The grouped GEMMs launch a fixed number of groups (graph capture). Both kernels let an empty group
// leave at once (its blocks read two row offsets, compare, return), but an empty group still costs its blocks:
// one per 16 weight rows in the decode kernel (one token of V4 would launch 256 experts x 256 row tiles = 65536
// blocks for the w1|w3 product, 6 x 256 of them with work), one per 128 rows holding ~190 KB of shared memory
// in the prefill kernel (one resident block per SM). So instead of one group per expert the groups are the
// non-empty experts in ascending order, each cut into chunks of at most `chunk` rows, followed by empty groups
// (offset = pairs) up to the host-side bound  min(experts, pairs) + (pairs - 1) / chunk  on the number of chunks:
// with one token that is top_k groups, and the empty tail is only the bound's slack. The chunk is 128 rows (the prefill kernel's row tile, so its max_rows_per_group
// is 128 and it launches one row tile per group), or for the decode kernel 8 / 16 / 32 / 64 rows by the average
// rows per expert (the kernel's token-group width: wide enough to share one pass over an expert's weights, narrow
// enough not to multiply padding rows; batch-invariant mode: always 8). The decode kernels' per-row arithmetic does
// not depend on the width, but groups of more than 8 rows run v7 instead of v8 (moe_gpu.h).
//
// Expert parallelism (moe_gpu.h). The dispatch sorts by this rank's expert slot instead of the expert id
// (PairOwner): a pair whose expert another rank holds, or whose row is another rank's padding, gets no slot
// (pair_slot -1) and no GEMM row; the slots hold only this rank's pairs, in the same (row, k) order inside a slot
// as on one GPU. The GEMMs launch the same host-side group bound (every pair might be local). Slots past the local
// pairs get row 0 and weight 0, because the SwiGLU and the prefill gather run over all `pairs` slots.
// With FP8 dispatch (EpDispatch::Fp8) the home rank runs fp8_quantize and the separate routing kernels on its own rows
// only, writing them into its record of the exchange buffer; after the all-gather one kernel copies every rank's
// record to where the one-rank routing leaves its results (xq, xs, expert_ids, route_w of the routed rows), and the
// dispatch kernels and everything after run as in the bf16 form. The fused decode routing kernel does not apply there
// (it routes and dispatches the same rows); its separate kernels have the same bits (see above).
#include "layers/moe/moe_gpu.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>

#include "core/env_switch.h"
#include "cuda/blas.h"
#include "cuda/check.h"
#include "cuda/stamp_records.h"
#include "cuda/device_util.cuh"
#include "cuda/numerics_mode.h"
#include "cuda/stream_gemm.cuh"
#include "layers/moe/route_fused.cuh"
#include "layers/moe/routing.cuh"

namespace deepinfer::cuda {

namespace {

// The routing pieces (route_fused.cuh) and their limits: kMaxExperts, kMaxTopK (route_topk's), kLogitWarps, kLogitRows,
// kFusedRouteRows, kRouteThreads.
using namespace moe_dev;

constexpr int kDispatchTile = 256;  // pairs per block of the count and scatter kernels
constexpr int kPrefillChunk = 128;  // the prefill kernel's row tile
constexpr int kMinDecodeChunk = 8;  // one mma token group of the decode kernel
constexpr int kMaxGridY = 65535;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// MoeDecode (moe_gpu.h): DEEPINFER_MOE_DECODE=v8 / v9 / v9small read once; anything else V9Wide (the default).
EnvSwitch<MoeDecode> g_moe_decode{"DEEPINFER_MOE_DECODE", [](const char* v) {
  return env_equals(v, "v8")        ? MoeDecode::V8
         : env_equals(v, "v9")      ? MoeDecode::V9
         : env_equals(v, "v9small") ? MoeDecode::V9Small
                                    : MoeDecode::V9Wide;
}};

size_t align256(size_t v) { return (v + 255) & ~size_t(255); }


// EpDispatch (moe_gpu.h): DEEPINFER_EP_DISPATCH=bf16 read once; anything else Fp8 (the default).
EnvSwitch<EpDispatch> g_ep_dispatch{"DEEPINFER_EP_DISPATCH", [](const char* v) {
  return env_equals(v, "bf16") ? EpDispatch::Bf16 : EpDispatch::Fp8;
}};

// The prefill kernel needs n % 128 == 0 and k % 128 == 0 for both products.
bool prefill_fits(const MoeGpu& w) {
  // v1 / v2 read the checkpoint layout, v3 the decode-packed copy; experts kept only in the decode layout
  // (pack_experts_for_decode) run the decode kernels at every size unless v3 is selected.
  const bool checkpoint_layout = w.w13.weight && w.w2.weight;
  if (!checkpoint_layout && !(mxfp4_prefill_reads_packed(w.w13) && mxfp4_prefill_reads_packed(w.w2))) return false;
  return w.w13.n % 128 == 0 && w.w13.k % 128 == 0 && w.w2.n % 128 == 0 && w.w2.k % 128 == 0;
}

// Upper bound on the chunks the dispatch makes: each non-empty expert (at most min(experts, pairs)) gives
// 1 + floor((count - 1) / chunk) chunks, and those floors add up to at most floor((pairs - 1) / chunk).
int group_bound(int64_t pairs, int experts, int chunk) {
  return int(std::min<int64_t>(experts, pairs) + (pairs - 1) / chunk);
}

// The slots of w13 / w2 on this rank: all experts on one GPU, the rank's share under expert parallelism.
int local_slots(const MoeGpu& w) { return w.replicas.slots ? w.w13.experts : w.experts; }

// Decode chunk: the token-group width of mxfp4_grouped_gemm for the average load of an expert.
int decode_chunk(int64_t pairs, int experts) {
  const int64_t avg = ceil_div(pairs, experts);
  return avg <= 8 ? 8 : avg <= 16 ? 16 : avg <= 32 ? 32 : 64;
}

// Weights packed for decode v8 and selected for it (the GPU model's layout).
bool fp8_streamed(const Fp8Linear& l) { return l.packed && stream_gemm::wants_stream(l.decode); }
bool fp4_streamed(const Fp4Experts& e) {
  return e.packed_weight && e.packed_scale && stream_gemm::wants_stream(e.decode);
}

// Decode MoE v9's wide form (plan_v9) takes groups of 4 rows instead of 8 where the average load is at most 2 pairs
// per expert (V4-Flash: up to 85 rows): the activation carve-up of w1|w3 (k = 4096) then lets TWO blocks of 4 stages
// share an SM (16 consumer warps on the issue-bound MXFP4 loop, as the roofline's batch-8 rows that reach ~60 % of
// the copy rate) instead of one block of 9 stages; the few experts with more than 4 rows stream twice (~2 % more
// bytes at 64 rows). A row's bits do not depend on the group width (its mma column is its own). Only above 8 rows
// (the fused 1..8-row form keeps its widths) and only with V9. DEEPINFER_MOE_V9_CHUNK=8 keeps 8, =4 takes 4 at every
// load where the wide form runs (timing A/B; read once).
constexpr int kNarrowDecodeChunk = 4;
EnvSwitch<int> g_v9_chunk{"DEEPINFER_MOE_V9_CHUNK",
                          [](const char* v) { return env_equals(v, "4") ? 4 : env_equals(v, "8") ? 8 : 0; }};
int v9_chunk_override() { return g_v9_chunk.get(); }
bool v9_narrow_groups(int rows, int64_t pairs, const MoeGpu& w) {
  const MoeDecode mode = moe_decode();
  if ((mode != MoeDecode::V9 && mode != MoeDecode::V9Wide) || rows <= stream_gemm::kMaxRows) return false;
  if (!fp4_streamed(w.w13) || !fp4_streamed(w.w2) || !fp8_streamed(w.shared_w13) || !fp8_streamed(w.shared_w2))
    return false;
  const int force = v9_chunk_override();
  if (force) return force == kNarrowDecodeChunk;
  return pairs <= 2 * int64_t(w.experts);
}

// Host-side decisions of one call: functions of `rows` and the shapes only, never of the routing.
struct CallPlan {
  int rows = 0;
  int64_t pairs = 0;   // rows * top_k
  bool prefill = false;
  bool fused_route = false;  // decode_route_kernel (decode, rows <= kFusedRouteRows)
  // W2's output has a region of its own (else it reuses w1|w3's, dead by then): needed where W2 reads w1|w3's
  // output while it writes (the SwiGLU prologue), i.e. where the decode groups are 8 rows (<= 8 pairs per expert
  // on average). A function of rows and the shapes only, as the workspace carve must be.
  bool separate_y = false;
  int chunk = 0;       // rows per GEMM group at most
  int groups = 0;      // GEMM groups launched
  int max_groups = 0;  // groups the workspace holds (the bound for the smallest chunk: any path fits)
  int tiles = 0;       // dispatch tiles
};

// moe_gpu.h moe_prefill_rows_per_expert: DEEPINFER_MOE_PREFILL_ROWS_PER_EXPERT read once (no setter); a value outside
// [1, 4096] is an error.
EnvSwitch<int> g_prefill_rows_per_expert{"DEEPINFER_MOE_PREFILL_ROWS_PER_EXPERT", [](const char* v) {
  if (!v || !*v) return kMoePrefillRowsPerExpert;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  DI_CHECK(*end == '\0' && n >= 1 && n <= 4096,
           std::string("DEEPINFER_MOE_PREFILL_ROWS_PER_EXPERT must be an integer in [1, 4096], got '") + v + "'");
  return int(n);
}};

}  // namespace

int moe_prefill_rows_per_expert() { return g_prefill_rows_per_expert.get(); }

namespace {

CallPlan make_plan(int rows, const MoeGpu& w) {
  CallPlan p;
  p.rows = rows;
  p.pairs = int64_t(rows) * w.top_k;
  const bool fits = prefill_fits(w);
  // Batch-invariant mode (algorithms.md §4): Auto stays on the decode kernels and their groups of 8 rows (decode
  // v8 where the experts are packed for it) at every batch size, so a row's bits never depend on the batch.
  const bool invariant = batch_invariant();
  switch (w.expert_path) {
    case MoeGemmPath::Auto:
      p.prefill = !invariant && fits && p.pairs >= int64_t(moe_prefill_rows_per_expert()) * w.experts;
      break;
    case MoeGemmPath::Decode: p.prefill = false; break;
    case MoeGemmPath::Prefill: p.prefill = fits; break;
  }
  p.fused_route = !p.prefill && rows <= kFusedRouteRows;
  p.separate_y = p.pairs <= int64_t(kMinDecodeChunk) * w.experts;
  p.chunk = p.prefill ? kPrefillChunk : invariant ? kMinDecodeChunk : decode_chunk(p.pairs, w.experts);
  if (!p.prefill && p.chunk == kMinDecodeChunk && p.separate_y && v9_narrow_groups(rows, p.pairs, w))
    p.chunk = kNarrowDecodeChunk;
  p.groups = group_bound(p.pairs, local_slots(w), p.chunk);
  // The bound for the smallest chunk: any path fits, whatever the decode switch says when the workspace is sized.
  p.max_groups = group_bound(p.pairs, local_slots(w), kNarrowDecodeChunk);
  p.tiles = int(ceil_div(p.pairs, kDispatchTile));
  return p;
}

// The workspace, carved in a fixed order from sizes that grow with rows, so the carve for any rows <= max_rows
// fits in moe_workspace_bytes(max_rows).
struct Layout {
  uint32_t* ticket = nullptr;       // [1] decode_route_kernel's arrival counter, zeroed by each call
  uint32_t* tile_count = nullptr;   // [ceil(hidden / 16)] decode MoE v9's combine counters, right after the ticket
                                    // (one memset zeroes both)
  int32_t* used_groups = nullptr;   // [1] the GEMM groups that hold rows (they come first), written by the routing
  int32_t* expert_ids = nullptr;    // [pairs] routing: selected expert per pair, selection order
  float* route_w = nullptr;         // [pairs] routing weight per pair (times route_scale)
  float* logits = nullptr;          // [rows, experts] fp32
  float* scores = nullptr;          // [rows, experts] their route_score (decode_route_kernel, route_scores_in_blocks())
  int32_t* tile_hist = nullptr;     // [tiles, experts] counts, then their exclusive prefix over the tiles
  int32_t* expert_start = nullptr;  // [experts] first slot of each expert
  int32_t* group_experts = nullptr; // [max_groups] GEMM group -> expert
  int32_t* group_offsets = nullptr; // [max_groups + 1] GEMM group -> first slot
  int32_t* pair_slot = nullptr;     // [pairs] pair -> slot (the combine reads the expert outputs through it)
  int32_t* slot_row = nullptr;      // [pairs] slot -> row of x
  float* slot_weight = nullptr;     // [pairs] slot -> routing weight
  uint8_t* xq = nullptr;            // [rows, hidden] x in FP8
  float* xs = nullptr;              // [rows, hidden / act_block]
  uint8_t* disp_q = nullptr;        // [pairs, hidden] x's FP8 rows in slot order (prefill; decode reads xq via slot_row)
  float* disp_s = nullptr;          // [pairs, hidden / act_block]
  float* expert_h = nullptr;        // [pairs, 2 inter] w1|w3 outputs (fp32; bf16 on the prefill path)
  float* expert_y = nullptr;        // [pairs, hidden] w2 outputs (fp32; bf16 on the prefill path on one GPU): own
                                    // region (CallPlan::separate_y) or expert_h's
  uint8_t* act_q = nullptr;         // [pairs, inter] W2 input in FP8 (where the SwiGLU is not fused into W2)
  float* act_s = nullptr;           // [pairs, inter / act_block]
  float* shared_h = nullptr;        // [rows, 2 shared_inter]
  uint8_t* shared_q = nullptr;      // [rows, shared_inter]
  float* shared_s = nullptr;        // [rows, shared_inter / act_block]
  float* shared_y = nullptr;        // [rows, hidden]
  void* prefill_ws = nullptr;       // mxfp4_prefill_workspace_bytes(pairs, max(hidden, inter)); shared by w13 and w2
  size_t bytes = 0;
};

Layout carve(uintptr_t base, int rows, const MoeGpu& w) {
  const CallPlan p = make_plan(rows, w);
  const int64_t R = rows, P = p.pairs, E = w.experts, H = w.hidden, I = w.inter, S = w.shared_inter;
  const int64_t B = w.act_block;
  Layout L;
  auto take = [&](auto*& ptr, int64_t count) {
    using T = std::remove_reference_t<decltype(*ptr)>;
    ptr = reinterpret_cast<T*>(base + L.bytes);
    L.bytes += align256(size_t(count) * sizeof(T));
  };
  take(L.ticket, int64_t(moe_counter_words(w)));
  L.tile_count = L.ticket + 1;
  take(L.used_groups, 1);
  take(L.expert_ids, P);
  take(L.route_w, P);
  take(L.logits, R * E);
  take(L.scores, R * E);
  take(L.tile_hist, int64_t(p.tiles) * E);
  take(L.expert_start, E);
  take(L.group_experts, p.max_groups);
  take(L.group_offsets, int64_t(p.max_groups) + 1);
  take(L.pair_slot, P);
  take(L.slot_row, P);
  take(L.slot_weight, P);
  take(L.xq, R * H);
  take(L.xs, R * (H / B));
  take(L.disp_q, P * H);
  take(L.disp_s, P * (H / B));
  take(L.expert_h, P * std::max(2 * I, H));
  if (p.separate_y)
    take(L.expert_y, P * H);
  else
    L.expert_y = L.expert_h;
  take(L.act_q, P * I);
  take(L.act_s, P * (I / B));
  take(L.shared_h, R * 2 * S);
  take(L.shared_q, R * S);
  take(L.shared_s, R * (S / B));
  take(L.shared_y, R * H);
  if (prefill_fits(w)) {
    L.prefill_ws = reinterpret_cast<void*>(base + L.bytes);
    L.bytes += align256(mxfp4_prefill_workspace_bytes(P, std::max(H, I)));
  }
  return L;
}

// EpDispatch::Fp8: one rank's record in the all-gather, its M rows (zero-padded) as the routed-row arrays hold them:
// x's FP8 codes [M, hidden], their scales [M, hidden / act_block], the expert ids and the routing weights
// [M, top_k] each; byte offsets of the parts (16-byte aligned, for the unpack's 16-byte copies) and the record size.
struct Fp8Record {
  int64_t s = 0, ids = 0, w = 0, bytes = 0;  // the codes start at 0
};

Fp8Record fp8_record(int rows_per_rank, const MoeGpu& w) {
  auto a16 = [](int64_t v) { return (v + 15) & ~int64_t(15); };
  const int64_t M = rows_per_rank;
  Fp8Record r;
  r.s = a16(M * w.hidden);
  r.ids = r.s + a16(M * (w.hidden / w.act_block) * int64_t(sizeof(float)));
  r.w = r.ids + a16(M * w.top_k * int64_t(sizeof(int32_t)));
  r.bytes = r.w + a16(M * w.top_k * int64_t(sizeof(float)));
  return r;
}

// The per-call buffers of expert parallelism (moe_gpu.h), before the carve of the routed rows: the exchange buffer
// the all-gather fills (the group's bf16 rows of x, or with FP8 dispatch the ranks' records: one buffer sized for
// either, so the workspace does not depend on the switch), the per-pair output buffer the reduce-scatter reads, and
// this rank's returned pair outputs.
struct EpLayout {
  bf16* x = nullptr;          // [world * M, hidden] (EpDispatch::Bf16)
  uint8_t* records = nullptr; // [world, record.bytes] (EpDispatch::Fp8), the same memory as x
  Fp8Record record;
  float* pair_y = nullptr;    // [world * M * top_k, hidden]
  float* returned = nullptr;  // [M * top_k, hidden]
  size_t bytes = 0;
};

EpLayout carve_ep(uintptr_t base, int world, int rows_per_rank, const MoeGpu& w) {
  EpLayout L;
  if (world <= 1) return L;
  const int64_t G = int64_t(world) * rows_per_rank, H = w.hidden, K = w.top_k;
  auto take = [&](auto*& ptr, int64_t count) {
    using T = std::remove_reference_t<decltype(*ptr)>;
    ptr = reinterpret_cast<T*>(base + L.bytes);
    L.bytes += align256(size_t(count) * sizeof(T));
  };
  L.record = fp8_record(rows_per_rank, w);
  take(L.records, std::max<int64_t>(G * H * int64_t(sizeof(bf16)), world * L.record.bytes));
  L.x = reinterpret_cast<bf16*>(L.records);
  take(L.pair_y, G * K * H);
  take(L.returned, int64_t(rows_per_rank) * K * H);
  return L;
}

// Which slot of this rank computes a pair: parallel::PairOwner (parallel/replica_choice.h), the one definition the
// dispatch, the per-rank pair counter and the host tests share.
using parallel::PairOwner;

// ---------------------------------------------------------------------------------------------------------
// Router logits (model-spec §3), a warp per expert and row: route_fused.cuh's logit_dot, batch-invariant.
__global__ void __launch_bounds__(kLogitWarps * 32)
    router_logits_kernel(const bf16* __restrict__ x, const bf16* __restrict__ gate, int rows, int experts, int hidden,
                         float* __restrict__ logits) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int e = blockIdx.x * kLogitWarps + warp;
  if (e >= experts) return;  // warp-uniform
  const int r0 = blockIdx.y * kLogitRows, r1 = min(r0 + kLogitRows, rows);
  for (int r = r0; r < r1; ++r) {
    const float acc = logit_dot(x + int64_t(r) * hidden, gate + int64_t(e) * hidden, hidden);
    if (lane == 0) logits[int64_t(r) * experts + e] = acc;
  }
}

// The same logits for up to kLogitRows rows of one expert in ONE pass over k (decode MoE v9 above 16 rows): each
// row keeps its own accumulator with logit_dot's fma chain (the lane's vectors in order of v, the 8 products of a
// vector in order of j) and the same butterfly sum, so every logit has logit_dot's bits; the gate row is read once
// and the loads of all the rows are in flight together, instead of one dependent pass per row (router_logits_kernel:
// 8 passes of ~4 load latencies each, ~20 us at any batch). Rows past `rows` are neither read nor summed.
__device__ __forceinline__ void logit_dot_rows(const bf16* __restrict__ x, int rows, const bf16* __restrict__ gate_row,
                                               int hidden, float (&out)[kLogitRows]) {
  const int lane = threadIdx.x % 32;
  const auto* g = reinterpret_cast<const dev::Bf16x8*>(gate_row);
  const int vecs = hidden / 8;
  float acc[kLogitRows];
#pragma unroll
  for (int r = 0; r < kLogitRows; ++r) acc[r] = 0.0f;
  // Rows past `rows` read the last row again (no branch around the loads, so all of them are in flight together)
  // and their sums are dropped.
  const dev::Bf16x8* xr[kLogitRows];
#pragma unroll
  for (int r = 0; r < kLogitRows; ++r)
    xr[r] = reinterpret_cast<const dev::Bf16x8*>(x + int64_t(min(r, rows - 1)) * hidden);
#pragma unroll 2
  for (int v = lane; v < vecs; v += 32) {
    dev::Bf16x8 xv[kLogitRows];
#pragma unroll
    for (int r = 0; r < kLogitRows; ++r) xv[r] = xr[r][v];
    float gf[8];
    dev::unpack8(g[v], gf);
#pragma unroll
    for (int r = 0; r < kLogitRows; ++r) {
      float xf[8];
      dev::unpack8(xv[r], xf);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[r] = fmaf(xf[j], gf[j], acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < kLogitRows; ++r) out[r] = r < rows ? dev::warp_sum(acc[r]) : 0.0f;
}

// router_logits_kernel's grid and output through logit_dot_rows (the same bits).
__global__ void __launch_bounds__(kLogitWarps * 32)
    router_logits_rows_kernel(const bf16* __restrict__ x, const bf16* __restrict__ gate, int rows, int experts,
                              int hidden, float* __restrict__ logits) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int e = blockIdx.x * kLogitWarps + warp;
  if (e >= experts) return;  // warp-uniform
  const int r0 = blockIdx.y * kLogitRows, n = min(kLogitRows, rows - r0);
  float out[kLogitRows];
  logit_dot_rows(x + int64_t(r0) * hidden, n, gate + int64_t(e) * hidden, hidden, out);
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < kLogitRows; ++r)
      if (r < n) logits[int64_t(r0 + r) * experts + e] = out[r];
  }
}

// The row function as it was before session 7 (each slot's tid2eid entry, then its logit, in turn), kept for the
// bitwise test of the one above (hash_route_rows(..., reference = true)).
__device__ __forceinline__ void hash_route_row_reference(int r, const float* logits, const int32_t* __restrict__ tokens,
                                                         const int32_t* __restrict__ tid2eid, int64_t vocab,
                                                         int experts, int top_k, float temp, bool normalize, float eps,
                                                         float route_scale, int32_t* __restrict__ ids,
                                                         float* __restrict__ weights) {
  const int32_t token = tokens[r];
  if (token < 0 || token >= vocab) {
    printf("moe_forward: row %d has token %d outside the hash table [0, %lld)\n", r, token, (long long)vocab);
    __trap();
  }
  float s[kMaxTopK];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxTopK; ++k) {
    if (k < top_k) {
      const int e = tid2eid[int64_t(token) * top_k + k];
      if (e < 0 || e >= experts) {
        printf("moe_forward: tid2eid[%d][%d] = %d is not an expert\n", token, k, e);
        __trap();
      }
      s[k] = moe_dev::route_score(__ldcg(logits + int64_t(r) * experts + e), temp);
      sum += s[k];
      ids[int64_t(r) * top_k + k] = e;
    }
  }
#pragma unroll
  for (int k = 0; k < kMaxTopK; ++k) {
    if (k < top_k) {
      const float v = normalize ? s[k] / (sum + eps) : s[k];
      weights[int64_t(r) * top_k + k] = v * route_scale;
    }
  }
}

template <bool kReference>
__global__ void hash_route_kernel(const float* __restrict__ logits, const int32_t* __restrict__ tokens,
                                  const int32_t* __restrict__ tid2eid, int64_t vocab, int rows, int experts, int top_k,
                                  float temp, bool normalize, float eps, float route_scale, int32_t* __restrict__ ids,
                                  float* __restrict__ weights) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  if constexpr (kReference)
    hash_route_row_reference(r, logits, tokens, tid2eid, vocab, experts, top_k, temp, normalize, eps, route_scale,
                             ids, weights);
  else
    hash_route_row(r, logits, tokens, tid2eid, vocab, experts, top_k, temp, normalize, eps, route_scale, ids, weights);
}

// The fused routing's arrival counters (ticket, and decode MoE v9's combine counters) to zero (moe_gpu.h
// moe_ticket_by_memset), launched with PDL behind the MoE's predecessor: it waits for that grid like any PDL kernel
// (launch.h's contract), so the routing kernel's own wait behind it implies the predecessor too.
__global__ void zero_counters_kernel(uint32_t* __restrict__ counters, int n) {
  pdl_wait();
  for (int i = threadIdx.x; i < n; i += blockDim.x) counters[i] = 0;
  pdl_launch_dependents();
}

// ---------------------------------------------------------------------------------------------------------
// The whole decode routing in one launch (rows <= kFusedRouteRows). Blocks [0, logit_blocks) compute the router
// logits (kLogitWarps experts x kLogitRows rows each, a warp per expert and half of the rows, logit_dot), the
// others quantize x to FP8; then every block takes a ticket, and the last one to arrive (the ticket was zeroed by
// the call, so exactly one block sees gridDim.x - 1) finds all logits written and
//   routes each row (a warp per row: route_row_topk, or hash_route_row on hash layers),
//   counts the pairs per expert, scans the counts and chunk counts over the experts (first slot, first GEMM group),
//   writes the GEMM groups (as dispatch_scan_kernel) and each pair's slot (expert start + earlier pairs of the same
//   expert), slot -> row and slot -> weight.
// Which block is last depends on timing, but it computes the same function of the logits whichever it is.
// Its arguments (RouteArgs), its stamps (RouteStamp, ModelStamp) and the device functions it runs are in
// route_fused.cuh; here the kernel and the per-launch helpers of the model's stamp records.

// One record per MoE layer and device (slots in the order of the layers' first stamped launch, route_stamp_record).
constexpr int kRouteStampSlots = 256;

__device__ __forceinline__ unsigned long long sm_id() {
  unsigned r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void model_stamp_entry(unsigned long long* s, unsigned long long start,
                                                  unsigned long long entry) {
  atomicMax(s + kAccStart, ~start);
  atomicMax(s + kAccEntry, ~entry);
  atomicMax(s + kAccStartLatest, start);
  atomicMax(s + kAccEntryLatest, entry);
  if (blockIdx.x == 0) s[kRecSmBlock0] = sm_id();
}
__device__ __forceinline__ void model_stamp_close(unsigned long long* s, unsigned long long start,
                                                  unsigned long long entry) {
  s[kStampEntry] = ~atomicExch(s + kAccEntry, 0ull);
  s[kStampComputed] = atomicExch(s + kAccComputed, 0ull);
  s[kRecStart] = ~atomicExch(s + kAccStart, 0ull);
  s[kRecStartLatest] = atomicExch(s + kAccStartLatest, 0ull);
  s[kRecEntryLatest] = atomicExch(s + kAccEntryLatest, 0ull);
  s[kRecLastStart] = start;
  s[kRecLastEntry] = entry;
  s[kRecGrid] = gridDim.x;
  s[kRecSmLast] = sm_id();
  s[kRecLaunches] += 1;
}

// Session 5 (H8), same bits, fewer latencies on the critical path (run 26: 22.6 us per call at one row under ncu):
//  - the logit warps issue all 16 gate / x loads of a lane at once (logit_dot_window; logit_dot had 4 in flight,
//    4 dependent DRAM round trips; since session 27 the gate's go out before the PDL wait: logit_dot_gate_loaded);
//  - the last block keeps the routing results in shared memory (route_row_topk returns each lane's pick,
//    hash_route_row copies them): no read back of ids / weights through L2 between the routing, the count and
//    the scatter;
//  - the (rows, chunks) scan over the experts is a warp-shuffle scan plus one pass over the 8 warp totals (2
//    barriers instead of the Hillis-Steele scan's 16); integer sums, so the same slots and groups.
// A second form (route v2, session 11: the bias and hash entries loaded before the ticket, the scores spread over the
// block, a one-barrier dispatch; bitwise this one) was deleted in session 13: V4 batch 1 -1.1 % (run 76), but V4.1
// batch 1 +0.3 % and batch 8 +2 % (run 79); bench/gpu/NOTES.md "Fused decode routing: phases and v2".
// The selector form (kSelector; DEEPINFER_ROUTE_SELECTOR=block, moe_gpu.h route_selector; bench/gpu/NOTES.md
// "Session 35"): the CSA2 decode select's selector form (csa2_indexer_gpu.cu) for the routing. The ticket picks the
// routing block at the end (the last to arrive), whose first run of route_rows' code is then on the critical path;
// here block 0 routes, known from the launch: before its PDL wait it rehearses route_rows (the same instructions: one
// loop over the rehearsal and the real run, not unrolled) on rows of its own (zero scores, token 0; the picks into
// g_route_rehearsal_*, read by nobody: the one global write before a wait in this file, to memory no other kernel
// touches), then waits, polls the ticket until the other blocks (the logit and quantization blocks, b = blockIdx.x -
// 1) have arrived, and routes and dispatches as the last block does. The same function of the logits: the same bits.
__device__ float g_route_rehearsal_scores[kFusedRouteRows * kMaxExperts];  // zero: the rehearsal's scores and logits
__device__ int32_t g_route_rehearsal_tokens[kFusedRouteRows];              // zero: the hash layers' token 0
__device__ int32_t g_route_rehearsal_ids[kFusedRouteRows * kMaxTopK];
__device__ float g_route_rehearsal_w[kFusedRouteRows * kMaxTopK];

// The routing block's step once every other block has counted (the last block's ticket, or the selector's poll):
// the acquire fence (the other blocks' logits are visible from here, read through L2: __ldcg), then thread 0 zeroes
// the ticket again for the next call (MoeGpu::counters). The store after the fence, not before it: the fence waits
// for the thread's outstanding stores, and thread 0's warp routes row 0, so a zeroing store ahead of it held that
// row's score / logit loads behind the store's L2 round trip (bench/gpu/NOTES.md session 49; the dependent round
// trips session 48's audits took off the latency kernels' paths). Where the store stands in the grid does not matter
// to the next call: its blocks arrive after their pdl_wait, so after this grid has completed (launch.h).
__device__ __forceinline__ void acquire_logits_then_zero_ticket(uint32_t* ticket) {
  fence_acq_rel_gpu();
  if (threadIdx.x == 0) *ticket = 0;
}

template <int kPerLane>
__device__ __forceinline__ void route_as_selector(const RouteArgs& A, int32_t* s_ids, float* s_w, int32_t* s_count,
                                                  int32_t* s_first, int2* s_warp_total) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const RouteRowsIO rehearsal{g_route_rehearsal_scores, A.scores ? g_route_rehearsal_scores : nullptr,
                              g_route_rehearsal_tokens, g_route_rehearsal_ids, g_route_rehearsal_w};
#pragma unroll 1  // one copy of route_rows for both runs: the rehearsal fetches the real run's instructions
  for (int run = 0; run < 2; ++run) {
    const bool real = run == 1;
    const RouteRowsIO io = real ? RouteRowsIO::of(A) : rehearsal;
    if (real) {
      pdl_wait();
      pdl_launch_dependents();  // as every block of the kernel (above)
      for (int i = tid; i < kMaxExperts; i += kRouteThreads) s_count[i] = 0;
    }
    // Hash layers: the rows' tokens and tid2eid entries before the poll (after the wait: the tokens are the step's
    // input), not after it: the other blocks write neither, so two of a hash row's three dependent round trips leave
    // the path behind their arrivals (bench/gpu/NOTES.md session 49).
    const HashRowExperts hash = hash_row_experts_of(A, io, tid);
    if (real) {
      if (tid == 0) dev::spin_until_count(A.ticket, gridDim.x - 1);
      __syncthreads();
      acquire_logits_then_zero_ticket(A.ticket);
    }
    route_rows<kPerLane>(A, io, hash, tid, warp, lane, s_ids, s_w, NoRouteMarks{});
    __syncthreads();  // the routing in shared memory
  }
  fused_dispatch(A, s_ids, s_w, s_count, s_first, s_warp_total, BlockSync{});
}

// kModelStamps (route stamps inside the model, above): A.stamps is the layer's record; false is the measured kernel.
// kSelector: the selector form (above; never with stamps).
template <int kPerLane, bool kModelStamps, bool kSelector = false>
__global__ void __launch_bounds__(kRouteThreads) decode_route_kernel(const RouteArgs A) {
  static_assert(!(kModelStamps && kSelector), "the stamps time the ticket form");
  constexpr int kWarps = kRouteThreads / 32;
  __shared__ int32_t s_count[kMaxExperts];
  __shared__ int32_t s_first[kMaxExperts];
  __shared__ int32_t s_ids[kFusedRouteRows * kMaxTopK];  // routed expert of pair p, then its slot (PairOwner)
  __shared__ float s_w[kFusedRouteRows * kMaxTopK];      // routing weight of pair p
  __shared__ int2 s_warp_total[kWarps];
  __shared__ bool s_last;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  [[maybe_unused]] unsigned long long start = 0, entry = 0;  // kModelStamps: first instruction, wait return
  if constexpr (kModelStamps) start = dev::globaltimer_ns();
  if constexpr (kSelector) {
    if (blockIdx.x == 0) {
      route_as_selector<kPerLane>(A, s_ids, s_w, s_count, s_first, s_warp_total);
      return;
    }
  }
  // A logit warp's expert and rows (warp-uniform); its gate vectors in registers, loaded before the wait under
  // route_gate_early() (a weight: launch.h's contract), else after it.
  const unsigned b = blockIdx.x - (kSelector ? 1u : 0u);  // the block's place among the logit and quantization blocks
  const bool logit_block = int(b) < A.logit_blocks;
  const int e = (b % A.expert_blocks) * kLogitWarps + warp % kLogitWarps;
  const int r0 = (b / A.expert_blocks) * kLogitRows + (warp / kLogitWarps) * (kLogitRows / 2);
  const int r1 = min(r0 + kLogitRows / 2, A.rows);
  const bool dots = logit_block && e < A.experts && r0 < r1;
  const bf16* gate_row = A.gate + int64_t(e) * A.hidden;
  constexpr int kGateLanes = kPerLane <= 8 ? 16 : 20;  // the whole row at V4's hidden 4096 (256 experts), V4.1's 5120
  uint4 gate_v[kGateLanes];
  if (dots && A.gate_early) load_vectors<kGateLanes>(gate_row, lane, A.hidden / 8, gate_v);
  // Launched with PDL behind zero_counters_kernel, plainly behind a memset, or with kept counters (MoeGpu::counters,
  // left zero by the previous call's last block) with PDL behind the MoE's predecessor: x and the zero ticket are
  // visible after the wait.
  pdl_wait();
  stamp_first(kModelStamps ? nullptr : A.stamps);
  if constexpr (kModelStamps) {
    entry = dev::globaltimer_ns();
    if (tid == 0) model_stamp_entry(A.stamps, start, entry);
  }
  // Decode MoE v9 launches w1|w3 with PDL after this kernel: its blocks may start now (they stream the shared
  // expert's weights, and wait for this grid before reading anything it writes). A hint; a no-op for a plain
  // successor (v8).
  pdl_launch_dependents();

  if (logit_block) {
    if (dots) {
      if (!A.gate_early) load_vectors<kGateLanes>(gate_row, lane, A.hidden / 8, gate_v);
      for (int r = r0; r < r1; ++r) {
        const float acc = logit_dot_gate_loaded<kGateLanes>(gate_v, A.x + int64_t(r) * A.hidden, gate_row, A.hidden);
        if (lane == 0) {
          A.logits[int64_t(r) * A.experts + e] = acc;
          if (A.scores) A.scores[int64_t(r) * A.experts + e] = moe_dev::route_score(acc, A.temp);  // route_row_topk_scored
        }
      }
    }
  } else {
    const int64_t v = int64_t(b - A.logit_blocks) * kRouteThreads + tid;
    quantize_vec8(A.x, v, int64_t(A.rows) * A.hidden / 8, A.act_block / 8, A.xq, A.xs);
  }
  // The last block's counts start at zero (set by every block while its stores drain: shared memory only).
  for (int i = tid; i < kMaxExperts; i += kRouteThreads) s_count[i] = 0;

  // Ticket: every thread's stores are ordered before the block's arrival (fence, barrier, then one atomic).
  fence_acq_rel_gpu();
  __syncthreads();
  if constexpr (kSelector) {  // block 0 routes
    if (tid == 0) atomicAdd(A.ticket, 1u);
    return;
  }
  if (tid == 0) {
    stamp_latest(kModelStamps ? nullptr : A.stamps);
    if constexpr (kModelStamps) {  // ordered before the ticket: the last block reads it at its end
      atomicMax(A.stamps + kAccComputed, dev::globaltimer_ns());
      fence_acq_rel_gpu();
    }
    const unsigned ticket = atomicAdd(A.ticket, 1u);
    if constexpr (kModelStamps) {
      if (ticket == 0) A.stamps[kRecSmFirstDone] = sm_id();
    }
    s_last = ticket == gridDim.x - 1;
  }
  __syncthreads();
  if (!s_last) return;
  acquire_logits_then_zero_ticket(A.ticket);
  stamp_last_block(A.stamps, kStampTicket);

  if constexpr (kModelStamps) {
    // The warm rerun (A.stamp_runs 2, route_stamps_warm): the rows routed twice in one loop (the same code: the
    // second run finds it in the SM's instruction cache), the same picks written twice; the ticket stamped again
    // before the second run, so ticket -> routed times it alone. The marks of the last run stand.
#pragma unroll 1
    for (int run = 0; run < A.stamp_runs; ++run) {
      if (run > 0) {
        __syncthreads();
        stamp_last_block(A.stamps, kStampTicket);
      }
      route_rows<kPerLane>(A, tid, warp, lane, s_ids, s_w, RecordMarks{A.stamps});  // (row 0's warp: thread 0 records)
    }
  } else
    route_rows<kPerLane>(A, tid, warp, lane, s_ids, s_w, NoRouteMarks{});
  __syncthreads();  // the routing in shared memory
  stamp_last_block(A.stamps, kStampRouted);
  fused_dispatch(A, s_ids, s_w, s_count, s_first, s_warp_total, BlockSync{});
  if constexpr (kModelStamps) {
    if (tid == 0) model_stamp_close(A.stamps, start, entry);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Dispatch: count, scan, scatter (see the top of the file).
// `experts` counts this rank's slots (PairOwner): the histograms and the scan run over slots.
__global__ void __launch_bounds__(kDispatchTile)
    dispatch_count_kernel(const int32_t* __restrict__ ids, int64_t pairs, int experts, PairOwner owner,
                          int32_t* __restrict__ tile_hist) {
  extern __shared__ int32_t hist[];  // [experts]
  for (int e = threadIdx.x; e < experts; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const int64_t p = int64_t(blockIdx.x) * kDispatchTile + threadIdx.x;
  const int slot = p < pairs ? owner.slot(p, ids[p]) : -1;
  if (slot >= 0) atomicAdd(&hist[slot], 1);
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) tile_hist[int64_t(blockIdx.x) * experts + e] = hist[e];
}

__global__ void __launch_bounds__(kMaxExperts)
    dispatch_scan_kernel(int32_t* __restrict__ tile_hist, int tiles, int experts, int pairs, int chunk, int groups,
                         int32_t* __restrict__ expert_start, int32_t* __restrict__ group_experts,
                         int32_t* __restrict__ group_offsets, int32_t* __restrict__ slot_row,
                         float* __restrict__ slot_weight, int32_t* __restrict__ used_groups) {
  __shared__ int2 scan[kMaxExperts];  // (rows, chunks) per expert, scanned
  const int e = threadIdx.x;
  int count = 0;
  if (e < experts) {
    for (int t = 0; t < tiles; ++t) {  // exclusive prefix over the tiles, in place
      int32_t* h = tile_hist + int64_t(t) * experts + e;
      const int c = *h;
      *h = count;
      count += c;
    }
  }
  const int chunks = (count + chunk - 1) / chunk;
  scan[e] = make_int2(count, chunks);
  __syncthreads();
  for (int o = 1; o < kMaxExperts; o <<= 1) {  // inclusive Hillis-Steele scan over the 1024 entries
    int2 v = scan[e];
    if (e >= o) {
      const int2 u = scan[e - o];
      v.x += u.x;
      v.y += u.y;
    }
    __syncthreads();
    scan[e] = v;
    __syncthreads();
  }
  const int first_slot = scan[e].x - count, first_group = scan[e].y - chunks;
  const int used = scan[kMaxExperts - 1].y, local = scan[kMaxExperts - 1].x;
  if (used > groups) {  // cannot happen (group_bound); writing on would overrun the group arrays
    if (e == 0) printf("moe_forward: %d GEMM groups exceed the bound %d\n", used, groups);
    __trap();
  }
  if (e < experts) {
    expert_start[e] = first_slot;
    for (int j = 0; j < chunks; ++j) {
      group_experts[first_group + j] = e;
      group_offsets[first_group + j] = first_slot + j * chunk;
    }
  }
  for (int g = used + e; g < groups; g += kMaxExperts) {  // empty groups: any valid expert, no rows
    group_experts[g] = 0;
    group_offsets[g] = local;
  }
  if (e == 0) {
    group_offsets[groups] = local;
    *used_groups = used;
  }
  for (int sl = local + e; sl < pairs; sl += kMaxExperts) {  // slots of other ranks' pairs: read, never used
    slot_row[sl] = 0;
    slot_weight[sl] = 0.0f;
  }
}

__global__ void __launch_bounds__(kDispatchTile)
    dispatch_scatter_kernel(const int32_t* __restrict__ ids, const float* __restrict__ route_w, int64_t pairs,
                            int experts, int top_k, PairOwner owner, const int32_t* __restrict__ tile_hist,
                            const int32_t* __restrict__ expert_start, int32_t* __restrict__ pair_slot,
                            int32_t* __restrict__ slot_row, float* __restrict__ slot_weight) {
  __shared__ int32_t tile_ids[kDispatchTile];
  const int i = threadIdx.x;
  const int64_t p = int64_t(blockIdx.x) * kDispatchTile + i;
  const int e = p < pairs ? owner.slot(p, ids[p]) : -1;  // this rank's slot (the expert on one GPU)
  tile_ids[i] = e;
  __syncthreads();
  if (p >= pairs) return;
  if (e < 0) {  // another rank computes it
    pair_slot[p] = -1;
    return;
  }
  int rank = 0;  // earlier pairs of the same expert in this tile
  for (int j = 0; j < i; ++j) rank += tile_ids[j] == e;
  const int slot = expert_start[e] + tile_hist[int64_t(blockIdx.x) * experts + e] + rank;
  pair_slot[p] = slot;
  slot_row[slot] = int(p / top_k);
  slot_weight[slot] = route_w[p];
}

// disp_q[slot] = xq[slot_row[slot]] and the same for the scales: one warp per slot, 16-byte copies.
__global__ void gather_rows_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ xs,
                                   const int32_t* __restrict__ slot_row, int64_t slots, int hidden, int scale_cols,
                                   uint8_t* __restrict__ dq, float* __restrict__ ds) {
  const int64_t slot = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (slot >= slots) return;
  const int64_t r = slot_row[slot];
  const auto* src = reinterpret_cast<const uint4*>(xq + r * hidden);
  auto* dst = reinterpret_cast<uint4*>(dq + slot * hidden);
  for (int v = lane; v < hidden / 16; v += 32) dst[v] = src[v];
  for (int c = lane; c < scale_cols; c += 32) ds[slot * scale_cols + c] = xs[r * scale_cols + c];
}

// ---------------------------------------------------------------------------------------------------------
// Clamped SwiGLU times the routing weight, then the FP8 quantization of W2's input (model-spec §3 "MoE", §2; the
// values from stream_gemm::swiglu, the scale from stream_gemm::block_scale, as decode v8's fused prologue). swiglu
// rounds g, u and a to bf16 where the reference does (its GEMMs return bf16, its expert casts a to bf16 before W2's
// quantization), so an fp32 h and its bf16 rounding (the prefill kernel's y_type BF16) give the same bits. One warp per
// (row, block); kPerLane = act_block / 32 values per lane.
// h [rows, 2 inter] (w1 part, then w3 part), row_weight [rows] or null (the shared expert: weight 1).
__device__ __forceinline__ float h_value(float v) { return v; }
__device__ __forceinline__ float h_value(bf16 v) { return __bfloat162float(v); }
template <int kPerLane, class T>
__global__ void swiglu_quant_kernel(const T* __restrict__ h, const float* __restrict__ row_weight, int64_t rows,
                                    int inter, float limit, uint8_t* __restrict__ q, float* __restrict__ scales) {
  constexpr int B = 32 * kPerLane;
  const int blocks_per_row = inter / B;
  const int64_t unit = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (unit >= rows * blocks_per_row) return;  // warp-uniform
  const int64_t row = unit / blocks_per_row;
  const int b = int(unit % blocks_per_row);
  const T* g = h + row * 2 * inter + int64_t(b) * B;
  const T* u = g + inter;
  const float rw = row_weight ? row_weight[row] : 1.0f;
  float a[kPerLane];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    a[j] = stream_gemm::swiglu(h_value(g[j * 32 + lane]), h_value(u[j * 32 + lane]), limit, rw);
    amax = fmaxf(amax, fabsf(a[j]));
  }
  amax = dev::warp_max(amax);
  const float scale = dev::fp8_block_scale(amax);
  const float inv = dev::fp8_inv_scale(scale);  // 1.0f / scale bit for bit, without its slow path
  uint8_t* qr = q + row * inter + int64_t(b) * B;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) qr[j * 32 + lane] = __nv_cvt_float_to_fp8(a[j] * inv, __NV_SATFINITE, __NV_E4M3);
  if (lane == 0) scales[row * blocks_per_row + b] = scale;
}

// y[r] = bf16( sum_{k = 0 .. top_k-1} expert_y[pair_slot[r, k]] + shared_y[r] ) in fp32, the slots in their
// fixed order (batch invariance), the experts before the shared expert as in v4_moe_step: per element
// ((((0 + e_0) + e_1) + ...) + e_{K-1}) + shared, the order of the fused combine in stream_gemm.cuh too.
// pair_slot null: the outputs are in pair order (expert_y[r * top_k + k], the rows expert parallelism returns).
// PDL-aware (cuda/launch.h): decode MoE v9 above 8 rows launches it with PDL behind its w2 launch; elsewhere it is
// launched plainly and the wait is a no-op.
// Layout (session 5, H8): one thread per 4 columns, kCombineThreads per block, a row
// spread over hidden / (4 * kCombineThreads) blocks (8 at hidden 4096), and each thread's K + 1 loads issued
// together before the sum. It was one block of 256 threads per row, each thread walking 4 column vectors with a
// runtime k loop: 4 x 7 dependent load latencies at one row (12 us in run 26's ncu table). Each element's sum is
// the same expression in the same order, so the bits are unchanged.
constexpr int kCombineThreads = 128;

__global__ void __launch_bounds__(kCombineThreads)
    combine_kernel(const MoeCombineParts parts, int hidden, int blocks_per_row, bf16* __restrict__ y) {
  __shared__ int32_t slots[kMaxTopK];
  pdl_wait();
  const int64_t r = blockIdx.x / blocks_per_row;
  const int v = (blockIdx.x % blocks_per_row) * kCombineThreads + threadIdx.x;
  const int top_k = parts.top_k;
  if (threadIdx.x < top_k)
    slots[threadIdx.x] = parts.pair_slot ? parts.pair_slot[r * top_k + threadIdx.x] : int32_t(r * top_k + threadIdx.x);
  __syncthreads();
  if (v >= hidden / 4) return;
  combine_vec4(parts, slots, hidden, r, v, y);
}

// Expert parallelism: pair_y[p] = this rank's output of pair p (its slot's row of expert_y), or +0.0 where another
// rank computes the pair (pair_slot -1), so that the reduce-scatter's sum is the one output. One block per pair.
__global__ void pair_outputs_kernel(const float* __restrict__ expert_y, const int32_t* __restrict__ pair_slot,
                                    int hidden, float* __restrict__ pair_y) {
  const int64_t p = blockIdx.x;
  const int slot = pair_slot[p];
  float4* dst = reinterpret_cast<float4*>(pair_y + p * hidden);
  const float4* src = slot >= 0 ? reinterpret_cast<const float4*>(expert_y + int64_t(slot) * hidden) : nullptr;
  for (int v = threadIdx.x; v < hidden / 4; v += blockDim.x) dst[v] = src ? src[v] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

// EpDispatch::Fp8: the gathered records (Fp8Record, rank-major) into the routed rows' arrays, row g = rank * M + i:
// x's FP8 codes and scales, the expert ids and routing weights, where the one-rank quantization and routing leave
// them, so the dispatch and the GEMMs read them as in the bf16 form. One block per routed row, 16-byte copies.
__global__ void unpack_records_kernel(const uint8_t* __restrict__ records, Fp8Record rec, int rows_per_rank,
                                      int hidden, int scale_cols, int top_k, uint8_t* __restrict__ xq,
                                      float* __restrict__ xs, int32_t* __restrict__ ids, float* __restrict__ weights) {
  const int64_t g = blockIdx.x, i = g % rows_per_rank;
  const uint8_t* r = records + (g / rows_per_rank) * rec.bytes;
  const auto* src = reinterpret_cast<const uint4*>(r + i * hidden);
  auto* dst = reinterpret_cast<uint4*>(xq + g * hidden);
  for (int v = threadIdx.x; v < hidden / 16; v += blockDim.x) dst[v] = src[v];
  const auto* s = reinterpret_cast<const float*>(r + rec.s) + i * scale_cols;
  for (int c = threadIdx.x; c < scale_cols; c += blockDim.x) xs[g * scale_cols + c] = s[c];
  if (int(threadIdx.x) < top_k) {
    ids[g * top_k + threadIdx.x] = reinterpret_cast<const int32_t*>(r + rec.ids)[i * top_k + threadIdx.x];
    weights[g * top_k + threadIdx.x] = reinterpret_cast<const float*>(r + rec.w)[i * top_k + threadIdx.x];
  }
}

// Expert parallelism, once per step: staging = [rows, then the rows' tokens zero-padded to rows_per_rank].
__global__ void share_rows_stage_kernel(const int32_t* __restrict__ tokens, int rows, int rows_per_rank,
                                        int32_t* __restrict__ staging) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0) staging[0] = rows;
  if (i < rows_per_rank) staging[1 + i] = i < rows ? tokens[i] : 0;
}

// The arguments fp8_gemm gives decode v8 (layers/quant/fp8_gemm.cu) for `rows` rows of q / s (fp32 output).
packed::Args shared_args(const Fp8Linear& l, const uint8_t* q, const float* s, int rows, float* out) {
  packed::Args pa;
  skinny::Args& a = pa.base;
  a.q = q;
  a.xs = s;
  a.act_block_log2 = skinny::log2_exact(l.block);
  a.w = l.weight;
  a.ws = l.scale;
  a.w_block_log2 = skinny::log2_exact(l.block);
  a.n = int(l.n);
  a.k = int(l.k);
  a.rows = rows;
  a.y = out;
  pa.wp = l.packed;
  return pa;
}

// The shared expert at decode through decode v8 in groups of <= 8 rows, w2 taking the SwiGLU of w1|w3's output in
// its prologue (no separate quantization launch). Applies where the weights are packed for DecodeKernel::Stream and
// either rows <= 8 (fp8_gemm's Skinny path runs this same launch there: the same bits) or batch-invariant mode
// (fp8_gemm's Skinny path switches to v7 above 8 rows, which sums in another order). Returns false, having
// launched nothing, where it does not apply. `grid`: both launches' grid (kernels.h StreamGrid; the same bits at any).
bool shared_expert_stream(const MoeGpu& w, const uint8_t* xq, const float* xs, int rows, float* h, float* y,
                          cudaStream_t stream, const StreamGrid& grid) {
  if (!fp8_streamed(w.shared_w13) || !fp8_streamed(w.shared_w2)) return false;
  if (rows > stream_gemm::kMaxRows && !batch_invariant()) return false;
  const int cap = std::min(rows, stream_gemm::kMaxRows);
  const int groups = int(ceil_div(rows, cap));
  // One group of `cap` rows at a time.
  auto args = [&](const Fp8Linear& l, const uint8_t* q, const float* s, float* out) {
    return shared_args(l, q, s, rows, out);
  };
  using skinny::WeightFormat;
  // Both shapes fit the shared-memory carve-up or neither does in practice (w2's k is the smaller); w13 is tried
  // first so that a refusal launches nothing.
  if (!stream_gemm::launch_stream<WeightFormat::FP8, float>(args(w.shared_w13, xq, xs, h), groups, cap, stream, {},
                                                            false, nullptr, {}, grid))
    return false;
  DI_CUDA_CHECK_LAUNCH("stream_gemm_kernel<FP8> (shared w1|w3)");
  stream_gemm::SwigluInput sw;
  sw.h = h;
  sw.limit = w.swiglu_limit;
  const bool w2_launched =
      stream_gemm::launch_stream<WeightFormat::FP8, float>(args(w.shared_w2, nullptr, nullptr, y), groups, cap, stream, sw,
                                                           false, nullptr, {}, grid);
  DI_CHECK(w2_launched, "cuda::moe_forward: decode v8 took the shared w1|w3 but not w2 (shared memory)");
  DI_CUDA_CHECK_LAUNCH("stream_gemm_kernel<FP8> (shared w2, SwiGLU prologue)");
  return true;
}

// Decode MoE v9 (moe_gpu.h MoeDecode): the two moe_pair_kernel launches of a call, or ok = false where V9 does
// not apply (then V8's launches run). Segment 0 is the shared expert as shared_expert_stream runs it (dense rows,
// groups of up to 8), segment 1 the routed experts as mxfp4_grouped_gemm[_swiglu] run them (the dispatch's groups,
// split over the blocks by the routing's count of non-empty groups).
// Two forms:
//  - fused combine (one GPU, the fused routing, 1..8 rows; V9 and V9Small): the shared expert is ONE group of
//    `rows` rows, and the routed groups' width is the call's rows on top-k layers (an expert takes at most one pair
//    per row, so no group is cut: the same rows per group as V8's width plan.chunk, a smaller activation carve-up,
//    which lets two blocks share an SM at batch 1); the w2 launch does the top-k combine (last arrival per tile).
//  - separate combine (V9 and V9Wide: more rows, or expert parallelism): the shared expert in dense groups of this rank's
//    own rows (decode v8's grouping, as batch-invariant mode runs it), as wide as the routed groups, which are the
//    dispatch's chunks of 8 (or 4: v9_narrow_groups); the combine runs after w2 as its own kernel (per-item arrival counting would cost a
//    fence and an atomic per item: ~200 items per block at 64 rows), behind the reduce-scatter under expert
//    parallelism.
struct V9Launches {
  bool ok = false;
  bool fused_combine = false;
  stream_gemm::PairParams w13, w2;
};

V9Launches plan_v9(const MoeGpu& w, const CallPlan& plan, const Layout& L, int rows, int64_t home, bf16* y, bool ep) {
  V9Launches v;
  const MoeDecode mode = moe_decode();
  if (mode == MoeDecode::V8) return v;
  // Decode groups of at most 8 rows (the kernels' mma width) and W2's own output region (the SwiGLU prologue reads
  // w1|w3's output while W2 writes): true at <= 8 pairs per expert on average, and in batch-invariant mode while W2's
  // region exists.
  if (plan.prefill || !plan.separate_y || plan.chunk > kMinDecodeChunk || rows < 0) return v;
  if (!fp4_streamed(w.w13) || !fp4_streamed(w.w2) || !fp8_streamed(w.shared_w13) || !fp8_streamed(w.shared_w2))
    return v;
  const bool fused = !ep && plan.fused_route && rows >= 1 && rows <= stream_gemm::kMaxRows;
  if (!fused && mode != MoeDecode::V9 && mode != MoeDecode::V9Wide) return v;
  if (fused && mode == MoeDecode::V9Wide) return v;  // V8 at 1..8 rows on one GPU (moe_gpu.h)
  // Under expert parallelism V9Wide leaves 1..8 rows per rank to V8 as well while V8's routed products take the wgmma
  // consumer (launch_stream, cuda/stream_fp4_wgmma.cuh: groups of <= 8 rows, outside batch-invariant mode) and V9's
  // pair kernels the f16 one: a row's bits then do not depend on the parallelism (one GPU runs V8 there), and a
  // rank's greedy tokens stay one GPU's (EpModel.GreedyMatchesOneGpu, which failed in run 58 without this).
  if (ep && mode == MoeDecode::V9Wide && rows <= stream_gemm::kMaxRows && stream_gemm::fp4_wgmma() &&
      !batch_invariant())
    return v;
  const int B = w.act_block;
  // Routed group width: a top-k selection takes distinct experts, so an expert has at most one pair per row; a hash
  // table row is not checked for repeats (upload_v4_moe), so there it is the dispatch chunk or all pairs.
  const int cap = int(std::min<int64_t>(plan.chunk, w.tid2eid ? plan.pairs : plan.rows));
  // The shared expert: this rank's rows (all rows on one GPU), one group (fused) or groups of up to 8.
  const int shared_cap = fused ? rows : std::max(1, std::min(rows, plan.chunk));
  const int shared_groups = fused ? 1 : int(ceil_div(rows, shared_cap));
  const uint8_t* home_q = L.xq + home * w.hidden;
  const float* home_s = L.xs + home * (w.hidden / B);
  auto segment = [&](const packed::Args& pa, int groups, int rows_cap, const float* h, const float* row_weight,
                     const int* used) {
    stream_gemm::Segment sg;
    sg.pa = pa;
    sg.groups = groups;
    sg.rows_cap = rows_cap;
    sg.swiglu.h = h;
    sg.swiglu.row_weight = row_weight;
    sg.swiglu.limit = w.swiglu_limit;
    sg.used_groups = used;
    return sg;
  };
  v.w13.seg[0] = segment(shared_args(w.shared_w13, home_q, home_s, rows, L.shared_h), shared_groups, shared_cap,
                         nullptr, nullptr, nullptr);
  v.w13.seg[1] = segment(stream_gemm::mxfp4_expert_args(L.xq, L.xs, B, w.w13, L.group_experts, L.group_offsets,
                                                        L.expert_h, L.slot_row),
                         plan.groups, cap, nullptr, nullptr, L.used_groups);
  v.w2.seg[0] = segment(shared_args(w.shared_w2, nullptr, nullptr, rows, L.shared_y), shared_groups, shared_cap,
                        L.shared_h, nullptr, nullptr);
  v.w2.seg[1] = segment(stream_gemm::mxfp4_expert_args(nullptr, nullptr, B, w.w2, L.group_experts, L.group_offsets,
                                                       L.expert_y, nullptr),
                        plan.groups, cap, L.expert_h, L.slot_weight, L.used_groups);
  if (fused) {
    v.w2.combine.y = y;
    v.w2.combine.pair_slot = L.pair_slot;
    v.w2.combine.rows = rows;
    v.w2.combine.top_k = w.top_k;
    v.w2.combine.tile_count = L.tile_count;
  }
  for (stream_gemm::PairParams* P : {&v.w13, &v.w2}) {
    P->rows_cap = std::max(P->seg[0].rows_cap, P->seg[1].rows_cap);
    stream_gemm::PairParams q = *P;  // launch_pair's choice of staging and configuration
    if (!stream_gemm::pair_choose(q).stages) return v;
  }
  // The fused combine needs both w2 segments on the same output columns (always: n = hidden).
  if (v.w2.seg[0].pa.base.n != v.w2.seg[1].pa.base.n) return v;
  v.ok = true;
  v.fused_combine = fused;
  return v;
}

// The fused routing kernel's arguments for one call of `routed` rows (moe_forward, moe_fused_route_phases).
RouteArgs fused_route_args(const MoeGpu& w, const CallPlan& plan, const Layout& L, const bf16* x,
                           const int32_t* tokens, int routed, const PairOwner& owner) {
  RouteArgs A;
  A.x = x;
  A.gate = w.gate;
  A.bias = w.gate_bias;
  A.tid2eid = w.tid2eid;
  A.tokens = tokens;
  A.vocab = w.vocab;
  A.rows = routed;
  A.experts = w.experts;
  A.top_k = w.top_k;
  A.hidden = int(w.hidden);
  A.act_block = w.act_block;
  A.temp = w.gate_temp;
  A.eps = w.route_eps;
  A.route_scale = w.route_scale;
  A.normalize = w.normalize;
  A.chunk = plan.chunk;
  A.groups = plan.groups;
  A.owner = owner;
  A.expert_blocks = int(ceil_div(w.experts, kLogitWarps));
  A.logit_blocks = A.expert_blocks * int(ceil_div(routed, kLogitRows));
  A.warp_dispatch = route_dispatch_warp() && int64_t(routed) * w.top_k <= kWarpDispatchPairs;
  A.gate_early = route_gate_early();
  A.logits = L.logits;
  A.scores = !w.tid2eid && route_scores_in_blocks() ? L.scores : nullptr;  // hash layers score only their picks
  A.xq = L.xq;
  A.xs = L.xs;
  A.ids = L.expert_ids;
  A.route_w = L.route_w;
  A.group_experts = L.group_experts;
  A.group_offsets = L.group_offsets;
  A.pair_slot = L.pair_slot;
  A.slot_row = L.slot_row;
  A.slot_weight = L.slot_weight;
  A.used_groups = L.used_groups;
  A.ticket = L.ticket;
  return A;
}

// moe_gpu.h route_stamps, route_stamps_warm: DEEPINFER_ROUTE_STAMPS=1 | warm (both), read once.
EnvSwitch<bool> g_route_stamps{"DEEPINFER_ROUTE_STAMPS",
                               [](const char* v) { return env_equals(v, "1") || env_equals(v, "warm"); }};
EnvSwitch<bool> g_route_stamps_warm{"DEEPINFER_ROUTE_STAMPS", [](const char* v) { return env_equals(v, "warm"); }};
// moe_gpu.h route_selector: DEEPINFER_ROUTE_SELECTOR=block|ticket (default block since run 198), read once; settable.
EnvSwitch<bool> g_route_selector{"DEEPINFER_ROUTE_SELECTOR", [](const char* v) { return !env_equals(v, "ticket"); }};
// moe_gpu.h route_scores_in_blocks: DEEPINFER_ROUTE_SCORES=blocks|tail, read once; settable.
EnvSwitch<bool> g_route_scores_in_blocks{"DEEPINFER_ROUTE_SCORES", [](const char* v) { return !env_equals(v, "tail"); }};
// moe_gpu.h moe_counters_kept: DEEPINFER_MOE_COUNTERS=kept|zeroed, read once; settable.
EnvSwitch<bool> g_moe_counters_kept{"DEEPINFER_MOE_COUNTERS", [](const char* v) { return !env_equals(v, "zeroed"); }};
// moe_gpu.h route_gate_early: DEEPINFER_ROUTE_GATE=early|late, read once; settable.
EnvSwitch<bool> g_route_gate_early{"DEEPINFER_ROUTE_GATE", [](const char* v) { return !env_equals(v, "late"); }};
// moe_gpu.h route_dispatch_warp: DEEPINFER_ROUTE_DISPATCH=warp|block, read once; settable.
EnvSwitch<bool> g_route_dispatch_warp{"DEEPINFER_ROUTE_DISPATCH",
                                      [](const char* v) { return !env_equals(v, "block"); }};

// moe_gpu.h moe_ticket_by_memset / moe_shared_first: DEEPINFER_MOE_TICKET=memset (default off),
// DEEPINFER_MOE_SHARED_FIRST=0 (default on), read once (no setters).
EnvSwitch<bool> g_ticket_by_memset{"DEEPINFER_MOE_TICKET", [](const char* v) { return env_equals(v, "memset"); }};
EnvSwitch<bool> g_shared_first{"DEEPINFER_MOE_SHARED_FIRST", [](const char* v) { return !env_equals(v, "0"); }};
// moe_gpu.h moe_routed_pdl_rows: DEEPINFER_MOE_ROUTED_PDL (unset or empty: the model's choice), read once; settable.
// A routed-PDL row threshold the fused routing can take: 0 (never) or 1..kFusedRouteRows.
bool routed_pdl_rows_valid(long rows) { return rows >= 0 && rows <= kFusedRouteRows; }
EnvSwitch<int> g_routed_pdl_rows{"DEEPINFER_MOE_ROUTED_PDL", [](const char* v) {
  if (!v || !*v) return kRoutedPdlByModel;
  char* end = nullptr;
  const long rows = std::strtol(v, &end, 10);
  DI_CHECK(end != v && *end == '\0' && routed_pdl_rows_valid(rows),
           std::string("DEEPINFER_MOE_ROUTED_PDL=") + v + ": 0 (never) or the fewest rows launched with PDL, 1.." +
               std::to_string(kFusedRouteRows));
  return int(rows);
}};
// moe_gpu.h moe_site_combine: DEEPINFER_MOE_SITE_COMBINE=0 opts out (default on since run 138), read once; settable.
EnvSwitch<bool> g_site_combine{"DEEPINFER_MOE_SITE_COMBINE", [](const char* v) { return !env_equals(v, "0"); }};

// The record of the layer whose router is `gate` on the current device (the end of the file).
unsigned long long* route_stamp_record(const void* gate, cudaStream_t stream);

// The RouteStamp marks of one stamp buffer or record as moe_fused_route_phases returns them (moe_gpu.h): the phase
// ends in microseconds after Entry, then the last block's clock cycles between its marks.
std::vector<double> route_phases(const unsigned long long* s) {
  std::vector<double> out;
  for (int i = kStampComputed; i <= kStampEnd; ++i) out.push_back(double(int64_t(s[i] - s[kStampEntry])) * 1e-3);
  for (int i = kStampClock + 1; i < kStampCount; ++i) out.push_back(double(s[i] - s[i - 1]));
  return out;
}

// The fused routing kernel for E experts, with the model's stamps or without (the measured kernel).
template <bool kModelStamps, bool kSelector = false>
auto route_kernel_for(int E) {
  return E <= 128   ? decode_route_kernel<4, kModelStamps, kSelector>
         : E <= 256 ? decode_route_kernel<8, kModelStamps, kSelector>    // V4: 256 experts
         : E <= 384 ? decode_route_kernel<12, kModelStamps, kSelector>   // V4.1: 384 experts
                    : decode_route_kernel<32, kModelStamps, kSelector>;
}

// The fused routing kernel on `stream` (its ticket zeroed before it); pdl: launched with programmatic dependent
// launch behind its predecessor. Under route_stamps() a call without stamps of its own (every moe_forward call)
// runs the stamped kernel on its layer's record.
void launch_fused_route(const RouteArgs& A, cudaStream_t stream, bool pdl) {
  const int E = A.experts;
  LaunchSpec spec;
  spec.grid = dim3(unsigned(A.logit_blocks + ceil_div(int64_t(A.rows) * A.hidden / 8, kRouteThreads)));
  spec.block = dim3(kRouteThreads);
  spec.stream = stream;
  spec.pdl = pdl;
  unsigned long long* record = route_stamps() && !A.stamps ? route_stamp_record(A.gate, stream) : nullptr;
  if (record) {
    RouteArgs S = A;
    S.stamps = record;
    S.stamp_runs = route_stamps_warm() ? 2 : 1;
    DI_CUDA_CHECK(launch(spec, route_kernel_for<true>(E), S));
  } else if (route_selector() && !A.stamps) {  // the selector form: one more block, block 0
    spec.grid.x += 1;
    DI_CUDA_CHECK(launch(spec, route_kernel_for<false, true>(E), A));
  } else {
    DI_CUDA_CHECK(launch(spec, route_kernel_for<false>(E), A));
  }
  DI_CUDA_CHECK_LAUNCH("decode_route_kernel");
}

}  // namespace

// Declared in moe_gpu.h; decode_route_kernel's last block runs the same row function.
void hash_route_rows(const float* logits, const int32_t* tokens, const int32_t* tid2eid, int64_t vocab, int rows,
                     int experts, int top_k, float temp, bool normalize, float eps, float route_scale, int32_t* ids,
                     float* weights, cudaStream_t stream, bool reference) {
  DI_CHECK(top_k >= 1 && top_k <= kMaxTopK, "cuda::hash_route_rows: top_k " + std::to_string(top_k) + " outside [1, " +
                                                std::to_string(kMaxTopK) + "]");
  if (rows <= 0) return;
  auto kernel = reference ? hash_route_kernel<true> : hash_route_kernel<false>;
  kernel<<<unsigned(ceil_div(rows, 128)), 128, 0, stream>>>(logits, tokens, tid2eid, vocab, rows, experts, top_k, temp,
                                                            normalize, eps, route_scale, ids, weights);
  DI_CUDA_CHECK_LAUNCH("hash_route_kernel");
}

// moe_gpu.h: the batch-1 FFN's critical path.
bool moe_ticket_by_memset() { return g_ticket_by_memset.get(); }

bool moe_shared_first() { return g_shared_first.get(); }
bool moe_site_combine() { return g_site_combine.get(); }
void set_moe_site_combine(bool on) { g_site_combine.set(on); }

MoeDecode moe_decode() { return g_moe_decode.get(); }
MoeV9Staging moe_v9_staging() {
  const int m = stream_gemm::pair_act_mode();
  return m == 1 ? MoeV9Staging::Fp8 : m == 2 ? MoeV9Staging::F16 : MoeV9Staging::Auto;
}
void set_moe_v9_staging(MoeV9Staging s) {
  stream_gemm::set_pair_act_mode(s == MoeV9Staging::Fp8 ? 1 : s == MoeV9Staging::F16 ? 2 : 0);
}
int moe_v9_group_rows() { return v9_chunk_override(); }
void set_moe_v9_group_rows(int rows) {
  DI_CHECK(rows == 0 || rows == 4 || rows == 8, "cuda::set_moe_v9_group_rows: 0 (auto), 4 or 8");
  g_v9_chunk.set(rows);
}
EpDispatch ep_dispatch() { return g_ep_dispatch.get(); }
void set_ep_dispatch(EpDispatch d) { g_ep_dispatch.set(d); }
void set_moe_decode(MoeDecode d) { g_moe_decode.set(d); }

namespace {
template <class T>
void swiglu_quant(const T* h, const float* row_weight, int64_t rows, int64_t inter, int block, float limit, uint8_t* q,
                  float* scales, cudaStream_t stream) {
  DI_CHECK((block == 32 || block == 64 || block == 128 || block == 256) && inter % block == 0 && rows >= 0,
           "cuda::moe_swiglu_quant: block " + std::to_string(block) + " must be 32, 64, 128 or 256 and divide inter = " +
               std::to_string(inter));
  if (rows == 0) return;
  const int64_t units = rows * (inter / block);
  const int warps = 8;
  const unsigned grid = unsigned(ceil_div(units, warps));
  auto launch = [&](auto kernel) {
    kernel<<<grid, warps * 32, 0, stream>>>(h, row_weight, rows, int(inter), limit, q, scales);
  };
  switch (block) {
    case 32: launch(swiglu_quant_kernel<1, T>); break;
    case 64: launch(swiglu_quant_kernel<2, T>); break;
    case 128: launch(swiglu_quant_kernel<4, T>); break;
    default: launch(swiglu_quant_kernel<8, T>); break;  // 256
  }
  DI_CUDA_CHECK_LAUNCH("swiglu_quant_kernel");
}
}  // namespace

void moe_swiglu_quant(const float* h, const float* row_weight, int64_t rows, int64_t inter, int block, float limit,
                      uint8_t* q, float* scales, cudaStream_t stream) {
  swiglu_quant(h, row_weight, rows, inter, block, limit, q, scales, stream);
}
void moe_swiglu_quant(const bf16* h, const float* row_weight, int64_t rows, int64_t inter, int block, float limit,
                      uint8_t* q, float* scales, cudaStream_t stream) {
  swiglu_quant(h, row_weight, rows, inter, block, limit, q, scales, stream);
}

// ---------------------------------------------------------------------------------------------------------
void moe_validate(const MoeGpu& w) {
  const std::string where = "cuda::moe: ";
  DI_CHECK(w.experts >= 1 && w.experts <= kMaxExperts,
           where + std::to_string(w.experts) + " experts out of range [1, " + std::to_string(kMaxExperts) + "]");
  DI_CHECK(w.top_k >= 1 && w.top_k <= std::min(kMaxTopK, w.experts),
           where + "top_k " + std::to_string(w.top_k) + " out of range [1, min(16, experts)]");
  DI_CHECK(w.act_block == 32 || w.act_block == 64 || w.act_block == 128 || w.act_block == 256,
           where + "activation block " + std::to_string(w.act_block) + " is not 32, 64, 128 or 256");
  // The GEMMs need K % 128 == 0 (and the activation block dividing K); a ragged last FP8 block, as the CPU's
  // fp8_fake_quant_ragged allows for tiny test widths, has no GPU form.
  for (auto [name, v] : {std::pair<const char*, int64_t>{"hidden", w.hidden}, {"inter", w.inter},
                         {"shared_inter", w.shared_inter}})
    DI_CHECK(v > 0 && v % 128 == 0 && v % w.act_block == 0,
             where + name + " = " + std::to_string(v) + " must be a positive multiple of 128 and of the activation "
                                                         "block (no ragged FP8 blocks on the GPU)");
  DI_CHECK(w.gate, where + "no gate weight");
  DI_CHECK(!w.tid2eid || w.vocab > 0, where + "a hash layer needs its vocab (tid2eid rows)");
  auto has_layout = [](const Fp4Experts& e) {
    return (e.weight && e.scale) || (e.packed_weight && e.packed_scale);
  };
  // One GPU: a slot per expert. Expert parallelism: the rank's slots (the placement's slots_per_rank, redundant
  // copies included), at least one and at most `experts` (the dispatch's group bounds and scans count slots within
  // the experts' bounds), and a replica table of them.
  const bool ep_slots = w.replicas.slots != nullptr;
  DI_CHECK(ep_slots ? w.w13.experts >= 1 && w.w13.experts <= w.experts &&
                          w.w13.experts == w.replicas.slots_per_rank && w.replicas.count && w.replicas.max_replicas >= 1
                    : w.w13.experts == w.experts,
           where + std::to_string(w.w13.experts) + " expert slots for " + std::to_string(w.experts) + " experts" +
               (ep_slots ? " (expert parallelism: 1 .. experts, the replica table's " +
                               std::to_string(w.replicas.slots_per_rank) + " slots per rank)"
                         : " (one GPU: one slot per expert)"));
  DI_CHECK(has_layout(w.w13) && w.w13.n == 2 * w.inter && w.w13.k == w.hidden,
           where + "w13 must be [slots, 2 inter, hidden] = [" + std::to_string(w.w13.experts) + ", " +
               std::to_string(2 * w.inter) + ", " + std::to_string(w.hidden) + "], got [" +
               std::to_string(w.w13.experts) + ", " + std::to_string(w.w13.n) + ", " + std::to_string(w.w13.k) + "]");
  DI_CHECK(has_layout(w.w2) && w.w2.experts == w.w13.experts && w.w2.n == w.hidden && w.w2.k == w.inter,
           where + "w2 must be [slots, hidden, inter] = [" + std::to_string(w.w13.experts) + ", " +
               std::to_string(w.hidden) + ", " + std::to_string(w.inter) + "], got [" + std::to_string(w.w2.experts) +
               ", " + std::to_string(w.w2.n) + ", " + std::to_string(w.w2.k) + "]");
  DI_CHECK(w.shared_w13.weight && w.shared_w13.scale && w.shared_w13.n == 2 * w.shared_inter &&
               w.shared_w13.k == w.hidden && w.shared_w13.block == w.act_block,
           where + "shared_w13 must be [2 shared_inter, hidden] = [" + std::to_string(2 * w.shared_inter) + ", " +
               std::to_string(w.hidden) + "] with block " + std::to_string(w.act_block) + ", got [" +
               std::to_string(w.shared_w13.n) + ", " + std::to_string(w.shared_w13.k) + "] block " +
               std::to_string(w.shared_w13.block));
  DI_CHECK(w.shared_w2.weight && w.shared_w2.scale && w.shared_w2.n == w.hidden && w.shared_w2.k == w.shared_inter &&
               w.shared_w2.block == w.act_block,
           where + "shared_w2 must be [hidden, shared_inter] = [" + std::to_string(w.hidden) + ", " +
               std::to_string(w.shared_inter) + "] with block " + std::to_string(w.act_block) + ", got [" +
               std::to_string(w.shared_w2.n) + ", " + std::to_string(w.shared_w2.k) + "] block " +
               std::to_string(w.shared_w2.block));
}

size_t moe_workspace_bytes(int max_rows, const MoeGpu& w, int world) {
  moe_validate(w);
  DI_CHECK(max_rows >= 0 && world >= 1, "cuda::moe_workspace_bytes: negative max_rows or no rank");
  // The routed rows: every rank's under expert parallelism.
  const int routed = int(std::min<int64_t>(int64_t(world) * max_rows, int64_t(1) << 30));
  // The carve grows with rows except where W2's own output region stops (CallPlan::separate_y): the largest call
  // that still has it may need more than max_rows' carve.
  const int separate_rows = int(std::min<int64_t>(routed, int64_t(kMinDecodeChunk) * w.experts / w.top_k));
  return carve_ep(0, world, max_rows, w).bytes +
         std::max(carve(0, std::max(routed, 1), w).bytes, carve(0, std::max(separate_rows, 1), w).bytes);
}

namespace {

// The group of a call: world 1 and this rank 0 without expert parallelism.
struct CallGroup {
  int world = 1, rank = 0;
  int rows_per_rank = 0;  // M
  int routed = 0;         // rows routed on this rank: world * M, or the call's rows on one GPU
};

CallGroup call_group(int rows, const MoeExpertParallel* ep) {
  CallGroup g;
  if (!ep) {
    g.rows_per_rank = g.routed = rows;
    return g;
  }
  DI_CHECK(ep->group, "cuda::moe_forward: expert parallelism without a group");
  g.world = ep->group->world_size();
  g.rank = ep->group->rank();
  g.rows_per_rank = ep->rows_per_rank;
  DI_CHECK(rows <= g.rows_per_rank, "cuda::moe_forward: " + std::to_string(rows) + " rows on rank " +
                                        std::to_string(g.rank) + ", more than the group's " +
                                        std::to_string(g.rows_per_rank) + " rows per rank");
  g.routed = g.world * g.rows_per_rank;
  return g;
}

}  // namespace

PairOwner moe_pair_owner(const MoeGpu& w, const MoeExpertParallel* ep) {
  PairOwner owner;
  owner.replicas = w.replicas;
  owner.top_k = w.top_k;
  if (ep) {
    const CallGroup g = call_group(0, ep);
    owner.rank = g.rank;
    owner.rank_rows = ep->rank_rows;
    owner.rows_per_rank = g.rows_per_rank;
  }
  return owner;
}

MoeRoutingView moe_routing_view(void* workspace, int rows, const MoeGpu& w, const MoeExpertParallel* ep) {
  const CallGroup g = call_group(rows, ep);
  const uintptr_t base = reinterpret_cast<uintptr_t>(workspace) + carve_ep(0, g.world, g.rows_per_rank, w).bytes;
  const Layout L = carve(base, std::max(g.routed, 1), w);
  const int64_t first = int64_t(g.rank) * g.rows_per_rank * w.top_k;  // this rank's rows among the routed ones
  return {L.expert_ids + first, L.route_w + first, L.expert_ids};
}

void moe_share_rows(parallel::Collectives& group, const int32_t* tokens, int rows, int rows_per_rank,
                    int32_t* staging, int32_t* shared_rows, int32_t* shared_tokens, cudaStream_t stream) {
  DI_CHECK(rows >= 0 && rows <= rows_per_rank, "cuda::moe_share_rows: " + std::to_string(rows) +
                                                   " rows, more than the group's " + std::to_string(rows_per_rank));
  const int n = rows_per_rank + 1;
  share_rows_stage_kernel<<<unsigned(ceil_div(n, 256)), 256, 0, stream>>>(tokens, rows, rows_per_rank, staging);
  DI_CUDA_CHECK_LAUNCH("share_rows_stage_kernel");
  group.all_gather(staging, shared_rows, 1, parallel::CommType::I32, stream);
  if (rows_per_rank > 0)
    group.all_gather(staging + 1, shared_tokens, size_t(rows_per_rank), parallel::CommType::I32, stream);
}

void moe_forward(const bf16* x, const int32_t* tokens, int rows, const MoeGpu& w, bf16* y, void* workspace,
                 cublasHandle_t blas, cudaStream_t stream, const SideStream* side, const MoeExpertParallel* ep,
                 MoeCombineParts* defer) {
  if (defer) *defer = MoeCombineParts{};  // the combine into y, unless the end below leaves the parts
  moe_validate(w);
  DI_CHECK(rows >= 0, "cuda::moe_forward: negative rows");
  const CallGroup grp = call_group(rows, ep);
  if (grp.routed == 0) return;  // every rank of the group has no rows (all ranks see the same M)
  DI_CHECK((x || rows == 0) && (y || rows == 0) && workspace, "cuda::moe_forward: x, y and workspace are required");
  DI_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 8 == 0 &&
               reinterpret_cast<uintptr_t>(workspace) % 256 == 0,
           "cuda::moe_forward: x must be 16-byte, y 8-byte and the workspace 256-byte aligned");
  DI_CHECK(ep || !w.replicas.slots, "cuda::moe_forward: the layer holds one rank's share of the experts (a replica "
                                    "table) but the call has no expert-parallel group");
  if (ep) {
    DI_CHECK(grp.world == 1 || w.replicas.slots,
             "cuda::moe_forward: expert parallelism over " + std::to_string(grp.world) +
                 " ranks needs the layer's replica table (one rank's share of the experts)");
    DI_CHECK(ep->rank_rows && (!w.tid2eid || ep->tokens),
             "cuda::moe_forward: expert parallelism needs the group's row counts (and tokens on hash layers): "
             "moe_share_rows");
    tokens = ep->tokens;
  }
  DI_CHECK(!w.tid2eid || tokens, "cuda::moe_forward: a hash layer needs the rows' token ids");
  DI_CHECK(int64_t(grp.routed) * w.top_k < (int64_t(1) << 31), "cuda::moe_forward: rows * top_k overflows int32 slots");
  const int routed = grp.routed;
  const CallPlan plan = make_plan(routed, w);
  DI_CHECK(plan.groups <= kMaxGridY, "cuda::moe_forward: " + std::to_string(routed) + " rows make " +
                                         std::to_string(plan.groups) + " GEMM groups, more than one launch takes");
  const EpLayout X = carve_ep(reinterpret_cast<uintptr_t>(workspace), grp.world, grp.rows_per_rank, w);
  Layout L = carve(reinterpret_cast<uintptr_t>(workspace) + X.bytes, routed, w);
  const bool counters_kept = w.counters && moe_counters_kept();  // MoeGpu::counters: zero at the call, left zero
  if (counters_kept) {
    L.ticket = w.counters;
    L.tile_count = w.counters + 1;
  }
  const int E = w.experts, K = w.top_k, B = w.act_block;
  const int64_t H = w.hidden, I = w.inter, P = plan.pairs;
  PairOwner owner = moe_pair_owner(w, ep);
  const int slots = local_slots(w);

  // Expert parallelism's exchange (moe_gpu.h EpDispatch): bf16 rows, or FP8 records made by the home rank.
  const bool fp8_dispatch = ep && grp.world > 1 && ep_dispatch() == EpDispatch::Fp8;
  // 1. Expert parallelism, bf16 dispatch: the group's rows, this rank's zero-padded to M (zeros route like any row,
  //    to valid experts; their pairs are not computed, PairOwner), gathered in place.
  if (ep && !fp8_dispatch) {
    const int64_t M = grp.rows_per_rank;
    bf16* mine = X.x + int64_t(grp.rank) * M * H;
    if (rows > 0)
      DI_CUDA_CHECK(cudaMemcpyAsync(mine, x, sizeof(bf16) * size_t(rows * H), cudaMemcpyDeviceToDevice, stream));
    if (rows < M)
      DI_CUDA_CHECK(cudaMemsetAsync(mine + int64_t(rows) * H, 0, sizeof(bf16) * size_t((M - rows) * H), stream));
    ep->group->all_gather(mine, X.x, size_t(M * H), parallel::CommType::BF16, stream);
    x = X.x;
  }
  // This rank's rows among the routed ones (the shared expert and the combine are the home rank's).
  const int64_t home = int64_t(grp.rank) * grp.rows_per_rank;
  // Decode MoE v9 (moe_gpu.h MoeDecode): after the routing, two launches (and the combine, where not fused) do the
  // rest.
  const V9Launches v9 = plan_v9(w, plan, L, rows, home, y, ep != nullptr);
  auto launch_v9 = [&] {
    // w1|w3 of the shared expert and the routed experts, then w2 of both with the SwiGLU prologue (and the combine
    // where fused) (cuda/stream_gemm.cuh moe_pair_kernel), each launched with PDL behind its predecessor.
    const bool w13 = stream_gemm::launch_pair(v9.w13, stream, true);
    DI_CUDA_CHECK_LAUNCH("moe_pair_kernel (w1|w3, shared + routed)");
    const bool w2 = w13 && stream_gemm::launch_pair(v9.w2, stream, true);
    DI_CUDA_CHECK_LAUNCH("moe_pair_kernel (w2, shared + routed)");
    DI_CHECK(w13 && w2, "cuda::moe_forward: decode MoE v9 was planned but did not launch");
  };

  // The shared expert does not depend on the routing: with a side stream it runs beside the routed experts,
  // from the moment x's FP8 rows exist (after the routing kernel, or fp8_quantize on the unfused paths).
  const uint8_t* home_q = L.xq + home * H;
  const float* home_s = L.xs + home * (H / B);
  auto shared_expert = [&](cudaStream_t st, const uint8_t* home_q, const float* home_s) {
    if (plan.prefill) {
      fp8_gemm(home_q, home_s, rows, w.shared_w13, L.shared_h, OutType::F32, st, GemmPath::Wgmma);
      moe_swiglu_quant(L.shared_h, nullptr, rows, w.shared_inter, B, w.swiglu_limit, L.shared_q, L.shared_s, st);
      fp8_gemm(L.shared_q, L.shared_s, rows, w.shared_w2, L.shared_y, OutType::F32, st, GemmPath::Wgmma);
      return;
    }
    // Decode: on the decode kernels like the routed experts, so that the decode side stays batch-invariant
    // (fp8_gemm's own Auto switches at 64 rows).
    const StreamGrid grid = side && st == side->stream ? side->grid : StreamGrid{};
    if (shared_expert_stream(w, home_q, home_s, rows, L.shared_h, L.shared_y, st, grid)) return;
    fp8_gemm(home_q, home_s, rows, w.shared_w13, L.shared_h, OutType::F32, st, GemmPath::Skinny);
    moe_swiglu_quant(L.shared_h, nullptr, rows, w.shared_inter, B, w.swiglu_limit, L.shared_q, L.shared_s, st);
    fp8_gemm(L.shared_q, L.shared_s, rows, w.shared_w2, L.shared_y, OutType::F32, st, GemmPath::Skinny);
  };
  // A rank without rows of its own (expert parallelism) has no shared expert to run.
  const SideStream* shared_side = rows > 0 && !v9.ok ? side : nullptr;
  // Decode with the fused routing on one GPU (moe_gpu.h moe_shared_first): the shared expert forks before the
  // routing kernel, whose ~19 us of latency (batch 1) otherwise leave HBM idle, and quantizes x itself
  // (fp8_quantize: the bits of the routing kernel's quantization, quantize_vec8) into disp_q / disp_s, which only
  // the prefill path uses.
  const bool shared_before_routing =
      shared_side && plan.fused_route && !ep && !fp8_dispatch && !v9.fused_combine && moe_shared_first();
  auto fork_shared = [&] {
    if (!shared_side) return;
    DI_CUDA_CHECK(cudaEventRecord(side->fork, stream));
    DI_CUDA_CHECK(cudaStreamWaitEvent(side->stream, side->fork, 0));
    if (shared_before_routing) {
      fp8_quantize(x, L.disp_q, L.disp_s, rows, int(H), B, side->stream);
      shared_expert(side->stream, L.disp_q, L.disp_s);
    } else {
      shared_expert(side->stream, home_q, home_s);
    }
    DI_CUDA_CHECK(cudaEventRecord(side->join, side->stream));
  };

  // 1-2. Router logits [n, experts] in fp32 (into L.logits) and the routing, top_k experts and weights per row
  // (ids / weights [n, top_k]), of n rows xr with their tokens tok (hash layers): the routed rows (one GPU, bf16
  // dispatch) or this rank's own (FP8 dispatch). Below the prefill threshold our batch-invariant kernel (a logit's
  // bits do not depend on n); above it cuBLAS (fast, deterministic for a given shape; the prefill GEMMs are not
  // batch-invariant either).
  auto route = [&](const bf16* xr, const int32_t* tok, int n, int32_t* ids, float* weights) {
    float* logits = L.logits;
    if (plan.prefill) {
      gemm_bf16(blas, xr, H, w.gate, H, logits, OutType::F32, E, n, E, H, stream);
    } else {
      DI_CHECK(ceil_div(n, kLogitRows) <= kMaxGridY, "cuda::moe_forward: too many rows for the router kernel");
      const dim3 grid(unsigned(ceil_div(E, kLogitWarps)), unsigned(ceil_div(n, kLogitRows)));
      if (v9.ok) {
        router_logits_rows_kernel<<<grid, kLogitWarps * 32, 0, stream>>>(xr, w.gate, n, E, int(H), logits);
        DI_CUDA_CHECK_LAUNCH("router_logits_rows_kernel");
      } else {
        router_logits_kernel<<<grid, kLogitWarps * 32, 0, stream>>>(xr, w.gate, n, E, int(H), logits);
        DI_CUDA_CHECK_LAUNCH("router_logits_kernel");
      }
    }
    if (w.tid2eid) {
      hash_route_rows(logits, tok, w.tid2eid, w.vocab, n, E, K, w.gate_temp, w.normalize, w.route_eps,
                      w.route_scale, ids, weights, stream, false);
    } else {
      route_topk(logits, w.gate_bias, n, E, K, w.gate_temp, w.normalize, w.route_eps, w.route_scale, ids, weights,
                 stream);
    }
  };
  // 3. Dispatch of the routed rows into this rank's slot order (expert order on one GPU) and the GEMM groups.
  auto dispatch = [&] {
    dispatch_count_kernel<<<unsigned(plan.tiles), kDispatchTile, size_t(slots) * sizeof(int32_t), stream>>>(
        L.expert_ids, P, slots, owner, L.tile_hist);
    DI_CUDA_CHECK_LAUNCH("dispatch_count_kernel");
    dispatch_scan_kernel<<<1, kMaxExperts, 0, stream>>>(L.tile_hist, plan.tiles, slots, int(P), plan.chunk,
                                                        plan.groups, L.expert_start, L.group_experts, L.group_offsets,
                                                        L.slot_row, L.slot_weight, L.used_groups);
    DI_CUDA_CHECK_LAUNCH("dispatch_scan_kernel");
    dispatch_scatter_kernel<<<unsigned(plan.tiles), kDispatchTile, 0, stream>>>(
        L.expert_ids, L.route_w, P, slots, K, owner, L.tile_hist, L.expert_start, L.pair_slot, L.slot_row,
        L.slot_weight);
    DI_CUDA_CHECK_LAUNCH("dispatch_scatter_kernel");
  };

  if (fp8_dispatch) {
    // 1-2 on the home rank for its own rows, straight into its record (the one-GPU kernels: fp8_quantize has the
    // bits of the fused routing kernel's quantization, the routing kernels those of its routing, so each row's codes,
    // scales, experts and weights are the one-GPU ones); the padding rows' entries are zeros (expert 0, weight 0:
    // never dispatched, PairOwner). The all-gather of the records, then every rank's record unpacked into the routed
    // rows' arrays, where the bf16 form's quantization and routing leave them.
    const int64_t M = grp.rows_per_rank;
    const Fp8Record& rec = X.record;
    uint8_t* mine = X.records + int64_t(grp.rank) * rec.bytes;
    if (rows < M) DI_CUDA_CHECK(cudaMemsetAsync(mine, 0, size_t(rec.bytes), stream));
    if (rows > 0) {
      fp8_quantize(x, mine, reinterpret_cast<float*>(mine + rec.s), rows, int(H), B, stream);
      route(x, tokens ? tokens + home : nullptr, rows, reinterpret_cast<int32_t*>(mine + rec.ids),
            reinterpret_cast<float*>(mine + rec.w));
    }
    ep->group->all_gather(mine, X.records, size_t(rec.bytes), parallel::CommType::U8, stream);
    unpack_records_kernel<<<unsigned(grp.routed), 128, 0, stream>>>(X.records, rec, int(M), int(H), int(H / B), K,
                                                                    L.xq, L.xs, L.expert_ids, L.route_w);
    DI_CUDA_CHECK_LAUNCH("unpack_records_kernel");
    fork_shared();
    dispatch();
  } else if (plan.fused_route) {
    if (shared_before_routing) fork_shared();
    // 1-3 in one kernel: logits, x in FP8, routing, dispatch, GEMM groups. (V9: the combine counters too.)
    const int counters = int(v9.fused_combine ? moe_counter_words(w) : 1);
    const bool by_memset = !counters_kept && moe_ticket_by_memset();
    if (by_memset) {
      DI_CUDA_CHECK(cudaMemsetAsync(L.ticket, 0, sizeof(uint32_t) * size_t(counters), stream));
    } else if (!counters_kept) {
      LaunchSpec zero;
      zero.grid = dim3(1);
      zero.block = dim3(256);
      zero.stream = stream;
      DI_CUDA_CHECK(launch(zero, zero_counters_kernel, L.ticket, counters));
      DI_CUDA_CHECK_LAUNCH("zero_counters_kernel");
    }
    // PDL behind zero_counters_kernel, or behind the MoE's predecessor itself with kept counters.
    launch_fused_route(fused_route_args(w, plan, L, x, tokens, routed, owner), stream, !by_memset);
    if (v9.fused_combine) {
      launch_v9();
      return;
    }
    if (!shared_before_routing) fork_shared();
  } else {
    // x in FP8 once (W8A8, model-spec §2): the shared expert reads it as is, the routed experts in slot order.
    fp8_quantize(x, L.xq, L.xs, routed, int(H), B, stream);
    fork_shared();
    route(x, tokens, routed, L.expert_ids, L.route_w);
    dispatch();
  }

  // 4-5. Routed experts: w1|w3, SwiGLU with the routing weight, FP8, w2.
  float* expert_y = L.expert_y;
  bool expert_y_bf16 = false;  // the prefill kernel's y (below)
  if (v9.ok) {
    launch_v9();  // the shared expert's products too
  } else if (plan.prefill) {
    // The prefill kernel reads its rows in slot order: gather x's FP8 rows there first. Its outputs h and y in bf16,
    // where the SwiGLU and the combine round them on entry anyway (the reference's GEMMs return bf16): the same bits
    // at half the stores (bench/gpu/NOTES.md "Session 58"). Under expert parallelism y stays fp32, the reduce-scatter's
    // type.
    gather_rows_kernel<<<unsigned(ceil_div(P, 8)), 256, 0, stream>>>(L.xq, L.xs, L.slot_row, P, int(H), int(H / B),
                                                                     L.disp_q, L.disp_s);
    DI_CUDA_CHECK_LAUNCH("gather_rows_kernel");
    mxfp4_grouped_gemm_prefill(L.disp_q, L.disp_s, P, B, w.w13, L.group_experts, L.group_offsets, plan.groups,
                               plan.chunk, L.expert_h, OutType::BF16, L.prefill_ws, stream);
    moe_swiglu_quant(reinterpret_cast<const bf16*>(L.expert_h), L.slot_weight, P, I, B, w.swiglu_limit, L.act_q,
                     L.act_s, stream);
    expert_y_bf16 = !ep;
    mxfp4_grouped_gemm_prefill(L.act_q, L.act_s, P, B, w.w2, L.group_experts, L.group_offsets, plan.groups,
                               plan.chunk, expert_y, expert_y_bf16 ? OutType::BF16 : OutType::F32, L.prefill_ws,
                               stream);
  } else {
    // The decode kernels read x's FP8 rows through slot -> row (no gathered copy) and, on decode v8, make W2's
    // input from w1|w3's output in their prologue.
    // moe_routed_pdl_rows: w1|w3 PDL-launched behind the fused routing, its stream predecessor.
    const int pdl_rows = moe_routed_pdl_rows() == kRoutedPdlByModel ? w.routed_pdl_rows : moe_routed_pdl_rows();
    const bool routed_pdl = plan.fused_route && pdl_rows > 0 && plan.rows >= pdl_rows;
    mxfp4_grouped_gemm(L.xq, L.xs, B, w.w13, L.group_experts, L.group_offsets, plan.groups, plan.chunk, L.expert_h,
                       stream, L.slot_row, routed_pdl);
    // (The fused W2 reads expert_h while it writes expert_y: only where they are apart.)
    if (!(plan.separate_y && mxfp4_grouped_gemm_swiglu(L.expert_h, L.slot_weight, w.swiglu_limit, B, w.w2,
                                                       L.group_experts, L.group_offsets, plan.groups, plan.chunk,
                                                       expert_y, stream))) {
      moe_swiglu_quant(L.expert_h, L.slot_weight, P, I, B, w.swiglu_limit, L.act_q, L.act_s, stream);
      mxfp4_grouped_gemm(L.act_q, L.act_s, B, w.w2, L.group_experts, L.group_offsets, plan.groups, plan.chunk,
                         expert_y, stream);
    }
  }

  // 6. Expert parallelism: every pair's output back to its home rank (the reduce-scatter adds one rank's output
  //    to the others' +0.0, moe_gpu.h), in pair order; on one GPU the combine reads them where they are.
  const float* pair_outputs = expert_y;
  const int32_t* pair_slot = L.pair_slot;
  if (ep) {
    pair_outputs_kernel<<<unsigned(P), 256, 0, stream>>>(expert_y, L.pair_slot, int(H), X.pair_y);
    DI_CUDA_CHECK_LAUNCH("pair_outputs_kernel");
    ep->group->reduce_scatter_sum(X.pair_y, X.returned, size_t(int64_t(grp.rows_per_rank) * K * H),
                                  parallel::CommType::F32, stream);
    pair_outputs = X.returned;
    pair_slot = nullptr;  // pair order
  }
  if (rows == 0) return;

  // 7. Shared expert (weight 1); on the side stream (or in V9's launches) it already ran.
  if (shared_side)
    DI_CUDA_CHECK(cudaStreamWaitEvent(stream, shared_side->join, 0));
  else if (!v9.ok)
    shared_expert(stream, home_q, home_s);

  // 8. Combine in slot order, experts then the shared expert, fp32, then bf16. With PDL behind V9's w2 launch (one
  //    GPU; under expert parallelism its predecessor is the reduce-scatter, not ours). Or left to the caller's next
  //    mHC site (moe_combine.h), which reads the same sum where it reads y.
  MoeCombineParts parts;
  if (expert_y_bf16)
    parts.expert_y_bf16 = reinterpret_cast<const bf16*>(pair_outputs);
  else
    parts.expert_y = pair_outputs;
  parts.shared_y = L.shared_y;
  parts.pair_slot = pair_slot;
  parts.top_k = K;
  if (defer && moe_site_combine() && pair_slot && K <= kSiteCombineMaxTopK) {
    *defer = parts;
    return;
  }
  moe_combine(parts, rows, H, y, stream, v9.ok && !ep);
}

void moe_combine(const MoeCombineParts& parts, int64_t rows, int64_t hidden, bf16* y, cudaStream_t stream, bool pdl) {
  DI_CHECK(parts.set() && parts.shared_y && parts.top_k >= 1 && parts.top_k <= kMaxTopK && hidden % 4 == 0,
           "cuda::moe_combine: incomplete parts, top_k out of range or hidden not a multiple of 4");
  if (rows == 0) return;
  const int combine_blocks = int(ceil_div(hidden / 4, kCombineThreads));
  DI_CHECK(rows * combine_blocks <= INT32_MAX, "cuda::moe_combine: too many rows for the combine grid");
  LaunchSpec spec;
  spec.grid = dim3(unsigned(rows * combine_blocks));
  spec.block = dim3(kCombineThreads);
  spec.stream = stream;
  spec.pdl = pdl;
  DI_CUDA_CHECK(launch(spec, combine_kernel, parts, int(hidden), combine_blocks, y));
  DI_CUDA_CHECK_LAUNCH("combine_kernel");
}


// moe_gpu.h: the fused routing kernel alone, once, eager, with its phase stamps.
std::vector<double> moe_fused_route_phases(const MoeGpu& w_in, const bf16* x, const int32_t* tokens, int rows,
                                           cudaStream_t stream) {
  MoeGpu w = w_in;
  w.expert_path = MoeGemmPath::Decode;  // the fused routing is a decode form
  // Only the router's part of the layer is read (the benchmark passes no experts): moe_validate's checks of it.
  DI_CHECK(w.gate && w.experts >= 1 && w.experts <= kMaxExperts && w.top_k >= 1 &&
               w.top_k <= std::min(kMaxTopK, w.experts) && w.hidden > 0 && w.hidden % 128 == 0 &&
               (w.act_block == 32 || w.act_block == 64 || w.act_block == 128 || w.act_block == 256) &&
               w.hidden % w.act_block == 0 && (!w.tid2eid || (w.vocab > 0 && tokens)),
           "cuda::moe_fused_route_phases: the router's shapes (gate, experts, top_k, hidden, act_block; tid2eid with "
           "vocab and tokens on a hash layer)");
  DI_CHECK(rows >= 1 && rows <= kFusedRouteRows && !w.replicas.slots,
           "cuda::moe_fused_route_phases: 1.." + std::to_string(kFusedRouteRows) + " rows on one GPU");
  const CallPlan plan = make_plan(rows, w);
  DI_CHECK(plan.fused_route, "cuda::moe_fused_route_phases: the call does not take the fused routing");
  // Its own workspace (the carve of this call: the expert regions are empty without inter sizes) and stamps: a
  // diagnostic, never captured.
  void* ws = nullptr;
  unsigned long long* stamps = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&ws, carve(0, rows, w).bytes));
  DI_CUDA_CHECK(cudaMalloc(&stamps, sizeof(unsigned long long) * kStampCount));
  std::vector<unsigned long long> host(kStampCount, 0);
  host[kStampEntry] = ~0ull;  // atomicMin's start
  const Layout L = carve(reinterpret_cast<uintptr_t>(ws), rows, w);
  DI_CUDA_CHECK(cudaMemcpyAsync(stamps, host.data(), sizeof(unsigned long long) * kStampCount,
                                cudaMemcpyHostToDevice, stream));
  DI_CUDA_CHECK(cudaMemsetAsync(L.ticket, 0, sizeof(uint32_t), stream));
  RouteArgs A = fused_route_args(w, plan, L, x, tokens, rows, moe_pair_owner(w, nullptr));
  A.stamps = stamps;
  launch_fused_route(A, stream, false);
  DI_CUDA_CHECK(cudaMemcpyAsync(host.data(), stamps, sizeof(unsigned long long) * kStampCount,
                                cudaMemcpyDeviceToHost, stream));
  DI_CUDA_CHECK(cudaStreamSynchronize(stream));
  DI_CUDA_CHECK(cudaFree(stamps));
  DI_CUDA_CHECK(cudaFree(ws));
  return route_phases(host.data());
}

// Route stamps inside the model (moe_gpu.h route_stamps): the slots and each device's records.
namespace {

// One record per MoE layer and device, the router's gate naming the layer (cuda/stamp_records.h).
StampRecords& route_records() {
  static StampRecords records{kRouteStampSlots, kRecWords};
  return records;
}

// Declared above launch_fused_route. Null (the launch goes unstamped) once kRouteStampSlots are taken, or where the
// device has no records yet and `stream` is capturing (no allocation there: set_route_stamps allocates them first).
unsigned long long* route_stamp_record(const void* gate, cudaStream_t stream) {
  return route_records().record(gate, stream);
}

}  // namespace

bool route_stamps() { return g_route_stamps.get(); }
bool route_stamps_warm() { return g_route_stamps_warm.get(); }
bool route_selector() { return g_route_selector.get(); }
void set_route_selector(bool on) { g_route_selector.set(on); }
void set_route_stamps_warm(bool on) { g_route_stamps_warm.set(on); }
bool route_scores_in_blocks() { return g_route_scores_in_blocks.get(); }
void set_route_scores_in_blocks(bool on) { g_route_scores_in_blocks.set(on); }
bool moe_counters_kept() { return g_moe_counters_kept.get(); }
void set_moe_counters_kept(bool on) { g_moe_counters_kept.set(on); }
size_t moe_counter_words(const MoeGpu& w) { return size_t(1 + ceil_div(w.hidden, 16)); }
int moe_routed_pdl_rows() { return g_routed_pdl_rows.get(); }
void set_moe_routed_pdl_rows(int rows) {
  DI_CHECK(rows == kRoutedPdlByModel || routed_pdl_rows_valid(rows),
           "cuda::set_moe_routed_pdl_rows: " + std::to_string(rows) + " outside kRoutedPdlByModel, 0.." +
               std::to_string(kFusedRouteRows));
  g_routed_pdl_rows.set(rows);
}
bool route_gate_early() { return g_route_gate_early.get(); }
void set_route_gate_early(bool on) { g_route_gate_early.set(on); }
bool route_dispatch_warp() { return g_route_dispatch_warp.get(); }
void set_route_dispatch_warp(bool on) { g_route_dispatch_warp.set(on); }
void set_route_stamps(bool on) {
  if (on) route_records().allocate();  // this device's records, outside any capture
  g_route_stamps.set(on);
}

std::vector<RouteStampRecord> moe_route_stamps_read() {
  const std::vector<unsigned long long> raw = route_records().read();
  const int used = int(raw.size() / kRecWords);
  std::vector<RouteStampRecord> out;
  for (int i = 0; i < used; ++i) {
    const unsigned long long* s = raw.data() + size_t(i) * kRecWords;
    RouteStampRecord r;
    r.slot = i;
    r.launches = s[kRecLaunches];
    r.grid = int(s[kRecGrid]);
    r.sm_block0 = int(s[kRecSmBlock0]);
    r.sm_first_done = int(s[kRecSmFirstDone]);
    r.sm_last = int(s[kRecSmLast]);
    r.entry_ns = s[kStampEntry];
    auto us = [&](int k) { return double(int64_t(s[k] - s[kStampEntry])) * 1e-3; };
    r.start_first = us(kRecStart);
    r.start_latest = us(kRecStartLatest);
    r.entry_latest = us(kRecEntryLatest);
    r.last_start = us(kRecLastStart);
    r.last_entry = us(kRecLastEntry);
    r.phases = route_phases(s);
    if (s[kRecMarkLoads] != 0) {  // top-k layers: the routed phase split at route_row_topk's marks
      const unsigned long long ticket = s[kStampClock], routed = s[kStampClock + 1];
      r.routed_split = {double(s[kRecMarkLoads] - ticket), double(s[kRecMarkScores] - s[kRecMarkLoads]),
                        double(s[kRecMarkPicks] - s[kRecMarkScores]), double(routed - s[kRecMarkPicks])};
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace deepinfer::cuda
