// Device side of the MoE router (model-spec §3 "MoE", §4), shared by route_topk (routing.cu) and the MoE's fused
// decode routing kernel (moe_gpu.cu), so both produce the same bits: sqrt(softplus) scores, top-k by score + bias
// with ties to the lower expert id, the normalised routing weights.
#pragma once

#include <cmath>
#include <cstdint>

namespace deepinfer::cuda::moe_dev {

constexpr int kMaxTopK = 16;

// sqrt(softplus(logit / temp)), softplus stable for large arguments.
__device__ __forceinline__ float route_score(float logit, float temp) {
  const float x = logit / temp;
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

template <int kPerLane, class Marks = NoRouteMarks>
__device__ __forceinline__ RowPick route_row_topk(const float* logits_row, const float* bias, int experts, int top_k,
                                               float temp, bool normalize, float eps, float route_scale,
                                               int32_t* ids_row, float* weights_row, Marks mark = {}) {
  const int lane = threadIdx.x % 32;
  // Every logit and bias of the lane is loaded before the first score: computed in the loop that loads them, each
  // expert's division / sqrt slow-path calls kept the next expert's loads behind them, 2 x kPerLane dependent
  // round trips (SASS of decode_route_kernel<8>; ncu, issue 4: the top-k layers' routing took ~9.5 us more than
  // the hash layers'). The same values and the same arithmetic.
  float logit[kPerLane], add[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = i * 32 + lane;
    logit[i] = 0.0f;
    add[i] = 0.0f;
    if (e < experts) {
      logit[i] = __ldcg(logits_row + e);
      if (bias) add[i] = bias[e];
    }
  }
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
  uint32_t taken = 0;  // bit i: expert i * 32 + lane already selected
  float sum = 0.0f;
  RowPick mine{0, 0.0f};
  for (int j = 0; j < top_k; ++j) {
    Pick best{-INFINITY, 0.0f, 0x7FFFFFFF};
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const Pick cand{key[i], score[i], i * 32 + lane};
      if (i * 32 + lane < experts && !((taken >> i) & 1u) && better(cand, best)) best = cand;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      Pick other{__shfl_xor_sync(0xFFFFFFFFu, best.key, o), __shfl_xor_sync(0xFFFFFFFFu, best.score, o),
                 __shfl_xor_sync(0xFFFFFFFFu, best.id, o)};
      if (better(other, best)) best = other;
    }
    if (best.id % 32 == lane) taken |= 1u << (best.id / 32);
    sum += best.score;
    if (lane == j) mine = RowPick{best.id, best.score};  // every lane holds the same best (butterfly)
  }
  mark(2, sum);
  return store_pick(mine, sum, top_k, normalize, eps, route_scale, ids_row, weights_row);
}

// ---------------------------------------------------------------------------------------------------------
// route_row_topk's selection with fewer dependent steps per pick (the fused decode routing kernel v2, moe_gpu.cu),
// for scores another part of the block computed. The picks are route_row_topk's: `better` is a strict total order on
// the (key, id) of the candidates that route_row_topk can select (ids differ; a NaN key never wins its
// comparisons there, so it is never picked: here it is no candidate), so the best untaken candidate is the same
// whether found by route_row_topk's scan and butterfly or by the tree and the two warp reductions below.

// A float key as an unsigned integer with the same order and the same equalities (-0 == +0; not for NaN), so that
// one redux.sync finds the warp's largest key.
__device__ __forceinline__ uint32_t ordered_key(float key) {
  const uint32_t b = key == 0.0f ? 0u : __float_as_uint(key);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// One row's top-k by one whole warp from the lane's keys (score + bias) and scores of experts lane, lane + 32, ...
// (as route_row_topk computes them: score = route_score(logit, temp), key = score + bias, or score + 0.0f without a
// bias). Each pick: the best untaken candidate of the lane by a tree of comparisons (depth log2 kPerLane instead of
// a chain of kPerLane), then the warp's largest key (redux.sync max) and the lowest id holding it (redux.sync min)
// instead of a 5-step butterfly of 3 shuffles each. The weights are route_row_topk's expressions in its order (the
// selected scores summed in selection order, then normalised). Stores and returns what route_row_topk does.
template <int kPerLane>
__device__ __forceinline__ RowPick select_topk_redux(const float (&key)[kPerLane], const float (&score)[kPerLane],
                                                     int experts, int top_k, bool normalize, float eps,
                                                     float route_scale, int32_t* ids_row, float* weights_row) {
  const int lane = threadIdx.x % 32;
  const Pick none{-INFINITY, 0.0f, 0x7FFFFFFF};  // route_row_topk's starting best: a round without a candidate
  uint32_t taken = 0;  // bit i: expert i * 32 + lane already selected
  float sum = 0.0f;
  RowPick mine{0, 0.0f};
  for (int j = 0; j < top_k; ++j) {
    Pick c[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const bool candidate = i * 32 + lane < experts && !((taken >> i) & 1u) && !isnan(key[i]);
      c[i] = candidate ? Pick{key[i], score[i], i * 32 + lane} : none;
    }
#pragma unroll
    for (int w = 1; w < kPerLane; w <<= 1) {
#pragma unroll
      for (int i = 0; i + w < kPerLane; i += 2 * w)
        if (better(c[i + w], c[i])) c[i] = c[i + w];
    }
    const uint32_t local_key = ordered_key(c[0].key);
    const uint32_t top = __reduce_max_sync(0xFFFFFFFFu, local_key);
    const int id = int(__reduce_min_sync(0xFFFFFFFFu, local_key == top ? uint32_t(c[0].id) : 0xFFFFFFFFu));
    const float picked = __shfl_sync(0xFFFFFFFFu, c[0].score, id % 32);  // none: lane 31's 0.0f, as the scan's
    if (id % 32 == lane && id < experts) taken |= 1u << (id / 32);
    sum += picked;
    if (lane == j) mine = RowPick{id, picked};
  }
  return store_pick(mine, sum, top_k, normalize, eps, route_scale, ids_row, weights_row);
}

}  // namespace deepinfer::cuda::moe_dev
