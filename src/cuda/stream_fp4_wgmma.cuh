// The MXFP4 decode stream on wgmma (bench/gpu/NOTES.md "MXFP4 decode stream on wgmma (session 8, H69)"):
// stream_gemm_kernel's MXFP4 product (decode v8: the packed experts bulk-copied through a shared-memory ring by one
// producer thread, groups of <= 8 token rows) with the consumer arithmetic on Hopper's FP8 tensor path.
//
// Why: the v8 MXFP4 consumer is issue-bound: ~49.5 warp instructions per 32-wide K step and warp (512 weights) in the
// kBlk128 loop (NOTES "Decode stream loop for 128-blocks"), most of them the e2m1 -> f16 widening, 2 HMMA and the
// per-step scale decode; ncu of the batch-1 step: 13 M warp instructions per ~50 MB of w1|w3, DRAM 27 %. Hopper has
// no FP8 mma.sync of its own (emulated, NOTES "The FP8 mma.sync idea: rejected"), so the FP8 tensor path is
// wgmma: register-A m64n8k32 e4m3, the weights widened to e4m3 in registers (cuda/fp4_e4m3.h: 7 integer operations
// per 8 values, exact), the tokens as B (8 slots x 32 e4m3 per K step, shared memory, no widening at all).
//
// Weights: the decode pack as it is (kernels.h "Fragment-ordered MXFP4 experts", no new copy). A work item is a
// 64-row tile = 4 consecutive packed 16-row tiles (one wgmma M); warp w of the 8 consumer warps takes tile w % 4 of
// the item in warpgroup w / 4. Stage = 32 K steps of all 4 tiles (4 x 8 KB of nibbles + 4 x 512 B of scale groups:
// 8 bulk copies, each tile's K range contiguous in the pack, produce_item), two halves of 16 steps; in each half
// warpgroup 0 takes steps 0-7, warpgroup 1 steps 8-15. K order: the pack's physical columns and the wgmma's
// logical K are matched by the per-32 de-interleave of cuda/fp4_e4m3.h (even columns -> logical 0-15, odd -> 16-31);
// the activations are staged in that order (stage_b), the weights are not moved.
//
// Scales: the e8m0 weight scale is per (row, 32-wide block), so each K step is its own wgmma into its own
// accumulator set (D overwritten: scale-d false), 4 in flight per batch, two batches per stage (the second's
// widening overlaps the first's tensor work); then per element acc += (d x w_scale[row]) x x_scale[token]: with
// 128-wide activation blocks (V4) the 4 steps of a block are summed with their weight scales first and the block's
// activation scale applied once, with 32-wide ones (V4.1) every step gets (w_scale x x_scale). Every scale is a power
// of two, so only the additions round.
//
// Numerics: not bitwise the f16 path (the FP8 tensor path sums a 32-wide K block in its own order and precision,
// the blocks are then added in fp32 here); tests/gpu/test_stream_fp4_wgmma.cpp bounds the difference. Deterministic
// and batch-invariant: a token's column in the wgmma depends on that token only, warpgroup 0's partial + warpgroup
// 1's in that order, each over its steps in K order, and which block takes an item changes no bit.
//
// Switch: on unless DEEPINFER_STREAM_FP4=f16 (read once; "f16": stream_gemm_kernel's f16 consumer, bitwise decode
// v8). The default since session 9: batch 1 / 8 at 4K on 16 V4-Flash layers 3.675 -> 3.595 / 8.553 -> 7.264 ms (run
// 55, same-call A/B). launch_stream (cuda/stream_gemm.cuh) tries this first for MXFP4 and falls back to
// stream_gemm_kernel where it declines (switch off, more than 8 rows in a group, activation block not 32 / 128,
// shared memory, batch-invariant mode).
#pragma once

#include <algorithm>
#include <limits>

#include "core/env_switch.h"
#include "cuda/fp4_e4m3.h"
#include "cuda/numerics_mode.h"
#include "cuda/stream_fp4_wgmma.h"
#include "cuda/stream_gemm.cuh"
#include "cuda/wgmma.cuh"

