// Device side of the MoE router (model-spec §3 "MoE", §4), shared by route_topk (routing.cu) and the MoE's fused
// decode routing kernel (moe_gpu.cu), so both produce the same bits: sqrt(softplus) scores, top-k by score + bias
// with ties to the lower expert id, the normalised routing weights.
#pragma once

#include <cmath>
#include <cstdint>

namespace deepinfer::cuda::moe_dev {

constexpr int kMaxTopK = 16;

// sqrt(softplus(logit / temp)), softplus stable for large arguments. The checkpoints' gate_temp is 1.0 and
// x / 1.0f == x exactly, so that case skips the division: its slow-path branch is one of the divergence regions that
// keep a lane's scores from overlapping (bench/gpu/route_latency.cu).
__device__ __forceinline__ float route_score(float logit, float temp) {
  const float x = temp == 1.0f ? logit : logit / temp;
  return sqrtf(x > 20.0f ? x : log1pf(expf(x)));
}

struct Pick {
  float key;    // score + bias: decides the selection
  float score;  // score alone: the routing weight
  int id;
};

__device__ __forceinline__ bool better(const Pick& a, const Pick& b) {
  return a.key > b.key || (a.key == b.key && a.id < b.id);
}

// One row's routing by one whole warp: each lane holds experts lane, lane + 32, ... (experts <= 32 * kPerLane);
// k rounds of a warp-wide (key, id) arg-max pick the experts in the same descending order as the reference's
// partial_sort. logits_row [experts] (read through L2: another block may have written it, moe_gpu.cu), ids_row and
// weights_row [top_k].
// Returns lane j's pick (j < top_k): the expert id and its final weight, the values it stored, so that a caller
// can keep using them without reading the row back (decode_route_kernel's dispatch). Each lane keeps its own
// pick in registers; the weights' arithmetic is the stored form's (session 5, H8: it used to store the raw score
// from lane 0, then read it back through memory for the normalisation, two dependent round trips).
struct RowPick {
  int id;
  float weight;
};

// Lane j < top_k's pick as stored: its score normalised by the selected scores' sum (in selection order) and scaled;
// the selection kernels' common last step.
__device__ __forceinline__ RowPick store_pick(RowPick mine, float sum, int top_k, bool normalize, float eps,
                                              float route_scale, int32_t* ids_row, float* weights_row) {
  const int lane = threadIdx.x % 32;
  if (lane < top_k) {
    float w = mine.weight;
    if (normalize) w = w / (sum + eps);
    mine.weight = w * route_scale;
    ids_row[lane] = mine.id;
    weights_row[lane] = mine.weight;
  }
  return mine;
}

// route_row_topk's progress marks for latency benchmarks (bench/gpu/route_latency.cu): mark(i, v) is called once
// v, a value of step i, is computed (0: the loads, 1: the scores, 2: the picks). The default does nothing.
struct NoRouteMarks {
  __device__ __forceinline__ void operator()(int, float) const {}
};

// A float key as an unsigned integer with the same order and the same equalities (-0 == +0), above 0 for every
// non-NaN float (-inf: 0x007FFFFF), so that 0 can mean "no candidate".
__device__ __forceinline__ uint32_t ordered_key(float key) {
  const uint32_t b = key == 0.0f ? 0u : __float_as_uint(key);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// One row's top-k by one whole warp from the lane's keys (score + bias, or score + 0.0f without a bias) and scores
// of experts lane, lane + 32, ... The picks and floats are those of the reference selection (routing.cu
// route_row_topk_reference, the CPU's partial_sort): per pick the untaken candidate with the largest key, ties to
// the lower id (`better`); a NaN key is never picked; a pick without any candidate left is id 0x7FFFFFFF with score
// 0. The weights are the selected scores summed in pick order, then normalised (store_pick).
// How (bench/gpu/NOTES.md "Instruction fetch of the serial tails": a chain of `better` and a 15-shuffle butterfly
// compiled to nested divergent branches, ~1,670 cycles per pick, 10 K of the last block's 13 K cycles at one V4-Flash
// row, run 75): each candidate is one 64-bit integer ordered as `better` orders the candidates, the key's ordered
// image above the complement of its id (0: taken, NaN or past the experts), so a pick is branch-free: the lane's
// maximum by a tree of integer max / select, the warp's by two redux.sync (high word, then low word among the lanes
// holding it), the picked score from the winner's lane; the winner's entry is zeroed where it equals the pick.
template <int kPerLane, class Marks = NoRouteMarks>
__device__ __forceinline__ RowPick select_topk(const float (&key)[kPerLane], const float (&score)[kPerLane],
                                               int experts, int top_k, bool normalize, float eps, float route_scale,
                                               int32_t* ids_row, float* weights_row, Marks mark = {}) {
  const int lane = threadIdx.x % 32;
  uint64_t cand[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const uint32_t e = uint32_t(i * 32 + lane);
    cand[i] = int(e) < experts && !isnan(key[i]) ? (uint64_t(ordered_key(key[i])) << 32) | (0xFFFFFFFFu - e) : 0;
  }
  float sum = 0.0f;
  RowPick mine{0, 0.0f};
  for (int j = 0; j < top_k; ++j) {
    uint64_t best[kPerLane];
    float best_score[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      best[i] = cand[i];
      best_score[i] = score[i];
    }
#pragma unroll
    for (int w = 1; w < kPerLane; w <<= 1) {
#pragma unroll
      for (int i = 0; i + w < kPerLane; i += 2 * w) {
        const bool right = best[i + w] > best[i];
        best[i] = right ? best[i + w] : best[i];
        best_score[i] = right ? best_score[i + w] : best_score[i];
      }
    }
    const uint32_t hi = __reduce_max_sync(0xFFFFFFFFu, uint32_t(best[0] >> 32));
    const uint32_t lo = __reduce_max_sync(0xFFFFFFFFu, uint32_t(best[0] >> 32) == hi ? uint32_t(best[0]) : 0u);
    const bool none = hi == 0;  // every candidate taken or NaN
    const int id = none ? 0x7FFFFFFF : int(0xFFFFFFFFu - lo);
    const float picked = __shfl_sync(0xFFFFFFFFu, best_score[0], id % 32);
    const uint64_t won = (uint64_t(hi) << 32) | lo;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) cand[i] = cand[i] == won ? 0 : cand[i];  // a no-op when none (won == 0)
    sum += none ? 0.0f : picked;
    if (lane == j) mine = RowPick{id, none ? 0.0f : picked};
  }
  mark(2, sum);
  return store_pick(mine, sum, top_k, normalize, eps, route_scale, ids_row, weights_row);
}

// A lane's values of one routing row (experts lane, lane + 32, ...; read through L2: another block wrote them) and
// their biases, zero past `experts`: every load issued before any use. Computed in the loop that loads them, each
// expert's division / sqrt slow-path calls kept the next expert's loads behind them, 2 x kPerLane dependent round
// trips (SASS of decode_route_kernel<8>; ncu, issue 4: the top-k layers' routing took ~9.5 us more than the hash
// layers'); a sum in the loop did the same (run 149: 7,200 cycles).
template <int kPerLane>
__device__ __forceinline__ void load_lane_row(const float* row, const float* bias, int experts, int lane,
                                              float (&value)[kPerLane], float (&add)[kPerLane]) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = i * 32 + lane;
    value[i] = 0.0f;
    add[i] = 0.0f;
    if (e < experts) {
      value[i] = __ldcg(row + e);
      if (bias) add[i] = bias[e];
    }
  }
}

