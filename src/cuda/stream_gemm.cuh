// Decode GEMM v8 (bench/gpu/NOTES.md, "Decode v8"): the packed (fragment-ordered) FP8 / MXFP4 weights streamed
// through shared memory by bulk asynchronous copies, for groups of at most 8 tokens (decode, m = 1..8).
//
// Why: runs 6-8 (ncu, v4 / v7 kernels) showed the decode GEMMs latency-bound: ~16 resident warps per SM, 55 % of
// the stalls on global loads, DRAM 30 %: the bytes in flight were what registers x warps can hold (~32 KB per
// SM), well under the ~60 KB that 30 GB/s per SM x ~2 us of loaded latency needs. Here one producer thread per
// block keeps a ring of NS stages of 16 KB filled with cp.async.bulk (one copy per stage: the packed K range of a
// 16-row tile is contiguous), so the bytes in flight are NS x 16 KB per block (64-128 KB per SM), independent of
// registers; the 8 consumer warps read their fragments from shared memory and run the arithmetic of v7.
//
// Block: warps 0-7 consume, warp 8 produces (lane 0 only). Persistent: block b takes the work items
// [b I / B, (b + 1) I / B) of the I = groups x tiles items (group-major), so the producer streams across tile and
// group boundaries without a gap; items of empty groups are skipped by producer and consumers alike.
// Stage = one chunk of a tile: FP8 32 K steps (32 x 512 B), MXFP4 64 K steps (32 x 512 B) + their 8 x 128 B scale
// groups. Consumer warp w takes granule w of every chunk (FP8 4 steps, MXFP4 8 steps), so all 8 warps work on
// every full chunk.
// Synchronization: full[s] (1 arrival + the copy's transaction bytes) and empty[s] (8 arrivals, one per consumer
// warp, after the warp has read its fragments into registers). Stage / parity advance identically in producer
// and consumers (same item sequence, same chunks); the producer waits on empty with the opposite parity, which a
// fresh barrier satisfies (PTX: try_wait.parity returns true for the phase before the current one).
//
// Activations: at each group change the consumers widen the group's rows (<= 8) once into shared memory in the
// fragment order the mma wants (f16, 16 bytes per lane per step) and copy the activation scales there, zero for
// the unused token slots. v7 re-widened them per warp and tile (the MXFP4 kernel was near issue-bound, ncu run 8).
//
// Determinism / batch invariance: warp w sums its granules over the tile's chunks in order; the 8 warps' partials
// are added in the order 0..7. The chunking depends on k only, the mma's output column of a token on that token
// only, so a token's result is the same bits alone or in a batch, and run to run.
//
// Groups. With expert ids (the MoE) group g is rows [row_offsets[g], row_offsets[g + 1]) of expert expert_ids[g];
// without (a dense layer) group g is rows [g rows_cap, min((g + 1) rows_cap, rows)), so a dense product of any
// number of rows runs as groups of <= 8 with each row's arithmetic unchanged.
// Activation prologue (MoE decode, issue 4): the rows may be gathered through skinny::Args::row_index (x's FP8
// rows read in expert order, no copy), or made here from W1 | W3's fp32 output by the clamped SwiGLU times the
// routing weight and the FP8 quantization (SwigluInput): the values and e4m3 bytes are those of the separate
// quantization kernel (the same swiglu() below and fp8_quant.cuh's block scale), so the product is the same bits as
// the unfused pair.
//
// PDL (cuda/launch.h; launch_stream(..., pdl = true) from fp8_gemm): in a dense product the producer's work items
// are fixed by the shapes and it reads only the packed weights, so it fills the ring (the first NS stages: the
// fresh `empty` barriers let it) before the predecessor has finished; it then stalls on `empty` until the
// consumers, which pdl_wait() before their first activation read and output write, free stages. With expert ids
// (the MoE) the items depend on the routing, so the producer waits first too.
//
// Decode MoE v9 (bench/gpu/NOTES.md "Decode MoE v9"): moe_pair_kernel runs the shared expert's FP8 product and the
// routed experts' MXFP4 product of one MoE stage in one persistent launch (w2's with the top-k combine fused), from
// the same per-tile device functions as stream_gemm_kernel (produce_tile, stage_rows, consume_tile, reduce_store),
// so a tile's bits are the same in both kernels. Both use the byte-permute e2m1 widening (widen_fp4_perm) unless
// DEEPINFER_FP4_WIDEN=shift, and a one-row tile loop for groups of one row; neither changes a bit.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/env_switch.h"
#include "cuda/check.h"
#include "cuda/kernels.h"
#include "cuda/l2_policy.cuh"
#include "cuda/launch.h"
#include "cuda/mbarrier.cuh"
#include "cuda/packed_gemm.cuh"
#include "cuda/skinny_gemm.cuh"
#include "layers/norm_rope/rope.cuh"
#include "layers/quant/fp8_gemm.h"
#include "layers/quant/fp8_quant.cuh"

namespace deepinfer::cuda::stream_gemm {

using skinny::WeightFormat;

constexpr int kConsumerWarps = 8;
constexpr int kThreads = (kConsumerWarps + 1) * 32;
constexpr int kConsumerThreads = kConsumerWarps * 32;
constexpr int kMaxRows = 8;        // tokens per group this kernel takes (one mma N side)
constexpr int kWeightStage = 16384;
constexpr int kMaxStages = 12;

template <WeightFormat F>
struct Geo {
  static constexpr bool kFp4 = F == WeightFormat::MXFP4;
  static constexpr int kChunkSteps = kFp4 ? 64 : 32;    // K steps of 32 per stage (16 KB of weights)
  static constexpr int kGranule = kFp4 ? 8 : 4;         // steps per consumer warp per chunk
  static constexpr int kStepBytes = kFp4 ? 256 : 512;   // packed bytes per 16-row tile and K step
  static constexpr int kStageBytes = kWeightStage + (kFp4 ? 8 * 128 : 0);
  static_assert(kChunkSteps == kGranule * kConsumerWarps, "one granule per consumer warp per chunk");
};

// ---- mbarrier / bulk-copy wrappers (PTX ISA 8.x, sm_90).
using dev::mbar_init;
using dev::mbar_wait;
using dev::mbar_wait_acquire_cluster;
using dev::mbar_arrive;
using dev::warp_release_stage;
using dev::mbar_arrive_expect_tx;
using dev::bulk_g2s;  // cuda/mbarrier.cuh
using dev::bulk_g2s_weights;
using dev::mbar_fence_init;
__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint2 lds64(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr));
  return v;
}
__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerThreads) : "memory"); }

// e8m0 byte times 2^14 (the MXFP4 widening's unscale) as a float, exact: 2^(b - 127 + 14) is a normal binary32
// for every b < 241 (b = 0 included); larger b gives +inf like e8m0_to_float(b) * 2^14 does.
__device__ __forceinline__ float fp4_scale(uint32_t b) { return __uint_as_float(min(b + 14u, 255u) << 23); }

// e2m1 -> f16 widening of one 32-bit word of MXFP4 codes (8 nibbles), the same f16x2 words as
// skinny::Format<MXFP4>::widen (nibbles j and j + 4 in one f16x2: magnitude at bits 9-11, sign at bit 15 of its
// half; checked against it exhaustively per nibble), in 11 integer instructions instead of 15-16: each byte's two
// nibbles become the HIGH bytes of their f16 halves in one pass over the word (lo: the low nibbles, hi: the high
// ones; byte = sign << 7 | magnitude << 1), then one byte permute per f16x2 places two of them with zero low bytes.
// The MXFP4 consumer is issue-bound (bench/gpu/NOTES.md "Decode v8": ~37 of ~66 instructions per 256-byte warp
// step are this widening), so this is ~8 instructions (~12 %) less per step. DEEPINFER_FP4_WIDEN=shift keeps the
// shift-and-mask form (read once; the bits are the same either way).
__device__ __forceinline__ void widen_fp4_perm(uint32_t v, uint32_t (&h)[4]) {
  const uint32_t lo = ((v << 1) & 0x0E0E0E0Eu) | ((v << 4) & 0x80808080u);
  const uint32_t hi = ((v >> 3) & 0x0E0E0E0Eu) | (v & 0x80808080u);
  h[0] = __byte_perm(lo, 0u, 0x2404);  // nibbles 0, 4: bytes 0, 2 of lo into bytes 1, 3
  h[1] = __byte_perm(hi, 0u, 0x2404);  // nibbles 1, 5
  h[2] = __byte_perm(lo, 0u, 0x3414);  // nibbles 2, 6: bytes 1, 3 of lo
  h[3] = __byte_perm(hi, 0u, 0x3414);  // nibbles 3, 7
}
// The process-wide choice (host): DEEPINFER_FP4_WIDEN read once, set_fp4_perm_widen overrides it (tests). One flag
// per program (a static of an inline function).
inline EnvSwitch<bool>& fp4_perm_widen_switch() {
  static EnvSwitch<bool> perm{"DEEPINFER_FP4_WIDEN", [](const char* v) { return !env_equals(v, "shift"); }};
  return perm;
}
inline bool fp4_perm_widen() { return fp4_perm_widen_switch().get(); }
inline void set_fp4_perm_widen(bool on) { fp4_perm_widen_switch().set(on); }
// The K loop for 128-wide activation blocks (consume_tile's kBlk128; FP8 also needs 128-wide weight blocks):
// DEEPINFER_STREAM_LOOP=blk128|generic (read once; default blk128 since session 7: the same bits as the generic loop,
// batch-1 decode -3.2 %, batch 8 -7.0 % on 16 V4-Flash layers, H200 run 48); set_blk128_loop overrides it (tests).
// bench/gpu/NOTES.md "Decode stream loop for 128-blocks".
inline EnvSwitch<bool>& blk128_loop_switch() {
  static EnvSwitch<bool> on{"DEEPINFER_STREAM_LOOP", [](const char* v) { return !env_equals(v, "generic"); }};
  return on;
}
inline bool blk128_loop() { return blk128_loop_switch().get(); }
inline void set_blk128_loop(bool on) { blk128_loop_switch().set(on); }
// Ring depth of the dense FP8 products (bench/gpu/NOTES.md "Decode stream: a shallow ring"): DEEPINFER_STREAM_STAGES=N
// (read once; unset: 2, the default since session 13; 0: the earlier sizing in launch_stream, up to 6 stages);
// set_ring_stages overrides it (tests, roofline). N > 0: a dense FP8 product (no expert ids) that fits two blocks per
// SM takes N stages per block (N = 2: 64 KB in flight per SM) instead of the most that fit. Session 12's
// microbenchmark (H200): with 192 KB per SM requested at once, the stages of all blocks land late and together, and
// the consumers' math runs as a tail after the last byte (wq_b 15.1 us; 10.2 us for the bare ring); two stages per
// block land one after the other and the math overlaps the stream (wq_b 12.6 us). Only the number of stages changes,
// not the chunks or any operation: the same output bits (GpuFp8Gemm.StreamRingDepthBitwise: 0 mismatches, runs 76 /
// 78). Made the default after the whole model, V4-Flash batch 1 3.016 -> 2.978 ms (-1.3 %, run 76; batch 8 -0.5 %,
// 64 / 256 / prefill equal), and the V4 / V4.1 forward suites with it (13/13, run 79).
constexpr int kDefaultRingStages = 2;
// The count: its value, kDefaultRingStages when unset, 0 when negative.
inline EnvSwitch<int>& ring_stages_switch() {
  static EnvSwitch<int> n{"DEEPINFER_STREAM_STAGES",
                          [](const char* v) { return v ? std::max(0, std::atoi(v)) : kDefaultRingStages; }};
  return n;
}
inline int ring_stages() { return ring_stages_switch().get(); }
inline void set_ring_stages(int n) { ring_stages_switch().set(std::max(0, n)); }
// The persistent grid's size (stream_gemm's launch): DEEPINFER_STREAM_GRID=balanced|full (read once; default
// balanced). Block b takes the contiguous work items [b I / B, (b + 1) I / B). full: B = min(I, slots); where the I
// items are not a multiple of the slots, the blocks of one item fewer end a whole item early: V4.1 wo_b (320 tiles on
// 264 slots, 56 blocks of two) ended its median block 7.9 us before its last (run 128, `roofline --fp8-phases`), V4.1
// shared w1|w3 (288) 6.1 us. balanced: B = ceil(I / ceil(I / slots)) (160 blocks of two for wo_b, 256 of eight for
// V4 wq_b's 2048): the same longest block with the HBM shared by fewer; alone V4.1 wo_b 21.0 -> 18.8 us, shared
// w1|w3 14.2 -> 12.9; in the step V4 batch 1 -0.8 %, V4.1 -1.2 % (run 130). A work item's arithmetic does not
// depend on B: the same bits (GpuFp8Gemm.StreamBalancedGridBitwise).
inline EnvSwitch<bool>& balanced_grid_switch() {
  static EnvSwitch<bool> on{"DEEPINFER_STREAM_GRID", [](const char* v) { return !env_equals(v, "full"); }};
  return on;
}
inline bool balanced_grid() { return balanced_grid_switch().get(); }
inline void set_balanced_grid(bool on) { balanced_grid_switch().set(on); }
// Where stream_gemm_kernel lets its dependent launch start (PDL, cuda/launch.h): DEEPINFER_STREAM_TRIGGER=entry|last
// (read once; default entry since run 133). entry: every thread at the kernel's top, so the next kernel of the stream
// is launched once all blocks are resident and each of its blocks takes an SM slot as soon as one of ours exits (a
// dense stream's producer then streams its first stages while our slowest blocks finish; the dense launches' blocks
// end 0.5-3.8 us apart, run 132 `roofline --fp8-phases`). last: each block's last item, after its last weight chunk
// is consumed. Run 133, same call: V4 batch 1 2.472-2.481 -> 2.447-2.451 ms (-1.0 %), V4.1 and batch 8 flat. The
// dependent still waits for this grid's completion in its pdl_wait: the same bits
// (GpuFp8Gemm.StreamEntryTriggerChainBitwise).
inline EnvSwitch<bool>& entry_trigger_switch() {
  static EnvSwitch<bool> on{"DEEPINFER_STREAM_TRIGGER", [](const char* v) { return !env_equals(v, "last"); }};
  return on;
}
inline bool entry_trigger() { return entry_trigger_switch().get(); }
inline void set_entry_trigger(bool on) { entry_trigger_switch().set(on); }
// The blocks of a persistent launch of `items` work items on `slots` resident blocks (balanced_grid()).
inline int64_t persistent_blocks(int64_t items, int64_t slots) {
  const int64_t blocks = std::min(items, slots);
  if (!balanced_grid() || blocks <= 0) return blocks;
  const int64_t per_block = (items + blocks - 1) / blocks;
  return (items + per_block - 1) / per_block;
}
// Whether a decode stream launch (stream_gemm_kernel, moe_pair_kernel, the mid kernels, the MXFP4 wgmma consumer)
// copies its weights evict_first in L2 (packed::Args::weights_evict_first, mbarrier.cuh bulk_g2s_weights):
// the switch of its kind (cuda/l2_policy.h), where no later group of the launch reads a weight tile again from L2:
// a dense product in one group; an expert product of at most 8 groups (the MoE dispatch's bound is the experts hit
// plus one per `chunk` pairs: at batch 1 the top-k experts, one row each; run 117 found the bound of groups x rows,
// 6 x 8 = 48 at batch 1, kept the expert streams off).
inline bool stream_weights_evict_first(bool experts, int64_t groups) {
  return experts ? expert_weights_evict_first() && groups <= 8 : dense_weights_evict_first() && groups == 1;
}
// Whether a product takes the kBlk128 loop: the switch, 128-wide activation blocks (and weight blocks for FP8), and
// k a multiple of 128 (so an MXFP4 granule is 8 steps or, at the end of k, 4).
inline bool use_blk128(const skinny::Args& a, bool fp4) {
  return blk128_loop() && a.act_block_log2 == 7 && a.k % 128 == 0 && (fp4 || a.w_block_log2 == 7);
}

