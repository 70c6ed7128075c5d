// The V4 MoE FFN sublayer on the GPU (model-spec.md §3 "MoE", §2 W8A8; issue 4), the device twin of
// model/v4/v4_moe.cpp (v4_moe_step with NumericsOptions all on) for a batch of rows:
//   logits = x . gate^T (fp32)  ->  sqrt-softplus scores, top_k by score + bias (or tid2eid[token] on the hash
//   layers), normalised weights times route_scale  ->  dispatch the (row, slot) pairs into expert order  ->
//   x quantized once to FP8 (block act_block), gathered  ->  MXFP4 w1|w3  ->  clamped SwiGLU times the routing
//   weight, FP8-quantized  ->  MXFP4 w2  ->  y[r] = bf16( sum_{k = 0 .. top_k-1} expert_k(x[r]) + shared(x[r]) ).
// The shared expert is the same SwiGLU on FP8 weights (fp8_gemm) with weight 1.
//
// Graph capture: one call enqueues kernels on `stream` (and the side stream's shared expert) only; no host
// synchronization, no device -> host copy, no allocation (everything lives in `workspace`, which the caller may
// share with other modules between calls: nothing is kept in it across calls), and every launch size is a function
// of the host-known `rows` and the weights' shapes, never of the routing.
//
// Launches at decode (rows <= 16, the fused forms; moe_gpu.cu's top comment): 5 kernels on `stream` (the counters'
// zeroing, routing, w1|w3, w2 with the SwiGLU prologue, combine) and 3 on the side stream for the shared expert (x in
// FP8, w1|w3, w2), where the experts and the shared expert are packed for decode v8 (the GPU model); 2 more on the
// checkpoint layout (the routed w2's SwiGLU quantization and fp8_gemm's separate launches). With MoeDecode::V9 at
// 1..8 rows: 4 kernels (zeroing, routing, w1|w3 and w2 of both); at 9..16 rows 5 (the combine apart); above 16 rows
// the 6 separate routing kernels and 3 (MoeDecode below). (DEEPINFER_MOE_TICKET=memset: a memset node for the
// zeroing kernel; DEEPINFER_MOE_SHARED_FIRST=0: no x in FP8 on the side.)
//
// Batch invariance (algorithms.md §4): below the prefill threshold (see MoeGemmPath) every kernel computes a
// row's result with a reduction order that does not depend on the other rows (the router logits use a kernel of
// our own rather than cuBLAS for that reason, and the fused and separate routing kernels share its code; the
// decode expert / FP8 GEMMs split K per warp independently of the token count), and the top_k expert outputs are
// summed in slot order k = 0 .. top_k-1, so a row's output is bitwise the same alone or inside a batch. Above the
// threshold the prefill kernels (cuBLAS gate, wgmma experts and shared expert) take over: still deterministic run
// to run, but their sums are ordered differently from the decode kernels', so a row's bits depend on which side
// of the threshold its batch falls. Two limits of that rule without batch-invariant mode: decode v8 takes groups
// of <= 8 rows, so a batch with more rows per expert (or more than 8 rows for the shared expert) runs v7, which
// sums in another order. With cuda::batch_invariant() on, Auto always takes the decode side with groups of 8 rows
// (v8 wherever the weights are packed for it, the shared expert too), so a row's bits never depend on the batch.
//
// Expert parallelism (docs/parallel.md "Expert parallelism: the exact gathered version"): the routed experts are
// split over the ranks of a group, each rank holding its slots of the MoeGpu::replicas table. One call per
// rank, every rank of the group calling with the same rows_per_rank M:
//   1. all-gather x: every rank's rows, zero-padded to M, so every rank sees the group's world * M rows;
//   2. every rank routes all of them with the same kernels (the router and its bias or hash table are replicated,
//      routing is a function of the row) and runs the grouped expert GEMMs only for the pairs it owns (the copy of
//      the pair's expert that parallel::PairOwner names: with redundant experts exactly one copy per pair), each
//      pair's fp32 output in a per-pair buffer [world][M][top_k][hidden], +0.0 for the others and for the padding
//      rows' pairs;
//   3. reduce-scatter (sum) that buffer: each rank receives its own rows' pair outputs; exactly one rank wrote each
//      element, the others +0.0, so the sum is that value whatever order NCCL adds in (a -0.0 output comes back as
//      +0.0, which the combine cannot tell apart: its sum starts from +0.0);
//   4. the combine on the home rank: the same kernel and order as on one GPU (top-k slots in order from zero, then
//      the shared expert, which the home rank computes for its rows).
// EpDispatch::Fp8 (the default, below) sends less than step 1's bf16 rows: the home rank quantizes its own rows to
// FP8 (the same quantizer, so the codes and scales are those the one-GPU call makes for them) and routes them (router
// logits, top-k or the hash table), and the all-gather carries each rank's record of codes, scales, expert ids and
// routing weights (H + 4 H / act_block + 8 top_k bytes a row instead of 2 H); the receivers take those as their
// routing and their x in FP8 and go straight to the dispatch. Quantization and routing are functions of the row, so
// every pair sees the inputs of the bf16 form: the same bits.
// So a pair's arithmetic is the one-GPU arithmetic, and in batch-invariant mode (where a pair's output does not
// depend on the other pairs of its launch) the result is the one-GPU result bit for bit. One GPU is the same code
// with world 1: no gather, no per-pair buffer, the combine reads the expert outputs where the GEMMs left them.
// The communication is fixed-size per call (world * M rows), so a step is capturable into a CUDA graph. Sending
// only the pairs (the all-to-all-v layout of parallel/expert_dispatch.h) is the bandwidth-lean next version.
#pragma once

