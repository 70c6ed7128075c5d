// The MoE's decode routing pieces, device side (model-spec §3 "MoE", §2 W8A8): the router logits' dot products, x's
// FP8 quantization, the hash and top-k row routing into shared memory, the dispatch (pair slots, GEMM groups) and the
// combine's per-vector sum. decode_route_kernel and combine_kernel (moe_gpu.cu) are built from them, and so is the
// planned persistent FFN kernel, another translation unit (docs/persistent_ffn.md §4 "Reuse without copies"): one
// definition, so both produce the same bits. They moved here from moe_gpu.cu with their code unchanged (every
// kernel of moe_gpu.cu kept its SASS instruction for instruction, session 16: bench/gpu/NOTES.md "Routing pieces in
// route_fused.cuh"); new are fused_dispatch's barrier parameter, route_rows (the routing kernel's row loop)
// and combine_vec4 (the combine kernel's thread body). Only .cu files include this.
//
// The routing threads: fused_dispatch, scan_own_slots, write_groups and the stamps take their thread from threadIdx.x,
// so they run on threads 0 .. kRouteThreads - 1 (the whole block of decode_route_kernel), thread 0 writing the stamps;
// route_rows takes its thread's indices as parameters.
#pragma once

#include <cstdint>
#include <cstdio>

#include "cuda/device_util.cuh"
#include "cuda/kernels.h"
#include "cuda/stream_gemm.cuh"
#include "layers/moe/moe_combine.cuh"
#include "layers/moe/routing.cuh"
#include "parallel/replica_choice.h"