// Clamped SwiGLU times the routing weight (model-spec §3 "MoE": g = min(W1 x, limit), u = clamp(W3 x, +-limit),
// a = silu(g) u w; limit <= 0 disables the clamp as in swiglu_expert.cpp). The one definition of these values on the
// GPU: the MoE's quantization kernel and the fused prologue both call it, so they round alike.
// The reference's rounding (bench/gpu/NOTES.md "Session 57"): its quantized GEMMs return bf16, so g and u arrive as
// bf16 values, and its expert casts a to bf16 before W2's FP8 quantization.
__device__ __forceinline__ void swiglu_clamp(float& g, float& u, float limit) {
  if (limit > 0) {
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
  }
}
__device__ __forceinline__ float swiglu(float g, float u, float limit, float w) {
  g = dev::round_bf16(g);
  u = dev::round_bf16(u);
  swiglu_clamp(g, u, limit);
  const float silu = g / (1.0f + expf(-g));
  return dev::round_bf16(silu * u * w);
}

// swiglu() of 8 values (one row's g[j], u[j], its weight w) into a: the same operations on each value (so the same
// bits), in passes: the bf16 roundings of g and u in pairs; per kSpan values the clamps and 1 + exp(-g), then their
// divisions and products; the products' rounding in pairs. swiglu() value by value put each value's whole chain
// behind the previous one's division, whose FCHK branch around the slow-path CALL no instruction crosses (SASS of
// fp4_wgmma_kernel, sm_90a: ~30 dependent instructions a value, 8 in a row); here kSpan exp chains overlap and only
// the divisions stay one after another. kSpan 4 keeps HEAD's registers (8 spilled in moe_pair_kernel).
template <int kSpan = 4>
__device__ __forceinline__ void swiglu8(float (&g)[8], float (&u)[8], float limit, float w, float (&a)[8]) {
#pragma unroll
  for (int j = 0; j < 8; j += 2) {
    const float2 gr = dev::round_bf16x2(g[j], g[j + 1]), ur = dev::round_bf16x2(u[j], u[j + 1]);
    g[j] = gr.x, g[j + 1] = gr.y, u[j] = ur.x, u[j + 1] = ur.y;
  }
#pragma unroll
  for (int j0 = 0; j0 < 8; j0 += kSpan) {
    float d[kSpan];
#pragma unroll
    for (int j = 0; j < kSpan; ++j) {
      swiglu_clamp(g[j0 + j], u[j0 + j], limit);
      d[j] = 1.0f + expf(-g[j0 + j]);
    }
#pragma unroll
    for (int j = 0; j < kSpan; ++j) a[j0 + j] = g[j0 + j] / d[j] * u[j0 + j] * w;  // silu(g) u w
  }
#pragma unroll
  for (int j = 0; j < 8; j += 2) {
    const float2 ar = dev::round_bf16x2(a[j], a[j + 1]);
    a[j] = ar.x, a[j + 1] = ar.y;
  }
}

// The fused SwiGLU input: h [rows, 2k] fp32 (W1's k outputs, then W3's), row_weight [rows] or null (weight 1).
struct SwigluInput {
  const float* h = nullptr;
  const float* row_weight = nullptr;
  float limit = 0;
};

// Shared-memory carve-up, identical on host and device.
// act8 (decode MoE v9 with DEEPINFER_MOE_V9_ACT=fp8; stream_gemm_kernel's dense FP8 products under ring_stages()):
// the activations are staged as their e4m3 bytes (k + 32 bytes per row, bank-conflict free for the 8-byte fragment
// loads) and widened to f16 in the K loop (exact: the same f16 values, so the same bits), half the f16 carve-up: at
// 8 rows and k = 4096, 33 KB instead of 66 KB, so two blocks of 4 stages share an SM.
struct Layout {
  int stages = 4, stage_bytes = 0;
  int rows_cap = 1;          // token slots held (<= 8): the activation rows of one group
  int act_stride = 0;        // bytes per token row of staged activations: 2k + 64 (f16) or k + 32 (act8)
  int x_blocks = 0;          // k / act_block
  size_t ring = 0, act = 0, xs = 0, partial = 0, bars = 0, total = 0;
  __host__ __device__ Layout(int stages_, int stage_bytes_, int rows_cap_, int k, int xb_log2, bool act8 = false)
      : stages(stages_), stage_bytes(stage_bytes_), rows_cap(rows_cap_) {
    act_stride = act8 ? k + 32 : 2 * k + 64;
    x_blocks = k >> xb_log2;
    ring = 0;
    act = ring + size_t(stages) * stage_bytes;
    xs = act + size_t(rows_cap) * act_stride;
    partial = xs + size_t(x_blocks) * kMaxRows * 4;
    bars = partial + 2 * kConsumerWarps * 128 * 4;
    total = bars + 2 * size_t(stages) * 8;
  }
};

struct Params {
  packed::Args pa;   // q, xs, act / weight block logs, ws (FP8 scales), n, k, expert ids / offsets, rows, y, wp, sp
  int groups = 1;
  int stages = 4;
  int rows_cap = 1;
  SwigluInput swiglu;  // h set: the activations come from the SwiGLU prologue, q / xs are not read
  // stream_gemm_kernel<..., kQuantX>: the activations are these bf16 rows [rows, k] (through pa.base.row_index),
  // quantized in the prologue as fp8_quantize would (act block 2^act_block_log2); q / xs are not read.
  const __nv_bfloat16* x_bf16 = nullptr;
  // stream_gemm_kernel<..., kRope> (bf16 out): the RoPE of each output row's heads in reduce_store (rope_store).
  RopeEpilogue rope;
  // stream_gemm_kernel's PDL trigger at its top instead of each block's last item (entry_trigger()).
  bool entry_trigger = false;
  // Phase stamps, null: none. The MXFP4 wgmma stream's ([blocks][fp4wg::kStampSlots]; cuda/stream_fp4_wgmma.cuh)
  // or stream_gemm_kernel<FP8, ..., kStamps = true>'s ([blocks][kFp8StampSlots]; fp8_gemm.h Fp8StampSlot).
  unsigned long long* stamps = nullptr;
};

// Phase stamps of the dense FP8 stream (a diagnostic: roofline --fp8-phases, bench/gpu/NOTES.md "The dense FP8
// stream's phase stamps"), the counterpart of the MXFP4 wgmma stream's (cuda/stream_fp4_wgmma.cuh StampSlot): the
// slots are layers/quant/fp8_gemm.h's Fp8StampSlot, written only by the stamped instantiation
// (stream_gemm_kernel<..., kStamps = true>), so the default kernels' code does not change. dense_stamp_target: where
// the next launch_stream<FP8> writes them ([blocks][kFp8StampSlots]), null: the default kernels; one pointer per
// program (a static of an inline function), set by set_stream_fp8_stamps (layers/quant/fp8_gemm.h).
inline unsigned long long*& dense_stamp_target() {
  static unsigned long long* target = nullptr;
  return target;
}
// The same stamps inside the model's steps (bench/gpu/NOTES.md "Dense FP8 stream stamps inside the step"; v4_decode
// --fp8-stamps), the counterpart of the MXFP4 wgmma stream's (cuda/stream_fp4_wgmma.cuh fp4wg::step_stamps_switch):
// with this switch on, every launch_stream<FP8> onto stream_gemm_kernel without a dense_stamp_target (eager or
// captured) runs the stamped instantiation on its own record, keyed by the launch's packed weights (pa.wp: each
// layer's wq_a, wq_b, wo_b, shared w1|w3, w2, ... has its own), overwritten by each launch.
// DEEPINFER_FP8_STEP_STAMPS=1 sets it process-wide, read once; set_stream_fp8_step_stamps (layers/quant/fp8_gemm.h)
// overrides it and allocates the device's records, so call it before a capture. Off (the default), an FP8 launch
// costs one relaxed atomic load more.
inline EnvSwitch<bool>& dense_step_stamps_switch() {
  static EnvSwitch<bool> on{"DEEPINFER_FP8_STEP_STAMPS", [](const char* v) { return env_equals(v, "1"); }};
  return on;
}
// The record of the launch with packed weights `key`: `blocks` blocks of n x k over `rows` rows, quant_x: the
// quantizing prologue's form (kQuantX), rope: the RoPE epilogue's (kRope) (layers/quant/fp8_gemm.cu: a
// cuda/stamp_records.h record of 2 x SMs x kFp8StampSlots words per key and device, the launch's grid, shape and
// stream kept for the reader); null (the launch goes unstamped) once the slots are taken, where the grid exceeds a
// record, or where the device has no records yet and `stream` is capturing.
unsigned long long* dense_step_record(const void* key, int blocks, int n, int k, int rows, bool quant_x, bool rope,
                                      cudaStream_t stream);
// mbar_wait; kStamps: its cycles added to *cycles (the producers' empty-barrier waits of the stamped instantiations).
// The default is mbar_wait alone.
template <bool kStamps>
__device__ __forceinline__ void mbar_wait_timed(uint32_t bar, uint32_t parity, long long* cycles) {
  if constexpr (kStamps) {
    const long long t0 = clock64();
    mbar_wait(bar, parity);
    *cycles += clock64() - t0;
  } else {
    mbar_wait(bar, parity);
  }
}
// A consumer's wait for a stage's full barrier; kStamps: thread 0 times it into stamps[wait_slot], counts the stage in
// stamps[stages_slot] and stamps its first one at stamps[first_slot] (cycles after t_start). The stream kernels'
// stamped instantiations (stream_gemm_kernel, fp4wg::fp4_wgmma_kernel) share it; the default is mbar_wait alone.
template <bool kStamps>
__device__ __forceinline__ void full_wait_stamped(uint32_t bar, uint32_t phase, unsigned long long* stamps,
                                                  long long t_start, int first_slot, int wait_slot, int stages_slot) {
  if constexpr (kStamps) {
    const long long t0 = clock64();
    mbar_wait(bar, phase);
    if (threadIdx.x == 0) {
      const long long t1 = clock64();
      if (stamps[stages_slot] == 0) stamps[first_slot] = (unsigned long long)(t1 - t_start);
      stamps[wait_slot] += (unsigned long long)(t1 - t0);
      stamps[stages_slot] += 1;
    }
  } else {
    mbar_wait(bar, phase);
  }
}

// ---- The pieces of both kernels below (stream_gemm_kernel and decode MoE v9's moe_pair_kernel), one definition
// each, so that a tile's arithmetic is the same code, hence the same bits, in either kernel.