#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/kernels.h"
#include "layers/moe/moe_combine.h"
#include "parallel/collectives.h"
#include "parallel/replica_choice.h"

namespace deepinfer::cuda {

// Which expert GEMMs run. Auto takes the prefill kernels when the batch brings at least
// kMoePrefillRowsPerExpert rows per expert on average (rows * top_k >= kMoePrefillRowsPerExpert * experts) and
// every product meets the prefill kernel's n % 128 == 0 / k % 128 == 0, except in batch-invariant mode
// (cuda::batch_invariant()), where Auto is always Decode; Decode / Prefill force a side (tests, benchmarks;
// Prefill still falls back to Decode where the shapes do not allow it).
enum class MoeGemmPath { Auto, Decode, Prefill };

// One pair per expert on average: the crossover measured with the grouped prefill kernel v5 (H200 runs 47-48,
// tools/gpu/moe_crossover.sh, bench/gpu/NOTES.md "MoE path crossover"): the prefill path beats the decode kernels at
// every size tried from 1.5 pairs per expert on (decode batch 64 / 256 1.08 / 1.29x on V4-Flash, 1.11 / 1.42x on
// V4.1-Flash; 4K prefill in 256..2048-row steps 1.30..2.99x; CP2 prefill's 1024-row shares take it too). It was 64
// while the prefill kernel was v1. The tests that need the decode kernels at larger row counts pin MoeGemmPath::Decode;
// with 1 every GPU suite passes (session 8, tools/gpu/moe_threshold_check.sh: test_gpu_model 66/66, test_gpu_ep 24/24).
constexpr int kMoePrefillRowsPerExpert = 1;
// The threshold Auto uses: DEEPINFER_MOE_PREFILL_ROWS_PER_EXPERT (1..4096, read once per process) or
// kMoePrefillRowsPerExpert; for measuring the decode / prefill crossover (bench/gpu/NOTES.md "MoE path crossover").
int moe_prefill_rows_per_expert();

// Which kernels the decode MoE runs (bench/gpu/NOTES.md "Decode MoE v9" and "Decode MoE at batch 16-256"). V8: the
// launches listed at the top of this file (routing, w1|w3, w2 with the SwiGLU prologue, combine on the main stream; the
// shared expert's two decode-v8 launches beside them). V9: routing, then ONE launch of w1|w3 for the shared expert and
// the routed experts (cuda/stream_gemm.cuh moe_pair_kernel), then ONE launch of w2 for both with the SwiGLU prologue
// and the top-k combine fused (last arrival per tile), chained by programmatic dependent launch: 3 kernels + the memset
// on one stream (the side stream is not used). Same bits as V8 (the same per-element K order and combine order). V9
// applies where the experts and the shared expert are packed for decode v8 (the GPU model), without expert parallelism,
// at 1..8 rows. Above 8 rows (and under expert parallelism at any row count) V9 runs the same two moe_pair_kernel
// launches without the fused combine: routing (the separate kernels above 16 rows), w1|w3 of the shared expert (groups
// of 8 rows) and every (routed group, tile) item in one launch, split over the SMs by the count of NON-EMPTY groups (a
// device value the routing writes, so the host's group bound leaves no SM idle), w2 the same with the SwiGLU prologue,
// then the combine kernel (PDL): 3 kernels after the routing, no side stream. It applies wherever the decode groups are
// 8 rows (CallPlan: <= 8 pairs per expert on average, e.g. V4-Flash up to 341 rows, and always in batch-invariant mode
// while W2 has its own output region) and the weights are packed for decode v8; elsewhere V8's launches run. Bits: the
// V8 bits wherever V8 runs decode v8 for every product; above 8 rows V8 (outside batch-invariant mode) runs the shared
// expert through fp8_gemm's v7, which sums in another order, while V9 runs it on decode v8 in groups of 8 rows as
// batch-invariant mode does: there V9 equals V8 in batch-invariant mode bit for bit. V9Small: V9 at 1..8 rows only
// (V8's launches elsewhere), the first form. V9Wide: V9 except the one-GPU fused form at 1..8 rows (V8 there) — the
// default: on the H200 (run 25, GpuMoe.DecodeV9WideFullWidth, V4-Flash width, graph replays) v9's wide form takes 531 /
// 1246 / 2691 us at 16 / 64 / 256 rows against v8's 784 / 2225 / 3304, while the 1..8-row form is slower than v8 (108
// vs 97 us at one row). DEEPINFER_MOE_DECODE=v8 / v9 / v9small / v9wide selects one process-wide, read once;
// set_moe_decode overrides it (tests).
enum class MoeDecode { V8, V9, V9Small, V9Wide };
MoeDecode moe_decode();
void set_moe_decode(MoeDecode);
// The batch-1 FFN's critical path (session 11, tools/gpu/trace_decode.sh on 16 V4-Flash layers): the fused routing
// kernel (~19 us of latency at one row, HBM idle) and what precedes it.
//  - The routing's arrival counters are zeroed by a one-block kernel launched with PDL behind the MoE's predecessor
//    (its wait there keeps the chain transitive, cuda/launch.h), and the routing kernel follows with PDL; a memset
//    node instead (DEEPINFER_MOE_TICKET=memset, the form before) left ~13 us per layer with nothing running.
//  - On one GPU with a side stream, the shared expert forks before the routing kernel instead of after it, with its
//    own FP8 copy of x (fp8_quantize: the routing kernel's quantization bits) in the decode-unused disp_q / disp_s,
//    so its 25 MB stream beside the routing's latency (DEEPINFER_MOE_SHARED_FIRST=0 forks it after the routing).
//  Same bits either way. Same-call A/B (H200 runs 69-70, 16 layers, 4K, graphs): batch 1 3.311 ms (memset, after)
//  -> 3.169 ms (kernel, before); batch 8 7.29 -> 7.33; 64 / 256 / prefill unchanged. Each alone does not pay: kernel
//  + after 3.47 ms (the shared expert then takes the SMs ahead of the routed w1|w3), memset + before 3.305 ms.
// Both read once from the environment.
bool moe_ticket_by_memset();
bool moe_shared_first();
// Whether a call with MoeGpu::counters uses them (default; DEEPINFER_MOE_COUNTERS=kept) or zeroes its workspace's as a
// call without them does (DEEPINFER_MOE_COUNTERS=zeroed, the form before session 27). The same bits
// (GpuMoe.KeptCountersSameBits). Read once; set_moe_counters_kept overrides it (a CUDA graph keeps its form).
bool moe_counters_kept();
void set_moe_counters_kept(bool on);
// Whether moe_forward leaves its output as the combine's parts for the caller's next mHC site (the `defer`
// argument; layers/moe/moe_combine.h) instead of launching the combine: on unless DEEPINFER_MOE_SITE_COMBINE=0 (read
// once), set_moe_site_combine overrides it. Same bits either way (the site sums the parts with combine_kernel's
// expression, layers/moe/moe_combine.cuh). V4 batch 1 -1.7 % (H200 run 138, same call: 2.382-2.403 -> 2.350-2.357 ms
// over 16 layers at 4K). V4.1: the cluster lagged entry sums the parts (hc_lagged_site_pre's y_parts), -1.0 % at
// batch 1 (H200 run 283: 1.731-1.735 -> 1.714-1.718 ms); session 25's one-block entry on the parts lost (runs
// 153-154: one 128-thread block read 7x y's bytes), which the cluster spreads over its blocks (bench/gpu/NOTES.md).
bool moe_site_combine();
void set_moe_site_combine(bool on);
// V9's routed group width above 8 rows (NOTES "Decode MoE at batch 16-256"): 0 = auto (4 rows where the batch
// brings <= 2 pairs per expert on average, else 8), 4 or 8 forced where the wide form runs. The bits do not depend
// on it (a row's mma column is its own); the SM occupancy does. DEEPINFER_MOE_V9_CHUNK=4 / 8 sets it process-wide,
// read once; set_moe_v9_group_rows overrides it (tests).
int moe_v9_group_rows();
void set_moe_v9_group_rows(int rows);
// V9's activation staging (cuda/stream_gemm.cuh Layout act8): f16, or the e4m3 bytes widened in the K loop, which
// halves the staged rows' shared memory (two blocks per SM at 8-row groups and k = 4096) for 4 more instructions per
// K step; the same f16 values, so the same bits. Auto (default): e4m3 bytes exactly where f16 staging leaves one
// block per SM and e4m3 staging fits two. DEEPINFER_MOE_V9_ACT=fp8 / f16 forces one process-wide, read once;
// set_moe_v9_staging overrides it (tests).
enum class MoeV9Staging { Auto, Fp8, F16 };
MoeV9Staging moe_v9_staging();
void set_moe_v9_staging(MoeV9Staging);

// The e2m1 widening of the decode-v8 / v9 MXFP4 consumers (cuda/stream_gemm.cuh widen_fp4_perm): the byte-permute
// form (default) or the shift-and-mask form (DEEPINFER_FP4_WIDEN=shift). The same f16 values either way, so the
// same bits; the switch exists for timing A/B and for the test that checks that claim on the GPU.
bool fp4_perm_widen();
void set_fp4_perm_widen(bool on);

struct MoeGpu {
  const bf16* gate = nullptr;        // [experts, hidden] (bf16 on disk; logits are fp32, model-spec §8)
  const float* gate_bias = nullptr;  // [experts], selection only; null on hash layers
  const int32_t* tid2eid = nullptr;  // [vocab, top_k] on hash layers (V4's first num_hash_layers), else null
  Fp4Experts w13;                    // n = 2 * inter: rows [0, inter) = w1, [inter, 2 inter) = w3; k = hidden
  Fp4Experts w2;                     // n = hidden, k = inter
  // Expert parallelism: the layer's logical -> physical replica table on the device (parallel/replica_choice.h,
  // built from an EPLB placement by parallel/expert_shard.h), the same on every rank; w13 / w2 hold this rank's
  // slots_per_rank slots. An expert may have several copies (redundant experts): each pair is computed by the one
  // copy PairOwner names. Null slots: one GPU, every expert, slot = expert id, and w13 / w2 hold `experts` slots.
  parallel::ReplicaView replicas;
  Fp8Linear shared_w13;              // n = 2 * shared_inter (w1 rows then w3 rows), k = hidden
  Fp8Linear shared_w2;               // n = hidden, k = shared_inter
  int experts = 0, top_k = 0, act_block = 128;
  int64_t hidden = 0, inter = 0, shared_inter = 0;
  float swiglu_limit = 0, route_scale = 1, route_eps = 0, gate_temp = 1;
  bool normalize = true;
  int64_t vocab = 0;                 // rows of tid2eid (hash layers): a token outside [0, vocab) traps
  MoeGemmPath expert_path = MoeGemmPath::Auto;
  // The decode routed w1|w3 with PDL behind the fused routing from this many rows on (0: never; moe_routed_pdl_rows
  // above): V4.1 sets 8, V4 leaves it off (measured per model, bench/gpu/NOTES.md "Session 45").
  int routed_pdl_rows = 0;
  // [moe_counter_words(*this)] device words that every call leaves at zero (the fused routing's ticket, decode MoE
  // v9's combine counters: the block that completes a count resets it), zeroed once by their owner (the step models'
  // scratch, as the mHC site's arrival counters): the call then launches nothing to zero them, so the routing follows
  // its predecessor with one PDL hop fewer. Null (or moe_counters_kept() off): they live in the workspace and each
  // call zeroes them first (zero_counters_kernel or a memset, moe_ticket_by_memset). One set serves calls that run one
  // after another, whatever the layer.
  uint32_t* counters = nullptr;
};

// The words MoeGpu::counters points at.
size_t moe_counter_words(const MoeGpu&);

// Throws deepinfer::Error naming the first inconsistent or unsupported shape (moe_workspace_bytes and
// moe_forward call it; the uploads call it so a bad checkpoint fails at load).
void moe_validate(const MoeGpu&);

// What expert parallelism's all-gather carries (the top comment): Bf16, every rank's bf16 rows, each rank then
// quantizing and routing all of them; Fp8 (default), every rank's FP8 rows, scales and routing results, made once
// by the home rank. The same bits either way. DEEPINFER_EP_DISPATCH=bf16 / fp8 selects one process-wide, read once;
// set_ep_dispatch overrides it (tests). No effect without a group (one GPU).
enum class EpDispatch { Bf16, Fp8 };
EpDispatch ep_dispatch();
void set_ep_dispatch(EpDispatch);

// One call's expert-parallel group (the top comment): the same rows_per_rank on every rank of the group.
struct MoeExpertParallel {
  parallel::Collectives* group = nullptr;
  int rows_per_rank = 0;               // M: every rank's rows padded to this count (>= each rank's rows)
  const int32_t* rank_rows = nullptr;  // [world] device: each rank's rows this call (moe_share_rows)
  const int32_t* tokens = nullptr;     // [world * M] device: every rank's token ids, zero-padded (hash layers)
};

// Bytes of workspace for calls of up to max_rows rows (256-byte aligned pieces; the caller's buffer should be
// 256-byte aligned too, as cudaMalloc's are); with expert parallelism over `world` ranks, for rows_per_rank up to
// max_rows (the group's rows are routed on every rank).
size_t moe_workspace_bytes(int max_rows, const MoeGpu&, int world = 1);

// Once per step of an expert-parallel group, before its MoE layers: gathers every rank's row count and token ids
// (zero-padded to rows_per_rank) into shared_rows [world] and shared_tokens [world * rows_per_rank] (device), which
// MoeExpertParallel then names. `staging` is [rows_per_rank + 1] int32 of device scratch.
void moe_share_rows(parallel::Collectives& group, const int32_t* tokens, int rows, int rows_per_rank,
                    int32_t* staging, int32_t* shared_rows, int32_t* shared_tokens, cudaStream_t stream);

// y[r] = sum over the row's top_k experts of w_e * expert_e(x[r]) + shared(x[r]), rounded to bf16 (official
// numerics: W8A8 FP8 input quantization for the expert GEMMs, the W2 input quantized after the routing weight,
// as v4_moe_step with NumericsOptions all on). tokens[r] (the row's token id) is read only on hash layers.
// x [rows, hidden] bf16 (16-byte aligned), y [rows, hidden] bf16. With `ep`, the call is this rank's part of the
// group's MoE (the top comment): rows may be 0 (the rank still takes part in the collectives), and `tokens` is
// unused (ep->tokens has every rank's).
// defer (optional): where moe_site_combine() is on and the call ends in the one-GPU combine (top_k <=
// kSiteCombineMaxTopK), the combine is not launched: *defer receives its parts and y is not written; the caller's
// next mHC site reads them (cuda/step_kernels.h hc_expand_site_pre). Otherwise *defer is left unset (parts.set()
// false) and y holds the output.
void moe_forward(const bf16* x, const int32_t* tokens, int rows, const MoeGpu& w, bf16* y, void* workspace,
                 cublasHandle_t blas, cudaStream_t stream,
                 const SideStream* side = nullptr, const MoeExpertParallel* ep = nullptr,
                 MoeCombineParts* defer = nullptr);

// Which pairs of a call this rank computes, in which local slot (parallel/replica_choice.h): what moe_forward's
// dispatch uses, for the per-rank pair counter (layers/moe/expert_counts.h count_rank_pairs) to use the same.
parallel::PairOwner moe_pair_owner(const MoeGpu& w, const MoeExpertParallel* ep);

// Where the last moe_forward(rows) on `workspace` left its routing (tests and diagnostics): the selected experts
// in selection order and their weights (already times route_scale), [rows, top_k] each, of this rank's rows.
// group_experts: every routed row's experts [world * M, top_k] (the gathered rows, rank-major; = experts on one GPU),
// which PairOwner assigns to the ranks (the per-rank pair counter reads them).
struct MoeRoutingView {
  const int32_t* experts = nullptr;
  const float* weights = nullptr;
  const int32_t* group_experts = nullptr;
};
MoeRoutingView moe_routing_view(void* workspace, int rows, const MoeGpu& w, const MoeExpertParallel* ep = nullptr);

// The hash layers' routing of `rows` rows (model-spec §3 "hash MoE"; moe_forward's non-fused path): ids / weights
// [rows, top_k] from the router logits and each row's token through tid2eid [vocab, top_k]. reference = true runs
// the row function as it was before session 6's loads-in-flight rewrite, for the bitwise test
// (tests/gpu/model/test_hash_route_gpu.cpp).
void hash_route_rows(const float* logits, const int32_t* tokens, const int32_t* tid2eid, int64_t vocab, int rows,
                     int experts, int top_k, float temp, bool normalize, float eps, float route_scale, int32_t* ids,
                     float* weights, cudaStream_t stream, bool reference = false);

// Diagnostics for benchmarks (bench/gpu/roofline.cu "fused_route_phases", bench/gpu/NOTES.md "Fused decode routing:
// phases and v2"): runs the fused decode routing kernel of a decode call of `rows` (1..16) rows of x [rows, hidden]
// (tokens [rows] on hash layers) once on `stream`, eager, on a workspace and a stamp buffer of its own, and
// synchronizes the stream. Returns, in microseconds after the first block's entry (%globaltimer): [0] the last block
// done with its logits / quantization, [1] the last block's ticket taken, [2] the rows routed, [3] the pairs
// counted, [4] the scan and GEMM groups written, [5] the end; then the last block's SM clock cycles between those
// points: [6] ticket -> routed, [7] -> counted, [8] -> scanned, [9] -> end.
// Reads only the router's part of w (gate, gate_bias or tid2eid and vocab, experts, top_k, hidden, act_block, the
// routing constants): the experts may be absent. One GPU only; not capturable (it allocates and synchronizes).
std::vector<double> moe_fused_route_phases(const MoeGpu& w, const bf16* x, const int32_t* tokens, int rows,
                                           cudaStream_t stream);

// The same phase stamps inside the model's decode step (bench/gpu/NOTES.md "Fused decode routing: phase stamps inside
// the model"; the microbenchmark above takes 10.4 us at V4 batch 1 where the model's routing launches take 16-20 us,
// session 13 runs 80-82). With route_stamps() on, every fused routing launch of moe_forward (eager or captured) runs a
// stamped instantiation of the routing kernel (the measured kernel is untouched) that writes its layer's record on the
// device, overwritten at each launch: the slots are the layers' routers in the order of their first stamped launch on
// the device (the model's MoE layer order when the switch is set before the first step), at most 256. Same routing bits
// either way (GpuMoe.RouteStampsSameBits). DEEPINFER_ROUTE_STAMPS=1 sets it process-wide, read once; set_route_stamps
// overrides it (tests, v4_decode --route-stamps; switching on resolves the current device's records, so call it before
// a capture). Off, a routing launch costs one relaxed atomic load more.
bool route_stamps();
void set_route_stamps(bool on);
// The warm rerun of the stamped routing (v4_decode --route-stamps-warm; bench/gpu/NOTES.md "Session 35"): under
// route_stamps(), each stamped launch's last block routes its rows twice and the ticket -> routed phase times the
// second run, whose code is in the SM's instruction cache: the difference to the plain stamps is the first run's
// instruction fetch (the decode selects' was ~8.6 K cycles on V4.1, run 193). The same picks either way
// (GpuMoe.RouteStampsSameBits). DEEPINFER_ROUTE_STAMPS=warm sets both, read once; set_route_stamps_warm overrides it.
bool route_stamps_warm();
void set_route_stamps_warm(bool on);
// Which block of the fused decode routing routes (bench/gpu/NOTES.md "Sessions 35, 37"): one more block known from
// the launch (block 0; DEEPINFER_ROUTE_SELECTOR=block, the default since run 198), which rehearses the rows' routing
// before its PDL wait so that its first run of that code is off the critical path, or (`ticket`) the last block to
// take the ticket. Run 198: the routed phase's first run costs ~3.1 K cycles of instruction fetch (V4 stamps 6,864 ->
// 3,745 cycles warm); batch 1 -0.6 % on both models (V4 2.302-2.311 vs 2.307-2.329 ms, V4.1 1.932-1.945 vs
// 1.946-1.954), same token checksums. The same bits either way (GpuMoe.RouteSelectorSameBits). Stamped launches
// (route_stamps, moe_fused_route_phases) keep the ticket. Read once; set_route_selector overrides it (a CUDA graph
// keeps the form it was captured with).
bool route_selector();
void set_route_selector(bool on);
// Where the fused routing's top-k layers compute their sqrt-softplus scores: in the blocks that make the logits, one
// warp an expert beside its logit, so that the last block only picks (default; DEEPINFER_ROUTE_SCORES=blocks), or in
// the last block's warp per row, kPerLane (8 at V4, 12 at V4.1) a lane one after another (DEEPINFER_ROUTE_SCORES=tail,
// the form before session 26: ~4,500 of the routed phase's ~8,400 cycles in the step, run 148's route stamps). The
// same route_score on the same logit: the same bits (GpuMoe.RouteScoresInBlocksSameBits). Read once;
// set_route_scores_in_blocks overrides it (a CUDA graph keeps the form it was captured with).
bool route_scores_in_blocks();
void set_route_scores_in_blocks(bool on);
// How the fused routing's last block dispatches at most 32 pairs (batch 1-4 at top-8): on its warp 0, a lane a pair,
// from shuffles (default; DEEPINFER_ROUTE_DISPATCH=warp), or with the whole block's count and scan over every expert
// slot behind three barriers (DEEPINFER_ROUTE_DISPATCH=block, the form before session 27, ~4,500 cycles of the
// routing's last ~6,100 at batch 1, run 150's route stamps). More pairs always take the block's. The same integer
// arrays, so the same bits (GpuMoe.RouteDispatchWarpSameBits). Read once; set_route_dispatch_warp overrides it (a CUDA
// graph keeps the form it was captured with).
bool route_dispatch_warp();
void set_route_dispatch_warp(bool on);
// When the fused routing's logit warps load their gate rows (2 MB at V4, 3.75 MB at V4.1, from HBM): before the
// kernel's PDL wait, so that their latency overlaps the predecessor's tail (default; DEEPINFER_ROUTE_GATE=early: the
// gate is a weight, cuda/launch.h's contract), or after it beside x's (DEEPINFER_ROUTE_GATE=late, the form before
// session 27). The same loads and fma chain: the same bits (GpuMoe.RouteGateEarlySameBits). Read once;
// set_route_gate_early overrides it (a CUDA graph keeps its form).
bool route_gate_early();
void set_route_gate_early(bool on);
// The routed experts' decode w1|w3 launched with PDL behind the fused routing kernel: its blocks become resident once
// the routing's blocks pass their own wait (the routing lets dependents in right after it), so their ring setup,
// launch latency and first weight stages run under the routing; the producer and the consumers still wait for the
// routing's grid before reading the groups or x. The same bits either way. Where: from MoeGpu::routed_pdl_rows rows
// on (a per-model choice, measured per model), or as DEEPINFER_MOE_ROUTED_PDL says: `0` never, an integer n from 1
// to 16 from n rows on. bench/gpu/NOTES.md "Session 45": at batch 1 the routed blocks take the SMs the shared
// expert's side-stream launches need (V4 +1.2-2.2 %, V4.1 +1.7-3.1 %); at batch 8, where V4.1's routed w1|w3 runs
// ~190 us, it starts ~6 us sooner after the routing (V4.1 -1.9 % on an H200, -3 % on an H100), while V4's routing
// slows under the early weight flood (+0.5 %). Read once; set_moe_routed_pdl_rows overrides it (kRoutedPdlByModel:
// the weights' choice again; a CUDA graph keeps the form it was captured with).
constexpr int kRoutedPdlByModel = -1;
int moe_routed_pdl_rows();
void set_moe_routed_pdl_rows(int rows);
// One layer's record as the last stamped launch left it. Times in microseconds after entry_ns (the first block's
// return from the PDL wait, %globaltimer), as moe_fused_route_phases counts them.
struct RouteStampRecord {
  int slot = 0;
  uint64_t launches = 0;  // stamped launches of this layer so far (0: the slot's record was never written)
  int grid = 0;           // blocks of the launch
  int sm_block0 = -1, sm_first_done = -1, sm_last = -1;  // %smid of block 0, the first block to arrive, the last
  uint64_t entry_ns = 0;
  double start_first = 0;   // the earliest first instruction of a block (before its PDL wait: <= 0)
  double start_latest = 0;  // the latest first instruction (a block the SMs took late)
  double entry_latest = 0;  // the latest return from the wait
  double last_start = 0, last_entry = 0;  // the last block's own first instruction and wait return
  std::vector<double> phases;  // moe_fused_route_phases' 10 values: computed .. end (us), then the 4 cycle counts
  // Top-k layers (empty on hash layers): the last block's ticket -> routed cycles (phases[6]) split at route_row_topk's
  // marks: logits and bias loaded (after the ticket's fence), scores, picks, then the stores of ids / weights and the
  // block barrier.
  std::vector<double> routed_split;
};
// The current device's records, slot order; call with the stamped launches complete (e.g. the stream synchronized:
// it copies on the legacy stream).
std::vector<RouteStampRecord> moe_route_stamps_read();

}  // namespace deepinfer::cuda