namespace deepinfer::cuda::moe_dev {

constexpr int kMaxExperts = 1024;  // route_topk's limit; the scan kernel has one thread per expert
constexpr int kLogitWarps = 4;     // router logits: experts per block (one warp each)
constexpr int kLogitRows = 8;      // router logits: rows per block
// Decode routing in one kernel up to this many rows: its last block routes one row per warp (two rounds of 8
// warps) and sorts at most 16 x 16 pairs; more rows take the separate kernels, which spread that work.
constexpr int kFusedRouteRows = 16;
// The fused routing's dispatch on one warp, a lane a pair (dispatch_pairs_warp): batch 1-4 at top-8, 1-5 at top-6.
constexpr int kWarpDispatchPairs = 32;
constexpr int kRouteThreads = 256;  // fused routing kernel: 8 warps = kLogitWarps experts x 2 halves of kLogitRows
static_assert(kRouteThreads / 32 == 2 * kLogitWarps && kLogitRows % 2 == 0, "a logit block's warps: 4 x 2 halves");
static_assert(kMaxExperts % kRouteThreads == 0, "the last block's scan: whole experts per thread");

// The last-block-arrives pattern (session 5, H8): each thread's stores, dev::fence_acq_rel_gpu (cuda/device_util.cuh),
// a barrier, one relaxed atomicAdd; the last block's atomic, a barrier, the fence, its loads.
using dev::fence_acq_rel_gpu;

// ---------------------------------------------------------------------------------------------------------
// Router logits (model-spec §3: the gate is a bf16 GEMM computed in fp32), batch-invariant: logit (r, e) is one
// warp's dot product of x[r] and gate[e], each lane summing its 8-wide columns lane * 8 + 256 j in order of j
// with fma, then the warp's butterfly sum; nothing depends on how many rows the call has. One definition for the
// two kernels that compute logits (router_logits_kernel, decode_route_kernel).
__device__ __forceinline__ float logit_dot(const bf16* __restrict__ x_row, const bf16* __restrict__ gate_row,
                                           int hidden) {
  const int lane = threadIdx.x % 32;
  const auto* g = reinterpret_cast<const dev::Bf16x8*>(gate_row);
  const auto* xr = reinterpret_cast<const dev::Bf16x8*>(x_row);
  const int vecs = hidden / 8;
  float acc = 0.0f;
#pragma unroll 4  // loads of 4 steps in flight; the fma chain keeps its order
  for (int v = lane; v < vecs; v += 32) {
    float gf[8], xf[8];
    dev::unpack8(g[v], gf);
    dev::unpack8(xr[v], xf);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc = fmaf(xf[j], gf[j], acc);
  }
  return dev::warp_sum(acc);
}

// kWin of a lane's vectors v0 + 32 w (those below vecs) into the logit's fma chain: in order of w, each vector's 8
// products in order of j (logit_dot's order of v and j).
template <int kWin>
__device__ __forceinline__ void fma_vectors(const uint4 (&gv)[kWin], const uint4 (&xv)[kWin], int v0, int vecs,
                                            float& acc) {
#pragma unroll
  for (int w = 0; w < kWin; ++w) {
    if (v0 + 32 * w < vecs) {
      float gf[8], xf[8];
      dev::unpack8(reinterpret_cast<const dev::Bf16x8&>(gv[w]), gf);
      dev::unpack8(reinterpret_cast<const dev::Bf16x8&>(xv[w]), xf);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc = fmaf(xf[j], gf[j], acc);
    }
  }
}

// kWin of a lane's 16-byte vectors v0 + 32 w of a bf16 row (those below vecs), all loads in flight at once.
template <int kWin>
__device__ __forceinline__ void load_vectors(const bf16* __restrict__ row, int v0, int vecs, uint4 (&out)[kWin]) {
  const auto* p = reinterpret_cast<const uint4*>(row);  // one 16-byte load a vector
#pragma unroll
  for (int w = 0; w < kWin; ++w)
    if (v0 + 32 * w < vecs) out[w] = p[v0 + 32 * w];
}

// logit_dot with all of a lane's loads of up to kWin vectors in flight at once (decode_route_kernel: hidden 4096
// is 16 vectors per lane, so one load latency instead of logit_dot's four); the fma chain is logit_dot's (the
// lane's vectors in order of v, the 8 products of a vector in order of j), so the same bits.
template <int kWin>
__device__ __forceinline__ float logit_dot_window(const bf16* __restrict__ x_row, const bf16* __restrict__ gate_row,
                                                  int hidden, int v_first = 0, float acc = 0.0f) {
  const int lane = threadIdx.x % 32;
  const int vecs = hidden / 8;
  for (int v0 = v_first + lane; v0 < vecs; v0 += 32 * kWin) {
    uint4 gv[kWin], xv[kWin];
    load_vectors<kWin>(gate_row, v0, vecs, gv);
    load_vectors<kWin>(x_row, v0, vecs, xv);
    fma_vectors<kWin>(gv, xv, v0, vecs, acc);
  }
  return dev::warp_sum(acc);
}

// The first kGateLanes vectors of each lane's share of a gate row (decode_route_kernel loads them before its PDL wait:
// the gate is a weight, launch.h's contract, so its HBM latency overlaps the predecessor's tail): 16 cover hidden 4096
// (V4), 20 hidden 5120 (V4.1). logit_dot_gate_loaded then loads x's matching vectors and runs the row's rest (none
// up to there) in a narrow window, so that its registers beside the held gate vectors do not spill; the same fma chain
// in the same order as logit_dot_window, so the same bits.
template <int kGateLanes>
__device__ __forceinline__ float logit_dot_gate_loaded(const uint4 (&gv)[kGateLanes], const bf16* __restrict__ x_row,
                                                       const bf16* __restrict__ gate_row, int hidden) {
  const int lane = threadIdx.x % 32;
  const int vecs = hidden / 8;
  uint4 xv[kGateLanes];
  load_vectors<kGateLanes>(x_row, lane, vecs, xv);
  float acc = 0.0f;
  fma_vectors<kGateLanes>(gv, xv, lane, vecs, acc);
  return logit_dot_window<4>(x_row, gate_row, hidden, 32 * kGateLanes, acc);
}

// Hash layers (model-spec §3: V4's first num_hash_layers): the experts are tid2eid[token]; the weights are the
// sqrt-softplus scores of those experts, normalised as route_weights / route_topk do (fp32 sum in slot order).
// One thread per row. Three dependent round trips: the token, then every tid2eid entry of the row at once, then
// every logit at once (the reference below took 1 + 2 top_k, 13 at top-6: each entry, then its logit, in turn; ~1 us
// each in the decode routing's last block, bench/gpu/NOTES.md "Decode latency work at batch 1"). The scores, their
// sum in slot order and the weights are the same expressions in the same order: bitwise the reference (checked by
// GpuMoe.HashRouteMatchesReferenceBitwise, tests/gpu/model/test_hash_route_gpu.cpp); an invalid entry traps with the
// same message (the first invalid slot's).
// In two parts: hash_row_experts, the first two round trips (the token and its tid2eid entries, checked), which do
// not depend on the router logits, so that the fused routing's selector loads them before its poll (moe_gpu.cu
// route_as_selector); then the row's routing from its experts (the logits, the third).
struct HashRowExperts {
  int e[kMaxTopK];  // slots k < top_k: row r's experts, tid2eid[token][k]
};

__device__ __forceinline__ HashRowExperts hash_row_experts(int r, const int32_t* __restrict__ tokens,
                                                           const int32_t* __restrict__ tid2eid, int64_t vocab,
                                                           int experts, int top_k) {
  const int32_t token = tokens[r];
  if (token < 0 || token >= vocab) {
    printf("moe_forward: row %d has token %d outside the hash table [0, %lld)\n", r, token, (long long)vocab);
    __trap();
  }
  HashRowExperts row;
  int* e = row.e;
#pragma unroll
  for (int k = 0; k < kMaxTopK; ++k)
    if (k < top_k) e[k] = tid2eid[int64_t(token) * top_k + k];
#pragma unroll
  for (int k = 0; k < kMaxTopK; ++k) {
    if (k < top_k && (e[k] < 0 || e[k] >= experts)) {  // validated at upload; the dispatch would write out of bounds
      printf("moe_forward: tid2eid[%d][%d] = %d is not an expert\n", token, k, e[k]);
      __trap();
    }
  }
  return row;
}

__device__ __forceinline__ void hash_route_row(int r, const HashRowExperts& row, const float* logits, int experts,
                                               int top_k, float temp, bool normalize, float eps, float route_scale,
                                               int32_t* __restrict__ ids, float* __restrict__ weights,
                                               int32_t* s_ids = nullptr, float* s_weights = nullptr) {
  const int* e = row.e;
  float logit[kMaxTopK];
#pragma unroll
  for (int k = 0; k < kMaxTopK; ++k)
    if (k < top_k) logit[k] = __ldcg(logits + int64_t(r) * experts + e[k]);
  float s[kMaxTopK];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxTopK; ++k) {
    if (k < top_k) {
      s[k] = moe_dev::route_score(logit[k], temp);
      sum += s[k];
      ids[int64_t(r) * top_k + k] = e[k];
      if (s_ids) s_ids[r * top_k + k] = e[k];  // decode_route_kernel: the routing again for its dispatch
    }
  }
#pragma unroll
  for (int k = 0; k < kMaxTopK; ++k) {
    if (k < top_k) {
      const float v = normalize ? s[k] / (sum + eps) : s[k];
      weights[int64_t(r) * top_k + k] = v * route_scale;
      if (s_weights) s_weights[r * top_k + k] = v * route_scale;
    }
  }
}