// The ring's position, advanced identically by the producer and the consumers (same items, same chunks).
struct Ring {
  uint32_t base = 0, full = 0, empty = 0;  // shared addresses: stage 0, full[0], empty[0]
  int stages = 1;
  int stride = 0;  // bytes per stage
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == stages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

// The block's ring in dynamic shared memory at s_base: the stages at L.ring, the full barriers at L.bars and the
// empty ones after them, NS stages of `stride` bytes (L: Layout or MidLayout).
template <class Lay>
__device__ __forceinline__ Ring ring_at(uint32_t s_base, const Lay& L, int NS, int stride) {
  Ring R;
  R.base = s_base + uint32_t(L.ring);
  R.full = s_base + uint32_t(L.bars);
  R.empty = R.full + 8 * NS;
  R.stages = NS;
  R.stride = stride;
  return R;
}

// The ring's barriers (thread 0, before the fence and the block-wide barrier): full takes the producer's one
// arrival (+ the bytes), empty one arrival per consumer warp.
__device__ __forceinline__ void init_ring(const Ring& R) {
  for (int s = 0; s < R.stages; ++s) {
    mbar_init(R.full + 8 * s, 1);
    mbar_init(R.empty + 8 * s, kConsumerWarps);
  }
}

// Rows [rb, re) and expert e of group `grp`: with expert ids group g is rows [row_offsets[g], row_offsets[g + 1])
// of expert expert_ids[g], else (a dense product) rows [g rows_cap, min((g + 1) rows_cap, rows)). Never more than
// rows_cap rows (the host guarantees rows <= rows_cap per group).
__device__ __forceinline__ void group_rows(const skinny::Args& a, int grp, int rows_cap, int& rb, int& re,
                                           int64_t& e) {
  if (a.expert_ids) {
    rb = a.row_offsets[grp];
    re = a.row_offsets[grp + 1];
    e = a.expert_ids[grp];
  } else {
    rb = grp * rows_cap;
    re = a.rows;
    e = 0;
  }
  re = min(re, rb + rows_cap);
}

// Producer (one thread): the chunks of tile `tile` of expert e (packed weights, + the MXFP4 scale groups) into the
// ring, one bulk copy (two for MXFP4) per stage. kStamps: the empty-barrier waits added to *wait_cycles.
template <WeightFormat F, bool kStamps = false>
__device__ __forceinline__ void produce_tile(const packed::Args& pa, int tile, int64_t e, Ring& R,
                                             long long* wait_cycles = nullptr) {
  using G = Geo<F>;
  constexpr bool kFp4 = G::kFp4;
  const int steps = pa.base.k / 32, tiles = (pa.base.n + 15) / 16;
  const int chunks = (steps + G::kChunkSteps - 1) / G::kChunkSteps;
  const int sgroups = (steps + 7) / 8;
  const uint8_t* wsrc = pa.wp + ((kFp4 ? e * tiles : 0) + tile) * int64_t(steps) * G::kStepBytes;
  const uint8_t* ssrc = kFp4 ? pa.sp + (e * tiles + tile) * int64_t(sgroups) * 128 : nullptr;
  for (int c = 0; c < chunks; ++c) {
    const int s0 = c * G::kChunkSteps;
    const int ns = min(G::kChunkSteps, steps - s0);
    const uint32_t wbytes = uint32_t(ns * G::kStepBytes);
    const uint32_t sbytes = kFp4 ? uint32_t(min(8, sgroups - c * 8) * 128) : 0u;
    const uint32_t full = R.full + 8 * R.stage;
    mbar_wait_timed<kStamps>(R.empty + 8 * R.stage, R.phase ^ 1u, wait_cycles);
    mbar_arrive_expect_tx(full, wbytes + sbytes);
    const uint32_t dst = R.base + uint32_t(R.stage * R.stride);
    bulk_g2s_weights(dst, wsrc + int64_t(s0) * G::kStepBytes, wbytes, full, pa.weights_evict_first);
    if constexpr (kFp4)
      bulk_g2s_weights(dst + kWeightStage, ssrc + int64_t(c) * 8 * 128, sbytes, full, pa.weights_evict_first);
    R.advance();
  }
}

// Consumers (all 256 threads): put(i, load(i)) for every i < count, each thread's kPass loads issued before their
// stores. The stagers' stores are volatile shared-memory asm with a memory clobber, which no load moves across, so a
// load / store pair per loop iteration ran one L2 round trip after another: session 10's ncu of the batch-1 MXFP4
// stream (fp4_wgmma_kernel) found 29 % of the consumers' samples in its activation stage, 16 round trips at k = 4096.
template <int kPass, class Load, class Put>
__device__ __forceinline__ void load_then_put(int count, Load&& load, Put&& put) {
  using T = decltype(load(0));
  for (int i0 = 0; i0 < count; i0 += kPass * kConsumerThreads) {
    T v[kPass];
#pragma unroll
    for (int p = 0; p < kPass; ++p) {
      const int i = i0 + p * kConsumerThreads + int(threadIdx.x);
      if (i < count) v[p] = load(i);
    }
#pragma unroll
    for (int p = 0; p < kPass; ++p) {
      const int i = i0 + p * kConsumerThreads + int(threadIdx.x);
      if (i < count) put(i, v[p]);
    }
  }
}

// The FP8 codes of group rows [rb, rb + rows) x units [0, units) of x (8 bytes a unit, from column col0; rows
// through a.row_index): put(t, u, bytes), loads first (load_then_put).
template <int kPass, class Put>
__device__ __forceinline__ void stage_q_units(const skinny::Args& a, int rb, int rows, int col0, int units, Put&& put) {
  load_then_put<kPass>(
      rows * units,
      [&](int v) {
        const uint8_t* row = a.q + skinny::act_row(a, rb + v / units) * a.k;
        return __ldg(reinterpret_cast<const uint2*>(row + col0 + 8 * (v % units)));
      },
      [&](int v, uint2 q8) { put(v / units, v % units, q8); });
}

// Consumers (all 256 threads; a warp-uniform loop: every lane shuffles): the fused SwiGLU prologue's e4m3 bytes of
// rows [rb, rb + rows) x columns [col0, col0 + 8 units) of sw.h (W1's outputs, W3's k columns further), lane = 8
// columns of one row (v = t units + u), the act_block / 8 lanes of an activation block sharing its amax by
// shuffles (col0 and units aligned to the block). put(t, u, bytes) for every unit, put_scale(t, u, scale) once per
// block (its first unit). The same swiglu() (as swiglu8), dev::fp8_block_scale and dev::fp8_codes8 as moe_swiglu_quant, so its
// values and bytes; only the destination is the caller's: stage_rows' SwiGLU prologue (below: all of k, the f16 / e4m3 stage
// layout) and the MXFP4 wgmma stream's stage_b (all of k, cuda/stream_fp4_wgmma.cuh).
template <class Put, class PutScale>
__device__ __forceinline__ void swiglu_quant_units(const skinny::Args& a, const SwigluInput& sw, int rb, int rows,
                                                   int col0, int units, int warp, int lane, Put&& put,
                                                   PutScale&& put_scale) {
  const int K = a.k;
  const int lpb = 1 << (a.act_block_log2 - 3);
  // The lane's unit v = t units + u (v < rows units <=> t < rows), kept as (t, u) without an integer division (a
  // ~20-instruction chain ahead of the loads' addresses); lpb is a power of two.
  int t = 0, u = warp * 32 + lane;
  while (u >= units) {
    u -= units;
    ++t;
  }
  for (int v0 = warp * 32; v0 < rows * units; v0 += kConsumerThreads) {
    const bool valid = t < rows;
    float av[8];
    float amax = 0.0f;
    if (valid) {
      const int64_t r = rb + t;
      const float4* hg = reinterpret_cast<const float4*>(sw.h + r * 2 * K + col0 + 8 * u);
      const float4* hu = reinterpret_cast<const float4*>(sw.h + r * 2 * K + K + col0 + 8 * u);
      const float4 g0 = __ldg(hg), g1 = __ldg(hg + 1), u0 = __ldg(hu), u1 = __ldg(hu + 1);
      float gs[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
      float us[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
      const float w = sw.row_weight ? __ldg(sw.row_weight + r) : 1.0f;
      swiglu8(gs, us, sw.limit, w, av);
#pragma unroll
      for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(av[j]));
    }
    for (int o = lpb / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    if (valid) {
      const float scale = dev::fp8_block_scale(amax);
      put(t, u, dev::fp8_codes8(av, scale));
      if ((u & (lpb - 1)) == 0) put_scale(t, u, scale);
    }
    u += kConsumerThreads;
    while (u >= units) {
      u -= units;
      ++t;
    }
  }
}

// Consumers (all 256 threads): a group's activation rows [rb, rb + rows) widened into shared memory in the mma's
// fragment order (row stride L.act_stride), their scales as [block][8 token slots] in xs_s with zeros in the unused
// slots; from x's FP8 rows (through a.row_index) or, with sw.h, from the SwiGLU prologue. Ends with a consumer
// barrier. The caller guarantees every consumer is past the previous tile's reduction barrier.
// kAct8: the e4m3 bytes are staged (Layout act8), already in the byte order whose widening gives the f16 words
// above (FP8: as is; MXFP4: the byte permutes of Format<MXFP4>::widen_x); consume_tile<..., true> widens them.
// kQuantX (with x16: bf16 rows [*, k]): the activations are x's rows quantized here with fp8_quantize's device code
// (layers/quant/fp8_quant.cuh, the same lanes per block), so the staged codes and scales are fp8_quantize's bits;
// a dense FP8 product then needs no quantize launch before it (bench/gpu/NOTES.md "wo_b's quantization in its
// prologue"). kStamps (kQuantX, the stamped stream_gemm_kernel): consumer thread 0 stamps its first quantized unit and
// the loop's end into stamps (kFp8StQuantFirstUnit / kFp8StQuantLoopEnd, cycles after t_start; first group only).
template <WeightFormat F, bool kAct8 = false, bool kQuantX = false, bool kStamps = false>
__device__ __forceinline__ void stage_rows(const skinny::Args& a, const SwigluInput& sw, const Layout& L,
                                           uint32_t act_s, float* xs_s, int rb, int rows, int warp, int lane,
                                           const __nv_bfloat16* x16 = nullptr, unsigned long long* stamps = nullptr,
                                           long long t_start = 0) {
  using Fmt = skinny::Format<F>;
  const int ctid = threadIdx.x;
  const int K = a.k, xb = a.act_block_log2;
  const int x_blocks = K >> xb;
  const int units = K / 8;  // 8 columns (one lane's share of a step) per unit
  auto stage_unit = [&](int t, int u, uint2 q8) {
    if constexpr (kAct8) {
      uint2 b = q8;
      if constexpr (F == WeightFormat::MXFP4) b = make_uint2(__byte_perm(q8.x, q8.y, 0x5140), __byte_perm(q8.x, q8.y, 0x7362));
      const uint32_t addr = act_s + uint32_t(t * L.act_stride + (u / 4) * 32 + (u % 4) * 8);
      asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(addr), "r"(b.x), "r"(b.y) : "memory");
    } else {
      uint32_t x[4];
      Fmt::widen_x(q8, x);
      const uint32_t addr = act_s + uint32_t(t * L.act_stride + (u / 4) * 64 + (u % 4) * 16);
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(x[0]), "r"(x[1]), "r"(x[2]),
                   "r"(x[3])
                   : "memory");
    }
  };
  if constexpr (kQuantX) {
    // Lane = 8 columns of one row; the act_block / 8 lanes of a block are consecutive lanes of one warp (k is a
    // multiple of the block and the loop's bases of 32), as fp8_quantize_kernel's. Warp-uniform loops, rows outer: no
    // integer division or modulo by the runtime units / lanes-per-block. Each lane takes kUnits units of a row at
    // once, their loads first and their block-amax shuffles interleaved, so the unit chains (load, amax, 4 shuffles,
    // two divisions, the codes) overlap instead of running one after another. In the step (`v4_decode --fp8-stamps`)
    // V4 wo_b's stage_rows went from 4.27 us (~8,450 SM cycles; run 133) to 2.75 (run 134), V4.1's from 3.52 to 2.27:
    // V4 batch 1 -1.4 %, V4.1 -0.6 %. Most of what is left is the first load, queued behind the launch's first wave
    // of weights (its first unit quantized 2.4 us after pdl_wait). The values and operations per unit are
    // fp8_quantize8's (fp8_quant.cuh: amax, block scale, codes), so the same codes and scales.
    constexpr int kUnits = 4;
    const int lpb = 1 << (xb - 3);
    for (int t = 0; t < rows; ++t) {
      const dev::Bf16x8* xrow = reinterpret_cast<const dev::Bf16x8*>(x16 + skinny::act_row(a, rb + t) * K);
      for (int u0 = warp * 32; u0 < units; u0 += kUnits * kConsumerThreads) {
        dev::Bf16x8 raw[kUnits];
#pragma unroll
        for (int p = 0; p < kUnits; ++p) {
          const int u = u0 + p * kConsumerThreads + lane;
          if (u < units) raw[p] = xrow[u];
        }
        float amax[kUnits];
#pragma unroll
        for (int p = 0; p < kUnits; ++p) {
          const int u = u0 + p * kConsumerThreads + lane;
          float f[8] = {};
          if (u < units) dev::unpack8(raw[p], f);
          amax[p] = dev::fp8_amax8(f);
        }
        for (int o = lpb / 2; o > 0; o >>= 1)
#pragma unroll
          for (int p = 0; p < kUnits; ++p) amax[p] = fmaxf(amax[p], __shfl_xor_sync(0xFFFFFFFFu, amax[p], o));
#pragma unroll
        for (int p = 0; p < kUnits; ++p) {
          const int u = u0 + p * kConsumerThreads + lane;
          if (u >= units) continue;
          float f[8];  // unpacked again rather than kept: 4 units x 8 floats would not fit beside the K loop's registers
          dev::unpack8(raw[p], f);
          const float scale = dev::fp8_block_scale(amax[p]);
          const uint2 codes = dev::fp8_codes8(f, scale);
          if (kStamps && threadIdx.x == 0 && t == 0 && u0 == 0 && p == 0 && stamps[kFp8StQuantFirstUnit] == 0) {
            asm volatile("" ::"r"(codes.x), "r"(codes.y));  // the codes exist before the clock is read
            stamps[kFp8StQuantFirstUnit] = (unsigned long long)(clock64() - t_start);
          }
          stage_unit(t, u, codes);
          if ((u & (lpb - 1)) == 0) xs_s[((8 * u) >> xb) * kMaxRows + t] = scale;
        }
      }
    }
    if (kStamps && threadIdx.x == 0 && stamps[kFp8StQuantLoopEnd] == 0)
      stamps[kFp8StQuantLoopEnd] = (unsigned long long)(clock64() - t_start);
  } else if (sw.h) {
    swiglu_quant_units(a, sw, rb, rows, 0, units, warp, lane, stage_unit,
                       [&](int t, int u, float scale) { xs_s[((8 * u) >> xb) * kMaxRows + t] = scale; });
  } else {
    // The scales' first pass ([block][slot] index ctid) is loaded before the codes and stored after them, so both
    // wait on one L2 round trip (run 66: the scale load after the codes' stage held 5.6 % of the samples). The codes:
    // 2 loads a pass (k = 4096: one pass a row; stream_gemm_kernel has 96 registers, and 4 spilled).
    const int kb0 = ctid / kMaxRows, slot0 = ctid % kMaxRows;
    const float s0 = kb0 < x_blocks && slot0 < rows ? __ldg(a.xs + skinny::act_row(a, rb + slot0) * x_blocks + kb0)
                                                    : 0.0f;
    stage_q_units<2>(a, rb, rows, 0, units, stage_unit);
    if (kb0 < x_blocks) xs_s[ctid] = s0;
  }
  if (kQuantX || sw.h) {
    // The prologues stored the rows' scales: zeros in the unused token slots.
    for (int idx = ctid; idx < x_blocks * kMaxRows; idx += kConsumerThreads)
      if (idx % kMaxRows >= rows) xs_s[idx] = 0.0f;
  } else if (x_blocks * kMaxRows > kConsumerThreads) {
    // The loaded form's later passes (act block 32: k = 5120 is 4 more), their loads first (load_then_put): one
    // load and store a pass waited an L2 round trip each, ~0.35 us under the flood (V4.1 wq_a's stage_rows 2.31 us
    // against V4's 0.92, run 128).
    load_then_put<4>(
        x_blocks * kMaxRows - kConsumerThreads,
        [&](int i) {
          const int idx = i + kConsumerThreads, slot = idx % kMaxRows;
          return slot < rows ? __ldg(a.xs + skinny::act_row(a, rb + slot) * x_blocks + idx / kMaxRows) : 0.0f;
        },
        [&](int i, float v) { xs_s[i + kConsumerThreads] = v; });
  }
  consumer_sync();
}

// The 128-wide block of step g0 + i where g0 (a granule's first step) is a multiple of 4: (g0 + i) / 4 written so
// that the steps of one block give one index the compiler sees (kBlk128: one activation-scale load per 4 steps).
__device__ __forceinline__ int blk4(int g0, int i) { return (g0 >> 2) + (i >> 2); }

// Consumers: tile `tile` (16 weight rows) over all of k against the staged rows; acc = this warp's partial sums
// of its granules in chunk order (fragment layout of the mma's accumulators: rows g, g + 8 x token slots 2c, 2c+1).
// kOne (a group of one row, batch-1 decode): token slot 0 is the only one stored, so the slot-1 accumulators
// (acc[1], acc[3]) are left at zero; acc[0] / acc[2] get the same operations in the same order, so the same bits.
// kBlk128 (the caller guarantees use_blk128: DEEPINFER_STREAM_LOOP=blk128): the block sizes fixed at compile time.
// FP8: the v7 fused-4 form (one scale pair per 4 steps); as a runtime flag the loop issued both forms' predicated
// instructions (per warp and 4-step chunk 205 instructions, ~60 of them the 32-block form's scale loads, shifts and
// FFMAs). MXFP4: one activation-scale index per 4 steps (the 8 steps' loads fold to 2) and the end-of-k check once
// per granule instead of per step. bench/gpu/NOTES.md "Decode stream loop for 128-blocks". The executed operations
// and their order are the same, so the bits.
// kStamps: consumer thread 0 times its full-barrier waits into stamps (Fp8StampSlot: kFp8StFullWaitCycles,
// kFp8StStages, kFp8StFirstData relative to t_start).
template <WeightFormat F, bool kPerm, bool kOne, bool kAct8 = false, bool kBlk128 = false, bool kStamps = false>
__device__ __forceinline__ void consume_tile(const skinny::Args& a, int tile, int rows, const Layout& L,
                                             uint32_t act_s, const float* xs_s, Ring& R, int warp, int lane,
                                             float (&acc)[4], unsigned long long* stamps = nullptr,
                                             long long t_start = 0) {
  using Fmt = skinny::Format<F>;
  using G = Geo<F>;
  constexpr bool kFp4 = G::kFp4;
  const int K = a.k;
  const int steps = K / 32;
  const int chunks = (steps + G::kChunkSteps - 1) / G::kChunkSteps;
  const int g = lane / 4, c4 = lane % 4;
  const int sb = a.w_block_log2, xb = a.act_block_log2;
  // v7: one scale pair per 4 steps (FP8 128-blocks; kBlk128: known at compile time)
  const bool fused4 = (kBlk128 && !kFp4) || (!kFp4 && sb == 7 && xb == 7);
  const int w_kblocks = (K + (1 << sb) - 1) >> sb;
  const uint32_t arow = act_s + uint32_t(min(g, rows - 1) * L.act_stride + c4 * (kAct8 ? 8 : 16));
  const float* xsl = xs_s + 2 * c4;  // token slots 2c, 2c + 1 of each activation block
  const uint8_t* ws_row = kFp4 ? nullptr : a.ws + int64_t((tile * 16) >> sb) * w_kblocks;

  acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
  for (int c = 0; c < chunks; ++c) {
    const int s0 = c * G::kChunkSteps;
    const int ns = min(G::kChunkSteps, steps - s0);
    const int gs = warp * G::kGranule;  // this warp's first step inside the chunk
    const bool mine = gs < ns;          // warp-uniform
    const uint32_t st = R.base + uint32_t(R.stage * R.stride);
    full_wait_stamped<kStamps>(R.full + 8 * R.stage, R.phase, stamps, t_start, kFp8StFirstData, kFp8StFullWaitCycles,
                               kFp8StStages);
    // Fragments to registers first; the stage is released once the math has used them (below).
    uint4 r[4];
    uint4 sc = make_uint4(0, 0, 0, 0);
    if (mine) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (!kFp4 || gs + 2 * i < ns)
          r[i] = lds128(st + uint32_t((kFp4 ? gs / 2 + i : gs + i) * 512 + lane * 16));
        else
          r[i] = make_uint4(0, 0, 0, 0);
      }
      if constexpr (kFp4) sc = lds128(st + uint32_t(kWeightStage + warp * 128 + g * 16));
    }
    // The stage is released after its math (below), where the fragments were used, so their loads have returned
    // and the release's fence has nothing left to drain (run 172, against releasing right after the loads: batch 1
    // -0.9 % V4 / -0.8 % V4.1, batch 8 -3.9 % / -6.2 %).
    const uint32_t empty_bar = R.empty + 8 * R.stage;
    R.advance();
    if (!mine) {
      warp_release_stage(empty_bar);
      continue;
    }