namespace deepinfer::cuda::stream_gemm {

namespace fp4wg {

constexpr int kItemTiles = 4;                                        // packed 16-row tiles per item (wgmma M = 64)
// A stage is two halves of 16 K steps; in each half warpgroup 0 takes steps 0-7 and warpgroup 1 steps 8-15 (one
// packed scale group each). Two halves a stage, not one (session 21, run 125's stream_probe): a stage's hand-off from
// the producer to the consumers costs ~600 cycles whatever its size, so 34 KB stages halve that cost per byte; the
// warpgroups' steps, and so the bits, are those of 17 KB stages.
constexpr int kHalfSteps = 16;                                       // 32-wide K steps per half stage
constexpr int kStageHalves = 2;
constexpr int kStageSteps = kHalfSteps * kStageHalves;               // 32-wide K steps per stage
constexpr int kWgSteps = kHalfSteps / 2;                             // per consumer warpgroup and half: one scale group
constexpr int kTileBytes = kStageSteps * 256;                        // one tile's nibbles in a stage (8 KB)
constexpr int kScaleOffset = kItemTiles * kTileBytes;                // the 4 tiles' scale groups after the nibbles
constexpr int kTileScaleBytes = kStageSteps / 8 * 128;               // one tile's 4 scale groups
constexpr int kStageBytes = kScaleOffset + kItemTiles * kTileScaleBytes;  // 34 KB
constexpr int kStepB = kMaxRows * 32;                                // one K step of B: 8 token slots x 32 codes
static_assert(kWgSteps == 8, "a warpgroup's share of a half stage is one packed scale group");

// The switch: on unless DEEPINFER_STREAM_FP4=f16 (read once); set_fp4_wgmma overrides it (tests, bench).
inline EnvSwitch<bool>& on_switch() {
  static EnvSwitch<bool> on{"DEEPINFER_STREAM_FP4", [](const char* v) { return !env_equals(v, "f16"); }};
  return on;
}

// Which blocks take the extra items when the items do not divide evenly over the blocks (block_items): the weights'
// own choice (Fp4Experts::front_items, per model: V4.1 front, V4 even; bench/gpu/NOTES.md "Session 29", run 159), or
// forced for every launch: DEEPINFER_FP4_ITEMS=even (spread over the grid, the form since session 8) or front (the
// first items % blocks blocks). Why front may pay (NOTES "Session 28", run 156): V4.1's routed w1|w3 at batch 1 has
// 432 items on 132 blocks, so 36 blocks take a fourth (~5 us), while the median block starts ~6 us after the first
// (PDL's early launch places the lowest blocks first, on the SMs free at the time). Which block takes an item changes
// no bit. Read once; set_stream_fp4_items (cuda/stream_fp4_wgmma.h) overrides it (tests, bench).
inline EnvSwitch<Fp4Items>& items_switch() {
  static EnvSwitch<Fp4Items> items{"DEEPINFER_FP4_ITEMS", [](const char* v) {
    if (env_equals(v, "even")) return Fp4Items::Even;
    if (env_equals(v, "front")) return Fp4Items::Front;
    return Fp4Items::Weights;
  }};
  return items;
}
// Whether a launch of weights whose own choice is `weights_front` puts the leftover items on the first blocks.
inline bool front_items(bool weights_front) {
  const Fp4Items forced = items_switch().get();
  return forced == Fp4Items::Weights ? weights_front : forced == Fp4Items::Front;
}

// The consume loop's form (consume_item): the halves overlapped (the default since session 45: each batch of 4
// steps folded after the next batch is issued, so one wgmma group is in flight while the next batch widens;
// bench/gpu/NOTES.md "Session 43", "Session 45": H100 batch 1 V4.1 -0.6 %, V4 -0.1 % in run 225; H200 batch 1 flat,
// batch 8 -0.5 % in run 227), or half by half (DEEPINFER_FP4_HALF_OVERLAP=0). The same operations in the same order
// on the accumulators, so the same bits. Read once; set_stream_fp4_half_overlap (cuda/stream_fp4_wgmma.h) overrides
// it (tests, bench; a CUDA graph keeps the kernel it was captured with).
inline EnvSwitch<bool>& half_overlap_switch() {
  static EnvSwitch<bool> on{"DEEPINFER_FP4_HALF_OVERLAP", [](const char* v) { return !env_equals(v, "0"); }};
  return on;
}

// Block b's contiguous share [i0, i1) of `items` over `blocks` blocks: b x items / blocks on (the remainder spread),
// or with `front` q = items / blocks each and one more for the first items % blocks blocks.
__host__ __device__ inline void block_items(int64_t items, int b, int blocks, bool front, int64_t& i0, int64_t& i1) {
  if (front) {
    const int64_t q = items / blocks, r = items % blocks;
    i0 = b * q + (b < r ? b : r);
    i1 = i0 + q + (b < r ? 1 : 0);
  } else {
    i0 = items * b / blocks;
    i1 = items * (b + 1) / blocks;
  }
}

// K steps rounded up to whole stages: B and the activation scales are staged that far, the padding zero, so that a
// short last stage (k % 512 != 0) reads zero activations past k (consume_item's phantom batches).
__host__ __device__ inline int padded_steps(int k) { return (k / 32 + kStageSteps - 1) / kStageSteps * kStageSteps; }

// Phase stamps (a diagnostic: roofline --fp4-phases, bench/gpu/NOTES.md "Session 21"): kStampSlots 64-bit values per
// block, written only by the stamped instantiation (fp4_wgmma_kernel<.., kStamps = true>), so the default kernel's
// code does not change. Cycles are clock64() minus the writer's own value at the block's start (consumer thread 0 and
// the producer thread start together, after the block's one __syncthreads); *_ns are %globaltimer.
enum StampSlot : int {
  kStStartNs,          // the block's start
  kStConsWaited,       // consumers past their pdl_wait
  kStFirstStaged,      // the first group's B staged (stage_b done)
  kStFirstData,        // the first stage's full barrier passed
  kStConsEnd,          // the last item stored
  kStFullWaitCycles,   // summed over the full-barrier waits of consumer warp 0
  kStStages,           // stages consumed by consumer warp 0
  kStStageBCycles,     // summed over the block's stage_b calls
  kStProdWaited,       // the producer past its pdl_wait
  kStProdEnd,          // the producer's last copy issued
  kStEmptyWaitCycles,  // summed over the producer's empty-barrier waits
  kStEndNs,            // the last item stored (globaltimer)
  kStItems,            // items with rows this block consumed
  // Inside the block's first stage_b (consumer thread 0's view; bench/gpu/NOTES.md "Session 32"): its entry (the
  // group's ids read), the unused slots' zero codes stored, the rows' codes stored (their loads returned), the rows'
  // scales stored (before the proxy fence and the consumer barrier, which kStFirstStaged follows).
  kStBEntry,
  kStBZeroed,
  kStBCodes,
  kStBScales,
  kStampSlots = 20
};
// Where the next launch_fp4_wgmma writes its stamps ([blocks][kStampSlots]); null: the default kernel.
inline unsigned long long*& stamp_target() {
  static unsigned long long* target = nullptr;
  return target;
}
// The stamps inside the model's steps (bench/gpu/NOTES.md "The MXFP4 stream's stamps inside the step"): with this
// switch on, every launch_fp4_wgmma without a stamp_target (eager or captured) runs the stamped instantiation on its
// own record, keyed by the launch's packed weights (pa.wp: a layer's w1|w3 and w2 each have their own), overwritten
// by each launch (a graph replay leaves the last replay's stamps). DEEPINFER_FP4_STEP_STAMPS=1 sets it process-wide,
// read once; set_stream_fp4_step_stamps (cuda/stream_fp4_wgmma.h) overrides it and allocates the device's records,
// so call it before a capture. Off (the default), a launch costs one relaxed atomic load more.
inline EnvSwitch<bool>& step_stamps_switch() {
  static EnvSwitch<bool> on{"DEEPINFER_FP4_STEP_STAMPS", [](const char* v) { return env_equals(v, "1"); }};
  return on;
}
// The record of the launch with packed weights `key`, `blocks` blocks of n x k (cuda/stream_fp4_wgmma.cu: a
// cuda/stamp_records.h record per key and device, the launch's grid and shape kept for the reader); null (the launch
// goes unstamped) once the slots are taken, where the grid exceeds a record, or where the device has no records yet
// and `stream` is capturing.
unsigned long long* step_record(const void* key, int blocks, int n, int k, cudaStream_t stream);
// launch_fp4_wgmma's stamp pointer: the standalone target (roofline --fp4-phases) where one is set, else with the
// step stamps on the launch's record, else null (the default kernel).
inline unsigned long long* stamps_for(const void* key, int blocks, int n, int k, cudaStream_t stream) {
  if (unsigned long long* target = stamp_target()) return target;
  return step_stamps_switch().get() ? step_record(key, blocks, n, k, stream) : nullptr;
}

// Shared-memory carve-up (host and device): the ring, B (padded_steps x 256 bytes: 8 slots whatever the rows, the
// wgmma's N), the activation scales (times 2^6, fp4_e4m3.h; padded like B; xs_index's order), warpgroup 1's
// partials (two buffers of 4 warps x 128 floats), the ring's barriers.
struct Layout {
  int x_blocks = 0;  // padded_steps x 32 / act_block
  size_t ring = 0, act = 0, xs = 0, partial = 0, bars = 0, total = 0;
  __host__ __device__ Layout(int stages, int k, int xb_log2) {
    x_blocks = (padded_steps(k) * 32) >> xb_log2;
    ring = 0;
    act = ring + size_t(stages) * kStageBytes;
    xs = act + size_t(padded_steps(k)) * kStepB;
    partial = xs + size_t(x_blocks) * kMaxRows * 4;
    bars = partial + 2 * 4 * 128 * 4;
    total = bars + 2 * size_t(stages) * 8;
  }
};

// The activation block's log2 of an instantiation: launch_fp4_wgmma runs kAct128 exactly where
// a.act_block_log2 == 7, and fp4_wgmma_stages declines every block but 128 and 32. As a constant, a step's scale
// address is an immediate offset from one base per stage, not shifts by the run-time log2 at every fold (~6
// instructions a fold, 24 a stage; bench/gpu/NOTES.md "Session 49").
template <bool kAct128>
constexpr int kActBlockLog2 = kAct128 ? 7 : 5;

// Where the staged activation scale of (activation block `block`, token slot `slot`) lies in Layout::xs, for the
// instantiation's activation block (kActBlockLog2: 128 or 32 columns): [batch][slot][the batch's blocks], a batch
// being the 4 K steps (128 columns) one fold4 reads. At V4 (block 128) that is [block][slot], the layout before; at
// V4.1 (block 32) a slot's 4 blocks of a batch are contiguous, so fold4 reads them with one LDS.128 instead of 4
// LDS.32 (kOne; 2 LDS.128 for 4 LDS.64 with two slots): 12 fewer shared loads a stage, of its 26 (bench/gpu/NOTES.md
// "Session 49": the batch-1 consume loop is instruction-bound). Every value stays in its own word: the same bits.
template <bool kAct128>
__host__ __device__ constexpr int xs_index(int block, int slot) {
  constexpr int per_batch_log2 = 7 - kActBlockLog2<kAct128>;  // log2 of the blocks of a batch: 0 (V4) or 2 (V4.1)
  return (((block >> per_batch_log2) * kMaxRows + slot) << per_batch_log2) + (block & ((1 << per_batch_log2) - 1));
}

// Producer (one thread): item `item` (tiles 4 item .. 4 item + 3, those < ceil(n / 16)) of expert e, stage by stage:
// each present tile's 16 K steps of nibbles (4 KB, fewer at the end of k) and their 2 scale groups.
template <bool kStamps = false>
__device__ __forceinline__ void produce_item(const packed::Args& pa, int item, int64_t e, Ring& R,
                                             long long* wait_cycles = nullptr) {
  const int steps = pa.base.k / 32, tiles = (pa.base.n + 15) / 16, sgroups = (steps + 7) / 8;
  const int t0 = item * kItemTiles, nt = min(kItemTiles, tiles - t0);
  const int chunks = (steps + kStageSteps - 1) / kStageSteps;
  const uint8_t* wsrc = pa.wp + (e * tiles + t0) * int64_t(steps) * 256;
  const uint8_t* ssrc = pa.sp + (e * tiles + t0) * int64_t(sgroups) * 128;
  for (int c = 0; c < chunks; ++c) {
    const int s0 = c * kStageSteps, ns = min(kStageSteps, steps - s0);
    const uint32_t wbytes = uint32_t(ns * 256), sbytes = uint32_t((ns + 7) / 8 * 128);
    const uint32_t full = R.full + 8 * R.stage;
    mbar_wait_timed<kStamps>(R.empty + 8 * R.stage, R.phase ^ 1u, wait_cycles);
    mbar_arrive_expect_tx(full, uint32_t(nt) * (wbytes + sbytes));
    const uint32_t dst = R.base + uint32_t(R.stage * R.stride);
    for (int t = 0; t < nt; ++t) {
      bulk_g2s_weights(dst + uint32_t(t * kTileBytes), wsrc + (int64_t(t) * steps + s0) * 256, wbytes, full,
                       pa.weights_evict_first);
      bulk_g2s_weights(dst + uint32_t(kScaleOffset + t * kTileScaleBytes),
                       ssrc + (int64_t(t) * sgroups + s0 / 8) * 128, sbytes, full, pa.weights_evict_first);
    }
    R.advance();
  }
}

// 8 physical columns 8u .. 8u + 7 of token slot t (e4m3 bytes, column order) into B: step u / 4, thread column
// group c = u % 4; the even columns to logical K 4c .. 4c + 3 (core matrix 0), the odd ones to 16 + 4c .. (core
// matrix 1, 128 bytes on): fp4_e4m3.h's K order.
__device__ __forceinline__ void put_b(uint32_t act_s, int t, int u, uint2 q8) {
  const uint32_t even = __byte_perm(q8.x, q8.y, fp4e4::kEvenBytes);
  const uint32_t odd = __byte_perm(q8.x, q8.y, fp4e4::kOddBytes);
  const uint32_t addr = act_s + uint32_t((u >> 2) * kStepB + t * 16 + (u & 3) * 4);
  asm volatile("st.shared.u32 [%0], %1;\nst.shared.u32 [%2], %3;\n" ::"r"(addr), "r"(even), "r"(addr + 128u),
               "r"(odd)
               : "memory");
}

// Consumers (all 256 threads): group rows [rb, rb + rows) into B (put_b) and their scales times 2^6 into
// xs_s (xs_index); slots >= rows and the padding past k (Layout) get zero codes and zero scales. From q (through
// a.row_index) or, with sw.h, from the SwiGLU prologue: swiglu_quant_units (cuda/stream_gemm.cuh), stage_rows'
// prologue too, so the same values and bytes; only the destination differs. Ends with the proxy fence (B is read by
// the tensor cores' async proxy) and a consumer barrier; the caller guarantees every wgmma of the previous group has
// completed.
// kAct128: the instantiation's activation block (kActBlockLog2, a.act_block_log2's value): xs_index's layout.
// kStamps: consumer thread 0 marks its phases (kStBEntry .. kStBScales) in the block's first call.
template <bool kAct128, bool kStamps = false>
__device__ __forceinline__ void stage_b(const skinny::Args& a, const SwigluInput& sw, uint32_t act_s, float* xs_s,
                                        int rb, int rows, int warp, int lane, unsigned long long* stamps = nullptr,
                                        long long t_start = 0) {
  const int ctid = threadIdx.x;
  const bool marks = kStamps && ctid == 0 && stamps[kStBEntry] == 0;
  auto mark = [&](int slot) {
    if constexpr (kStamps)
      if (marks) stamps[slot] = (unsigned long long)(clock64() - t_start);
  };
  mark(kStBEntry);
  const int K = a.k, xb = a.act_block_log2, x_blocks = K >> xb, units = K / 8;
  const int pad_blocks = (padded_steps(K) * 32) >> xb;
  constexpr float kUnscale = float(1 << fp4e4::kUnscaleLog2);
  // From q, the scales' first pass (values 0 .. 255 of the group's rows x x_blocks: every scale of a group at V4's
  // k = 4096 / 128, of a row at V4.1's k / 32) is loaded here, before the codes, and stored after them with the later
  // passes (those loaded then stored, load_then_put). Staged after the codes, the scales' loads came after the codes'
  // stores (volatile shared-memory asm with a memory clobber, which no load moves across): one more dependent L2
  // round trip, behind an L1 hit of the row index, on every group's path to its first stage (SASS of
  // fp4_wgmma_kernel<float, *, false, true>, sm_90a: the row offsets, the row index, the codes, then the row index
  // and the scales, four dependent round trips at batch 1); now the scale is in flight with the codes, three. The
  // same values to the same words: the same bits.
  const int n_scales = rows * x_blocks;
  auto scale_load = [&](int i) {
    return __ldg(a.xs + skinny::act_row(a, rb + i / x_blocks) * x_blocks + i % x_blocks);
  };
  auto scale_put = [&](int i, float s) { xs_s[xs_index<kAct128>(i % x_blocks, i / x_blocks)] = s * kUnscale; };
  const float s_first = !sw.h && ctid < n_scales ? scale_load(ctid) : 0.0f;
  // The head of the codes' chain into L1 before the zeroing below (at batch 1, 15 of 16 slots: 0.4 us of w2's block
  // and 0.75 us of w1|w3's before the first code load issued; run 285's `--fp4-stamps`, H100, b_zero - b_ent): the
  // SwiGLU input's lines of the thread's first unit, or the rows' index words. Prefetches hold no register: issuing
  // the loads themselves ahead of the zeroing (a hook in the stagers) left fp4_wgmma_kernel at its 168-register cap
  // with 16-24 bytes of stack (session 64).
  if (sw.h) {
    if (rows > 0 && ctid < units) {
      const float* g = sw.h + int64_t(rb) * 2 * K + 8 * ctid;
      prefetch_l1(g);
      prefetch_l1(g + K);
    }
  } else if (a.row_index && ctid < rows) {
    prefetch_l1(a.row_index + rb + ctid);
  }
  // Zero codes in the unused slots, slot-fastest (a warp's 32 stores cover 4 column groups x 8 slots of one step,
  // 32 different banks); the rows' codes with their loads first (stage_q_units).
  for (int v = ctid; v < kMaxRows * units; v += kConsumerThreads) {
    const int t = v & (kMaxRows - 1), u = v / kMaxRows;
    if (t >= rows) put_b(act_s, t, u, make_uint2(0u, 0u));
  }
  mark(kStBZeroed);
  if (!sw.h) stage_q_units<8>(a, rb, rows, 0, units, [&](int t, int u, uint2 q8) { put_b(act_s, t, u, q8); });
  if (sw.h)
    swiglu_quant_units(
        a, sw, rb, rows, 0, units, warp, lane, [&](int t, int u, uint2 q8) { put_b(act_s, t, u, q8); },
        [&](int t, int u, float scale) { xs_s[xs_index<kAct128>((8 * u) >> xb, t)] = scale * kUnscale; });
  mark(kStBCodes);
  for (int v = ctid; v < (padded_steps(K) - K / 32) * kStepB / 4; v += kConsumerThreads)
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(act_s + uint32_t(K / 32 * kStepB + 4 * v)), "r"(0u) : "memory");
  for (int idx = ctid; idx < pad_blocks * kMaxRows; idx += kConsumerThreads) {
    // (slot as idx minus the blocks' words, not idx % kMaxRows: at V4 xs_index(block, slot) then folds back to idx)
    const int block = idx / kMaxRows, slot = idx - block * kMaxRows;
    if (slot >= rows || block >= x_blocks) xs_s[xs_index<kAct128>(block, slot)] = 0.0f;
  }
  if (!sw.h) {  // (the prologue has stored the rows' scales)
    if (ctid < n_scales) scale_put(ctid, s_first);
    if (n_scales > kConsumerThreads)
      load_then_put<8>(
          n_scales - kConsumerThreads, [&](int i) { return scale_load(kConsumerThreads + i); },
          [&](int i, float s) { scale_put(kConsumerThreads + i, s); });
  }
  mark(kStBScales);
  dev::fence_proxy_async_smem();
  consumer_sync();
}

// The e8m0 scale in byte i of `word` as a float, 2^(b - 127), in two operations (b = 0 gives 0 instead of 2^-127:
// a weight block scaled by 2^-127 adds nothing an fp32 sum of other blocks can hold; b = 255 gives +inf as
// e8m0_to_float does). The 2^6 of the widening is in the activation scales (stage_b).
template <int i>
__device__ __forceinline__ float e8m0_byte(uint32_t word) {
  return __uint_as_float((i < 3 ? word << (23 - 8 * i) : word >> 1) & 0x7F800000u);
}

// 4 steps' widened fragments: step j's row-g word in q[j / 2].x (.z for odd j), row g + 8's in .y (.w); a[j] in the
// register-A order (a0 / a1: even nibbles of rows g / g + 8, a2 / a3: odd nibbles).
__device__ __forceinline__ void widen4(const uint4& q0, const uint4& q1, uint32_t (&a)[4][4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint4& q = j < 2 ? q0 : q1;
    fp4e4::widen(j % 2 ? q.z : q.x, a[j][0], a[j][2]);
    fp4e4::widen(j % 2 ? q.w : q.y, a[j][1], a[j][3]);
  }
}

// 4 wgmmas (steps s .. s + 3: B 256 bytes apart, i.e. +16 in the descriptor's start field) into 4 accumulator
// sets, one commit group; desc_lo / desc_hi: the descriptor of step s.
__device__ __forceinline__ void issue4(float (&d)[4][4], const uint32_t (&a)[4][4], uint32_t desc_lo,
                                       uint32_t desc_hi) {
  wgmma::fence();
#pragma unroll
  for (int j = 0; j < 4; ++j)
    wgmma::m64n8k32_e4m3_rs_first(d[j], a[j], uint64_t(desc_hi) << 32 | (desc_lo + uint32_t(16 * j)));
  wgmma::commit();
}

// After the wait that covers issue4's group: the accumulators are read only from here on, and the A registers
// (which the tensor core reads asynchronously) are kept alive until here.
__device__ __forceinline__ void settle(float (&d)[4][4], uint32_t (&a)[4][4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    wgmma::fence_regs_n(d[j]);
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[j][i])::"memory");
  }
}

