// The FP8 decode stream on wgmma (bench/gpu/NOTES.md "FP8 decode stream on wgmma (session 9, H73)"):
// stream_gemm_kernel's dense FP8 product (decode v8: the packed weights bulk-copied through a shared-memory ring by
// one producer thread, groups of <= 8 token rows) with the consumer arithmetic on Hopper's FP8 tensor path.
//
// Why: the v8 FP8 consumer is issue-bound (run 55, batch 1: wq_a 20 %, w13 49 %, w2 38 % of the copy roofline):
// 28.5 warp instructions per 32-wide K step and warp in the kBlk128 loop (NOTES "Decode stream loop for
// 128-blocks"), 8 of them the e4m3 -> f16 widening (F2FP), 2 HMMA, the rest LDS, addresses and scales. FP8 mma.sync
// is emulated on sm_90a, so the FP8 tensor path is wgmma: register-A m64n8k32 e4m3 with the weights' bytes AS THEY
// ARE in the decode pack (no widening, no repack: see the K order below), the tokens as B (8 slots x 32 e4m3 per K
// step, shared memory).
//
// Weights: the decode pack unchanged (kernels.h "Fragment-ordered FP8 weights": [16-row tile][k / 32 steps][lane
// (g, c)][16 bytes], bytes 0-7 = row g, columns 8c .. 8c + 7; bytes 8-15 = row g + 8, the same columns). A work item
// is a 64-row tile = 4 consecutive packed tiles (one wgmma M); warp w of the 8 consumer warps takes tile w % 4 in
// warpgroup w / 4. Stage = 16 K steps of the 4 tiles (4 x 8 KB: 4 bulk copies, each tile's K range contiguous);
// warpgroup 0 takes the stage's steps 0-7, warpgroup 1 steps 8-15, each as two batches of 4 steps.
// K order: a lane's 16 bytes of a step are the register-A fragment of the m64n8k32 e4m3 wgmma up to a K
// permutation: a0 = row g, logical K 4c .. 4c + 3 <- word x (physical 8c .. 8c + 3); a1 = row g + 8 <- word z;
// a2 = row g, logical 16 + 4c .. 16 + 4c + 3 <- word y (physical 8c + 4 .. 8c + 7); a3 = row g + 8 <- word w. The
// same bijection for every lane, so the activations are staged in that order (stage_slice: the low 4 bytes of a
// lane's 8 columns to B's first core matrix, the high 4 to the second) and the dot products are unchanged.
//
// Scales: V4's 128 x 128 weight blocks with 128-wide activation blocks (kBlk128): a batch = one scale block, its 4
// wgmmas chained into one accumulator set (scale-d false, then true), then acc += d x (w_scale x x_scale) in fp32
// (DeepGEMM's promotion interval, one per 128 K). A 64-row item lies in one 128-row weight block. V4.1's 32 x 32
// blocks with 32-wide activation blocks: each step its own wgmma into its own accumulator set (4 per batch), each
// folded with its own scale pair (the 16 rows of a warp lie in one 32-row block). Other block pairs: declined.
//
// Split K (the part the MXFP4 form does not need): V4's dense products have few 64-row items (wq_a n = 1024: 16;
// wo_b / shared w1|w3 / w2 n = 4096: 64) for 132 SMs. The S blocks of a cluster take the same items, block rank r
// streaming and staging only its slice of k (whole stages of 16 steps, balanced); the item's outputs are the S
// partials added in rank order through distributed shared memory, with stream_mid_split_kernel's exchange protocol
// (cuda/stream_gemm.cuh "The split variant": ready / done barriers, two buffers). S in {1, 2, 4, 8} minimizes the
// stages one block streams given the clusters resident at once (choose_split): from n, k and the device only,
// never the rows.
//
// Numerics: not bitwise the f16 path (the FP8 tensor path adds a block's products in its own order and precision;
// DeepGEMM measures ~14 bits kept inside one wgmma chain), so tests/gpu/test_stream_fp8_wgmma.cpp bounds the
// difference (rel L2, its bound derived there). Deterministic and batch-invariant: a token's wgmma column depends on
// that token only; batches, warpgroups and ranks are added in fixed order; S does not depend on the rows.
//
// Switch: DEEPINFER_STREAM_FP8=wgmma (read once; default off until measured); set_fp8_wgmma overrides it (tests,
// bench). launch_stream (cuda/stream_gemm.cuh) tries this first for FP8 and falls back to stream_gemm_kernel where
// it declines: switch off, more than 8 rows in a group, batch-invariant mode (other row counts run other kernels,
// fp8_gemm.cu's mid / v7 kernels: a row's bits must not depend on which ran), expert ids, block pairs other than
// 128 / 128 and 32 / 32, k % 128 != 0, or too little shared memory. The fused SwiGLU input (moe_gpu.cu's v8 shared
// w2) is staged by swiglu_quant_units (cuda/stream_gemm.cuh), over the rank's slice.
#pragma once

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "core/env_switch.h"
#include "cuda/numerics_mode.h"
#include "cuda/stream_gemm.cuh"
#include "cuda/wgmma.cuh"