__device__ __forceinline__ void hash_route_row(int r, const float* logits, const int32_t* __restrict__ tokens,
                                               const int32_t* __restrict__ tid2eid, int64_t vocab, int experts,
                                               int top_k, float temp, bool normalize, float eps, float route_scale,
                                               int32_t* __restrict__ ids, float* __restrict__ weights) {
  hash_route_row(r, hash_row_experts(r, tokens, tid2eid, vocab, experts, top_k), logits, experts, top_k, temp,
                 normalize, eps, route_scale, ids, weights);
}

// x in FP8 (model-spec §2), one 8-value vector v of x per thread, the act_block / 8 lanes of a block sharing its
// amax by shuffles: the rule and the bits of fp8_quantize (its vectors and lane groups are the same). Every lane
// of the warp must call it (shuffles).
__device__ __forceinline__ void quantize_vec8(const bf16* __restrict__ x, int64_t v, int64_t vecs, int lanes_per_block,
                                              uint8_t* __restrict__ q, float* __restrict__ scales) {
  const bool valid = v < vecs;
  float f[8] = {};
  if (valid) dev::unpack8(reinterpret_cast<const dev::Bf16x8*>(x)[v], f);
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(f[j]));
  for (int o = lanes_per_block / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
  const float scale = dev::fp8_block_scale(amax);
  const float inv = dev::fp8_inv_scale(scale);  // 1.0f / scale bit for bit, without its slow path
  if (!valid) return;
  uint32_t lo = 0, hi = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    lo |= uint32_t(__nv_cvt_float_to_fp8(f[j] * inv, __NV_SATFINITE, __NV_E4M3)) << (8 * j);
    hi |= uint32_t(__nv_cvt_float_to_fp8(f[4 + j] * inv, __NV_SATFINITE, __NV_E4M3)) << (8 * j);
  }
  reinterpret_cast<uint2*>(q)[v] = make_uint2(lo, hi);
  if (v % lanes_per_block == 0) scales[v / lanes_per_block] = scale;
}