// One batch of 4 steps into acc. sg / sh: the steps' e8m0 bytes of rows g / g + 8 (byte j = step j); xsb: this
// thread's token slot 2c's activation scales of the batch (xs_of_step), slot 2c + 1's next (xs_index: one float on
// with kAct128, the batch's one block; 4 floats on with 32-wide blocks, step j's block j of each float4). kAct128:
// the 4 steps are one activation block. kOne: only token slot 0 is stored (acc[1], acc[3] stay untouched), the
// slot-0 operations are those of the multi-row form, so the same bits.
template <bool kAct128, bool kOne>
__device__ __forceinline__ void fold4(float (&acc)[4], const float (&d)[4][4], uint32_t sg, uint32_t sh,
                                      const float* xsb) {
  const float wg[4] = {e8m0_byte<0>(sg), e8m0_byte<1>(sg), e8m0_byte<2>(sg), e8m0_byte<3>(sg)};
  const float wh[4] = {e8m0_byte<0>(sh), e8m0_byte<1>(sh), e8m0_byte<2>(sh), e8m0_byte<3>(sh)};
  if constexpr (kAct128) {
    float b[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (kOne && (i & 1)) continue;
      const float* w = i < 2 ? wg : wh;
      b[i] = __fmul_rn(d[0][i], w[0]);
#pragma unroll
      for (int j = 1; j < 4; ++j) b[i] = __fmaf_rn(d[j][i], w[j], b[i]);
    }
    const float2 sx = *reinterpret_cast<const float2*>(xsb);
    acc[0] = __fmaf_rn(b[0], sx.x, acc[0]);
    acc[2] = __fmaf_rn(b[2], sx.x, acc[2]);
    if constexpr (!kOne) {
      acc[1] = __fmaf_rn(b[1], sx.y, acc[1]);
      acc[3] = __fmaf_rn(b[3], sx.y, acc[3]);
    }
  } else {
    const float4 s0 = *reinterpret_cast<const float4*>(xsb);
    const float sx0[4] = {s0.x, s0.y, s0.z, s0.w};
    float sx1[4] = {};
    if constexpr (!kOne) {
      const float4 s1 = *reinterpret_cast<const float4*>(xsb + xs_index<kAct128>(0, 1));
      sx1[0] = s1.x, sx1[1] = s1.y, sx1[2] = s1.z, sx1[3] = s1.w;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      acc[0] = __fmaf_rn(d[j][0], __fmul_rn(wg[j], sx0[j]), acc[0]);
      acc[2] = __fmaf_rn(d[j][2], __fmul_rn(wh[j], sx0[j]), acc[2]);
      if constexpr (!kOne) {
        acc[1] = __fmaf_rn(d[j][1], __fmul_rn(wg[j], sx1[j]), acc[1]);
        acc[3] = __fmaf_rn(d[j][3], __fmul_rn(wh[j], sx1[j]), acc[3]);
      }
    }
  }
}