    float dblk[4];
#pragma unroll
    for (int i = 0; i < G::kGranule; ++i) {
      const int s = s0 + gs + i;
      if (kFp4 && !kBlk128 && s >= steps) break;  // MXFP4: a half granule at the end of k (k / 32 % 8 == 4)
      if (kFp4 && kBlk128 && i == 4 && ns - gs <= 4) break;  // the same, tested once per granule (k % 128 == 0)
      const int k0 = s * 32;
      uint32_t h0[4], h1[4];
      float sw0, sw1;
      if constexpr (kFp4) {
        const uint4 q4 = r[i / 2];
        if constexpr (kPerm) {
          widen_fp4_perm(i % 2 ? q4.z : q4.x, h0);
          widen_fp4_perm(i % 2 ? q4.w : q4.y, h1);
        } else {
          Fmt::widen(i % 2 ? q4.z : q4.x, h0);
          Fmt::widen(i % 2 ? q4.w : q4.y, h1);
        }
        const uint32_t w0 = i < 4 ? sc.x : sc.y, w1 = i < 4 ? sc.z : sc.w;
        sw0 = fp4_scale((w0 >> (8 * (i % 4))) & 0xFFu);
        sw1 = fp4_scale((w1 >> (8 * (i % 4))) & 0xFFu);
      } else {
        Fmt::widen(make_uint2(r[i].x, r[i].y), h0);
        Fmt::widen(make_uint2(r[i].z, r[i].w), h1);
        sw0 = sw1 = (!fused4 || i == 3) ? dev::e8m0_to_float(__ldg(ws_row + (kBlk128 ? blk4(s0 + gs, i) : k0 >> sb)))
                                        : 0.0f;
      }
      uint4 x;
      if constexpr (kAct8) {  // the staged e4m3 bytes widened here: the f16 words stage_rows<F, false> would store
        const uint2 b = lds64(arow + uint32_t(s * 32));
        skinny::e4m3x4_to_f16x4(b.x, x.x, x.y);
        skinny::e4m3x4_to_f16x4(b.y, x.z, x.w);
      } else {
        x = lds128(arow + uint32_t(s * 64));
      }
      const bool open = !fused4 || i == 0, close = !fused4 || i == 3;
      if (open)
        skinny::mma_f16<false>(dblk, h0[0], h1[0], h0[1], h1[1], x.x, x.y);
      else
        skinny::mma_f16<true>(dblk, h0[0], h1[0], h0[1], h1[1], x.x, x.y);
      skinny::mma_f16<true>(dblk, h0[2], h1[2], h0[3], h1[3], x.z, x.w);
      if (close) {
        if constexpr (kOne) {
          const float sx = xsl[(kBlk128 ? blk4(s0 + gs, i) : k0 >> xb) * kMaxRows];
          acc[0] += dblk[0] * (sw0 * sx);
          acc[2] += dblk[2] * (sw1 * sx);
        } else {
          const float2 sx = *reinterpret_cast<const float2*>(xsl + (kBlk128 ? blk4(s0 + gs, i) : k0 >> xb) * kMaxRows);
          acc[0] += dblk[0] * (sw0 * sx.x);
          acc[1] += dblk[1] * (sw0 * sx.y);
          acc[2] += dblk[2] * (sw1 * sx.x);
          acc[3] += dblk[3] * (sw1 * sx.y);
        }
      }
    }
    warp_release_stage(empty_bar);  // mbarrier.cuh: the reads before the next bulk copy
  }
}

// The output of tile `tile` held by reducer thread ctid < 128 (reduce_store): row m, column n. Lane ln ^ 4 of the
// same warp holds column n ^ 1 of the same row (ln / 4 is the column's low bits, ln % 4 and the warp the row's).
__device__ __forceinline__ void reduce_index(int ctid, int tile, int rb, int& m, int& n) {
  const int i = ctid / 32, ln = ctid % 32;
  n = tile * 16 + ln / 4 + (i >= 2 ? 8 : 0);
  m = rb + 2 * (ln % 4) + (i & 1);
}

// kRope: the query RoPE of a row of heads (layers/norm_rope/rope.cuh, model-spec §2) on the bf16 outputs, as
// fp8_gemm (bf16 out) then rope() give them: column n of head h = n / head_dim is channel c = n % head_dim; where
// c >= head_dim - rope_dim, the pair (x_{2i}, x_{2i+1}) of the bf16-rounded sums (i = (c - head_dim + rope_dim) / 2;
// head_dim and rope_dim even, so a pair is columns n & ~1, n | 1) is rotated by rope_angle(positions[m],
// inv_freq[i]) with rope_rotate, the functions rope_kernel inlines, so the same bits. The partner's sum comes from
// lane ^ 4 (reduce_index); the 128 reducer threads are whole warps, all of them shuffle. The angle (the accurate
// sincosf) is computed before the partials' barrier, while the other warps finish their K loop.
struct RopeColumn {
  bool rotate = false;
  dev::RopeAngle a{0.0f, 1.0f};
};
__device__ __forceinline__ RopeColumn rope_column(const RopeEpilogue& rope, int m, int n, int re, int N) {
  RopeColumn r;
  const int c = n % rope.head_dim, first = rope.head_dim - rope.rope_dim;
  r.rotate = n < N && m < re && c >= first;
  if (r.rotate) r.a = dev::rope_angle(__ldg(rope.positions + m), __ldg(rope.inv_freq + (c - first) / 2), false);
  return r;
}
__device__ __forceinline__ __nv_bfloat16 rope_value(float sum, int n, const RopeColumn& r) {
  const float other = __shfl_xor_sync(0xFFFFFFFFu, sum, 4);  // column n ^ 1, the same row
  if (!r.rotate) return __float2bfloat16_rn(sum);             // skinny::store_out's rounding
  const bool odd = n & 1;
  const __nv_bfloat162 v = dev::rope_rotate(__floats2bfloat162_rn(odd ? other : sum, odd ? sum : other), r.a);
  return odd ? __high2bfloat16(v) : __low2bfloat16(v);
}

// Consumers: the 8 warps' partials of a tile added in warp order 0..7 and stored (rows [rb, re), n < N). Two
// partial buffers alternate (`buf`), so one barrier per tile suffices (a buffer is rewritten only after the next
// tile's barrier, which follows every read of it). kRope (bf16 out): the stored values rotated (rope_value).
template <class OutT, bool kRope = false>
__device__ __forceinline__ void reduce_store(float* partial, int buf, const float (&acc)[4], int warp, int lane,
                                             int tile, int rb, int re, int N, OutT* y,
                                             const RopeEpilogue* rope = nullptr) {
  static_assert(!kRope || std::is_same_v<OutT, __nv_bfloat16>, "the RoPE epilogue stores bf16");
  const int ctid = threadIdx.x;
  float* pb = partial + buf * (kConsumerWarps * 128);
#pragma unroll
  for (int i = 0; i < 4; ++i) pb[warp * 128 + i * 32 + lane] = acc[i];
  if constexpr (kRope) {
    int m = 0, n = 0;
    RopeColumn rc;
    if (ctid < 128) {
      reduce_index(ctid, tile, rb, m, n);
      rc = rope_column(*rope, m, n, re, N);
    }
    consumer_sync();
    if (ctid < 128) {
      float sum = 0.0f;
#pragma unroll
      for (int w2 = 0; w2 < kConsumerWarps; ++w2) sum += pb[w2 * 128 + ctid];
      const __nv_bfloat16 v = rope_value(sum, n, rc);
      if (n < N && m < re) y[int64_t(m) * N + n] = v;
    }
  } else {
    consumer_sync();
    if (ctid < 128) {
      float sum = 0.0f;
#pragma unroll
      for (int w2 = 0; w2 < kConsumerWarps; ++w2) sum += pb[w2 * 128 + ctid];
      int m, n;
      reduce_index(ctid, tile, rb, m, n);
      if (n < N && m < re) skinny::store_out(y, int64_t(m) * N + n, sum);
    }
  }
}

// kPerm: widen_fp4_perm (MXFP4 only; FP8 instantiates false). kBlk128: consume_tile's 128-block loop (the host
// launches it only where use_blk128 holds; MXFP4 only with kPerm). kAct8: the activations staged as e4m3 bytes
// (Layout act8, as decode MoE v9's act8 form: the same f16 words reach the mma, so the same bits); the host takes it
// only under ring_stages() (FP8), where the f16 staging leaves one block per SM and the e4m3 staging two. kQuantX:
// the activations from P.x_bf16 (stage_rows' quantizing prologue). kRope (FP8, bf16 out): P.rope's RoPE in the
// epilogue (reduce_store), bench/gpu/NOTES.md "The query RoPE in wq_b's epilogue". kStamps: the phase stamps
// (Fp8StampSlot) into P.stamps[blockIdx.x]; a diagnostic instantiation (FP8 only, launch_stream).
template <WeightFormat F, class OutT, bool kPerm, bool kBlk128 = false, bool kAct8 = false, bool kQuantX = false,
          bool kRope = false, bool kStamps = false>
__global__ void __launch_bounds__(kThreads, 2) stream_gemm_kernel(const Params P) {
  using G = Geo<F>;
  const skinny::Args& a = P.pa.base;
  extern __shared__ __align__(128) uint8_t smem[];
  const int N = a.n, K = a.k;
  const int tiles = (N + 15) / 16;
  const int NS = P.stages;
  const Layout L(NS, G::kStageBytes, P.rows_cap, K, a.act_block_log2, kAct8);
  const uint32_t s_base = dev::smem_u32(smem);
  Ring R = ring_at(s_base, L, NS, G::kStageBytes);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  unsigned long long* stamps = kStamps ? P.stamps + size_t(blockIdx.x) * kFp8StampSlots : nullptr;
  if (P.entry_trigger) pdl_launch_dependents();
  if (threadIdx.x == 0) {
    init_ring(R);
    mbar_fence_init();
    if constexpr (kStamps) {
      for (int i = 0; i < kFp8StampSlots; ++i) stamps[i] = 0;
      stamps[kFp8StStartNs] = dev::globaltimer_ns();
    }
  }
  __syncthreads();  // the last block-wide barrier: from here producer and consumers run apart
  const long long t_start = kStamps ? clock64() : 0;

  const int64_t items = int64_t(P.groups) * tiles;
  const int64_t i0 = items * blockIdx.x / gridDim.x, i1 = items * (blockIdx.x + 1) / gridDim.x;

  if (warp == kConsumerWarps) {
    // ------------------------------------------------------------------------------------------- producer
    if (lane != 0) return;
    if (a.expert_ids) pdl_wait();  // the groups are the routing's output; dense items read weights only
    const long long t_waited = kStamps ? clock64() : 0;
    long long empty_wait = 0;
    for (int64_t it = i0; it < i1; ++it) {
      int rb, re;
      int64_t e;
      group_rows(a, int(it / tiles), P.rows_cap, rb, re, e);
      if (rb >= re) continue;
      produce_tile<F, kStamps>(P.pa, int(it % tiles), e, R, &empty_wait);
    }
    if constexpr (kStamps) {
      stamps[kFp8StProdWaited] = (unsigned long long)(t_waited - t_start);
      stamps[kFp8StProdEnd] = (unsigned long long)(clock64() - t_start);
      stamps[kFp8StEmptyWaitCycles] = (unsigned long long)empty_wait;
    }
    return;
  }

  // --------------------------------------------------------------------------------------------- consumers
  // FP8, dense: the line of the block's first weight scales (consume_tile's ws_row; lane 0 the warp's first granule,
  // lane 1 the row's last byte, for a row across two lines) towards L1 before the wait: a weight, not a predecessor's
  // output. Read where it is used, each warp's first scale load was issued only after the stage's full barrier, and
  // the warp waited for its L2 round trip right after releasing the stage, before its next stage (SASS of
  // stream_gemm_kernel<FP8, bf16, false, *, false, *, *>, sm_90a: SYNCS.PHASECHK, the fragments' LDS,
  // LDG.E.U8.CONSTANT, the HMMAs, the release's MEMBAR and arrive, then the FMUL of the scale). After the activations'
  // staging the block's two stages have landed, so the consumers, not the copies, set the pace there: the round trip
  // delayed the next stage's release, and with it the copy that refills it. The later chunks' scales lie in the same
  // lines where the row spans at most two (k / 128 <= 128 bytes at V4's 128-wide blocks); a middle line of a longer
  // row (V4.1's k / 32) is read where it is used, as before. A hint: the same loads of the same bytes, the same bits.
  if constexpr (!G::kFp4) {
    if (!a.expert_ids && i0 < i1 && lane < 2) {
      const int sb = a.w_block_log2, w_kblocks = (K + (1 << sb) - 1) >> sb;
      const uint8_t* ws_row = a.ws + int64_t((int(i0 % tiles) * 16) >> sb) * w_kblocks;
      const uint8_t* p = ws_row + (lane == 0 ? (warp * G::kGranule * 32) >> sb : w_kblocks - 1);
      asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p));
    }
  }
  pdl_wait();  // activations, expert ids / offsets and the output buffer: the predecessors' (cuda/launch.h)
  if (kStamps && threadIdx.x == 0) stamps[kFp8StConsWaited] = (unsigned long long)(clock64() - t_start);
  const uint32_t act_s = s_base + uint32_t(L.act);
  float* xs_s = reinterpret_cast<float*>(smem + L.xs);
  float* partial = reinterpret_cast<float*>(smem + L.partial);
  auto* y = static_cast<OutT*>(a.y);

  int cur_grp = -1, buf = 0;
  for (int64_t it = i0; it < i1; ++it) {
    int rb, re;
    int64_t e;
    const int grp = int(it / tiles), tile = int(it % tiles);
    group_rows(a, grp, P.rows_cap, rb, re, e);
    if (rb >= re) continue;
    const int rows = re - rb;
    if (grp != cur_grp) {
      const long long t0 = kStamps ? clock64() : 0;
      stage_rows<F, kAct8, kQuantX, kStamps>(a, P.swiglu, L, act_s, xs_s, rb, rows, warp, lane, P.x_bf16, stamps,
                                             t_start);
      if (kStamps && threadIdx.x == 0) {
        const long long t1 = clock64();
        if (cur_grp < 0) stamps[kFp8StFirstStaged] = (unsigned long long)(t1 - t_start);
        stamps[kFp8StStageRowsCycles] += (unsigned long long)(t1 - t0);
      }
      cur_grp = grp;
    }
    float acc[4];
    if (rows == 1)
      consume_tile<F, kPerm, true, kAct8, kBlk128, kStamps>(a, tile, rows, L, act_s, xs_s, R, warp, lane, acc, stamps,
                                                            t_start);
    else
      consume_tile<F, kPerm, false, kAct8, kBlk128, kStamps>(a, tile, rows, L, act_s, xs_s, R, warp, lane, acc,
                                                             stamps, t_start);
    // The block's last weight chunk is consumed: the next grid may start (unless it was let at the top).
    if (it == i1 - 1 && !P.entry_trigger) pdl_launch_dependents();
    const long long t_red = kStamps ? clock64() : 0;
    reduce_store<OutT, kRope>(partial, buf, acc, warp, lane, tile, rb, re, N, y, &P.rope);
    buf ^= 1;
    if (kStamps && threadIdx.x == 0) {
      stamps[kFp8StReduceCycles] += (unsigned long long)(clock64() - t_red);
      stamps[kFp8StItems] += 1;
    }
  }
  if (kStamps && threadIdx.x == 0) {
    stamps[kFp8StConsEnd] = (unsigned long long)(clock64() - t_start);
    stamps[kFp8StEndNs] = dev::globaltimer_ns();
  }
}