// ---------------------------------------------------------------------------------------------------------
// The fused decode routing's arguments (moe_gpu.cu decode_route_kernel, "the whole decode routing in one launch";
// filled by fused_route_args there).
struct RouteArgs {
  const bf16* x = nullptr;
  const bf16* gate = nullptr;
  const float* bias = nullptr;
  const int32_t* tid2eid = nullptr;
  const int32_t* tokens = nullptr;
  int64_t vocab = 0;
  int rows = 0, experts = 0, top_k = 0, hidden = 0, act_block = 0;
  float temp = 1, eps = 0, route_scale = 1;
  bool normalize = true;
  int chunk = 0, groups = 0;
  int expert_blocks = 0, logit_blocks = 0;
  // At most kWarpDispatchPairs pairs (rows * top_k) and route_dispatch_warp(): the last block's warp 0 dispatches them
  // alone (dispatch_pairs_warp), else the whole block's count, scan and write (fused_dispatch).
  bool warp_dispatch = false;
  // The logit warps' gate vectors loaded before the PDL wait (route_gate_early()), else after it.
  bool gate_early = true;
  parallel::PairOwner owner;  // expert parallelism: which pairs this rank computes, in which slot
  float* logits = nullptr;
  // [rows, experts] route_score of each logit, written beside it by the logit blocks (decode_route_kernel, top-k
  // layers) so that the last block's rows only pick (route_row_topk_scored); null: the last block scores.
  float* scores = nullptr;
  uint8_t* xq = nullptr;
  float* xs = nullptr;
  int32_t* ids = nullptr;
  float* route_w = nullptr;
  int32_t* group_experts = nullptr;
  int32_t* group_offsets = nullptr;
  int32_t* pair_slot = nullptr;
  int32_t* slot_row = nullptr;
  float* slot_weight = nullptr;
  int32_t* used_groups = nullptr;
  uint32_t* ticket = nullptr;
  // Diagnostics (moe_fused_route_phases): null in every moe_forward call. Else [kStampCount] u64 where thread 0 of
  // each block writes %globaltimer at its phase ends (RouteStamp), initialised by the host to {~0, 0, ...}.
  unsigned long long* stamps = nullptr;
  // The stamped kernel inside the model (route_stamps_warm, moe_gpu.h): how many times its last block routes the rows
  // (2: the warm rerun, the second timed). 1 everywhere else; the measured kernel ignores it.
  int stamp_runs = 1;
};

// The phase ends the routing kernels stamp (RouteArgs::stamps). Entry: the first block past pdl_wait (atomicMin);
// Computed: the last block done with its logits / quantization, just before its ticket (atomicMax); the rest by
// the last block only: its ticket taken and acquired, the rows routed, the pairs counted, the scan and GEMM groups
// written, its thread 0 done with the scatter. The last block also stamps its SM clock at the same five points
// (kStampClock + i), finer than %globaltimer where that ticks in microseconds.
enum RouteStamp : int {
  kStampEntry = 0,
  kStampComputed,
  kStampTicket,
  kStampRouted,
  kStampCounted,
  kStampScanned,
  kStampEnd,
  kStampClock,  // 5 clock64 values: Ticket .. End
  kStampCount = kStampClock + (kStampEnd - kStampTicket + 1)
};

// Thread 0 only; a uniform test of a null pointer when the stamps are off.
__device__ __forceinline__ void stamp_first(unsigned long long* s) {
  if (s && threadIdx.x == 0) atomicMin(s + kStampEntry, dev::globaltimer_ns());
}
__device__ __forceinline__ void stamp_latest(unsigned long long* s) {
  if (s && threadIdx.x == 0) atomicMax(s + kStampComputed, dev::globaltimer_ns());
}
__device__ __forceinline__ void stamp_last_block(unsigned long long* s, RouteStamp i) {
  if (s && threadIdx.x == 0) {
    s[i] = dev::globaltimer_ns();
    s[kStampClock + (i - kStampTicket)] = static_cast<unsigned long long>(clock64());
  }
}