// The activation scales of the batch whose first step is `step` counted from `xsb` (the scales of a batch's first
// step): step x 32 / 128 batches of xs_index's words on. Split sums stay exact: every step passed is a batch's
// first, a multiple of 4 steps (128 columns): s0 (a multiple of 32 steps), gs (of 8) and the stage's batch offsets
// (0, 4, 16, 20 steps).
template <bool kAct128>
__device__ __forceinline__ const float* xs_of_step(const float* xsb, int step) {
  constexpr int batch_words = xs_index<kAct128>((4 * 32) >> kActBlockLog2<kAct128>, 0);  // step 4's block: a batch on
  return xsb + ((step * 32) >> 7) * batch_words;
}

// Phantom batches (consume_item) and a tile past n get zero weight scales: a batch of half h's share (4 steps from
// gs, then gs + 4) is in where it starts before the stage's ns steps. A live tile in a whole stage has every batch
// in (the common case: all but a k's last stage where k % 1024 != 0), so the selects are skipped there (a branch the
// same for the warp; ~14 instructions a stage, bench/gpu/NOTES.md "Session 49"). The same words: the same bits.
__device__ __forceinline__ void mask_phantom_scales(uint4 (&sc)[kStageHalves], bool live, int gs, int ns) {
  if (live && ns == kStageSteps) return;
#pragma unroll
  for (int h = 0; h < kStageHalves; ++h) {
    const bool first_in = live && gs < ns - h * kHalfSteps, second_in = live && gs + 4 < ns - h * kHalfSteps;
    sc[h].x = first_in ? sc[h].x : 0u;
    sc[h].z = first_in ? sc[h].z : 0u;
    sc[h].y = second_in ? sc[h].y : 0u;
    sc[h].w = second_in ? sc[h].w : 0u;
  }
}