// ---------------------------------------------------------------------------------------------------------
// Decode MoE v9 (bench/gpu/NOTES.md "Decode MoE v9"): the shared expert's product and the routed experts' product
// of one MoE stage in ONE persistent launch, so that the batch-1 MoE is routing -> w1|w3 (shared + routed) ->
// w2 (shared + routed) + combine, three dependent kernels, with no per-expert or per-launch tail between them.
//   Segment 0: the shared expert, FP8, dense rows (groups of rows_cap rows), packed for decode v8.
//   Segment 1: the routed experts, MXFP4, expert groups (expert_ids / row_offsets), packed for decode v8.
// Work items are (group, tile) of each segment; block b of B takes segment 0's items [b I0 / B, (b + 1) I0 / B),
// then segment 1's [b I1 / B, (b + 1) I1 / B): every block streams the same mix of FP8 (memory-bound) and MXFP4
// (issue-bound, bench/gpu/NOTES.md "Decode v8") bytes, so no SM idles on a cheap format while others work, and
// its routed items are consecutive tiles of one or two experts (one activation staging each). Each item is one
// tile over all of k in ONE block with consume_tile / reduce_store: the same per-element K order as
// stream_gemm_kernel, so the same bits.
// The ring's stage stride is the MXFP4 stage (16 KB + 1 KB of scales) for both formats.
// PDL: the producer streams segment 0's weights without waiting (they and its item list are fixed by the shapes)
// and waits for the predecessor only before its first routed item (the routing's groups); the consumers wait
// before anything else. So a launch with PDL fills its ring with the shared expert's weights while the routing
// (or w1|w3) drains.
// Combine (the w2 launch, combine.tile_count set): after storing a tile, a block counts itself on that tile
// (fence, then one atomic); the block that completes the tile's count (every non-empty group of both segments
// has the tile) writes y[r][n] = bf16(sum_{k = 0 .. top_k-1} routed[pair_slot[r, k]][n] + shared[r][n]) for the
// tile's 16 columns and every row: combine_kernel's fp32 sum in its order, so the same bits, whichever block is
// last. The counters are zero at launch, and that block sets its tile's back to zero (the MoE's kept counters,
// layers/moe/moe_gpu.h MoeGpu::counters).
struct Segment {
  packed::Args pa;     // as launch_stream takes it (y: fp32 [rows, n])
  SwigluInput swiglu;  // h set: activations from the SwiGLU prologue
  int groups = 0;      // groups launched (the host's bound: a fixed shape per row count)
  int rows_cap = 1;    // rows per group at most (<= 8)
  // Device count of the groups that hold rows, which come first (the MoE dispatch writes its non-empty groups in
  // ascending order, then the empty ones); read after pdl_wait(). The blocks split only those groups' items, so
  // the empty groups of the host's bound leave no block idle (NOTES "Decode MoE at batch 16-256"). Null: all
  // `groups`. Which block computes an item does not change its bits.
  const int* used_groups = nullptr;
};

struct CombineArgs {
  __nv_bfloat16* y = nullptr;          // [rows, n]
  const int32_t* pair_slot = nullptr;  // [rows, top_k]: segment 1's output row of each (row, k) pair
  int rows = 0, top_k = 0;
  uint32_t* tile_count = nullptr;      // [tiles]; null: no combine
};

struct PairParams {
  Segment seg[2];  // [0] shared expert (FP8, dense), [1] routed experts (MXFP4, grouped)
  int stages = 4;
  int rows_cap = 1;  // max of the segments'
  bool act8 = false;  // activations staged as e4m3 bytes (Layout act8; set by launch_pair from the switch)
  CombineArgs combine;
};

__host__ __device__ inline Layout pair_layout(const PairParams& P) {
  const skinny::Args &a0 = P.seg[0].pa.base, &a1 = P.seg[1].pa.base;
  return Layout(P.stages, Geo<WeightFormat::MXFP4>::kStageBytes, P.rows_cap, a0.k > a1.k ? a0.k : a1.k,
                a0.act_block_log2 < a1.act_block_log2 ? a0.act_block_log2 : a1.act_block_log2, P.act8);
}

template <class OutT, bool kCombine, bool kPerm, bool kAct8>
__global__ void __launch_bounds__(kThreads, 2) moe_pair_kernel(const PairParams P) {
  using G1 = Geo<WeightFormat::MXFP4>;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint32_t s_last, s_expected;
  const Segment& S0 = P.seg[0];
  const Segment& S1 = P.seg[1];
  const int tiles0 = (S0.pa.base.n + 15) / 16, tiles1 = (S1.pa.base.n + 15) / 16;
  const int I0 = S0.groups * tiles0;  // < 2^31: the host checks
  // This block's items: segment 0's [f0, e0), then segment 1's [f1, e1) (each segment split in proportion).
  // Segment 0's range is fixed by the shapes; segment 1's depends on its used groups (a device count written by
  // the routing), so it is known only after pdl_wait() (seg1_range, called by producer and consumers alike).
  const int f0 = int(int64_t(I0) * blockIdx.x / gridDim.x), e0 = int(int64_t(I0) * (blockIdx.x + 1) / gridDim.x);
  const int n0 = e0 - f0;
  int f1 = 0, e1 = 0;
  auto seg1_range = [&] {
    int g1 = S1.groups;
    if (S1.used_groups) g1 = min(g1, max(0, __ldcg(S1.used_groups)));
    const int I1 = g1 * tiles1;
    f1 = int(int64_t(I1) * blockIdx.x / gridDim.x);
    e1 = int(int64_t(I1) * (blockIdx.x + 1) / gridDim.x);
  };
  const int NS = P.stages;
  const Layout L = pair_layout(P);
  const uint32_t s_base = dev::smem_u32(smem);
  Ring R = ring_at(s_base, L, NS, G1::kStageBytes);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (threadIdx.x == 0) {
    init_ring(R);
    mbar_fence_init();
  }
  __syncthreads();  // the last block-wide barrier: from here producer and consumers run apart

  // The block's item `it`: segment, group, tile and the group's rows / expert.
  auto decode = [&](int it, int& s, int& grp, int& tile, int& rb, int& re, int64_t& e) {
    if (it < n0) {
      s = 0;
      grp = (f0 + it) / tiles0;
      tile = (f0 + it) - grp * tiles0;
      group_rows(S0.pa.base, grp, S0.rows_cap, rb, re, e);
    } else {
      s = 1;
      grp = (f1 + it - n0) / tiles1;
      tile = (f1 + it - n0) - grp * tiles1;
      group_rows(S1.pa.base, grp, S1.rows_cap, rb, re, e);
    }
  };

  if (warp == kConsumerWarps) {
    // ------------------------------------------------------------------------------------------- producer
    if (lane != 0) return;
    // Segment 0's weights first, without waiting (they and the items are fixed by the shapes); then the routed
    // groups, the routing's output.
    for (int it = 0; it < n0; ++it) {
      int s, grp, tile, rb, re;
      int64_t e;
      decode(it, s, grp, tile, rb, re, e);
      if (rb >= re) continue;
      produce_tile<WeightFormat::FP8>(S0.pa, tile, e, R);
    }
    pdl_wait();
    seg1_range();
    const int items = n0 + (e1 - f1);
    for (int it = n0; it < items; ++it) {
      int s, grp, tile, rb, re;
      int64_t e;
      decode(it, s, grp, tile, rb, re, e);
      if (rb >= re) continue;
      if (s == 0)
        produce_tile<WeightFormat::FP8>(S0.pa, tile, e, R);
      else
        produce_tile<WeightFormat::MXFP4>(S1.pa, tile, e, R);
    }
    return;
  }

  // --------------------------------------------------------------------------------------------- consumers
  pdl_wait();  // activations, groups and the outputs: the predecessors' (cuda/launch.h)
  seg1_range();
  const int items = n0 + (e1 - f1);
  const uint32_t act_s = s_base + uint32_t(L.act);
  float* xs_s = reinterpret_cast<float*>(smem + L.xs);
  float* partial = reinterpret_cast<float*>(smem + L.partial);
  if (kCombine && warp == 0) {  // arrivals per tile: the non-empty groups of both segments
    const skinny::Args& a1 = S1.pa.base;
    int count = 0;
    for (int g = lane; g < S1.groups; g += 32) {
      const int rb = a1.row_offsets[g], re = min(a1.row_offsets[g + 1], rb + S1.rows_cap);
      count += rb < re;
    }
    count = __reduce_add_sync(0xFFFFFFFFu, count);
    for (int g = 0; g < S0.groups; ++g) count += g * S0.rows_cap < S0.pa.base.rows;
    if (lane == 0) s_expected = uint32_t(count);  // read after the first tile's barriers
  }

  int cur = -1, buf = 0;  // the staged (segment, group): segment << 24 | group (the host keeps groups < 2^24)
  for (int it = 0; it < items; ++it) {
    int s, grp, tile, rb, re;
    int64_t e;
    decode(it, s, grp, tile, rb, re, e);
    if (rb >= re) continue;
    const int rows = re - rb;
    if ((s << 24 | grp) != cur) {
      if (s == 0)
        stage_rows<WeightFormat::FP8, kAct8>(S0.pa.base, S0.swiglu, L, act_s, xs_s, rb, rows, warp, lane);
      else
        stage_rows<WeightFormat::MXFP4, kAct8>(S1.pa.base, S1.swiglu, L, act_s, xs_s, rb, rows, warp, lane);
      cur = s << 24 | grp;
    }
    float acc[4];
    if (s == 0) {  // FP8 is memory-bound: one form (kOne only trims the issue-bound MXFP4 loop)
      consume_tile<WeightFormat::FP8, false, false, kAct8>(S0.pa.base, tile, rows, L, act_s, xs_s, R, warp, lane, acc);
    } else {
      if (rows == 1)
        consume_tile<WeightFormat::MXFP4, kPerm, true, kAct8>(S1.pa.base, tile, rows, L, act_s, xs_s, R, warp, lane,
                                                              acc);
      else
        consume_tile<WeightFormat::MXFP4, kPerm, false, kAct8>(S1.pa.base, tile, rows, L, act_s, xs_s, R, warp, lane,
                                                               acc);
    }
    if (it == items - 1) pdl_launch_dependents();  // the block's last weight chunk is consumed: the next grid may start
    const int N = s == 0 ? S0.pa.base.n : S1.pa.base.n;
    reduce_store<OutT>(partial, buf, acc, warp, lane, tile, rb, re, N,
                       static_cast<OutT*>(s == 0 ? S0.pa.base.y : S1.pa.base.y));
    buf ^= 1;
    if constexpr (kCombine) {
      __threadfence();  // this tile's stores before the count
      consumer_sync();
      if (threadIdx.x == 0) s_last = atomicAdd(P.combine.tile_count + tile, 1u) + 1u == s_expected;
      consumer_sync();
      if (s_last) {
        if (threadIdx.x == 0) P.combine.tile_count[tile] = 0;  // every block of the tile has counted
        __threadfence();  // the other blocks' stores of this tile, counted before ours, are visible (read via L2)
        const float* routed = static_cast<const float*>(S1.pa.base.y);
        const float* shared = static_cast<const float*>(S0.pa.base.y);
        const int K = P.combine.top_k;
        for (int v = threadIdx.x; v < P.combine.rows * 16; v += kConsumerThreads) {
          const int r = v / 16, n = tile * 16 + v % 16;
          if (n >= N) continue;
          float sum = 0.0f;
          // Each output in bf16 first, as the reference's GEMMs return it (moe_combine.cuh combine_sum4's order).
          for (int k = 0; k < K; ++k)
            sum += dev::round_bf16(__ldcg(routed + int64_t(P.combine.pair_slot[r * K + k]) * N + n));
          sum += dev::round_bf16(__ldcg(shared + int64_t(r) * N + n));
          P.combine.y[int64_t(r) * N + n] = __float2bfloat16_rn(sum);
        }
      }
    }
  }
}