// Route stamps inside the model (moe_gpu.h route_stamps): launch_fused_route runs decode_route_kernel<kPerLane, true>
// with RouteArgs::stamps at the layer's record (route_stamp_record). The record's first kStampCount words are the
// RouteStamp marks moe_fused_route_phases reads (Entry and Computed copied there by the last block at its end), then
// what the model's timeline needs to tell waiting from working: the blocks' first instruction (before the PDL wait)
// against their wait's return, the latest of both (blocks the SMs took late), the last block's own, the grid, and
// the SMs of block 0, of the first block done (ticket 0) and of the last block. The earliest-of accumulators hold
// ~t under atomicMax, so zeroed memory (route_stamp_base) is their start; the last block takes them back to zero
// (atomicExch) for the layer's next launch, a step later. Thread 0 of each block only.
enum ModelStamp : int {
  kAccStart = kStampCount,  // ~ the earliest first instruction
  kAccEntry,                // ~ the earliest wait return
  kAccStartLatest,          // the latest first instruction
  kAccEntryLatest,          // the latest wait return
  kAccComputed,             // the latest block done with its logits / quantization
  kRecStart,                // closed by the last block: kAccStart, kAccStartLatest, kAccEntryLatest
  kRecStartLatest,
  kRecEntryLatest,
  kRecLastStart,            // the last block's first instruction and wait return
  kRecLastEntry,
  kRecGrid,
  kRecSmBlock0,
  kRecSmFirstDone,
  kRecSmLast,
  kRecLaunches,             // launches closed on this record
  kRecMarkLoads,            // the last block's SM clock inside its routed phase, top-k layers (route_row_topk's marks):
  kRecMarkScores,           // its logits and bias loaded, its scores computed, its picks made
  kRecMarkPicks,
  kRecWords
};

// route_row_topk's marks (routing.cuh NoRouteMarks) into the layer's record: thread 0's SM clock once the marked value
// exists (the empty asm consumes it, so the clock read cannot move before it).
struct RecordMarks {
  unsigned long long* s;
  __device__ __forceinline__ void operator()(int i, float v) const {
    asm volatile("" ::"f"(v));
    if (threadIdx.x == 0) s[kRecMarkLoads + i] = static_cast<unsigned long long>(clock64());
  }
};

// The fused routing's error path, out of line (no printf stack frame in the kernel). inline: one definition in every
// translation unit that includes this.
inline __device__ __noinline__ void fail_group_bound(int used, int groups) {
  printf("moe_forward: %d GEMM groups exceed the bound %d\n", used, groups);
  __trap();
}

// The fused routing's GEMM groups, in two steps around a barrier. scan_own_slots: the thread's kPerThread
// consecutive slots' (pairs, chunks) counts (own) and their inclusive prefix inside the warp (incl, shuffles); lane
// 31 then stores the warp's total in s_warp_total. write_groups, after the barrier: the exclusive prefix over all
// slots (the earlier warps' totals), each non-empty slot's groups (as dispatch_scan_kernel), the first slot of each
// of the thread's slots into s_first, the empty tail, group_offsets[groups], used_groups, and row 0 / weight 0 in the
// slots of other ranks' pairs. Integer sums. (s_first is never null since route v2 went, session 13; its null test
// stays because without it decode_route_kernel's SASS differs from the measured one.)
__device__ __forceinline__ void scan_own_slots(const RouteArgs& A, const int32_t* s_count, int2& own, int2& incl) {
  constexpr int kPerThread = kMaxExperts / kRouteThreads;  // slots per thread in the scan
  const int tid = threadIdx.x, lane = tid % 32;
  own = make_int2(0, 0);
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int c = s_count[tid * kPerThread + j];  // zero past the slots
    own.x += c;
    own.y += (c + A.chunk - 1) / A.chunk;
  }
  incl = own;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int ux = __shfl_up_sync(0xFFFFFFFFu, incl.x, o), uy = __shfl_up_sync(0xFFFFFFFFu, incl.y, o);
    if (lane >= o) {
      incl.x += ux;
      incl.y += uy;
    }
  }
}