template <int kPerLane, class Marks = NoRouteMarks>
__device__ __forceinline__ RowPick route_row_topk(const float* logits_row, const float* bias, int experts, int top_k,
                                               float temp, bool normalize, float eps, float route_scale,
                                               int32_t* ids_row, float* weights_row, Marks mark = {}) {
  const int lane = threadIdx.x % 32;
  float logit[kPerLane], add[kPerLane];
  load_lane_row<kPerLane>(logits_row, bias, experts, lane, logit, add);
  mark(0, logit[kPerLane - 1] + add[kPerLane - 1]);
  float score[kPerLane], key[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    score[i] = 0.0f;
    key[i] = -INFINITY;
    if (i * 32 + lane < experts) {
      score[i] = route_score(logit[i], temp);
      key[i] = score[i] + add[i];
    }
  }
  mark(1, key[kPerLane - 1]);
  return select_topk<kPerLane>(key, score, experts, top_k, normalize, eps, route_scale, ids_row, weights_row, mark);
}

// route_row_topk on scores already computed (route_score of each logit, by the blocks that made the logits:
// decode_route_kernel's RouteArgs::scores). The scores were the serial tail's slowest part: each lane's kPerLane
// divisions / square roots ran one after another through their slow-path branches, ~4,500 cycles of the routed
// phase in the step at V4's 8 a lane (run 148's route stamps). The same scores and keys, so the same picks.
template <int kPerLane, class Marks = NoRouteMarks>
__device__ __forceinline__ RowPick route_row_topk_scored(const float* scores_row, const float* bias, int experts,
                                                      int top_k, bool normalize, float eps, float route_scale,
                                                      int32_t* ids_row, float* weights_row, Marks mark = {}) {
  const int lane = threadIdx.x % 32;
  float score[kPerLane], add[kPerLane], key[kPerLane];
  load_lane_row<kPerLane>(scores_row, bias, experts, lane, score, add);
  mark(0, score[kPerLane - 1] + add[kPerLane - 1]);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) key[i] = i * 32 + lane < experts ? score[i] + add[i] : -INFINITY;
  mark(1, key[kPerLane - 1]);
  return select_topk<kPerLane>(key, score, experts, top_k, normalize, eps, route_scale, ids_row, weights_row, mark);
}

}  // namespace deepinfer::cuda::moe_dev