// The arguments of a routed MXFP4 expert product (decode v5 / v7 / v8): one group per expert, the e8m0 weight scales
// per 32 columns. Used by mxfp4_grouped_gemm[_swiglu] (layers/moe/mxfp4_experts.cu) and the MoE pair kernels
// (layers/moe/moe_gpu.cu).
inline packed::Args mxfp4_expert_args(const uint8_t* q, const float* xs, int act_block, const Fp4Experts& w,
                                      const int32_t* expert_ids, const int32_t* row_offsets, float* y,
                                      const int32_t* row_index) {
  packed::Args pa;
  skinny::Args& a = pa.base;
  a.q = q;
  a.xs = xs;
  a.act_block_log2 = skinny::log2_exact(act_block);
  a.w = w.weight;
  a.ws = w.scale;
  a.w_block_log2 = 5;
  a.n = int(w.n);
  a.k = int(w.k);
  a.expert_ids = expert_ids;
  a.row_offsets = row_offsets;
  a.y = y;
  a.row_index = row_index;
  pa.wp = w.packed_weight;
  pa.sp = w.packed_scale;
  pa.front_items = w.front_items;
  return pa;
}

// Resolves DecodeKernel::Auto: v7 unless DEEPINFER_DECODE_KERNEL=stream (read once per process).
inline bool wants_stream(DecodeKernel d) {
  if (d != DecodeKernel::Auto) return d == DecodeKernel::Stream;
  static EnvSwitch<bool> env{"DEEPINFER_DECODE_KERNEL", [](const char* v) { return env_equals(v, "stream"); }};
  return env.get();
}

// True when `kernel` has not yet been given a dynamic shared-memory limit of at least `bytes` on the current device
// (and records it): the caller then raises the limit. Keyed by (device, kernel address): a function attribute is
// set in one device's context, and without relocatable device code every translation unit has its own copy of the
// kernel. (Keyed by address alone, the rank on the second GPU of an EP test launched unconfigured after the first
// GPU's rank had raised it, and its peer then waited in a collective for ever: H200 run 21.)
inline bool raised_smem_limit(const void* kernel, size_t bytes) {
  int device = 0;
  DI_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, size_t> limits;
  std::lock_guard<std::mutex> lock(mu);
  size_t& limit = limits[{device, kernel}];
  if (bytes <= limit) return false;
  limit = bytes;
  return true;
}

// Lets `kernel` take `bytes` of dynamic shared memory, with all of the unified L1 / shared memory as shared memory
// (so that two blocks of ~110 KB fit on one SM). The attributes are set only when a larger carve-up comes
// (raised_smem_limit); that is remembered per kernel ADDRESS: without relocatable device code every translation unit
// that launches a template has its own copy of the kernel, while the statics of an inline function are one per
// program (a single per-instantiation counter let moe_gpu.cu's copy launch unconfigured after fp8_gemm.cu's copy had
// been raised: cudaErrorInvalidValue, H200 run 17).
template <class... Params>
inline void allow_smem(void (*kernel)(Params...), size_t bytes) {
  if (!raised_smem_limit(reinterpret_cast<const void*>(kernel), bytes)) return;
  DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     int(cudaSharedmemCarveoutMaxShared)));
}

// One launch of a stream kernel: `blocks` blocks of kThreads (cluster_x > 1: clusters of that many along x), `smem`
// bytes of dynamic shared memory, with PDL where `pdl` (cuda/launch.h).
template <class... Params, class Arg>
inline void launch_blocks(void (*kernel)(Params...), const Arg& arg, int64_t blocks, size_t smem, cudaStream_t stream,
                          bool pdl, unsigned cluster_x = 1) {
  LaunchSpec spec;
  spec.grid = dim3(unsigned(blocks));
  spec.block = dim3(kThreads);
  spec.smem = smem;
  spec.stream = stream;
  spec.cluster_x = cluster_x;
  spec.pdl = pdl;
  DI_CUDA_CHECK(launch(spec, kernel, arg));
}

// The MXFP4 product on wgmma (cuda/stream_fp4_wgmma.cuh, included at the end of this header):
// on unless DEEPINFER_STREAM_FP4=f16; false (nothing launched) where it is off or does not apply.
template <class OutT>
bool launch_fp4_wgmma(const packed::Args& pa, int groups, int64_t max_rows, cudaStream_t stream,
                      const SwigluInput& swiglu, bool pdl);

// The device's SM count, shared memory per SM and the per-block opt-in limit, read once.
inline int3 device_smem_limits() {
  static const int3 limits = [] {
    int dev = 0, sm = 132, per_sm = 233472, optin = 232448;
    if (cudaGetDevice(&dev) == cudaSuccess) {
      cudaDeviceGetAttribute(&sm, cudaDevAttrMultiProcessorCount, dev);
      cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    }
    return make_int3(sm, per_sm, optin);
  }();
  return limits;
}

// The ring of a stream launch: two blocks per SM of `depth` stages (2..kMaxStages; 0: of 6 down to 4) where they fit
// (f16-staged activations, then with depth > 0 e4m3-staged ones: at 8 rows and k = 8192 the f16 rows alone take 131
// KB, the e4m3 rows 66 KB); else one block of as many stages as fit, up to kMaxStages. stages 0: it does not fit.
struct StreamRing {
  int sms = 0, stages = 0, per_sm_blocks = 0;
  bool act8 = false;
  size_t smem = 0;
};
template <WeightFormat F>
inline StreamRing stream_ring(const packed::Args& pa, int rows_cap, int depth) {
  const int3 dev_limits = device_smem_limits();
  const int per_sm = dev_limits.y, optin = dev_limits.z;
  StreamRing r;
  r.sms = dev_limits.x;
  auto total = [&](int ns) {
    return Layout(ns, Geo<F>::kStageBytes, rows_cap, pa.base.k, pa.base.act_block_log2, r.act8).total;
  };
  // 1 KB of shared memory per block is reserved by the system.
  const int most = depth > 0 ? std::clamp(depth, 2, kMaxStages) : 6, least = std::min(most, 4);
  for (int pass = 0; pass < (depth > 0 ? 2 : 1) && !r.stages; ++pass) {
    r.act8 = pass == 1;
    for (int ns = most; ns >= least; --ns)
      if (2 * (total(ns) + 1024) <= size_t(per_sm) && total(ns) <= size_t(optin)) {
        r.stages = ns;
        r.per_sm_blocks = 2;
        break;
      }
  }
  if (!r.stages) {
    r.act8 = false;
    for (int ns = kMaxStages; ns >= 2; --ns)
      if (total(ns) <= size_t(optin)) {
        r.stages = ns;
        r.per_sm_blocks = 1;
        break;
      }
  }
  if (r.stages) r.smem = total(r.stages);
  return r;
}

// Host side: stages / blocks per SM from the shared-memory budget: dense FP8 products (no expert ids) take two blocks
// of ring_stages() stages (2 by default) where they fit; the others, and every product with
// DEEPINFER_STREAM_STAGES=0, two blocks of >= 4 stages (up to 6) when they fit; else one block with as many stages as
// fit, up to 12. A persistent grid of SMs x blocks per SM. Returns false (and
// launches nothing) when the kernel does not apply: more than 8 rows in a group, or too little shared memory.
// Without expert ids, max_rows is the rows of a group (rows_cap) and groups = ceil(rows / max_rows).
// pdl: launch with programmatic dependent launch (cuda/launch.h; fp8_gemm's decode products). Off for callers whose
// neighbouring kernels are launched plainly (the MoE); the kernel is correct either way.
// kQuantX (FP8 dense products): the activations are x_bf16's rows, quantized in the kernel's prologue (pa.base.q /
// xs unused). kRope (FP8 dense products, bf16 out): `rope` rotates the output rows' heads in the epilogue
// (reduce_store). grid (cuda/kernels.h StreamGrid): fewer blocks than the persistent grid, the same stages and kernel
// (the same bits: a work item is one tile over all of k in one block, whichever block takes it); the MXFP4 wgmma
// consumer ignores it.
template <WeightFormat F, class OutT, bool kQuantX = false, bool kRope = false>
inline bool launch_stream(const packed::Args& pa, int groups, int64_t max_rows, cudaStream_t stream,
                          const SwigluInput& swiglu = {}, bool pdl = false, const __nv_bfloat16* x_bf16 = nullptr,
                          const RopeEpilogue& rope = {}, const StreamGrid& grid = {}) {
  static_assert(!kQuantX || F == WeightFormat::FP8, "the quantizing prologue is the FP8 products'");
  static_assert(!kRope || (F == WeightFormat::FP8 && std::is_same_v<OutT, __nv_bfloat16>),
                "the RoPE epilogue is the FP8 products' with bf16 output");
  if (max_rows > kMaxRows || max_rows < 1) return false;
  if constexpr (F == WeightFormat::MXFP4)  // the wgmma consumer (stream_fp4_wgmma.cuh), where it applies
    if (launch_fp4_wgmma<OutT>(pa, groups, max_rows, stream, swiglu, pdl)) return true;
  const int depth = F == WeightFormat::FP8 && !pa.base.expert_ids ? ring_stages() : 0;
  const StreamRing ring = stream_ring<F>(pa, int(max_rows), depth);
  if (!ring.stages) return false;
  const int sms = ring.sms, rows_cap = int(max_rows), stages = ring.stages, per_sm_blocks = ring.per_sm_blocks;
  const bool act8 = ring.act8;
  Params P;
  P.pa = pa;
  P.pa.weights_evict_first = stream_weights_evict_first(F == WeightFormat::MXFP4, groups);
  P.groups = groups;
  P.stages = stages;
  P.rows_cap = rows_cap;
  P.swiglu = swiglu;
  P.x_bf16 = x_bf16;
  P.rope = rope;
  P.entry_trigger = entry_trigger();
  const size_t smem = ring.smem;
  constexpr bool kFp4 = F == WeightFormat::MXFP4;
  const bool blk128 = use_blk128(pa.base, kFp4);
  const bool perm = kFp4 && fp4_perm_widen();
  // MXFP4: perm x blk128 (the shift widening keeps the generic loop); FP8: blk128 x act8.
  auto kernel = perm     ? (blk128 ? stream_gemm_kernel<F, OutT, kFp4, true> : stream_gemm_kernel<F, OutT, kFp4, false>)
                : blk128 ? (act8 ? stream_gemm_kernel<F, OutT, false, !kFp4, !kFp4, kQuantX, kRope>
                                 : stream_gemm_kernel<F, OutT, false, !kFp4, false, kQuantX, kRope>)
                : act8   ? stream_gemm_kernel<F, OutT, false, false, !kFp4, kQuantX, kRope>
                         : stream_gemm_kernel<F, OutT, false, false, false, kQuantX, kRope>;
  const int64_t items = int64_t(groups) * ((pa.base.n + 15) / 16);
  int64_t slots = int64_t(sms) * per_sm_blocks;
  if (grid.capped()) {
    if (grid.blocks_per_sm > 0) slots = int64_t(sms) * std::min(per_sm_blocks, grid.blocks_per_sm);
    slots = std::max<int64_t>(1, slots - std::clamp(grid.spare_sms, 0, sms));
  }
  const int blocks = int(persistent_blocks(items, slots));
  if (blocks <= 0) return true;
  if constexpr (F == WeightFormat::FP8) {  // the stamped twin of the FP8 choice (Fp8StampSlot; a diagnostic)
    // The standalone target (roofline --fp8-phases), else with the step stamps on the launch's own record.
    P.stamps = dense_stamp_target();
    if (!P.stamps && dense_step_stamps_switch().get())
      P.stamps = dense_step_record(pa.wp, blocks, pa.base.n, pa.base.k, pa.base.rows, kQuantX, kRope, stream);
    if (P.stamps) {
      kernel = blk128 ? (act8 ? stream_gemm_kernel<F, OutT, false, true, true, kQuantX, kRope, true>
                              : stream_gemm_kernel<F, OutT, false, true, false, kQuantX, kRope, true>)
                      : (act8 ? stream_gemm_kernel<F, OutT, false, false, true, kQuantX, kRope, true>
                              : stream_gemm_kernel<F, OutT, false, false, false, kQuantX, kRope, true>);
    }
  }
  allow_smem(kernel, smem);
  launch_blocks(kernel, P, blocks, smem, stream, pdl);
  return true;
}

// Decode MoE v9's host side. Stages and blocks per SM of moe_pair_kernel: launch_stream's rule (two blocks of >= 4
// stages when they fit, else one block of as many stages as fit, up to 12) on the pair's carve-up (pair_layout),
// keeping 256 bytes for the kernel's static shared memory. stages 0: it does not fit.
struct PairConfig {
  int stages = 0, per_sm = 0;
  size_t smem = 0;
};
// DEEPINFER_MOE_V9_BLOCKS (read once; a timing A/B knob, the bits do not depend on it): "2" = two blocks per SM
// whenever two of >= 2 stages fit (at 8 rows per group and k = 4096 the activations take 66 KB a block, so the
// default rule runs ONE block of 9 stages: 8 consumer warps per SM on the issue-bound MXFP4 loop); "1" = one block
// of as many stages as fit; unset = the rule above.
// moe_pair_kernel's activation staging (Layout act8): 0 = auto (e4m3 bytes where f16 staging leaves one block per SM
// and e4m3 staging fits two: 5..8-row groups at k = 4096, 4..8 at k = 5120), 1 = always e4m3 bytes, 2 = always f16.
// DEEPINFER_MOE_V9_ACT=fp8 / f16 (read once); set_pair_act_mode overrides it (tests). The same bits either way.
inline EnvSwitch<int>& pair_act_switch() {
  static EnvSwitch<int> mode{"DEEPINFER_MOE_V9_ACT",
                             [](const char* v) { return env_equals(v, "fp8") ? 1 : env_equals(v, "f16") ? 2 : 0; }};
  return mode;
}
inline int pair_act_mode() { return pair_act_switch().get(); }
inline void set_pair_act_mode(int mode) { pair_act_switch().set(mode); }

inline int pair_blocks_override() {
  static EnvSwitch<int> blocks{"DEEPINFER_MOE_V9_BLOCKS",
                               [](const char* v) { return env_equals(v, "2") ? 2 : env_equals(v, "1") ? 1 : 0; }};
  return blocks.get();
}
inline PairConfig pair_config(PairParams P) {
  const int3 lim = device_smem_limits();
  const size_t per_sm = size_t(lim.y), optin = size_t(lim.z), static_smem = 256;
  auto total = [&](int ns) {
    P.stages = ns;
    return pair_layout(P).total;
  };
  PairConfig c;
  const int force = pair_blocks_override();
  for (int ns = 6; ns >= 2 && force == 2 && !c.stages; --ns)
    if (2 * (total(ns) + static_smem + 1024) <= per_sm && total(ns) + static_smem <= optin) c = {ns, 2, total(ns)};
  for (int ns = 6; ns >= 4 && force == 0 && !c.stages; --ns)
    if (2 * (total(ns) + static_smem + 1024) <= per_sm && total(ns) + static_smem <= optin) c = {ns, 2, total(ns)};
  for (int ns = kMaxStages; ns >= 2 && !c.stages; --ns)
    if (total(ns) + static_smem <= optin) c = {ns, 1, total(ns)};
  return c;
}