namespace deepinfer::cuda::stream_gemm {

namespace fp8wg {

constexpr int kItemTiles = 4;                          // packed 16-row tiles per item (wgmma M = 64)
constexpr int kStageSteps = 16;                        // 32-wide K steps per stage
constexpr int kWgSteps = kStageSteps / 2;              // per consumer warpgroup: two batches of 4 steps
constexpr int kStepBytes = 512;                        // one packed tile's K step (Geo<FP8>::kStepBytes)
constexpr int kTileBytes = kStageSteps * kStepBytes;   // one tile's bytes in a stage (8 KB)
constexpr int kStageBytes = kItemTiles * kTileBytes;   // 32 KB
constexpr int kStepB = kMaxRows * 32;                  // one K step of B: 8 token slots x 32 codes
constexpr int kItemOut = kItemTiles * 128;             // an item's outputs in the m16n8 fragment order (64 x 8)

// The switch: DEEPINFER_STREAM_FP8=wgmma turns it on (read once); set_fp8_wgmma overrides it (tests, bench).
inline EnvSwitch<bool>& on_switch() {
  static EnvSwitch<bool> on{"DEEPINFER_STREAM_FP8", [](const char* v) { return env_equals(v, "wgmma"); }};
  return on;
}

// The K slice of rank r of S: whole stages of 16 steps, balanced; the last one ends at k.
__host__ __device__ inline void slice_steps(int k, int S, int r, int& s_begin, int& s_end) {
  const int steps = k / 32, units = (steps + kStageSteps - 1) / kStageSteps;
  s_begin = units * r / S * kStageSteps;
  const int e = units * (r + 1) / S * kStageSteps;
  s_end = e < steps ? e : steps;
}
// The largest slice's steps rounded up to a whole stage: B and the activation scales are staged that far (the
// padding past k zero, so a short last stage's phantom batch reads zero activations).
inline int slice_cap(int k, int S) {
  int cap = 0;
  for (int r = 0; r < S; ++r) {
    int b, e;
    slice_steps(k, S, r, b, e);
    cap = std::max(cap, (e - b + kStageSteps - 1) / kStageSteps * kStageSteps);
  }
  return cap;
}

// Shared-memory carve-up (host and device): the ring, B (cap steps x 256 bytes: 8 slots whatever the rows, the
// wgmma's N), the activation scales [block][8 slots], warpgroup 1's partials (two buffers of 4 warps x 128 floats),
// the exchange buffers (split only: two items' partials), the ring's barriers, then ready[2], done[2] (split).
struct Layout {
  int x_blocks = 0;  // staged activation blocks: cap x 32 / act_block
  size_t ring = 0, act = 0, xs = 0, partial = 0, xbuf = 0, bars = 0, total = 0;
  __host__ __device__ Layout(int stages, int cap, int xb_log2, bool split) {
    x_blocks = (cap * 32) >> xb_log2;
    ring = 0;
    act = ring + size_t(stages) * kStageBytes;
    xs = act + size_t(cap) * kStepB;
    partial = xs + size_t(x_blocks) * kMaxRows * 4;
    xbuf = partial + 2 * size_t(kItemOut) * 4;
    bars = xbuf + (split ? 2 * size_t(kItemOut) * 4 : 0);
    total = bars + 2 * size_t(stages) * 8 + (split ? 4 * 8 : 0);
  }
};

struct Params {
  packed::Args pa;  // FP8 dense (or grouped): q, xs, block logs, ws, n, k, rows / expert groups, y, wp
  int groups = 1;
  int stages = 2;
  int rows_cap = 1;
  int split = 1;  // S: blocks per cluster (gridDim.x is a multiple)
  int cap = 16;   // Layout's staged steps
  SwigluInput swiglu;  // h set: the activations come from the SwiGLU prologue, q / xs are not read
};

// Producer (one thread): item `item`'s steps [sb0, sb1) (tiles 4 item .. 4 item + 3, those < ceil(n / 16)), stage
// by stage: each present tile's up to 16 steps (8 KB), one bulk copy each. A short last stage (the slice's steps
// not a multiple of 16: k % 512 != 0) gets the tile's first 16 - ns steps copied behind its ns steps, so that
// every stage byte the consumers read is a weight code (finite), never a stale or uninitialized byte that could
// be a NaN code: against B's zero padding such a phantom step adds exactly zero (consume_item), and the consumers
// load their fragments unpredicated (no zero selects, bench/gpu/NOTES.md "FP8 decode stream on wgmma").
__device__ __forceinline__ void produce_item(const packed::Args& pa, int item, int sb0, int sb1, Ring& R) {
  const int steps = pa.base.k / 32, tiles = (pa.base.n + 15) / 16;
  const int t0 = item * kItemTiles, nt = min(kItemTiles, tiles - t0);
  const uint8_t* wsrc = pa.wp + int64_t(t0) * steps * kStepBytes;
  for (int s0 = sb0; s0 < sb1; s0 += kStageSteps) {
    const int ns = min(kStageSteps, sb1 - s0);
    const uint32_t bytes = uint32_t(ns * kStepBytes), fill = uint32_t(kTileBytes) - bytes;
    const uint32_t full = R.full + 8 * R.stage;
    mbar_wait(R.empty + 8 * R.stage, R.phase ^ 1u);
    mbar_arrive_expect_tx(full, uint32_t(nt * kTileBytes));
    const uint32_t dst = R.base + uint32_t(R.stage * R.stride);
    for (int t = 0; t < nt; ++t) {
      const uint8_t* tile = wsrc + int64_t(t) * steps * kStepBytes;
      bulk_g2s_weights(dst + uint32_t(t * kTileBytes), tile + int64_t(s0) * kStepBytes, bytes, full,
                       pa.weights_evict_first);
      // The fill from the tile's first steps, in pieces of at most the tile's k (k < 512: fewer steps than the fill).
      for (uint32_t o = 0; o < fill; o += uint32_t(steps * kStepBytes))
        bulk_g2s(dst + uint32_t(t * kTileBytes) + bytes + o, tile, min(fill - o, uint32_t(steps * kStepBytes)), full);
    }
    R.advance();
  }
}

// 8 columns 8u .. 8u + 7 of the slice (local unit u: step u / 4, lane column group u % 4) of token slot t into B:
// the low 4 bytes to logical K 4c .. 4c + 3 (core matrix 0), the high 4 to 16 + 4c .. (core matrix 1, 128 bytes
// on), the K order of the header.
__device__ __forceinline__ void put_b(uint32_t act_s, int t, int u, uint2 q8) {
  const uint32_t addr = act_s + uint32_t((u >> 2) * kStepB + t * 16 + (u & 3) * 4);
  asm volatile("st.shared.u32 [%0], %1;\nst.shared.u32 [%2], %3;\n" ::"r"(addr), "r"(q8.x), "r"(addr + 128u),
               "r"(q8.y)
               : "memory");
}

// Consumers (all 256 threads): the slice [sb0, sb1) of group rows [rb, rb + rows) into B and their scales into
// xs_s[local block][slot], from q (through a.row_index) or, with sw.h, from the SwiGLU prologue (the same bytes and
// scales as moe_swiglu_quant); slots >= rows and the padding to `cap` steps get zero codes and zero scales. The
// codes' loads are issued before their stores (stage_q_units, cuda/stream_gemm.cuh). Ends with the proxy fence (B is
// read by the tensor cores' async proxy) and a consumer barrier; the caller guarantees every wgmma of the previous
// group has completed.
__device__ __forceinline__ void stage_slice(const skinny::Args& a, const SwigluInput& sw, uint32_t act_s, float* xs_s,
                                            int rb, int rows, int sb0, int sb1, int cap, int warp, int lane) {
  const int ctid = threadIdx.x;
  const int K = a.k, xb = a.act_block_log2, kblocks = K >> xb;
  const int units = (sb1 - sb0) * 4;
  constexpr int kPass = 4;
  if (sw.h)  // the fused SwiGLU prologue over the slice (blocks aligned: a slice starts at a multiple of 512)
    swiglu_quant_units(
        a, sw, rb, rows, sb0 * 32, units, warp, lane, [&](int t, int u, uint2 q8) { put_b(act_s, t, u, q8); },
        [&](int t, int u, float scale) { xs_s[((8 * u) >> xb) * kMaxRows + t] = scale; });
  if (!sw.h)
    stage_q_units<kPass>(a, rb, rows, sb0 * 32, units, [&](int t, int u, uint2 q8) { put_b(act_s, t, u, q8); });
  // Zero codes: every (slot, unit) outside the rows x slice, slot-fastest (a warp's stores in 32 banks).
  for (int v = ctid; v < kMaxRows * cap * 4; v += kConsumerThreads) {
    const int t = v & (kMaxRows - 1), u = v / kMaxRows;
    if (t >= rows || u >= units) put_b(act_s, t, u, make_uint2(0u, 0u));
  }
  const int kb0 = (sb0 * 32) >> xb, x_blocks = (cap * 32) >> xb;
  for (int idx = ctid; idx < x_blocks * kMaxRows; idx += kConsumerThreads) {
    const int kb = kb0 + idx / kMaxRows, slot = idx % kMaxRows;
    if (slot >= rows || kb >= kblocks)
      xs_s[idx] = 0.0f;
    else if (!sw.h)  // (the prologue has stored the rows' scales)
      xs_s[idx] = __ldg(a.xs + skinny::act_row(a, rb + slot) * kblocks + kb);
  }
  dev::fence_proxy_async_smem();
  consumer_sync();
}

// A step's register-A fragment from a lane's 16 packed bytes (the K order of the header).
__device__ __forceinline__ void frag(const uint4& r, uint32_t (&a)[4]) {
  a[0] = r.x;
  a[1] = r.z;
  a[2] = r.y;
  a[3] = r.w;
}

// One batch of 4 steps (B descriptors desc_lo + 16 j: B steps 256 bytes apart), one commit group. kBlk128: the 4
// steps chained into d[0] (one scale block); else each into its own d[j].
template <bool kBlk128>
__device__ __forceinline__ void issue4(float (&d)[4][4], const uint32_t (&a)[4][4], uint32_t desc_lo,
                                       uint32_t desc_hi) {
  wgmma::fence();
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint64_t db = uint64_t(desc_hi) << 32 | (desc_lo + uint32_t(16 * j));
    if (kBlk128 && j > 0)
      wgmma::m64n8k32_e4m3_rs_acc(d[0], a[j], db);
    else
      wgmma::m64n8k32_e4m3_rs_first(d[kBlk128 ? 0 : j], a[j], db);
  }
  wgmma::commit();
}

// After the wait that covers issue4's group: the accumulators are read only from here on, and the A registers
// (read asynchronously by the tensor core) are kept alive until here.
template <bool kBlk128>
__device__ __forceinline__ void settle(float (&d)[4][4], uint32_t (&a)[4][4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (!kBlk128 || j == 0) wgmma::fence_regs_n(d[j]);
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[j][i])::"memory");
  }
}