__device__ __forceinline__ void write_groups(const RouteArgs& A, const int32_t* s_count, int32_t* s_first, int2 own,
                                             int2 incl, const int2* s_warp_total) {
  constexpr int kPerThread = kMaxExperts / kRouteThreads;
  constexpr int kWarps = kRouteThreads / 32;
  const int tid = threadIdx.x, warp = tid / 32;
  const int P = A.rows * A.top_k;
  int2 before = make_int2(0, 0), total = make_int2(0, 0);
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const int2 t = s_warp_total[w];
    if (w < warp) {
      before.x += t.x;
      before.y += t.y;
    }
    total.x += t.x;
    total.y += t.y;
  }
  const int used = total.y, local = total.x;
  if (used > A.groups) {  // cannot happen (group_bound); writing on would overrun the group arrays
    if (tid == 0) fail_group_bound(used, A.groups);
    __trap();
  }
  int slot = before.x + incl.x - own.x, grp = before.y + incl.y - own.y;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int e = tid * kPerThread + j;
    const int c = s_count[e], chunks = (c + A.chunk - 1) / A.chunk;
    if (s_first) s_first[e] = slot;
    for (int q = 0; q < chunks; ++q) {
      A.group_experts[grp + q] = e;
      A.group_offsets[grp + q] = slot + q * A.chunk;
    }
    slot += c;
    grp += chunks;
  }
  for (int g = used + tid; g < A.groups; g += kRouteThreads) {  // empty groups: any valid expert, no rows
    A.group_experts[g] = 0;
    A.group_offsets[g] = local;
  }
  if (tid == 0) {
    A.group_offsets[A.groups] = local;
    *A.used_groups = used;
  }
  for (int sl = local + tid; sl < P; sl += kRouteThreads) {  // slots of other ranks' pairs: read, never used
    A.slot_row[sl] = 0;
    A.slot_weight[sl] = 0.0f;
  }
}

// fused_dispatch's barrier over the routing threads: the whole block (decode_route_kernel). The planned persistent
// FFN kernel routes on its consumer warps only and passes their named barrier (ConsumerSync, docs/persistent_ffn.md
// §4).
struct BlockSync {
  __device__ __forceinline__ void operator()() const { __syncthreads(); }
};

// fused_dispatch for at most kWarpDispatchPairs pairs, on one warp, lane p holding pair p (batch 1: top_k pairs,
// where the block's scan over all kMaxExperts slots behind three barriers took ~4,500 of the routing's last
// ~6,100 cycles, run 150's route stamps). The same arrays as the block's count, scan and write, from shuffles: a
// pair's slot starts after the local pairs of lower slots (`below`), its place in it is the earlier pairs of the
// same slot (`before`), and each slot's first pair writes its chunks' GEMM groups after those of the lower slots;
// then the empty groups and the other ranks' slots as write_groups writes them. Integer sums: the same values
// whatever the order, so the GEMMs read the same rows in the same places (GpuMoe.RouteDispatchWarpSameBits).
__device__ __forceinline__ void dispatch_pairs_warp(const RouteArgs& A, const int32_t* s_ids, const float* s_w) {
  constexpr unsigned kFull = 0xFFFFFFFFu;
  const int lane = threadIdx.x % 32;
  const int K = A.top_k, P = A.rows * K;  // P <= kWarpDispatchPairs (the host's test)
  const int slot = lane < P ? A.owner.slot(lane, s_ids[lane]) : -1;  // -1: another rank computes the pair
  const float weight = lane < P ? s_w[lane] : 0.0f;
  const bool mine = slot >= 0;
  int below = 0, before = 0, same = 0;
  for (int j = 0; j < P; ++j) {  // P is uniform
    const int sj = __shfl_sync(kFull, slot, j);
    below += sj >= 0 && sj < slot;
    same += sj == slot;
    before += j < lane && sj == slot;
  }
  const int local = __popc(__ballot_sync(kFull, mine));  // the pairs of this rank's slots
  const int chunks = mine && before == 0 ? (same + A.chunk - 1) / A.chunk : 0;  // counted on a slot's first pair
  stamp_last_block(A.stamps, kStampCounted);

  int group = 0, used = 0;  // the GEMM groups of the lower slots; all of them
  for (int j = 0; j < P; ++j) {
    const int sj = __shfl_sync(kFull, slot, j), cj = __shfl_sync(kFull, chunks, j);
    group += sj < slot ? cj : 0;
    used += cj;
  }
  if (used > A.groups) {  // cannot happen (group_bound); writing on would overrun the group arrays
    if (lane == 0) fail_group_bound(used, A.groups);
    __trap();
  }
  for (int q = 0; q < chunks; ++q) {
    A.group_experts[group + q] = slot;
    A.group_offsets[group + q] = below + q * A.chunk;
  }
  for (int g = used + lane; g < A.groups; g += 32) {  // empty groups: any valid expert, no rows
    A.group_experts[g] = 0;
    A.group_offsets[g] = local;
  }
  if (lane == 0) {
    A.group_offsets[A.groups] = local;
    *A.used_groups = used;
  }
  for (int sl = local + lane; sl < P; sl += 32) {  // slots of other ranks' pairs: read, never used
    A.slot_row[sl] = 0;
    A.slot_weight[sl] = 0.0f;
  }
  stamp_last_block(A.stamps, kStampScanned);

  if (lane < P) {
    const int sl = below + before;
    A.pair_slot[lane] = mine ? sl : -1;
    if (mine) {
      A.slot_row[sl] = lane / K;
      A.slot_weight[sl] = weight;
    }
  }
  stamp_last_block(A.stamps, kStampEnd);
}