// The staging (P.act8, pair_act_mode) and the configuration of a launch; stages 0: it does not fit.
inline PairConfig pair_choose(PairParams& P) {
  P.act8 = false;
  const PairConfig c = pair_config(P);
  const int mode = pair_act_mode();
  if (mode == 2) return c;
  PairParams q = P;
  q.act8 = true;
  const PairConfig c8 = pair_config(q);
  if (c8.stages && (mode == 1 || !c.stages || (c.per_sm == 1 && c8.per_sm == 2))) {
    P.act8 = true;
    return c8;
  }
  return c;
}

// Launches moe_pair_kernel (segment 0: FP8 dense, segment 1: MXFP4 grouped, both packed for decode v8, rows_cap
// 1..8 each); returns false, launching nothing, where the carve-up does not fit. pdl: launch with programmatic
// dependent launch (the kernel keeps the contract of cuda/launch.h either way).
template <class OutT = float>
inline bool launch_pair(PairParams P, cudaStream_t stream, bool pdl) {
  for (const Segment& s : P.seg)
    if (s.rows_cap < 1 || s.rows_cap > kMaxRows) return false;
  P.rows_cap = std::max(P.seg[0].rows_cap, P.seg[1].rows_cap);
  P.seg[0].pa.weights_evict_first = stream_weights_evict_first(false, P.seg[0].groups);
  P.seg[1].pa.weights_evict_first = stream_weights_evict_first(true, P.seg[1].groups);
  const PairConfig c = pair_choose(P);
  if (!c.stages) return false;
  P.stages = c.stages;
  const bool perm = fp4_perm_widen();
  using Kernel = void (*)(PairParams);
  // [combine][perm][act8]
  const Kernel kernels[2][2][2] = {
      {{moe_pair_kernel<OutT, false, false, false>, moe_pair_kernel<OutT, false, false, true>},
       {moe_pair_kernel<OutT, false, true, false>, moe_pair_kernel<OutT, false, true, true>}},
      {{moe_pair_kernel<OutT, true, false, false>, moe_pair_kernel<OutT, true, false, true>},
       {moe_pair_kernel<OutT, true, true, false>, moe_pair_kernel<OutT, true, true, true>}}};
  const Kernel kernel = kernels[P.combine.tile_count ? 1 : 0][perm ? 1 : 0][P.act8 ? 1 : 0];
  allow_smem(kernel, c.smem);
  const int64_t items = int64_t(P.seg[0].groups) * ((P.seg[0].pa.base.n + 15) / 16) +
                        int64_t(P.seg[1].groups) * ((P.seg[1].pa.base.n + 15) / 16);
  // The kernel counts items in int and keys its staged group as segment << 24 | group.
  if (items >= (int64_t(1) << 31) || P.seg[0].groups >= (1 << 24) || P.seg[1].groups >= (1 << 24)) return false;
  const int blocks = int(std::min<int64_t>(items, int64_t(device_smem_limits().x) * c.per_sm));
  if (blocks <= 0) return true;
  launch_blocks(kernel, P, blocks, c.smem, stream, pdl);
  return true;
}

// ---------------------------------------------------------------------------------------------------------
// FP8 GEMMs at 9..256 rows ("mid", bench/gpu/NOTES.md "FP8 GEMMs at 9-256 rows (session 5, H9)"): decode v8's
// weight stream with up to 64 rows per weight tile. stream_gemm_kernel takes groups of <= 8 rows (one mma N side),
// so m > 8 fell back to v7 (packed_gemm_kernel), which at 64 rows keeps ~16 KB of weights in flight per SM
// (latency-bound, ~10 % of the copy rate). Here a group holds up to 8 x RG rows (RG = 2, 4, 8 sub-groups of 8):
// each consumer warp reads a K step's weight fragment from the ring and widens it ONCE, then runs the mma pair
// against each sub-group's staged rows, so the tile's weight bytes cross HBM once for all of the group's rows.
// Activations are staged as their e4m3 bytes (Layout act8's order: row t at t (k + 32), contiguous in k) and
// widened to f16 in the K loop, which are the f16 words v8 stages (the MoE v9 act8 argument), with their scales as
// [k block][rows_cap slots], zero in the unused slots.
// Per-element arithmetic: a row's outputs get exactly stream_gemm_kernel's operations in its order (the same
// chunk / granule split of k over the 8 warps, the same mma sequence, the same fused4 scale application, the warps'
// partials added 0..7), and an mma's output column depends on its own token column only, so every row's result is
// the same bits as decode v8 computing it in a group of <= 8, and independent of the other rows and of m (but not
// of the wgmma kernel's bits: batch-invariant mode keeps the wgmma kernel, fp8_gemm.cu).
// Stream_gemm_kernel's code is untouched: this is a separate kernel reusing Ring / produce_tile / group_rows.
//
// The split variant (stream_mid_split_kernel, DEEPINFER_FP8_GEMM_MID=split): stream_mid_kernel stages a group's
// rows over all of k, so at k = 4096 / 5120 only 32 rows fit per group and at k = 8192 only 16 (wo_b at 64 rows
// reads its weights 4 times), and a narrow layer (wq_a: 64 tiles, wkv: 32) keeps at most `tiles` SMs busy. There the
// S blocks of a cluster take the same (group, tile) items, block rank r streaming and staging only its slice of k
// (steps [r G / S, (r + 1) G / S) granules of 4 steps): S = pow2floor(k / 1024) clamped to 1..8 from k alone, so a
// slice is <= 1280 columns and 64 rows always fit; a tile's outputs are the S slices' partials (each: the slice's 8
// warps added 0..7) added in rank order 0..S-1 through distributed shared memory. Deterministic, a row's bits
// independent of the other rows and of m (S and the slices depend on k only); S = 1 (k <= 1280... 2047) is
// stream_mid_kernel's arithmetic, v8's bits; S > 1 is another order than v8's (checked against the CPU).
// Exchange per tile j (buffer b = j % 2): every block waits until all ranks have read its xbuf[b] of tile j - 2
// (done[b], S arrivals), writes its partial there, arrives on every rank's ready[b] (release, cluster scope); waits
// for its own ready[b] (S arrivals, acquire); rank r sums outputs idx = r mod S over the ranks' xbuf[b] in rank
// order and stores them; then arrives on every rank's done[b]. Only the consumer warps take part (the producer
// streams ahead through the ring). A block leaves only after its last two tiles' done barriers have completed (no
// rank reads its shared memory or arrives on its barriers afterwards).
// Both kernels are mid_kernel_body<OutT, RG, kSplit>: the split's k slice and cluster exchange are its kSplit parts
// (without them, S = 1 and the slice is all of k, which fold away: stream_mid_kernel's SASS is the unsplit code's).

// Shared-memory carve-up of both (identical on host and device). cols: the staged columns (k; split: the largest
// slice's, a multiple of 128). split adds the exchange buffers xbuf[2] and the barriers ready[2], done[2].
struct MidLayout {
  int stages = 4, rows_cap = 16, act_stride = 0, x_blocks = 0;
  size_t ring = 0, act = 0, xs = 0, partial = 0, xbuf = 0, bars = 0, total = 0;
  __host__ __device__ MidLayout(int stages_, int rows_cap_, int rg, int cols, int xb_log2, bool split)
      : stages(stages_), rows_cap(rows_cap_) {
    act_stride = cols + 32;
    x_blocks = cols >> xb_log2;
    ring = 0;
    act = ring + size_t(stages) * kWeightStage;
    xs = act + size_t(rows_cap) * act_stride;
    partial = xs + size_t(x_blocks) * rows_cap * 4;
    partial = (partial + 15) & ~size_t(15);
    xbuf = partial + size_t(kConsumerWarps) * rg * 128 * 4;
    bars = split ? xbuf + 2 * size_t(rg) * 128 * 4 : xbuf;
    total = bars + 2 * size_t(stages) * 8 + (split ? 4 * 8 : 0);  // full[NS], empty[NS] (, ready[2], done[2])
  }
};

struct MidParams {
  packed::Args pa;  // FP8: q, xs, act / weight block logs, ws, n, k, rows, y, wp (no expert ids)
  int groups = 1;
  int stages = 4;
  int rows_cap = 16;  // rows per group (<= 8 RG, a multiple of 8)
};

struct SplitParams {
  packed::Args pa;  // FP8 dense: q, xs, block logs, ws, n, k, rows, y, wp
  int groups = 1;
  int stages = 4;
  int rows_cap = 16;
  int split = 1;       // S: blocks per cluster (gridDim.x is a multiple)
  int slice_cols = 0;  // the largest slice's columns (layout)
};

// Two blocks per SM for RG <= 4 (<= 113 registers), one for RG = 8 (its 64 accumulators + 64 block sums).
template <int RG>
constexpr int mid_blocks_per_sm() {
  return RG <= 4 ? 2 : 1;
}

__device__ __forceinline__ uint32_t cluster_map(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t cluster_addr) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_addr) : "memory");
}
__device__ __forceinline__ float ld_cluster_f32(uint32_t cluster_addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(cluster_addr) : "memory");
  return v;
}

// Split K over a cluster of S ranks (S > 1), once this block's partial of one output unit (tile or item) is in its
// buffer b (xb_b, `entries` floats; parity par of the unit's ready / done barriers, ready0 / done0 their b = 0 ones):
// tells every rank it is there, waits for every rank's, adds entry idx of the S buffers in rank order for
// idx = rank, rank + S, ... (store(idx, sum) stores it) and tells every rank its buffer b is read. All consumer
// threads call it.
template <class Store>
__device__ __forceinline__ void cluster_sum_partials(int S, int rank, uint32_t ready0, uint32_t done0, int b,
                                                     uint32_t par, const float* xb_b, int entries, Store&& store) {
  const int ctid = threadIdx.x;
  consumer_sync();
  if (ctid == 0) {
    asm volatile("fence.acq_rel.cluster;\n" ::: "memory");
    for (int q = 0; q < S; ++q) mbar_arrive_cluster(cluster_map(ready0 + 8 * b, uint32_t(q)));
  }
  mbar_wait_acquire_cluster(ready0 + 8 * b, par);  // every rank's partial of this unit is in its buffer b
  const uint32_t xb_addr = dev::smem_u32(xb_b);
  for (int idx = rank + S * ctid; idx < entries; idx += S * kConsumerThreads) {
    float sum = 0.0f;
    for (int q = 0; q < S; ++q) sum += ld_cluster_f32(cluster_map(xb_addr + 4 * idx, uint32_t(q)));
    store(idx, sum);
  }
  consumer_sync();
  if (ctid == 0)
    for (int q = 0; q < S; ++q) mbar_arrive_cluster(cluster_map(done0 + 8 * b, uint32_t(q)));
}

// The slice of k steps of rank r of S: whole granules of 4 steps, balanced.
__host__ __device__ inline void split_slice(int k, int S, int r, int& s_begin, int& s_end) {
  const int steps = k / 32, granules = (steps + 3) / 4;
  s_begin = granules * r / S * 4;
  const int e = granules * (r + 1) / S * 4;
  s_end = e < steps ? e : steps;
}
// S from k only (batch invariance): pow2floor(k / 1024) in 1..8.
inline int split_ranks(int k) {
  int S = 1;
  while (S < 8 && 2 * S * 1024 <= k) S *= 2;
  return S;
}

// Output idx (of a tile's [RG][4][32] partials) -> row m, column n.
__device__ __forceinline__ void mid_out_index(int idx, int tile, int rb, int& m, int& n) {
  const int t = idx / 128, i = (idx % 128) / 32, ln = idx % 32;
  n = tile * 16 + ln / 4 + (i >= 2 ? 8 : 0);
  m = rb + 8 * t + 2 * (ln % 4) + (i & 1);
}
// The 8 warps' partials of output idx added in warp order 0..7 (reduce_store's order).
template <int RG>
__device__ __forceinline__ float mid_warp_sum(const float* partial, int idx) {
  float sum = 0.0f;
#pragma unroll
  for (int w2 = 0; w2 < kConsumerWarps; ++w2) sum += partial[w2 * RG * 128 + idx];
  return sum;
}