// A batch's products into acc (rows g, g + 8 x slots 2c, 2c + 1). w[j]: the weight scale of step j (kBlk128: w[0]
// for the block); xsb: this thread's two slots' activation scales at the batch's first step's block, blocks
// kMaxRows floats apart. kOne: only slot 0 is stored (acc[1], acc[3] untouched); the slot-0 operations are the
// multi-row form's, so the same bits.
template <bool kBlk128, bool kOne>
__device__ __forceinline__ void fold4(float (&acc)[4], const float (&d)[4][4], const float (&w)[4], const float* xsb) {
#pragma unroll
  for (int j = 0; j < (kBlk128 ? 1 : 4); ++j) {
    const float2 sx = *reinterpret_cast<const float2*>(xsb + j * kMaxRows);
    const float s0 = __fmul_rn(w[j], sx.x);
    acc[0] = __fmaf_rn(d[j][0], s0, acc[0]);
    acc[2] = __fmaf_rn(d[j][2], s0, acc[2]);
    if constexpr (!kOne) {
      const float s1 = __fmul_rn(w[j], sx.y);
      acc[1] = __fmaf_rn(d[j][1], s1, acc[1]);
      acc[3] = __fmaf_rn(d[j][3], s1, acc[3]);
    }
  }
}

// Consumers: item `item` over the slice [sb0, sb1); acc = this warp's 16 rows x 8 slots over its warpgroup's steps.
// Every warp of a warpgroup runs the same wgmmas (warpgroup-wide: a wgmma under a branch ptxas cannot prove uniform
// is serialized, advisory C7518). A batch past the slice (short last stage, only the last rank's) multiplies weight
// codes (produce_item's fill: finite) by B's zero padding and gets a zero weight scale: it adds exactly zero. A warp
// whose tile is past n computes rows that are never stored (a wgmma's output row depends on its A row only), from
// whatever the stage holds; its weight scales are row 0's (an in-bounds read).
template <bool kBlk128, bool kOne>
__device__ __forceinline__ void consume_item(const skinny::Args& a, int item, int sb0, int sb1, uint32_t act_s,
                                             const float* xs_s, Ring& R, int warp, int lane, float (&acc)[4]) {
  constexpr int kSb = kBlk128 ? 7 : 5;  // weight block = activation block (host-checked)
  const int wg = warp / 4, wt = warp % 4, c = lane % 4;
  const int row0 = (item * kItemTiles + wt) * 16;
  const bool live = row0 < a.n;  // (warp-uniform)
  const int wkb = (a.k + (1 << kSb) - 1) >> kSb;
  const uint8_t* ws_row = a.ws + int64_t(live ? row0 >> kSb : 0) * wkb;
  int ws_last = wkb - 1;  // the row's last weight scale: a phantom batch's index is clamped to it
  // Opaque, so kept in registers: ptxas otherwise rebuilds them from the kernel arguments every stage (~13
  // instructions of the 162 a V4 stage had; bench/gpu/NOTES.md "FP8 decode stream on wgmma").
  asm("" : "+l"(ws_row), "+r"(ws_last));
  const int gs = wg * kWgSteps;
  // B of local step s at act_s + 256 s; core matrix 1 128 bytes after core matrix 0 (LBO); one 8-slot group along
  // N, so the SBO is unused (set to the same 128). Only the start field moves, by 16 per step, within its 14 bits.
  const uint64_t desc0 = wgmma::smem_desc_noswizzle(act_s + uint32_t(gs * kStepB), 128, 128);
  const uint32_t desc_lo = uint32_t(desc0), desc_hi = uint32_t(desc0 >> 32);
  const float* xsw = xs_s + 2 * c + ((gs * 32) >> kSb) * kMaxRows;  // this stage's batch 0 block (local)
  const uint32_t w_off = uint32_t(wt * kTileBytes + gs * kStepBytes + lane * 16);
  int si = (sb0 + gs) >> (kSb - 5);  // this stage's batch 0 weight-scale index (kBlk128: block, else step)
  constexpr int kBatchScales = kBlk128 ? 1 : 4, kStageScales = kStageSteps >> (kSb - 5);
  uint32_t dlo = desc_lo;
  acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
  for (int s0 = sb0; s0 < sb1; s0 += kStageSteps) {
    const int ns = min(kStageSteps, sb1 - s0);
    const bool in0 = gs < ns, in1 = gs + 4 < ns;  // the batch is inside the slice (else: a phantom, above)
    // The weight scales first: global loads whose latency the full-barrier wait and the wgmmas cover; the index
    // clamped into the row (a phantom's is past k), the value then zeroed.
    float w0[4], w1[4];
#pragma unroll
    for (int j = 0; j < kBatchScales; ++j) {
      const float v0 = dev::e8m0_to_float(__ldg(ws_row + min(si + j, ws_last)));
      const float v1 = dev::e8m0_to_float(__ldg(ws_row + min(si + kBatchScales + j, ws_last)));
      w0[j] = in0 ? v0 : 0.0f;
      w1[j] = in1 ? v1 : 0.0f;
    }
    const uint32_t st = R.base + uint32_t(R.stage * R.stride);
    mbar_wait(R.full + 8 * R.stage, R.phase);
    uint4 r[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) r[j] = lds128(st + w_off + uint32_t(j * kStepBytes));
    const uint32_t empty_bar = R.empty + 8 * R.stage;  // released after the math (stream_gemm.cuh consume_tile)
    R.advance();

    uint32_t a0[4][4], a1[4][4];
    float d0[4][4], d1[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      frag(r[j], a0[j]);
      frag(r[4 + j], a1[j]);
    }
    issue4<kBlk128>(d0, a0, dlo, desc_hi);
    issue4<kBlk128>(d1, a1, dlo + 16u * 4u, desc_hi);
    wgmma::wait_group<1>();
    settle<kBlk128>(d0, a0);
    fold4<kBlk128, kOne>(acc, d0, w0, xsw);
    wgmma::wait_group<0>();
    settle<kBlk128>(d1, a1);
    fold4<kBlk128, kOne>(acc, d1, w1, xsw + ((4 * 32) >> kSb) * kMaxRows);
    warp_release_stage(empty_bar);  // mbarrier.cuh: the reads before the next bulk copy
    si += kStageScales;
    dlo += 16u * kStageSteps;
    xsw += ((kStageSteps * 32) >> kSb) * kMaxRows;
  }
}

