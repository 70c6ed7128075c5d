// route_latency: where the cycles of one row's top-k routing go when one warp does it alone (bench/gpu/NOTES.md
// "Instruction fetch of the serial tails").
//
// Why: the fused decode routing's last block spends ~14 K cycles (V4-Flash, 256 experts top-6) on one row's
// routing after its ticket, with the data in L2 and its code warm or cold alike (run 74: the phase stamps with and
// without an L2 flush, and icache_probe). This runs moe_dev::route_row_topk, the same device code, in a single warp
// with clock64 marks after its loads, its scores and its picks (routing.cuh NoRouteMarks), on logits and bias
// already in L2 (the first launch of each case warms them; 20 launches, medians).
//
// Usage: route_latency [--out results.json]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "latency_bench.h"
#include "cuda/check.h"
#include "layers/moe/routing.cuh"

namespace {

using json = nlohmann::json;
using deepinfer::bench::median;
using deepinfer::cuda::moe_dev::RowPick;
using deepinfer::cuda::moe_dev::route_row_topk;

// clock64 once the marked value exists (the empty asm consumes it, so the clock read cannot move before it).
struct ClockMarks {
  long long* t;
  __device__ __forceinline__ void operator()(int i, float v) const {
    asm volatile("" ::"f"(v));
    t[i + 1] = clock64();
  }
};

constexpr int kMarks = 5;  // start, loads, scores, picks, stored

template <int kPerLane>
__global__ void route_one_row_kernel(const float* logits, const float* bias, int experts, int top_k, int32_t* ids,
                                     float* weights, long long* cycles) {
  long long t[kMarks];
  t[0] = clock64();
  const RowPick pick = route_row_topk<kPerLane>(logits, bias, experts, top_k, 1.0f, true, 1e-20f, 1.5f, ids, weights,
                                                ClockMarks{t});
  asm volatile("" ::"f"(pick.weight));
  t[kMarks - 1] = clock64();
  if (threadIdx.x == 0)
    for (int i = 0; i < kMarks; ++i) cycles[i] = t[i];
}

template <int kPerLane>
json measure(const char* model, int experts, int top_k, bool with_bias) {
  std::mt19937 rng(1234 + experts);
  std::normal_distribution<float> logit_dist(0.0f, 1.4f);
  std::uniform_real_distribution<float> bias_dist(-0.5f, 0.5f);
  std::vector<float> h_logits(static_cast<size_t>(experts)), h_bias(static_cast<size_t>(experts));
  for (float& v : h_logits) v = logit_dist(rng);
  for (float& v : h_bias) v = bias_dist(rng);
  float *logits = nullptr, *bias = nullptr, *weights = nullptr;
  int32_t* ids = nullptr;
  long long* cycles = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&logits, sizeof(float) * size_t(experts)));
  DI_CUDA_CHECK(cudaMalloc(&bias, sizeof(float) * size_t(experts)));
  DI_CUDA_CHECK(cudaMalloc(&weights, sizeof(float) * size_t(top_k)));
  DI_CUDA_CHECK(cudaMalloc(&ids, sizeof(int32_t) * size_t(top_k)));
  DI_CUDA_CHECK(cudaMalloc(&cycles, sizeof(long long) * kMarks));
  DI_CUDA_CHECK(cudaMemcpy(logits, h_logits.data(), sizeof(float) * size_t(experts), cudaMemcpyHostToDevice));
  DI_CUDA_CHECK(cudaMemcpy(bias, h_bias.data(), sizeof(float) * size_t(experts), cudaMemcpyHostToDevice));
  std::vector<std::vector<double>> steps(kMarks - 1);
  for (int run = 0; run < 21; ++run) {
    route_one_row_kernel<kPerLane><<<1, 32>>>(logits, with_bias ? bias : nullptr, experts, top_k, ids, weights,
                                              cycles);
    DI_CUDA_CHECK(cudaGetLastError());
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    long long h[kMarks];
    DI_CUDA_CHECK(cudaMemcpy(h, cycles, sizeof h, cudaMemcpyDeviceToHost));
    if (run == 0) continue;  // warms L2 and the SM
    for (int i = 0; i + 1 < kMarks; ++i) steps[size_t(i)].push_back(double(h[i + 1] - h[i]));
  }
  const char* names[] = {"loads", "scores", "picks", "store"};
  json row = {{"model", model}, {"experts", experts}, {"top_k", top_k}, {"per_lane", kPerLane},
              {"bias", with_bias}};
  double total = 0;
  std::printf("  %-4s experts %3d top-%d%s:", model, experts, top_k, with_bias ? " bias" : "     ");
  for (int i = 0; i + 1 < kMarks; ++i) {
    const double c = median(steps[size_t(i)]);
    total += c;
    row[std::string(names[i]) + "_cycles"] = c;
    std::printf("  %s %6.0f", names[i], c);
  }
  row["total_cycles"] = total;
  std::printf("  | total %6.0f cycles\n", total);
  cudaFree(cycles);
  cudaFree(ids);
  cudaFree(weights);
  cudaFree(bias);
  cudaFree(logits);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  return deepinfer::bench::run_latency_bench(
      argc, argv, "route_latency",
      "one warp routes one row (moe_dev::route_row_topk) from logits and bias in L2; clock64 marks after the loads, "
      "the scores, the picks and the stores; medians of 20 launches after one warm-up",
      [](const cudaDeviceProp&) {
        std::printf("  one warp routes one row (moe_dev::route_row_topk), cycles per step, median of 20\n");
        json rows = json::array();
        rows.push_back(measure<8>("v4", 256, 6, true));
        rows.push_back(measure<8>("v4", 256, 6, false));
        rows.push_back(measure<12>("v41", 384, 6, true));
        return rows;
      });
}