// The body of both mid kernels (P: MidParams without the split, SplitParams with it).
template <class OutT, int RG, bool kSplit, class MidP>
__device__ __forceinline__ void mid_kernel_body(const MidP& P) {
  using Fmt = skinny::Format<WeightFormat::FP8>;
  using G = Geo<WeightFormat::FP8>;
  const skinny::Args& a = P.pa.base;
  extern __shared__ __align__(128) uint8_t smem[];
  const int N = a.n, K = a.k;
  const int tiles = (N + 15) / 16;
  const int NS = P.stages, RC = P.rows_cap;
  int S = 1, layout_cols = K;  // without the split: one block per cluster, all of k staged
  if constexpr (kSplit) S = P.split, layout_cols = P.slice_cols;
  const MidLayout L(NS, RC, RG, layout_cols, a.act_block_log2, kSplit);
  const uint32_t s_base = dev::smem_u32(smem);
  Ring R = ring_at(s_base, L, NS, kWeightStage);
  const uint32_t ready0 = R.empty + 8 * NS, done0 = ready0 + 16;  // split only
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rank = int(blockIdx.x) % S;  // 1-D clusters of S blocks along x: %cluster_ctarank

  if (threadIdx.x == 0) {
    init_ring(R);
    if constexpr (kSplit) {
      for (int b = 0; b < 2; ++b) {
        mbar_init(ready0 + 8 * b, uint32_t(S));
        mbar_init(done0 + 8 * b, uint32_t(S));
      }
    }
    mbar_fence_init();
  }
  // Every block's barriers are initialized before any rank arrives on them remotely. The last block-wide (cluster)
  // barrier: from here producer and consumers run apart.
  if (S > 1) {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  } else {
    __syncthreads();
  }

  // This cluster's items (every rank the same), this rank's steps [sb0, sb1). The unsplit forms (32-bit block + 1,
  // the steps computed by the consumers only, L.x_blocks below) are those stream_mid_kernel had before the two
  // kernels shared this body: the same SASS (the folded split forms give other registers and instruction order).
  const int64_t items = int64_t(P.groups) * tiles;
  int64_t i0, i1;
  if constexpr (kSplit) {
    const int64_t clusters = gridDim.x / S, cid = blockIdx.x / S;
    i0 = items * cid / clusters, i1 = items * (cid + 1) / clusters;
  } else {
    i0 = items * blockIdx.x / gridDim.x, i1 = items * (blockIdx.x + 1) / gridDim.x;
  }
  int sb0 = 0, sb1 = 0, chunks = 0;
  auto set_slice = [&] {
    if constexpr (kSplit)
      split_slice(K, S, rank, sb0, sb1);
    else
      sb1 = K / 32;
    chunks = (sb1 - sb0 + G::kChunkSteps - 1) / G::kChunkSteps;
  };
  if constexpr (kSplit) set_slice();  // the producer streams the slice (unsplit: produce_tile, all of k)

  if (warp == kConsumerWarps) {
    // -------------------------------------------------------- producer: this rank's slice of every item's weights
    if (lane != 0) return;
    for (int64_t it = i0; it < i1; ++it) {
      int rb, re;
      int64_t e;
      group_rows(a, int(it / tiles), RC, rb, re, e);
      if (rb >= re) continue;
      if constexpr (kSplit) {
        const uint8_t* wsrc = P.pa.wp + (it % tiles) * int64_t(K / 32) * G::kStepBytes;
        for (int c = 0; c < chunks; ++c) {
          const int s0 = sb0 + c * G::kChunkSteps;
          const int ns = min(G::kChunkSteps, sb1 - s0);
          const uint32_t bytes = uint32_t(ns * G::kStepBytes);
          const uint32_t full = R.full + 8 * R.stage;
          mbar_wait(R.empty + 8 * R.stage, R.phase ^ 1u);
          mbar_arrive_expect_tx(full, bytes);
          bulk_g2s_weights(R.base + uint32_t(R.stage * R.stride), wsrc + int64_t(s0) * G::kStepBytes, bytes, full,
                           P.pa.weights_evict_first);
          R.advance();
        }
      } else {
        produce_tile<WeightFormat::FP8>(P.pa, int(it % tiles), 0, R);
      }
    }
    return;
  }

  // ------------------------------------------------------------------------------------------------ consumers
  pdl_wait();  // activations and the output buffer: the predecessors' (cuda/launch.h)
  const int ctid = threadIdx.x;
  const uint32_t act_s = s_base + uint32_t(L.act);
  float* xs_s = reinterpret_cast<float*>(smem + L.xs);
  float* partial = reinterpret_cast<float*>(smem + L.partial);
  float* xbuf = reinterpret_cast<float*>(smem + L.xbuf);
  auto* y = static_cast<OutT*>(a.y);
  if constexpr (!kSplit) set_slice();
  const int nsteps = sb1 - sb0;
  const int g = lane / 4, c4 = lane % 4;
  const int sb = a.w_block_log2, xb = a.act_block_log2;
  const bool fused4 = sb == 7 && xb == 7;  // v7 / v8: one scale pair per 4 steps (FP8 128-blocks)
  const int w_kblocks = (K + (1 << sb) - 1) >> sb;
  const int x_blocks = kSplit ? K >> xb : L.x_blocks;                // k blocks of a row of x's scales
  const int col0 = sb0 * 32, cols = kSplit ? nsteps * 32 : K;          // this rank's columns
  const int kb0 = col0 >> xb, slice_blocks = kSplit ? cols >> xb : x_blocks;  // and their k blocks

  int cur_grp = -1, j = 0;
  for (int64_t it = i0; it < i1; ++it) {
    int rb, re;
    int64_t e;
    const int grp = int(it / tiles), tile = int(it % tiles);
    group_rows(a, grp, RC, rb, re, e);
    if (rb >= re) continue;
    const int rows = re - rb;
    if (grp != cur_grp) {
      // Stage the group's e4m3 rows (16 bytes a unit, two loads before their stores: load_then_put; one at RG = 4,
      // whose 96 registers spilled with two) and scales. Every consumer is past the previous tile's last barrier,
      // after its last read of the staged rows.
      const int units = cols / 16;
      load_then_put<RG == 4 ? 1 : 2>(
          rows * units,
          [&](int v) {
            return __ldg(reinterpret_cast<const uint4*>(a.q + skinny::act_row(a, rb + v / units) * K + col0) +
                         v % units);
          },
          [&](int v, uint4 q) {
            const uint32_t addr = act_s + uint32_t((v / units) * L.act_stride + 16 * (v % units));
            asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(q.x), "r"(q.y), "r"(q.z),
                         "r"(q.w)
                         : "memory");
          });
      for (int idx = ctid; idx < slice_blocks * RC; idx += kConsumerThreads) {
        const int kb = idx / RC, slot = idx % RC;
        xs_s[idx] = slot < rows ? __ldg(a.xs + skinny::act_row(a, rb + slot) * x_blocks + kb0 + kb) : 0.0f;
      }
      consumer_sync();
      cur_grp = grp;
    }
    const int subs = (rows + 7) / 8;  // live sub-groups (warp-uniform)
    uint32_t arow[RG];
#pragma unroll
    for (int t = 0; t < RG; ++t)
      arow[t] = act_s + uint32_t(min(8 * t + g, rows - 1) * L.act_stride + c4 * 8);
    const uint8_t* ws_row = a.ws + int64_t((tile * 16) >> sb) * w_kblocks;

    float acc[RG][4];
#pragma unroll
    for (int t = 0; t < RG; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    for (int c = 0; c < chunks; ++c) {
      const int s0 = sb0 + c * G::kChunkSteps;
      const int ns = min(G::kChunkSteps, sb1 - s0);
      const int gs = warp * G::kGranule;
      const bool mine = gs < ns;
      const uint32_t st = R.base + uint32_t(R.stage * R.stride);
      mbar_wait(R.full + 8 * R.stage, R.phase);
      uint4 r[4];
      if (mine) {
#pragma unroll
        for (int i = 0; i < 4; ++i) r[i] = lds128(st + uint32_t((gs + i) * 512 + lane * 16));
      }
      // Released after the math, as consume_tile does (mbarrier.cuh warp_release_stage: the fence then finds the
      // fragments' loads returned; run 174: flat at batch 64, where these kernels run).
      const uint32_t empty_bar = R.empty + 8 * R.stage;
      R.advance();
      if (!mine) {
        warp_release_stage(empty_bar);
        continue;
      }

      float dblk[RG][4];
#pragma unroll
      for (int i = 0; i < G::kGranule; ++i) {
        const int s = s0 + gs + i;
        const int k0 = s * 32;
        uint32_t h0[4], h1[4];
        Fmt::widen(make_uint2(r[i].x, r[i].y), h0);
        Fmt::widen(make_uint2(r[i].z, r[i].w), h1);
        const float sw = (!fused4 || i == 3) ? dev::e8m0_to_float(__ldg(ws_row + (k0 >> sb))) : 0.0f;
        const float sw0 = sw, sw1 = sw;
        const bool open = !fused4 || i == 0, close = !fused4 || i == 3;
#pragma unroll
        for (int t = 0; t < RG; ++t) {
          if (t < subs) {
            uint4 x;
            const uint2 b = lds64(arow[t] + uint32_t((s - sb0) * 32));
            skinny::e4m3x4_to_f16x4(b.x, x.x, x.y);
            skinny::e4m3x4_to_f16x4(b.y, x.z, x.w);
            if (open)
              skinny::mma_f16<false>(dblk[t], h0[0], h1[0], h0[1], h1[1], x.x, x.y);
            else
              skinny::mma_f16<true>(dblk[t], h0[0], h1[0], h0[1], h1[1], x.x, x.y);
            skinny::mma_f16<true>(dblk[t], h0[2], h1[2], h0[3], h1[3], x.z, x.w);
            if (close) {
              const float2 sx =
                  *reinterpret_cast<const float2*>(xs_s + ((k0 >> xb) - kb0) * RC + 8 * t + 2 * c4);
              acc[t][0] += dblk[t][0] * (sw0 * sx.x);
              acc[t][1] += dblk[t][1] * (sw0 * sx.y);
              acc[t][2] += dblk[t][2] * (sw1 * sx.x);
              acc[t][3] += dblk[t][3] * (sw1 * sx.y);
            }
          }
        }
      }
      warp_release_stage(empty_bar);  // mbarrier.cuh: the reads before the next bulk copy
    }
    if (it == i1 - 1) pdl_launch_dependents();  // the block's last weight chunk is consumed

    // The 8 warps' partials added in warp order 0..7 (reduce_store's order), one buffer: a barrier before the
    // writes (the previous tile's readers are done) and one after.
    consumer_sync();
#pragma unroll
    for (int t = 0; t < RG; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[(warp * RG + t) * 128 + i * 32 + lane] = acc[t][i];
    consumer_sync();
    if (S == 1) {
      for (int idx = ctid; idx < subs * 128; idx += kConsumerThreads) {
        const float sum = mid_warp_sum<RG>(partial, idx);
        int m, n;
        mid_out_index(idx, tile, rb, m, n);
        if (n < N && m < re) skinny::store_out(y, int64_t(m) * N + n, sum);
      }
    } else {
      const int b = j & 1;
      const uint32_t par = uint32_t(j >> 1) & 1u;
      float* xb_b = xbuf + b * RG * 128;
      mbar_wait_acquire_cluster(done0 + 8 * b, par ^ 1u);  // every rank has read xbuf[b] of tile j - 2
      for (int idx = ctid; idx < subs * 128; idx += kConsumerThreads) xb_b[idx] = mid_warp_sum<RG>(partial, idx);
      cluster_sum_partials(S, rank, ready0, done0, b, par, xb_b, subs * 128, [&](int idx, float sum) {
        int m, n;
        mid_out_index(idx, tile, rb, m, n);
        if (n < N && m < re) skinny::store_out(y, int64_t(m) * N + n, sum);
      });
    }
    ++j;
  }
  if (S > 1) {  // no rank reads this block's xbuf or arrives on its barriers after these complete
    for (int jj = max(0, j - 2); jj < j; ++jj) mbar_wait_acquire_cluster(done0 + 8 * (jj & 1), uint32_t(jj >> 1) & 1u);
  }
}

template <class OutT, int RG>
__global__ void __launch_bounds__(kThreads, mid_blocks_per_sm<RG>()) stream_mid_kernel(const MidParams P) {
  mid_kernel_body<OutT, RG, false>(P);
}

template <class OutT, int RG>
__global__ void __launch_bounds__(kThreads, mid_blocks_per_sm<RG>()) stream_mid_split_kernel(const SplitParams P) {
  mid_kernel_body<OutT, RG, true>(P);
}

// Resident clusters of S blocks of `threads` threads of `kernel` with `smem` bytes of shared memory
// (cudaOccupancyMaxActiveClusters, read once per (device, kernel, smem, S)); `fallback` where the query fails. Used by
// the split mid kernels.
inline int64_t resident_clusters(const void* kernel, int threads, size_t smem, int S, int64_t fallback) {
  int device = 0;
  DI_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, size_t, int>, int64_t> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(device, kernel, smem, S);
  auto found = cache.find(key);
  if (found == cache.end()) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned(S * 64));
    cfg.blockDim = dim3(unsigned(threads));
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = unsigned(S);
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess || n <= 0) {
      (void)cudaGetLastError();
      n = int(fallback);
    }
    found = cache.emplace(key, int64_t(n)).first;
  }
  return found->second;
}

// Host side of both mid kernels: rows per group rows_cap = 16, 32 or 64 (the smallest that holds m, at most 64),
// halved while its carve-up does not fit one block of >= 4 stages (unsplit, k = 4096: 32 rows, 6 stages; split:
// 64 always fits a slice of <= 1280 columns); two blocks per SM of >= 4 stages where they fit (RG <= 4), else one
// block of as many stages as fit (<= 12); a persistent grid. Groups of rows_cap rows (weights read
// ceil(m / rows_cap) times). Split: S = split_ranks(k), the grid is the clusters that can be resident at once
// (cudaOccupancyMaxActiveClusters), at most one per item, times S. Returns false, launching nothing, where the
// kernel does not apply (m < 1, FP8 128 / 32 blocks only, k % 128 == 0 as fp8_gemm checks).
template <class OutT, bool kSplit>
inline bool launch_mid_kernel(const packed::Args& pa, int64_t m, cudaStream_t stream, bool pdl) {
  using Params = std::conditional_t<kSplit, SplitParams, MidParams>;
  if (m < 1 || m >= (int64_t(1) << 30)) return false;
  const int3 lim = device_smem_limits();
  const int sms = lim.x;
  const size_t per_sm = size_t(lim.y), optin = size_t(lim.z);
  const int k = pa.base.k;
  const int S = kSplit ? split_ranks(k) : 1;
  int cols = k;  // staged columns: all of k, or the largest slice
  if (kSplit) {
    cols = 0;
    for (int r = 0; r < S; ++r) {
      int b0, b1;
      split_slice(k, S, r, b0, b1);
      cols = std::max(cols, (b1 - b0) * 32);
    }
  }
  int rc = m <= 16 ? 16 : m <= 32 ? 32 : 64;
  int stages = 0, per_sm_blocks = 0;
  for (; rc >= 16 && !stages; rc /= 2) {
    const int rg = rc / 8;
    auto total = [&](int ns) { return MidLayout(ns, rc, rg, cols, pa.base.act_block_log2, kSplit).total; };
    for (int ns = 6; ns >= 4 && !stages && rg <= 4; --ns)  // mid_blocks_per_sm<rg>() == 2
      if (2 * (total(ns) + 1024) <= per_sm && total(ns) <= optin) stages = ns, per_sm_blocks = 2;
    for (int ns = kMaxStages; ns >= 4 && !stages; --ns)
      if (total(ns) <= optin) stages = ns, per_sm_blocks = 1;
    if (stages) break;
  }
  if (!stages) return false;
  Params P;
  P.pa = pa;
  P.pa.weights_evict_first = stream_weights_evict_first(false, 1);  // FP8 (dense) products
  P.pa.base.rows = int(m);
  P.rows_cap = rc;
  P.groups = int((m + rc - 1) / rc);
  P.stages = stages;
  if constexpr (kSplit) {
    P.split = S;
    P.slice_cols = cols;
  }
  const size_t smem = MidLayout(stages, rc, rc / 8, cols, pa.base.act_block_log2, kSplit).total;
  void (*kernel)(Params);
  if constexpr (kSplit)
    kernel = rc == 16   ? stream_mid_split_kernel<OutT, 2>
             : rc == 32 ? stream_mid_split_kernel<OutT, 4>
                        : stream_mid_split_kernel<OutT, 8>;
  else
    kernel = rc == 16 ? stream_mid_kernel<OutT, 2> : rc == 32 ? stream_mid_kernel<OutT, 4> : stream_mid_kernel<OutT, 8>;
  allow_smem(kernel, smem);
  // Resident clusters of S blocks with this carve-up (read once per (device, kernel, smem, S)); unsplit: blocks.
  int64_t clusters = int64_t(sms) * per_sm_blocks / S;
  if (S > 1)
    clusters =
        std::min(clusters, resident_clusters(reinterpret_cast<const void*>(kernel), kThreads, smem, S, clusters));
  if (kSplit && clusters <= 0) return false;
  const int64_t items = int64_t(P.groups) * ((pa.base.n + 15) / 16);
  clusters = std::min(clusters, items);
  if (clusters <= 0) return true;
  launch_blocks(kernel, P, clusters * S, smem, stream, pdl, unsigned(S));
  return true;
}

template <class OutT>
inline bool launch_mid(const packed::Args& pa, int64_t m, cudaStream_t stream, bool pdl) {
  return launch_mid_kernel<OutT, false>(pa, m, stream, pdl);
}
template <class OutT>
inline bool launch_mid_split(const packed::Args& pa, int64_t m, cudaStream_t stream, bool pdl) {
  return launch_mid_kernel<OutT, true>(pa, m, stream, pdl);
}

}  // namespace deepinfer::cuda::stream_gemm

#include "cuda/stream_fp4_wgmma.cuh"  // launch_fp4_wgmma