// An item's output idx (of kItemOut, the fragment order: tile w = idx / 128, accumulator i, lane) -> row m, col n.
__device__ __forceinline__ void out_index(int idx, int item, int rb, int& m, int& n) {
  const int w = idx / 128, i = (idx % 128) / 32, ln = idx % 32;
  n = (item * kItemTiles + w) * 16 + ln / 4 + (i >= 2 ? 8 : 0);
  m = rb + 2 * (ln % 4) + (i & 1);
}

// The kernel: stream_gemm_kernel's roles (8 consumer warps = 2 warpgroups, warp 8 = producer; persistent clusters
// over the group-major (group, item) list, every rank of a cluster the same items, rank r its k slice).
template <class OutT, bool kBlk128>
__global__ void __launch_bounds__(kThreads, 1) fp8_wgmma_kernel(const Params P) {
  const skinny::Args& a = P.pa.base;
  extern __shared__ __align__(1024) uint8_t smem[];
  const int N = a.n, K = a.k, S = P.split;
  const int items_per_group = ((N + 15) / 16 + kItemTiles - 1) / kItemTiles;
  const int NS = P.stages;
  const Layout L(NS, P.cap, a.act_block_log2, S > 1);
  const uint32_t s_base = dev::smem_u32(smem);
  Ring R = ring_at(s_base, L, NS, kStageBytes);
  const uint32_t ready0 = R.empty + 8 * NS, done0 = ready0 + 16;  // split only
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rank = int(blockIdx.x) % S;  // 1-D clusters of S blocks along x: %cluster_ctarank

  if (threadIdx.x == 0) {
    init_ring(R);
    if (S > 1)
      for (int b = 0; b < 2; ++b) {
        mbar_init(ready0 + 8 * b, uint32_t(S));
        mbar_init(done0 + 8 * b, uint32_t(S));
      }
    mbar_fence_init();
  }
  // Every rank's barriers are initialized before any rank arrives on them remotely; the last block-wide (cluster)
  // barrier: from here producer and consumers run apart.
  if (S > 1)
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  else
    __syncthreads();

  const int64_t items = int64_t(P.groups) * items_per_group;
  const int64_t clusters = gridDim.x / S, cid = blockIdx.x / S;
  const int64_t i0 = items * cid / clusters, i1 = items * (cid + 1) / clusters;
  int sb0, sb1;
  slice_steps(K, S, rank, sb0, sb1);

  if (warp == kConsumerWarps) {
    if (lane != 0) return;
    if (a.expert_ids) pdl_wait();  // the groups are the routing's output; dense items read weights only
    for (int64_t it = i0; it < i1; ++it) {
      int rb, re;
      int64_t e;
      group_rows(a, int(it / items_per_group), P.rows_cap, rb, re, e);
      if (rb >= re) continue;
      produce_item(P.pa, int(it % items_per_group), sb0, sb1, R);  // e: FP8 products are dense (host-checked)
    }
    return;
  }

  pdl_wait();  // activations and the output buffer: the predecessors' (cuda/launch.h)
  const uint32_t act_s = s_base + uint32_t(L.act);
  float* xs_s = reinterpret_cast<float*>(smem + L.xs);
  float* partial = reinterpret_cast<float*>(smem + L.partial);
  float* xbuf = reinterpret_cast<float*>(smem + L.xbuf);
  auto* y = static_cast<OutT*>(a.y);
  int cur_grp = -1, j = 0;
  for (int64_t it = i0; it < i1; ++it) {
    int rb, re;
    int64_t e;
    const int grp = int(it / items_per_group), item = int(it % items_per_group);
    group_rows(a, grp, P.rows_cap, rb, re, e);
    if (rb >= re) continue;
    const int rows = re - rb;
    if (grp != cur_grp) {
      stage_slice(a, P.swiglu, act_s, xs_s, rb, rows, sb0, sb1, P.cap, warp, lane);
      cur_grp = grp;
    }
    float acc[4];
    if (rows == 1)
      consume_item<kBlk128, true>(a, item, sb0, sb1, act_s, xs_s, R, warp, lane, acc);
    else
      consume_item<kBlk128, false>(a, item, sb0, sb1, act_s, xs_s, R, warp, lane, acc);
    if (it == i1 - 1) pdl_launch_dependents();  // the block's last weight stage is consumed

    // Warpgroup 0's partial + warpgroup 1's (in that order); warpgroup 1 hands its partials over through one of two
    // buffers (alternating per item: a buffer is rewritten two items later, after a barrier that follows
    // warpgroup 0's reads of it). Without the split warpgroup 0 stores; with it, the cluster exchange.
    const int b = j & 1;
    const uint32_t par = uint32_t(j >> 1) & 1u;
    float* pb = partial + b * kItemOut + (warp % 4) * 128;
    float* xb_b = xbuf + b * kItemOut;
    if (S > 1) mbar_wait_acq_cluster(done0 + 8 * b, par ^ 1u);  // every rank has read xbuf[b] of item j - 2
    if (warp >= 4) {
#pragma unroll
      for (int i = 0; i < 4; ++i) pb[i * 32 + lane] = acc[i];
    }
    consumer_sync();
    if (warp < 4) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float sum = acc[i] + pb[i * 32 + lane];
        const int idx = warp * 128 + i * 32 + lane;
        if (S > 1) {
          xb_b[idx] = sum;
        } else {
          int m, n;
          out_index(idx, item, rb, m, n);
          if (n < N && m < re) skinny::store_out(y, int64_t(m) * N + n, sum);
        }
      }
    }
    if (S > 1) {
      cluster_sum_partials(S, rank, ready0, done0, b, par, xb_b, kItemOut, [&](int idx, float sum) {
        int m, n;
        out_index(idx, item, rb, m, n);
        if (n < N && m < re) skinny::store_out(y, int64_t(m) * N + n, sum);
      });
    }
    ++j;
  }
  if (S > 1) {  // no rank reads this block's xbuf or arrives on its barriers after these complete
    for (int jj = max(0, j - 2); jj < j; ++jj) mbar_wait_acq_cluster(done0 + 8 * (jj & 1), uint32_t(jj >> 1) & 1u);
  }
}