// The fused routing's last block after the routing: the routed expert of pair p in s_ids[p] and its weight in
// s_w[p] (every thread's writes before a barrier), s_count zeroed: counts the pairs per slot (PairOwner; the
// expert on one GPU), scans the counts and chunk counts over the slots (first slot, first GEMM group), writes the
// GEMM groups and each pair's slot (slot start + earlier pairs of the same slot), slot -> row and slot -> weight.
// The routing threads call it (threadIdx.x < kRouteThreads, all of them); sync() is their barrier (BlockSync: the whole
// block of decode_route_kernel).
template <class Sync = BlockSync>
__device__ __forceinline__ void fused_dispatch(const RouteArgs& A, int32_t* s_ids, const float* s_w, int32_t* s_count,
                                               int32_t* s_first, int2* s_warp_total, Sync sync = {}) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int K = A.top_k, P = A.rows * K;
  if (A.warp_dispatch) {  // uniform
    if (warp == 0) dispatch_pairs_warp(A, s_ids, s_w);
    return;
  }
  for (int p = tid; p < P; p += kRouteThreads) {
    const int slot = A.owner.slot(p, s_ids[p]);  // the expert on one GPU
    s_ids[p] = slot;
    if (slot >= 0) atomicAdd(&s_count[slot], 1);  // integer counts: order-free
  }
  sync();
  stamp_last_block(A.stamps, kStampCounted);

  // Exclusive prefix of (rows, chunks) over the slots: kPerThread consecutive slots per thread, an inclusive scan
  // of the threads' totals inside each warp (shuffles), then the totals of the earlier warps.
  int2 own, incl;
  scan_own_slots(A, s_count, own, incl);
  if (lane == 31) s_warp_total[warp] = incl;
  sync();
  write_groups(A, s_count, s_first, own, incl, s_warp_total);
  sync();  // s_first complete
  stamp_last_block(A.stamps, kStampScanned);

  for (int p = tid; p < P; p += kRouteThreads) {
    const int e = s_ids[p];
    if (e < 0) {  // another rank computes it
      A.pair_slot[p] = -1;
      continue;
    }
    int rank = 0;  // earlier pairs of the same expert
    for (int j = 0; j < p; ++j) rank += s_ids[j] == e;
    const int sl = s_first[e] + rank;
    A.pair_slot[p] = sl;
    A.slot_row[sl] = p / K;
    A.slot_weight[sl] = s_w[p];
  }
  stamp_last_block(A.stamps, kStampEnd);
}