// One stage of consume_item with its halves overlapped (kOverlap): the stage's 4 batches of 4 steps (half h, batch b:
// steps s0 + 16 h + 4 b ..) with one wgmma group in flight while the next batch widens: each batch is folded after
// the next one is issued, the last after the final wait. The half-by-half loop waits for its second group before it
// widens the next half; here that widening runs under the group. The accumulators get the same folds in the same
// order (batch 0, 1, 2, 3), so the same bits. The scale words are masked as the half loop masks them (phantom
// batches: zero scales); the second half is skipped where it lies wholly past k (block-uniform: s0 and steps are the
// block's). desc_lo / desc_hi: the descriptor of step s0 + gs (consume_item's desc_st).
template <bool kAct128, bool kOne>
__device__ __forceinline__ void consume_stage_overlapped(const uint4 (&r)[kStageHalves][4], uint4 (&sc)[kStageHalves],
                                                         float (&acc)[4], bool live, int gs, int s0, int ns, int steps,
                                                         uint32_t desc_lo, uint32_t desc_hi, const float* xsw) {
  mask_phantom_scales(sc, live, gs, ns);
  const float* xss = xs_of_step<kAct128>(xsw, s0);
  auto xs_at = [&](int step) { return xs_of_step<kAct128>(xss, step - s0); };
  uint32_t a0[4][4], a1[4][4];
  float d0[4][4], d1[4][4];
  widen4(r[0][0], r[0][1], a0);
  issue4(d0, a0, desc_lo, desc_hi);
  widen4(r[0][2], r[0][3], a1);
  issue4(d1, a1, desc_lo + uint32_t(16 * 4), desc_hi);
  wgmma::wait_group<1>();
  settle(d0, a0);
  fold4<kAct128, kOne>(acc, d0, sc[0].x, sc[0].z, xs_at(s0));
  if (s0 + kHalfSteps >= steps) {  // no second half
    wgmma::wait_group<0>();
    settle(d1, a1);
    fold4<kAct128, kOne>(acc, d1, sc[0].y, sc[0].w, xs_at(s0 + 4));
    return;
  }
  const int hs1 = s0 + kHalfSteps;
  widen4(r[1][0], r[1][1], a0);
  issue4(d0, a0, desc_lo + uint32_t(16 * kHalfSteps), desc_hi);
  wgmma::wait_group<1>();
  settle(d1, a1);
  fold4<kAct128, kOne>(acc, d1, sc[0].y, sc[0].w, xs_at(s0 + 4));
  widen4(r[1][2], r[1][3], a1);
  issue4(d1, a1, desc_lo + uint32_t(16 * (kHalfSteps + 4)), desc_hi);
  wgmma::wait_group<1>();
  settle(d0, a0);
  fold4<kAct128, kOne>(acc, d0, sc[1].x, sc[1].z, xs_at(hs1));
  wgmma::wait_group<0>();
  settle(d1, a1);
  fold4<kAct128, kOne>(acc, d1, sc[1].y, sc[1].w, xs_at(hs1 + 4));
}