// The split of a product and its launch shape: S ranks per cluster, the staged steps, stages, shared memory and the
// clusters launched at most (resident at once, from cudaOccupancyMaxActiveClusters).
struct Split {
  int S = 1, cap = 16, stages = 0;
  size_t smem = 0;
  int64_t clusters = 0;
};

// S in {1, 2, 4, 8} (at most the stages of k: each rank at least one) minimizing the stages one block streams,
// waves x ceil(stages of k / S) with waves = ceil(items / resident clusters), the smaller S on a tie (fewer
// exchanges). From n, k and the device only (items = ceil(n / 64) of ONE group), never the rows, so a row's bits do
// not depend on the batch. E.g. on 132 SMs: wq_a (16 items, 8 stages of k) S = 8 if 16 clusters of 8 are resident,
// else 4; n = 4096 S = 2; wq_b (512 items) S = 1. `kernel`: the instantiation to launch (the residency query).
inline Split choose_split(const void* kernel, int n, int k, int xb, int sms, size_t optin) {
  const int64_t items = (n + 63) / 64;
  const int units = (k / 32 + kStageSteps - 1) / kStageSteps;
  Split best;
  int64_t best_cost = 0;
  for (int S = 1; S <= 8 && S <= units; S *= 2) {
    Split c;
    c.S = S;
    c.cap = slice_cap(k, S);
    for (int ns = 6; ns >= 2 && !c.stages; --ns)
      if (Layout(ns, c.cap, xb, S > 1).total <= optin) c.stages = ns;
    if (!c.stages) continue;
    c.smem = Layout(c.stages, c.cap, xb, S > 1).total;
    c.clusters = sms / S;
    if (S > 1) c.clusters = std::min(c.clusters, resident_clusters(kernel, kThreads, c.smem, S, c.clusters));
    if (c.clusters <= 0) continue;
    const int64_t cost = (items + c.clusters - 1) / c.clusters * ((units + S - 1) / S);
    if (!best.stages || cost < best_cost) best = c, best_cost = cost;
  }
  return best;
}

}  // namespace fp8wg