// The fused routing's rows, once every logit is visible (decode_route_kernel's last block, after its ticket): on
// top-k layers a warp per row (route_row_topk, with the progress marks: NoRouteMarks, RecordMarks), on hash layers a
// thread per row (hash_route_row: thread tid routes row tid from its experts `hash`, hash_row_experts_of); each
// row's picks go to A.ids / A.route_w and, for the dispatch, to s_ids / s_w [rows * top_k] (shared memory). No
// barrier: the caller's, before fused_dispatch reads them. tid is the routing thread, warp and lane its
// (decode_route_kernel: threadIdx.x, / 32, % 32).
// Written so that decode_route_kernel keeps the machine code it had with this loop in its body: the caller's tid,
// warp and lane (computed here, they would be computed twice), the row's routing through a lambda call as the kernel
// had it (without that call boundary the stamp after the rows no longer re-reads A.stamps), and `lane % 32` (== lane)
// in the store test (on a plain parameter, `lane < K` compiles to `K > lane`, which ptxas schedules differently).
// What route_rows reads per row and where it writes the picks: A's own (RouteRowsIO::of), or the selector form's
// rehearsal row (decode_route_kernel, DEEPINFER_ROUTE_SELECTOR=block): the same code on other buffers.
struct RouteRowsIO {
  const float* logits;
  const float* scores;
  const int32_t* tokens;
  int32_t* ids;
  float* route_w;
  __device__ __forceinline__ static RouteRowsIO of(const RouteArgs& A) {
    return {A.logits, A.scores, A.tokens, A.ids, A.route_w};
  }
};

// The experts of routing thread tid's hash row (row tid; none on top-k layers or past the rows): route_rows' input,
// loaded where the caller chooses (nothing in the routing kernel's grid writes the tokens or tid2eid; zero when none).
__device__ __forceinline__ HashRowExperts hash_row_experts_of(const RouteArgs& A, const RouteRowsIO& io, int tid) {
  HashRowExperts row{};
  if (A.tid2eid && tid < A.rows) row = hash_row_experts(tid, io.tokens, A.tid2eid, A.vocab, A.experts, A.top_k);
  return row;
}

template <int kPerLane, class Marks>
__device__ __forceinline__ void route_rows(const RouteArgs& A, const RouteRowsIO& io, const HashRowExperts& hash,
                                           int tid, int warp, int lane, int32_t* s_ids, float* s_w, Marks marks) {
  static_assert(kFusedRouteRows <= kRouteThreads, "hash layers: one row per routing thread at most");
  constexpr int kWarps = kRouteThreads / 32;
  const int K = A.top_k, E = A.experts;
  if (A.tid2eid) {
    if (tid < A.rows)
      hash_route_row(tid, hash, io.logits, E, K, A.temp, A.normalize, A.eps, A.route_scale, io.ids, io.route_w, s_ids,
                     s_w);
  } else {
    for (int r = warp; r < A.rows; r += kWarps) {  // warp-uniform
      auto route_row = [&](auto m) {
        if (io.scores)
          return route_row_topk_scored<kPerLane>(io.scores + int64_t(r) * E, A.bias, E, K, A.normalize, A.eps,
                                                 A.route_scale, io.ids + int64_t(r) * K, io.route_w + int64_t(r) * K,
                                                 m);
        return route_row_topk<kPerLane>(io.logits + int64_t(r) * E, A.bias, E, K, A.temp, A.normalize, A.eps,
                                        A.route_scale, io.ids + int64_t(r) * K, io.route_w + int64_t(r) * K, m);
      };
      const RowPick pick = route_row(marks);
      if (lane % 32 < K) {
        s_ids[r * K + lane] = pick.id;
        s_w[r * K + lane] = pick.weight;
      }
    }
  }
}
template <int kPerLane, class Marks>
__device__ __forceinline__ void route_rows(const RouteArgs& A, int tid, int warp, int lane, int32_t* s_ids, float* s_w,
                                           Marks marks) {
  const RouteRowsIO io = RouteRowsIO::of(A);
  route_rows<kPerLane>(A, io, hash_row_experts_of(A, io, tid), tid, warp, lane, s_ids, s_w, marks);
}

// ---------------------------------------------------------------------------------------------------------
// The combine of one row's 4 columns 4v .. 4v + 3 (v < hidden / 4): its routed experts' outputs, rows slots[k] of
// the parts' expert_y, summed in order of k, then the shared expert's (row r of shared_y), packed to bf16 into row r
// of y (moe_combine.cuh combine_bf16x4, the sum the mHC sites reading the parts compute too). The fixed order makes a
// row's bits independent of the dispatch (combine_kernel, moe_gpu.cu).
__device__ __forceinline__ void combine_vec4(const MoeCombineParts& parts, const int32_t* slots, int hidden, int64_t r,
                                             int v, bf16* __restrict__ y) {
  reinterpret_cast<uint2*>(y + r * hidden)[v] = combine_bf16x4<kMaxTopK>(parts, slots, hidden, r, v);
}

}  // namespace deepinfer::cuda::moe_dev