// Consumers: item `item` over all of k; acc = this warp's 16 rows x 8 slots over its warpgroup's steps (the m16n8
// fragment: rows g, g + 8 x slots 2c, 2c + 1). Every warp of a warpgroup runs the same steps (the wgmmas are
// warpgroup-wide); a warp whose tile is past n feeds zero codes.
// kStamps: the full-barrier waits are timed into stamps (consumer thread 0's; kStFullWaitCycles, kStStages,
// kStFirstData relative to t_start). kOverlap: the stage's halves overlapped (half_overlap_switch, below).
template <bool kAct128, bool kOne, bool kStamps = false, bool kOverlap = false>
__device__ __forceinline__ void consume_item(const skinny::Args& a, int item, uint32_t act_s, const float* xs_s,
                                             Ring& R, int warp, int lane, float (&acc)[4],
                                             unsigned long long* stamps = nullptr, long long t_start = 0) {
  const int steps = a.k / 32, chunks = (steps + kStageSteps - 1) / kStageSteps;
  const int wg = warp / 4, wt = warp % 4, g = lane / 4, c = lane % 4;
  const bool live = item * kItemTiles + wt < (a.n + 15) / 16;
  const float* xsl = xs_s + xs_index<kAct128>(0, 2 * c);  // token slot 2c's scales
  // B of step s at act_s + 256 s; the odd-column core matrix 128 bytes after the even one (LBO); the one 8-slot
  // group along N makes the SBO unused (set to the same 128, so either reading of the two fields fits). Only the
  // start address field (bits 0-13 of the low word) moves, and never past its 14 bits (shared memory < 256 KB), so
  // the steps' descriptors are 32-bit additions to the low word.
  // The descriptor of each stage's first step (desc_64: step s0 + gs) is carried from stage to stage, + 32 steps x
  // kStepB bytes (+512 in the start field) a stage: every B address lies below Layout::total < 256 KB, so the field
  // holds it and no carry leaves it, and the 64-bit addition is the low word's. Carried, not rebuilt from ch, and
  // with the warp index warp-uniform (the kernel's shuffle), ptxas keeps it in a uniform register and builds each
  // wgmma's descriptor with one uniform add (UIADD3) at a constant offset; built per stage in vector registers, each
  // of the 16 wgmmas cost a vector add, a move of the high word and two R2UR (~63 instructions a stage, now ~35:
  // bench/gpu/NOTES.md "Session 49"). 64 bits, not the low word alone: with a constant high word ptxas re-moved it
  // before every wgmma (up to 6 instructions a stage more). The same descriptors: the same bits.
  const int gs = wg * kWgSteps;
  const uint64_t desc0 = wgmma::smem_desc_noswizzle(act_s + uint32_t(gs * kStepB), 128, 128);  // step gs
  const float* xsw = xs_of_step<kAct128>(xsl, gs);  // the scales of step gs's block
  // This lane's fragments in a stage: tile wt's step pairs gs / 2 .. gs / 2 + 3, and its scale group entry.
  const uint32_t w_off = uint32_t(wt * kTileBytes + gs * 256 + lane * 16);
  const uint32_t s_off = uint32_t(kScaleOffset + wt * kTileScaleBytes + wg * 128 + g * 16);
  acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
  uint64_t desc_64 = desc0;
  for (int ch = 0; ch < chunks; ++ch, desc_64 += uint64_t((kStageSteps * kStepB) >> 4)) {
    const int s0 = ch * kStageSteps, ns = min(kStageSteps, steps - s0);
    const uint32_t desc_st = uint32_t(desc_64), desc_hi = uint32_t(desc_64 >> 32);
    // Per half, the share's two batches of 4 steps; in a short last stage (k % 1024 != 0) a batch past k is a
    // phantom: zero activations (B's padding) and zero weight scales (whatever codes the stage holds there: every
    // widened nibble is a finite e4m3), so it adds exactly zero. Both warpgroups thus run the same instructions every
    // half: a wgmma under a branch ptxas cannot prove uniform is serialized (advisory C7518); only a half wholly past
    // k, the same for the whole block, is skipped. A warp whose tile is past n runs with zero weight scales.
    const uint32_t st = R.base + uint32_t(R.stage * R.stride);
    full_wait_stamped<kStamps>(R.full + 8 * R.stage, R.phase, stamps, t_start, kStFirstData, kStFullWaitCycles,
                               kStStages);
    // Both halves' fragments (tile wt's steps at + 16 x 256 bytes, the scale group two groups on); the stage is
    // released after the math has used them.
    uint4 r[kStageHalves][4], sc[kStageHalves];
#pragma unroll
    for (int h = 0; h < kStageHalves; ++h) {
#pragma unroll
      for (int j = 0; j < 4; ++j) r[h][j] = lds128(st + w_off + uint32_t(h * kHalfSteps * 256 + j * 512));
      sc[h] = lds128(st + s_off + uint32_t(h * 256));
    }
    const uint32_t empty_bar = R.empty + 8 * R.stage;  // released after the math (stream_gemm.cuh consume_tile)
    R.advance();
    if constexpr (kOverlap) {
      consume_stage_overlapped<kAct128, kOne>(r, sc, acc, live, gs, s0, ns, steps, desc_st, desc_hi, xsw);
    } else {
      mask_phantom_scales(sc, live, gs, ns);
      const float* xss = xs_of_step<kAct128>(xsw, s0);
#pragma unroll
      for (int h = 0; h < kStageHalves; ++h) {
        const int hs0 = s0 + h * kHalfSteps;  // the half's first step
        if (hs0 >= steps) break;  // a half wholly past k (block-uniform): nothing to add
        uint32_t a0[4][4], a1[4][4];
        float d0[4][4], d1[4][4];
        widen4(r[h][0], r[h][1], a0);
        issue4(d0, a0, desc_st + uint32_t(16 * h * kHalfSteps), desc_hi);
        widen4(r[h][2], r[h][3], a1);
        issue4(d1, a1, desc_st + uint32_t(16 * (h * kHalfSteps + 4)), desc_hi);
        wgmma::wait_group<1>();
        settle(d0, a0);
        fold4<kAct128, kOne>(acc, d0, sc[h].x, sc[h].z, xs_of_step<kAct128>(xss, h * kHalfSteps));
        wgmma::wait_group<0>();
        settle(d1, a1);
        fold4<kAct128, kOne>(acc, d1, sc[h].y, sc[h].w, xs_of_step<kAct128>(xss, h * kHalfSteps + 4));
      }
    }
    warp_release_stage(empty_bar);  // mbarrier.cuh: the reads before the next bulk copy
  }
}