// The process-wide switch (host): DEEPINFER_STREAM_FP8=wgmma (read once; default off); set_fp8_wgmma overrides it.
inline bool fp8_wgmma() { return fp8wg::on_switch().get(); }
inline void set_fp8_wgmma(bool on) { fp8wg::on_switch().set(on); }

// Launches the wgmma form of launch_stream<FP8> (same arguments and contract); false, launching nothing, where it
// does not apply (the header's list). One block per SM (shared memory: 32 KB stages, as many as fit up to 6, at
// least 2), S blocks per cluster (fp8wg::choose_split), as many clusters as are resident at once, at most one per
// item.
template <class OutT>
inline bool launch_fp8_wgmma(const packed::Args& pa, int groups, int64_t max_rows, cudaStream_t stream,
                             const SwigluInput& swiglu, bool pdl) {
  if (!fp8_wgmma() || batch_invariant() || max_rows > kMaxRows || max_rows < 1) return false;
  const int xb = pa.base.act_block_log2, sb = pa.base.w_block_log2, k = pa.base.k, n = pa.base.n;
  if (!((xb == 7 && sb == 7) || (xb == 5 && sb == 5)) || k % 128 != 0 || k < 128 || n < 1) return false;
  if (pa.base.expert_ids) return false;  // the FP8 products are dense (the producer reads expert 0's pack)
  const int3 lim = device_smem_limits();
  const int sms = lim.x;
  const size_t optin = size_t(lim.z);
  auto kernel = xb == 7 ? fp8wg::fp8_wgmma_kernel<OutT, true> : fp8wg::fp8_wgmma_kernel<OutT, false>;
  // The largest carve-up any S may take, set before the residency queries (they need the attribute).
  allow_smem(kernel, optin);
  const fp8wg::Split sp = fp8wg::choose_split(reinterpret_cast<const void*>(kernel), n, k, xb, sms, optin);
  if (!sp.stages) return false;
  fp8wg::Params P;
  P.pa = pa;
  P.pa.weights_evict_first = stream_weights_evict_first(false, groups);
  P.groups = groups;
  P.stages = sp.stages;
  P.rows_cap = int(max_rows);
  P.split = sp.S;
  P.cap = sp.cap;
  P.swiglu = swiglu;
  const int64_t clusters = std::min(sp.clusters, int64_t(groups) * ((n + 63) / 64));
  if (clusters <= 0) return true;
  const int S = sp.S;
  const size_t smem = sp.smem;
  launch_blocks(kernel, P, clusters * S, smem, stream, pdl, unsigned(S));
  return true;
}

}  // namespace deepinfer::cuda::stream_gemm