// Consumers: warpgroup 0's partial + warpgroup 1's (in that order) stored for rows [rb, re), n < N. Warpgroup 1
// hands its partials over through one of two buffers (`buf`, alternating per item), so one barrier per item: a
// buffer is rewritten two items later, after a barrier that follows warpgroup 0's reads of it.
template <class OutT>
__device__ __forceinline__ void reduce_store_item(float* partial, int buf, const float (&acc)[4], int warp, int lane,
                                                  int item, int rb, int re, int N, OutT* y) {
  float* pb = partial + buf * (4 * 128) + (warp % 4) * 128;
  if (warp >= 4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) pb[i * 32 + lane] = acc[i];
  }
  consumer_sync();
  if (warp < 4) {
    const int g = lane / 4, c = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float sum = acc[i] + pb[i * 32 + lane];
      const int n = (item * kItemTiles + warp) * 16 + g + (i >= 2 ? 8 : 0);
      const int m = rb + 2 * c + (i & 1);
      if (n < N && m < re) skinny::store_out(y, int64_t(m) * N + n, sum);
    }
  }
}

// The kernel: stream_gemm_kernel's shape (8 consumer warps = 2 warpgroups, warp 8 = producer, persistent blocks
// over the group-major (group, item) list), Params as decode v8's.
// kStamps: the phase stamps (StampSlot) into P.stamps[blockIdx.x]; a diagnostic instantiation.
template <class OutT, bool kAct128, bool kStamps = false, bool kOverlap = false>
__global__ void __launch_bounds__(kThreads, 1) fp4_wgmma_kernel(const Params P) {
  const skinny::Args& a = P.pa.base;
  extern __shared__ __align__(1024) uint8_t smem[];
  const int N = a.n, K = a.k;
  const int items_per_group = ((N + 15) / 16 + kItemTiles - 1) / kItemTiles;
  const int NS = P.stages;
  const Layout L(NS, K, a.act_block_log2);
  const uint32_t s_base = dev::smem_u32(smem);
  Ring R = ring_at(s_base, L, NS, kStageBytes);
  // The warp index through a shuffle from lane 0: the value every lane has, but ptxas then knows it is warp-uniform,
  // so the producer / consumer split below is a uniform branch and the consumers' code may use the uniform datapath
  // (consume_item's wgmma descriptors: ~28 instructions a stage fewer). With threadIdx.x / 32 ptxas took the whole
  // consumer side as possibly divergent and moved every descriptor to uniform registers one R2UR at a time.
  const int warp = __shfl_sync(0xffffffffu, int(threadIdx.x / 32), 0), lane = threadIdx.x % 32;

  unsigned long long* stamps = kStamps ? P.stamps + size_t(blockIdx.x) * kStampSlots : nullptr;
  if (threadIdx.x == 0) {
    init_ring(R);
    mbar_fence_init();
    if constexpr (kStamps) {
      for (int i = 0; i < kStampSlots; ++i) stamps[i] = 0;
      stamps[kStStartNs] = dev::globaltimer_ns();
    }
  }
  __syncthreads();  // the last block-wide barrier: from here producer and consumers run apart
  const long long t_start = kStamps ? clock64() : 0;

  const int64_t items = int64_t(P.groups) * items_per_group;
  int64_t i0, i1;
  block_items(items, int(blockIdx.x), int(gridDim.x), P.pa.front_items, i0, i1);

  if (warp == kConsumerWarps) {
    if (lane != 0) return;
    if (a.expert_ids) pdl_wait();  // the groups are the routing's output
    long long empty_wait = 0;
    const long long t_waited = kStamps ? clock64() : 0;
    for (int64_t it = i0; it < i1; ++it) {
      int rb, re;
      int64_t e;
      const int grp = int(it) / items_per_group;  // (items < 2^31: launch_fp4_wgmma)
      group_rows(a, grp, P.rows_cap, rb, re, e);
      if (rb >= re) continue;
      produce_item<kStamps>(P.pa, int(it) - grp * items_per_group, e, R, &empty_wait);
    }
    if constexpr (kStamps) {
      stamps[kStProdWaited] = (unsigned long long)(t_waited - t_start);
      stamps[kStProdEnd] = (unsigned long long)(clock64() - t_start);
      stamps[kStEmptyWaitCycles] = (unsigned long long)empty_wait;
    }
    return;
  }

  pdl_wait();  // activations, expert ids / offsets and the output buffer: the predecessors'
  if (kStamps && threadIdx.x == 0) stamps[kStConsWaited] = (unsigned long long)(clock64() - t_start);
  const uint32_t act_s = s_base + uint32_t(L.act);
  float* xs_s = reinterpret_cast<float*>(smem + L.xs);
  float* partial = reinterpret_cast<float*>(smem + L.partial);
  auto* y = static_cast<OutT*>(a.y);
  int cur_grp = -1, buf = 0;
  for (int64_t it = i0; it < i1; ++it) {
    int rb, re;
    int64_t e;
    // 32-bit (items < 2^31: launch_fp4_wgmma): the 64-bit division's registers, live across the item, made ptxas
    // spill a value of the V4.1 kernel (4 bytes, reloaded every item) once the descriptors moved to uniform registers.
    const int grp = int(it) / items_per_group, item = int(it) - grp * items_per_group;
    group_rows(a, grp, P.rows_cap, rb, re, e);
    if (rb >= re) continue;
    const int rows = re - rb;
    if (grp != cur_grp) {
      const long long t0 = kStamps ? clock64() : 0;
      stage_b<kAct128, kStamps>(a, P.swiglu, act_s, xs_s, rb, rows, warp, lane, stamps, t_start);
      if (kStamps && threadIdx.x == 0) {
        const long long t1 = clock64();
        if (cur_grp < 0) stamps[kStFirstStaged] = (unsigned long long)(t1 - t_start);
        stamps[kStStageBCycles] += (unsigned long long)(t1 - t0);
      }
      cur_grp = grp;
    }
    float acc[4];
    if (rows == 1)
      consume_item<kAct128, true, kStamps, kOverlap>(a, item, act_s, xs_s, R, warp, lane, acc, stamps, t_start);
    else
      consume_item<kAct128, false, kStamps, kOverlap>(a, item, act_s, xs_s, R, warp, lane, acc, stamps, t_start);
    if (it == i1 - 1) pdl_launch_dependents();  // the block's last weight stage is consumed
    reduce_store_item<OutT>(partial, buf, acc, warp, lane, item, rb, re, N, y);
    buf ^= 1;
    if (kStamps && threadIdx.x == 0) stamps[kStItems] += 1;
  }
  if (kStamps && threadIdx.x == 0) {
    stamps[kStConsEnd] = (unsigned long long)(clock64() - t_start);
    stamps[kStEndNs] = dev::globaltimer_ns();
  }
}

// The kernel of one consume-loop form (kOverlap) for a launch stamped or not and at activation block 128 or
// not (launch_fp4_wgmma's choice).
template <class OutT, bool kOverlap>
auto kernel_for(bool stamped, bool act128) {
  return stamped ? (act128 ? fp4_wgmma_kernel<OutT, true, true, kOverlap>
                           : fp4_wgmma_kernel<OutT, false, true, kOverlap>)
                 : (act128 ? fp4_wgmma_kernel<OutT, true, false, kOverlap>
                           : fp4_wgmma_kernel<OutT, false, false, kOverlap>);
}

}  // namespace fp4wg

// The process-wide switch (host): on unless DEEPINFER_STREAM_FP4=f16 (read once); set_fp4_wgmma overrides it.
inline bool fp4_wgmma() { return fp4wg::on_switch().get(); }
inline void set_fp4_wgmma(bool on) { fp4wg::on_switch().set(on); }

// The ring depth launch_fp4_wgmma takes for these arguments (as many stages as fit, up to 12: a cap at 4 lost
// 0.7-1.3 % at batch 1 and 8, session 15 run 94, bench/gpu/NOTES.md "Session 15"), or 0 where the wgmma form does not
// apply: the switch off, groups above 8 rows, an activation block other than 32 / 128, k not a multiple of 128, too
// little shared memory; and in batch-invariant mode (cuda/numerics_mode.h), where other row counts may run the routed
// experts in the pair kernels (moe_gpu.cu's decode MoE v9, f16 consumer): a row's bits must not depend on which ran.
inline int fp4_wgmma_stages(const packed::Args& pa, int64_t max_rows) {
  if (!fp4_wgmma() || batch_invariant() || max_rows > kMaxRows || max_rows < 1) return 0;
  const int xb = pa.base.act_block_log2;
  if ((xb != 7 && xb != 5) || pa.base.k % 128 != 0) return 0;
  const size_t optin = size_t(device_smem_limits().z);
  for (int ns = kMaxStages; ns >= 2; --ns)
    if (fp4wg::Layout(ns, pa.base.k, xb).total <= optin) return ns;
  return 0;
}

// Launches the wgmma form of launch_stream<MXFP4> (same arguments and contract); false, launching nothing, where
// it does not apply (fp4_wgmma_stages). One block per SM (166 registers per thread with 34 KB stages: two blocks of
// 288 threads would allow 96, and the kernel spilled there at 131). That also spreads the 64-row items evenly: at
// batch 1, 6-7 experts x 64 items of V4-Flash's n = 4096 are ~3 per SM, where two blocks per SM would give some SMs 4.
template <class OutT>
inline bool launch_fp4_wgmma(const packed::Args& pa, int groups, int64_t max_rows, cudaStream_t stream,
                             const SwigluInput& swiglu, bool pdl) {
  const int stages = fp4_wgmma_stages(pa, max_rows);
  if (!stages) return false;
  Params P;
  P.pa = pa;
  P.pa.weights_evict_first = stream_weights_evict_first(true, groups);
  P.groups = groups;
  P.stages = stages;
  P.rows_cap = int(max_rows);
  P.swiglu = swiglu;
  P.pa.front_items = fp4wg::front_items(pa.front_items);  // the weights' choice, or the forced form
  const int64_t items = int64_t(groups) * (((pa.base.n + 15) / 16 + fp4wg::kItemTiles - 1) / fp4wg::kItemTiles);
  if (items > std::numeric_limits<int>::max()) return false;  // the kernel's item index is an int
  const int blocks = int(std::min<int64_t>(items, int64_t(device_smem_limits().x)));
  if (blocks <= 0) return true;
  P.stamps = fp4wg::stamps_for(pa.wp, blocks, pa.base.n, pa.base.k, stream);
  const size_t smem = fp4wg::Layout(stages, pa.base.k, pa.base.act_block_log2).total;
  const bool act128 = pa.base.act_block_log2 == 7;
  // Four forms: stamped or not (a diagnostic), the halves overlapped or not (fp4wg::half_overlap_switch).
  const bool overlap = fp4wg::half_overlap_switch().get();
  const bool stamped = P.stamps != nullptr;
  auto kernel =
      overlap ? fp4wg::kernel_for<OutT, true>(stamped, act128) : fp4wg::kernel_for<OutT, false>(stamped, act128);
  allow_smem(kernel, smem);
  launch_blocks(kernel, P, blocks, smem, stream, pdl);
  return true;
}

}  // namespace deepinfer::cuda::stream_gemm
