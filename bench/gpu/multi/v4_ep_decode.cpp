// V4-Flash (or V4.1-Flash: --family v41) over several GPUs of one host (issue 7, docs/parallel.md): expert
// parallelism (the routed experts split over the ranks, layers/moe/moe_gpu.h "Expert parallelism") with attention data
// parallelism (each rank its own sequences), ranks as threads, one GPU each. The model is synthetic: V4-Flash widths
// at full depth by default (43 layers, random weights in the official formats, ~160 GB, which only fits with the
// experts split), every rank building the same replicated weights and its share of the experts
// (random_v4_gpu_weights with a placement).
//
// Measured (all ranks step together; a step's time is the slowest rank's):
//  - decode at global batch 64 and 256 (batch / ranks sequences per rank, each assumed 4K long as v4_decode does),
//    replayed from CUDA graphs: step ms, tokens/s and tokens/s per GPU;
//  - where one eager decode step's time goes on rank 0 at global batch 256 (phase events; ffn.moe holds the
//    gather, the routed experts and the reduce-scatter);
//  - prefill: every rank prefills its own 4K prompt in chunks of --chunk rows (eager steps): tokens/s per GPU and
//    in total.
//
// With --cp-prefill N instead (context parallelism, docs/parallel.md "Context parallelism"): one N-token prompt,
// prefilled (a) by all ranks together through V4GpuModel::prefill_context_parallel (V41GpuModel's with --family v41;
// each rank the query side of its share of every chunk, the caches replicated) and (b) by rank 0 alone (the other
// ranks join each step's MoE exchange with no rows), both in chunks of --chunk rows with the experts EP-sharded;
// prints both tokens/s and the speedup. The model is built for this only (2 slots of N + 64 positions).
//
// --family v41 runs the same decode / prefill table on V4.1-Flash (bench/gpu/v4_flash_config.h flash41_config: 40
// layers, 384 experts top-6, every CSA2 role; V41GpuModel with random_v41_gpu_weights' share of the experts). No
// Engram layers by default: each of the two tables is ~101 GB, too large to make up on the fly next to a run; with
// --engram the Engram layers 1 and 14 are in, their (constant) tables in pinned host memory, one copy shared by every
// rank of the process (V41GpuWeights::shared_engram_tables), if the host has the memory.
//
// Before building, the per-rank memory of the run is planned (parallel/memory_plan.h with the MoE's gathered
// workspace) and printed; a run that does not fit the GPUs' free memory (or, with --engram, the host's) stops there
// with the shortfall.
//
// EPLB (docs/parallel.md "EPLB", algorithms.md §2): --skew zipf:S[:T] skews the routed load: every layer routed by
// score gets the selection bias b_e = -S * T * ln(1 + pi(e)) (GpuStepModelBase::set_routing_bias; pi a fixed random
// permutation of the experts, seed 1234, so the hot experts fall on ranks at random; T = 0.1 by default). The bias
// only picks experts (model-spec §3), so no weight changes. If the scores' noise were Gumbel of scale T, expert pi^-1(j)
// would be picked with probability proportional to (1 + j)^-S, i.e. Zipf(S); the scores are not exactly that, so
// the run prints the exponent it measured (least squares of ln load over ln(1 + popularity rank)). V4's hash-routed
// layers keep their tables (uniform). --eplb-redundant R builds the experts with R redundant slots per layer in the
// load-unaware placement (eplb_placement of a uniform load; R = 0: the contiguous split). Then, at global batch 256:
// a load window of --eplb-window N decode steps with the device counters on (each rank's routed pairs per layer,
// take_rank_pairs, and the expert loads, take_expert_loads, summed over the ranks with one all-reduce), moe_lb live
// = Σ_layers slowest rank's pairs / Σ_layers mean, the per-rank pair counts, and decode tokens/s/GPU at global batch
// 64 and 256; with --rebalance, the new placement (eplb_placement of the group's window, aligned to the one in use),
// the weight moves (rebalance_experts: experts moved, seconds), then the same window and decode timing again.
//
// usage: v4_ep_decode --out results.json [--family v4|v41] [--ep 2] [--layers 43|40] [--chunk 1024] [--quick]
//        [--engram] [--cp-prefill N] [--skew zipf:S[:T]] [--eplb-redundant R] [--rebalance] [--eplb-window N]
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../v4_flash_config.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "layers/moe/moe_gpu.h"
#include "model/config.h"
#include "model/v4/gpu/v4_gpu_model.h"
#include "model/v41/gpu/v41_gpu_model.h"
#include "parallel/comm.h"
#include "parallel/eplb.h"
#include "parallel/memory_plan.h"

using nlohmann::json;
using namespace deepinfer;

namespace {

struct Options {
  std::string out = "v4_ep_decode.json";
  std::string family = "v4";
  int ep = 2, layers = 0, chunk = 1024;  // layers 0: the full model (43 on V4, 40 on V4.1)
  int cp_prefill = 0;  // > 0: the context-parallel prefill comparison only (V4 or V4.1)
  bool quick = false;
  bool engram = false;  // V4.1: the Engram layers with their tables in pinned host memory
  // EPLB (the top comment): Zipf exponent S of the routed load (0: no skew) and the bias scale T, redundant slots per
  // layer, rebalance after the first window, decode steps per load window.
  double skew = 0, skew_temp = 0.1;
  int redundant = 0;
  bool rebalance = false;
  int eplb_window = 16;
  bool eplb() const { return skew > 0 || redundant > 0 || rebalance; }
};

// The --skew selection bias: b_e = -S * T * ln(1 + pi(e)), pi a fixed random permutation (the top comment).
std::vector<float> zipf_bias(int experts, double s, double temp) {
  std::vector<int> popularity(static_cast<size_t>(experts));
  std::iota(popularity.begin(), popularity.end(), 0);
  std::shuffle(popularity.begin(), popularity.end(), std::mt19937(1234));
  std::vector<float> bias(static_cast<size_t>(experts));
  for (int e = 0; e < experts; ++e) bias[size_t(e)] = float(-s * temp * std::log(1.0 + popularity[size_t(e)]));
  return bias;
}

// The Zipf exponent of a load: minus the least-squares slope of ln(load) over ln(1 + j), j the popularity rank
// (experts with no pairs left out).
double fitted_zipf(std::vector<double> load) {
  std::sort(load.begin(), load.end(), std::greater<double>());
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t j = 0; j < load.size(); ++j) {
    if (load[j] <= 0) continue;
    const double x = std::log(1.0 + double(j)), y = std::log(load[j]);
    n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double den = n * sxx - sx * sx;
  return den > 0 ? -(n * sxy - sx * sy) / den : 0.0;
}

// The decode / prefill runs' capacity per rank: 256 / ep sequences of 4K (+ the decode steps), steps of up to
// max(sequences, chunk) rows.
constexpr int kMaxGlobalBatch = 256;
StepCapacity decode_capacity(const Options& o) {
  StepCapacity cap;
  cap.slots = kMaxGlobalBatch / o.ep;
  cap.max_context = 4096 + 64;
  cap.max_rows = std::max(cap.slots, o.chunk);
  return cap;
}

// Every rank's model: the family's random weights (seed 7), the rank's share of the experts.
template <class Model>
std::unique_ptr<Model> rank_model(const ModelConfig& c, const parallel::ExpertPlacement& placement, int rank,
                                  const StepCapacity& cap, parallel::Comm& comm);
template <>
std::unique_ptr<gpu::V4GpuModel> rank_model(const ModelConfig& c, const parallel::ExpertPlacement& placement,
                                            int rank, const StepCapacity& cap, parallel::Comm& comm) {
  return std::make_unique<gpu::V4GpuModel>(c, gpu::random_v4_gpu_weights(c, 7, &placement, rank), cap, &comm);
}
template <>
std::unique_ptr<gpu::V41GpuModel> rank_model(const ModelConfig& c, const parallel::ExpertPlacement& placement,
                                             int rank, const StepCapacity& cap, parallel::Comm& comm) {
  return std::make_unique<gpu::V41GpuModel>(c, gpu::random_v41_gpu_weights(c, 7, &placement, rank), cap,
                                            PrefillReplayOptions{}, &comm);
}

// Device milliseconds between two events recorded around `steps` calls of fn on the model's stream.
template <class Fn>
double time_steps(gpu::GpuStepModel& m, int steps, Fn&& fn) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, m.stream());
  for (int i = 0; i < steps; ++i) fn(i);
  cudaEventRecord(b, m.stream());
  DI_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

// What every rank measured, rank-indexed; the report takes the slowest rank.
struct Shared {
  std::mutex mu;
  json ranks = json::array();
  std::vector<std::string> errors;
};

// --cp-prefill: the context-parallel prefill of one prompt vs rank 0 prefilling it alone (EP-sharded experts); V4 or
// V4.1 (the same GpuStepModelBase plumbing).
template <class Model>
void run_rank_cp(parallel::Comm& comm, int rank, const Options& o, const ModelConfig& config, Shared& shared) {
  const parallel::ExpertPlacement placement =
      parallel::contiguous_placement(config.num_layers, config.n_routed_experts, o.ep);
  const int len = o.cp_prefill;
  StepCapacity cap;
  cap.slots = 2;
  cap.max_context = len + 64;
  cap.max_rows = o.chunk;
  const std::unique_ptr<Model> built = rank_model<Model>(config, placement, rank, cap, comm);
  Model& model = *built;
  std::printf("rank %d: %d layers, weights %.1f GB, caches + scratch %.1f GB\n", rank, config.num_layers,
              double(model.weight_bytes()) / 1e9, double(model.state_bytes()) / 1e9);
  std::fflush(stdout);
  auto prompt = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    const int64_t range = std::min<int64_t>(120000, config.vocab_size - 3);
    for (int p = 0; p < n; ++p) t[size_t(p)] = int32_t(3 + (int64_t(p) * 104729) % range);
    return t;
  };
  const std::vector<int32_t> tokens = prompt(len), warm = prompt(std::min(len, 2 * o.chunk));
  // Rank 0 alone: its rows, every other rank joins the MoE exchange with none.
  auto alone = [&](int slot, const std::vector<int32_t>& t) {
    std::vector<StepRow> rows;
    for (size_t p0 = 0; p0 < t.size(); p0 += size_t(o.chunk)) {
      rows.clear();
      if (rank == 0)
        for (size_t p = p0; p < std::min(t.size(), p0 + size_t(o.chunk)); ++p)
          rows.push_back({slot, t[p], int32_t(p)});
      model.step(rows, o.chunk);
    }
  };
  model.prefill_context_parallel(1, warm, comm);  // warm-up of both paths
  alone(1, warm);
  comm.barrier(model.stream());
  const double cp_ms = time_steps(model, 1, [&](int) { model.prefill_context_parallel(0, tokens, comm); });
  comm.barrier(model.stream());
  const double alone_ms = time_steps(model, 1, [&](int) { alone(1, tokens); });
  comm.barrier(model.stream());
  json mine{{"rank", rank}, {"cp_seconds", cp_ms * 1e-3}, {"alone_seconds", alone_ms * 1e-3}};
  std::lock_guard<std::mutex> lock(shared.mu);
  shared.ranks.push_back(mine);
}

template <class Model>
void run_rank_decode(parallel::Comm& comm, int rank, const Options& o, const ModelConfig& config, Shared& shared) {
  // The placement the experts are built in (parallel::load_unaware_placement: contiguous, or with redundant slots the
  // EPLB placement of a uniform load; the engine's GPU loaders build the same one).
  const parallel::ExpertPlacement placement =
      parallel::load_unaware_placement(config.num_layers, config.n_routed_experts, o.ep, o.redundant);
  const StepCapacity cap = decode_capacity(o);
  const auto t0 = std::chrono::steady_clock::now();
  const std::unique_ptr<Model> built = rank_model<Model>(config, placement, rank, cap, comm);
  Model& model = *built;
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  json mine{{"rank", rank}, {"weights_GB", double(model.weight_bytes()) / 1e9},
            {"state_GB", double(model.state_bytes()) / 1e9}, {"build_s", build_s}};
  std::printf("rank %d: %d layers, weights %.1f GB, caches + scratch %.1f GB (built in %.1f s)\n", rank,
              config.num_layers, double(model.weight_bytes()) / 1e9, double(model.state_bytes()) / 1e9, build_s);
  std::fflush(stdout);

  if (o.skew > 0) {
    const int layers = model.set_routing_bias(zipf_bias(config.n_routed_experts, o.skew, o.skew_temp));
    if (rank == 0) std::printf("skew zipf:%g:%g on %d score-routed layers\n", o.skew, o.skew_temp, layers);
  }

  // Decode at 4K context, from CUDA graphs: `steps` timed steps at global batch `global` (3 more to capture and warm
  // up first); `counted`: with the expert-load counters on (their own graphs), the counts restarted after the warm-up.
  auto decode = [&](int global, int steps, bool counted) {
    const int B = global / o.ep;
    for (int s = 0; s < B; ++s) model.assume_length(s, 4096);
    std::vector<StepRow> rows(static_cast<size_t>(B));
    int32_t pos = 4096;
    auto next = [&] {
      for (int s = 0; s < B; ++s) rows[size_t(s)] = {s, int32_t(3 + (s * 7919 + rank * 131 + pos) % 120000), pos};
      ++pos;
    };
    if (counted) model.set_expert_load_counting(true);
    for (int i = 0; i < 3; ++i) {  // capture + warm-up
      next();
      model.step_graph(rows, B);
    }
    if (counted) {  // the window starts after the warm-up
      model.take_rank_pairs();
      model.take_expert_loads();
    }
    return time_steps(model, steps, [&](int) {
             next();
             model.step_graph(rows, B);
           }) /
           steps;
  };
  auto time_decode = [&](json& into) {
    for (int global : {64, 256}) {
      const double ms = decode(global, o.quick ? 5 : 10, false);
      into.push_back({{"global_batch", global}, {"rows_per_rank", global / o.ep}, {"step_ms", ms}});
    }
  };
  time_decode(mine["decode"]);

  // EPLB: a load window at global batch 256 (live moe_lb, per-rank pairs), then optionally the rebalancing.
  if (o.eplb()) {
    parallel::ExpertPlacement current = placement;
    const size_t L = config.layers.size(), E = size_t(config.n_routed_experts);
    auto window = [&](const char* label) {
      decode(kMaxGlobalBatch, o.eplb_window, true);
      const std::vector<int64_t> pairs = *model.take_rank_pairs();
      const std::vector<std::vector<int64_t>> loads = *model.take_expert_loads();
      model.set_expert_load_counting(false);
      // The group's window: every rank's counts (disjoint shares of the pairs) summed with one all-reduce.
      std::vector<int64_t> flat(L * E);
      for (size_t l = 0; l < L; ++l) std::copy(loads[l].begin(), loads[l].end(), flat.begin() + int64_t(l * E));
      cuda::DeviceBuffer buf(flat.size() * sizeof(int64_t));
      DI_CUDA_CHECK(cudaMemcpy(buf.get(), flat.data(), flat.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
      comm.all_reduce_sum(buf.get(), buf.get(), flat.size(), parallel::CommType::I64, model.stream());
      DI_CUDA_CHECK(cudaStreamSynchronize(model.stream()));
      DI_CUDA_CHECK(cudaMemcpy(flat.data(), buf.get(), flat.size() * sizeof(int64_t), cudaMemcpyDeviceToHost));
      std::vector<std::vector<double>> group(L, std::vector<double>(E));
      std::vector<double> per_expert(E, 0.0);
      for (size_t l = 0; l < L; ++l)
        for (size_t e = 0; e < E; ++e) {
          group[l][e] = double(flat[l * E + e]);
          if (config.layers[l].hash_moe == false) per_expert[e] += group[l][e];
        }
      mine["eplb"][label] = {{"rank_pairs", pairs},
                             {"planned_moe_lb", parallel::moe_lb(group, current)},
                             {"fitted_zipf", fitted_zipf(per_expert)}};
      return group;
    };
    const std::vector<std::vector<double>> load = window("before");
    if (o.rebalance) {
      const parallel::ExpertPlacement next = parallel::eplb_placement(load, o.ep, o.redundant, &current);
      const size_t moves = parallel::rebalance_plan(current, next).size();
      comm.barrier(model.stream());
      const auto t0 = std::chrono::steady_clock::now();
      const size_t received = model.rebalance_experts(next);
      comm.barrier(model.stream());
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      mine["eplb"]["rebalance"] = {{"moves", moves}, {"received", received}, {"seconds", seconds},
                                   {"planned_moe_lb_after", parallel::moe_lb(load, next)}};
      current = next;
      window("after");
      time_decode(mine["decode_after_rebalance"]);
    }
  }

  // One eager decode step at global batch 256, phase by phase (rank 0 reports it).
  {
    const int B = kMaxGlobalBatch / o.ep;
    std::vector<StepRow> rows(static_cast<size_t>(B));
    for (int s = 0; s < B; ++s) model.assume_length(s, 4096);
    for (int i = 0; i < 4; ++i) {
      for (int s = 0; s < B; ++s) rows[size_t(s)] = {s, int32_t(3 + s * 31 + i), 4096 + i};
      model.set_phase_timing(i > 0);  // the first step warms up
      model.step(rows, B);
    }
    for (auto& [name, ms] : model.phase_times()) mine["phases_ms"][name] = ms / 3;
    model.set_phase_timing(false);
    DI_CUDA_CHECK(cudaStreamSynchronize(model.stream()));
  }

  // Prefill of one 4K prompt per rank (slot 1 warms up, slot 0 is timed).
  const int64_t len = 4096;
  auto prefill = [&](int slot) {
    std::vector<StepRow> rows;
    for (int64_t p0 = 0; p0 < len; p0 += o.chunk) {
      rows.clear();
      for (int64_t p = p0; p < std::min<int64_t>(len, p0 + o.chunk); ++p)
        rows.push_back({slot, int32_t(3 + (p * 104729 + rank * 17) % 120000), int32_t(p)});
      model.step(rows, o.chunk);
    }
  };
  prefill(1);
  const double ms = time_steps(model, 1, [&](int) { prefill(0); });
  mine["prefill"] = {{"prompt", len}, {"chunk", o.chunk}, {"seconds", ms * 1e-3}};
  comm.barrier(model.stream());
  std::lock_guard<std::mutex> lock(shared.mu);
  shared.ranks.push_back(mine);
}

void run_rank(const parallel::CommId& id, int rank, const Options& o, const ModelConfig& config, Shared& shared) {
  parallel::Comm comm(id, rank, o.ep, rank);
  if (o.cp_prefill > 0 && o.family == "v41") run_rank_cp<gpu::V41GpuModel>(comm, rank, o, config, shared);
  else if (o.cp_prefill > 0) run_rank_cp<gpu::V4GpuModel>(comm, rank, o, config, shared);
  else if (o.family == "v41") run_rank_decode<gpu::V41GpuModel>(comm, rank, o, config, shared);
  else run_rank_decode<gpu::V4GpuModel>(comm, rank, o, config, shared);
}

double gb(double bytes) { return bytes / 1e9; }

// MemAvailable of /proc/meminfo in bytes (0 where it cannot be read).
int64_t host_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

// The MoE workspace a rank allocates for the gathered exchange (cuda::moe_workspace_bytes at `max_rows` rows per
// rank over `world` ranks: the group's gathered rows, the per-pair buffer, the routed pairs), from the config's MoE
// shapes alone. moe_validate wants weights: the shape-only layer names non-null placeholders it never reads.
int64_t gathered_moe_workspace(const ModelConfig& c, int max_rows, int world, int redundant) {
  cuda::MoeGpu m;
  m.experts = c.n_routed_experts;
  m.top_k = c.n_experts_per_tok;
  m.act_block = c.weight_block_size;
  m.hidden = c.hidden_size;
  m.inter = c.moe_intermediate_size;
  m.shared_inter = int64_t(c.n_shared_experts) * c.moe_intermediate_size;
  static const uint8_t placeholder[16] = {};
  m.gate = reinterpret_cast<const cuda::bf16*>(placeholder);
  for (cuda::Fp4Experts* e : {&m.w13, &m.w2}) {
    e->weight = e->scale = placeholder;
    e->experts = (c.n_routed_experts + redundant) / world;
  }
  m.w13.n = 2 * m.inter;
  m.w13.k = m.hidden;
  m.w2.n = m.hidden;
  m.w2.k = m.inter;
  m.replicas.count = m.replicas.slots = reinterpret_cast<const int32_t*>(placeholder);
  m.replicas.max_replicas = 1;
  m.replicas.slots_per_rank = m.w13.experts;
  for (cuda::Fp8Linear* l : {&m.shared_w13, &m.shared_w2}) {
    l->weight = placeholder;
    l->scale = placeholder;
    l->block = m.act_block;
  }
  m.shared_w13.n = 2 * m.shared_inter;
  m.shared_w13.k = m.hidden;
  m.shared_w2.n = m.hidden;
  m.shared_w2.k = m.shared_inter;
  return int64_t(cuda::moe_workspace_bytes(max_rows, m, world));
}

// The per-rank memory of the decode / prefill run, printed before anything is built (parallel::plan_memory of the
// run's layout: weights in the formats the GPU model keeps, bf16 caches of `slots` sequences of max_context
// positions, the step workspace, a 4 GiB runtime reserve; plus the gathered MoE exchange's workspace, which the
// planner's all-to-all-v buffers do not describe). Returns an empty string when it fits the smallest free memory of
// the ranks' GPUs (and, with Engram tables, the host's available memory), else why not.
std::string check_memory(const ModelConfig& c, const Options& o, json& out) {
  const StepCapacity cap = decode_capacity(o);
  size_t free_min = SIZE_MAX, total = 0;
  for (int d = 0; d < o.ep; ++d) {
    DI_CUDA_CHECK(cudaSetDevice(d));
    size_t free = 0;
    DI_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    free_min = std::min(free_min, free);
  }
  DI_CUDA_CHECK(cudaSetDevice(0));
  parallel::ParallelLayout layout;
  layout.gpus = o.ep;
  layout.ep_size = o.ep;
  layout.redundant_experts = o.redundant;
  layout.gpu_memory_bytes = int64_t(free_min);
  layout.engram_on_host = true;
  layout.include_draft = false;
  layout.sequences_per_rank = cap.slots;
  layout.max_rows_per_rank = cap.max_rows;
  const parallel::MemoryPlan plan = parallel::plan_memory(c, layout);
  const double caches = double(cap.slots) * (double(plan.kv.sequence_bytes) + plan.kv.token_bytes * cap.max_context);
  const double moe = double(gathered_moe_workspace(c, cap.max_rows, o.ep, o.redundant));
  const double workspace = double(plan.step_workspace_bytes + plan.window_scratch_bytes) + moe;
  const double need = double(plan.weight_bytes_per_rank) + caches + workspace + double(layout.runtime_reserve_bytes);
  std::printf("per rank (EP%d, %d layers): weights %.1f GB (%d of %d routed experts per layer), caches %.1f GB (%d "
              "sequences x %d positions, bf16), step workspace %.1f GB (%d rows; the gathered MoE exchange %.1f GB), "
              "runtime reserve %.1f GB = %.1f GB; smallest free GPU memory %.1f GB of %.1f GB\n",
              o.ep, c.num_layers, gb(double(plan.weight_bytes_per_rank)), plan.expert_slots_per_rank,
              c.n_routed_experts, gb(caches), cap.slots, cap.max_context, gb(workspace), cap.max_rows, gb(moe),
              gb(double(layout.runtime_reserve_bytes)), gb(need), gb(double(free_min)), gb(double(total)));
  out["memory_plan"] = {{"weights_GB_per_rank", gb(double(plan.weight_bytes_per_rank))}, {"caches_GB", gb(caches)},
                        {"workspace_GB", gb(workspace)}, {"need_GB_per_rank", gb(need)},
                        {"free_GB", gb(double(free_min))}, {"engram_host_GB", gb(double(plan.host_bytes))}};
  if (c.family == ModelFamily::V41) {
    if (c.engram_layer_ids.empty())
      std::printf("Engram: left out (each of V4.1-Flash's two tables is ~101 GB of pinned host memory; --engram "
                  "includes them)\n");
    else
      std::printf("Engram: %zu layers, tables %.1f GB in pinned host memory (one copy for every rank); host memory "
                  "available %.1f GB\n",
                  c.engram_layer_ids.size(), gb(double(plan.host_bytes)), gb(double(host_available_bytes())));
  }
  std::fflush(stdout);
  char why[512];
  if (need > double(free_min)) {
    std::snprintf(why, sizeof why,
                  "does not fit: each rank needs %.1f GB, the smallest free GPU memory is %.1f GB (%.1f GB short); "
                  "use more ranks (--ep) or fewer layers (--layers)",
                  gb(need), gb(double(free_min)), gb(need - double(free_min)));
    return why;
  }
  // The host keeps a margin beside the pinned tables (the process, the page cache of everything else).
  const int64_t host_margin = int64_t(16) << 30;
  if (plan.host_bytes > 0 && plan.host_bytes + host_margin > host_available_bytes()) {
    std::snprintf(why, sizeof why,
                  "the Engram tables do not fit the host: %.1f GB of pinned memory (+ %.0f GB margin), %.1f GB "
                  "available; run without --engram",
                  gb(double(plan.host_bytes)), gb(double(host_margin)), gb(double(host_available_bytes())));
    return why;
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) o.out = argv[++i];
    else if (a == "--ep" && i + 1 < argc) o.ep = std::stoi(argv[++i]);
    else if (a == "--family" && i + 1 < argc) o.family = argv[++i];
    else if (a == "--engram") o.engram = true;
    else if (a == "--layers" && i + 1 < argc) o.layers = std::stoi(argv[++i]);
    else if (a == "--chunk" && i + 1 < argc) o.chunk = std::stoi(argv[++i]);
    else if (a == "--quick") o.quick = true;
    else if (a == "--cp-prefill" && i + 1 < argc) o.cp_prefill = std::stoi(argv[++i]);
    else if (a == "--skew" && i + 1 < argc) {
      // zipf:S or zipf:S:T
      const std::string v = argv[++i];
      if (v.rfind("zipf:", 0) != 0) {
        std::fprintf(stderr, "v4_ep_decode: --skew zipf:S[:T], got '%s'\n", v.c_str());
        return 2;
      }
      const std::string rest = v.substr(5);
      const size_t colon = rest.find(':');
      o.skew = std::stod(rest.substr(0, colon));
      if (colon != std::string::npos) o.skew_temp = std::stod(rest.substr(colon + 1));
    } else if (a == "--eplb-redundant" && i + 1 < argc) o.redundant = std::stoi(argv[++i]);
    else if (a == "--rebalance") o.rebalance = true;
    else if (a == "--eplb-window" && i + 1 < argc) o.eplb_window = std::stoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: v4_ep_decode --out results.json [--family v4|v41] [--ep 2] [--layers 43|40] "
                           "[--chunk 1024] [--quick] [--engram] [--cp-prefill N] [--skew zipf:S[:T]] "
                           "[--eplb-redundant R] [--rebalance] [--eplb-window N]\n");
      return 2;
    }
  }
  if (o.eplb() && o.cp_prefill > 0) {
    std::fprintf(stderr, "v4_ep_decode: the EPLB options (--skew, --eplb-redundant, --rebalance) are for the decode "
                         "run, not --cp-prefill\n");
    return 2;
  }
  // The load window's positions follow 4K within the capacity's 64 extra positions (decode_capacity).
  if (o.skew < 0 || o.skew_temp <= 0 || o.redundant < 0 || o.eplb_window < 1 || o.eplb_window > 60) {
    std::fprintf(stderr, "v4_ep_decode: --skew S >= 0 with T > 0, --eplb-redundant R >= 0, --eplb-window 1..60\n");
    return 2;
  }
  if (o.family != "v4" && o.family != "v41") {
    std::fprintf(stderr, "v4_ep_decode: --family v4 or v41, got '%s'\n", o.family.c_str());
    return 2;
  }
  if (o.engram && o.family != "v41") {
    std::fprintf(stderr, "v4_ep_decode: --engram is for --family v41 (V4-Flash has no Engram layers)\n");
    return 2;
  }
  if (o.layers == 0) o.layers = o.family == "v41" ? 40 : 43;
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (o.ep < 2 || o.ep > devices || 256 % o.ep != 0) {
    std::fprintf(stderr, "v4_ep_decode: --ep %d needs that many GPUs (this machine has %d) dividing 256\n", o.ep,
                 devices);
    return 2;
  }
  if (o.redundant % o.ep != 0) {
    std::fprintf(stderr, "v4_ep_decode: --eplb-redundant %d must split evenly over the %d ranks\n", o.redundant, o.ep);
    return 2;
  }
  json out;
  out["command"] = "v4_ep_decode --family " + o.family + " --ep " + std::to_string(o.ep) + " --layers " +
                   std::to_string(o.layers) + " --chunk " + std::to_string(o.chunk) + (o.quick ? " --quick" : "") +
                   (o.engram ? " --engram" : "") +
                   (o.cp_prefill > 0 ? " --cp-prefill " + std::to_string(o.cp_prefill) : "") +
                   (o.skew > 0 ? " --skew zipf:" + std::to_string(o.skew) + ":" + std::to_string(o.skew_temp) : "") +
                   (o.redundant > 0 ? " --eplb-redundant " + std::to_string(o.redundant) : "") +
                   (o.rebalance ? " --rebalance" : "") +
                   (o.eplb() ? " --eplb-window " + std::to_string(o.eplb_window) : "");
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  out["device"] = prop.name;
  out["ranks"] = o.ep;
  out["nccl_version"] = parallel::nccl_version();
  out["family"] = o.family;
  const ModelConfig config =
      parse_model_config(o.family == "v41" ? flash41_config(o.layers, o.engram) : flash_config(o.layers));
  if (o.cp_prefill == 0) {
    std::string why;
    try {
      why = check_memory(config, o, out);
    } catch (const std::exception& e) {
      why = std::string("memory plan: ") + e.what();
    }
    if (!why.empty()) {
      std::fprintf(stderr, "v4_ep_decode: %s\n", why.c_str());
      out["errors"] = {why};
      std::ofstream(o.out) << out.dump(2) << "\n";
      return 1;
    }
  }

  Shared shared;
  const parallel::CommId id = parallel::Comm::unique_id();
  std::vector<std::thread> threads;
  for (int r = 0; r < o.ep; ++r)
    threads.emplace_back([&, r] {
      try {
        run_rank(id, r, o, config, shared);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(shared.mu);
        shared.errors.push_back("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  for (auto& t : threads) t.join();
  if (!shared.errors.empty()) {
    for (const auto& e : shared.errors) std::fprintf(stderr, "v4_ep_decode: %s\n", e.c_str());
    out["errors"] = shared.errors;
    std::ofstream(o.out) << out.dump(2) << "\n";
    return 1;
  }
  std::sort(shared.ranks.begin(), shared.ranks.end(),
            [](const json& a, const json& b) { return a["rank"].get<int>() < b["rank"].get<int>(); });
  out["per_rank"] = shared.ranks;
  if (o.cp_prefill > 0) {
    double cp_s = 0, alone_s = 0;
    for (const json& r : shared.ranks) {
      cp_s = std::max(cp_s, r["cp_seconds"].get<double>());
      alone_s = std::max(alone_s, r["alone_seconds"].get<double>());
    }
    const double n = o.cp_prefill;
    out["cp_prefill"] = {{"prompt", o.cp_prefill}, {"chunk", o.chunk},       {"ranks", o.ep},
                         {"cp_seconds", cp_s},     {"cp_tokens_per_s", n / cp_s}, {"one_rank_seconds", alone_s},
                         {"one_rank_tokens_per_s", n / alone_s}, {"speedup", alone_s / cp_s}};
    std::printf("\ncp prefill of %d tokens (chunks of %d, %d layers, experts EP%d): CP%d %.3f s = %.0f tokens/s; "
                "rank 0 alone %.3f s = %.0f tokens/s; speedup %.2fx\n",
                o.cp_prefill, o.chunk, o.layers, o.ep, o.ep, cp_s, n / cp_s, alone_s, n / alone_s, alone_s / cp_s);
    std::ofstream(o.out) << out.dump(2) << "\n";
    return 0;
  }
  out["model"] = {{"family", o.family}, {"layers", o.layers}, {"engram", !config.engram_layer_ids.empty()},
                  {"weights_GB_per_rank", shared.ranks[0]["weights_GB"]}};

  if (o.eplb()) std::printf("\ndecode in the placement the experts were built in (no EPLB statistics yet):");
  std::printf("\n%-13s %-9s %10s %12s %14s\n", "global batch", "per rank", "step ms", "tokens/s", "tokens/s/GPU");
  for (size_t i = 0; i < shared.ranks[0]["decode"].size(); ++i) {
    double ms = 0;
    for (const json& r : shared.ranks) ms = std::max(ms, r["decode"][i]["step_ms"].get<double>());
    const int global = shared.ranks[0]["decode"][i]["global_batch"];
    const double tps = global / (ms * 1e-3);
    out["decode"].push_back({{"global_batch", global}, {"context", 4096}, {"step_ms", ms}, {"tokens_per_s", tps},
                             {"tokens_per_s_per_gpu", tps / o.ep}});
    std::printf("%-13d %-9d %10.3f %12.0f %14.0f\n", global, global / o.ep, ms, tps, tps / o.ep);
  }
  if (o.eplb()) {
    // moe_lb live: Σ over layers of the slowest rank's routed pairs / Σ of the mean (each layer waits for its slowest
    // rank), from the device counters of the window; and each rank's pairs over all layers.
    for (const char* label : {"before", "after"}) {
      if (!shared.ranks[0]["eplb"].contains(label)) continue;
      const size_t layers = shared.ranks[0]["eplb"][label]["rank_pairs"].size();
      double slowest = 0, mean = 0;
      std::vector<int64_t> totals(shared.ranks.size(), 0);
      for (size_t l = 0; l < layers; ++l) {
        int64_t top = 0, sum = 0;
        for (size_t r = 0; r < shared.ranks.size(); ++r) {
          const int64_t n = shared.ranks[r]["eplb"][label]["rank_pairs"][l].get<int64_t>();
          top = std::max(top, n);
          sum += n;
          totals[r] += n;
        }
        slowest += double(top);
        mean += double(sum) / double(shared.ranks.size());
      }
      const double live = mean > 0 ? slowest / mean : 1.0;
      const json& e0 = shared.ranks[0]["eplb"][label];
      out["eplb"][label] = {{"moe_lb_live", live}, {"moe_lb_planned", e0["planned_moe_lb"]},
                            {"fitted_zipf", e0["fitted_zipf"]}, {"rank_pairs", totals},
                            {"window_steps", o.eplb_window}, {"global_batch", kMaxGlobalBatch}};
      std::printf("\nEPLB %s%s: moe_lb live %.4f (placement's expected %.4f), measured Zipf exponent %.3f; routed pairs "
                  "per rank over %d steps at global batch %d, all layers:",
                  label, std::string(label) == "before" ? (o.redundant > 0 ? " (static placement, redundant slots)"
                                                                           : " (contiguous placement)")
                                                        : " (after the rebalance)",
                  live, e0["planned_moe_lb"].get<double>(), e0["fitted_zipf"].get<double>(), o.eplb_window,
                  kMaxGlobalBatch);
      for (size_t r = 0; r < totals.size(); ++r) std::printf(" rank %zu %lld", r, (long long)totals[r]);
      std::printf("\n");
    }
    if (shared.ranks[0]["eplb"].contains("rebalance")) {
      double seconds = 0;
      int64_t received = 0;
      for (const json& r : shared.ranks) {
        seconds = std::max(seconds, r["eplb"]["rebalance"]["seconds"].get<double>());
        received += r["eplb"]["rebalance"]["received"].get<int64_t>();
      }
      const json& rb = shared.ranks[0]["eplb"]["rebalance"];
      out["eplb"]["rebalance"] = {{"moves", rb["moves"]}, {"experts_over_nccl", received}, {"seconds", seconds},
                                  {"planned_moe_lb_after", rb["planned_moe_lb_after"]}};
      std::printf("rebalance: %lld slot moves (%lld experts over NCCL) in %.3f s\n",
                  (long long)rb["moves"].get<int64_t>(), (long long)received, seconds);
      std::printf("\ndecode after the rebalance:\n%-13s %-9s %10s %12s %14s\n", "global batch", "per rank", "step ms",
                  "tokens/s", "tokens/s/GPU");
      for (size_t i = 0; i < shared.ranks[0]["decode_after_rebalance"].size(); ++i) {
        double ms = 0;
        for (const json& r : shared.ranks) ms = std::max(ms, r["decode_after_rebalance"][i]["step_ms"].get<double>());
        const int global = shared.ranks[0]["decode_after_rebalance"][i]["global_batch"];
        const double tps = global / (ms * 1e-3);
        out["decode_after_rebalance"].push_back({{"global_batch", global}, {"context", 4096}, {"step_ms", ms},
                                                 {"tokens_per_s", tps}, {"tokens_per_s_per_gpu", tps / o.ep}});
        std::printf("%-13d %-9d %10.3f %12.0f %14.0f\n", global, global / o.ep, ms, tps, tps / o.ep);
      }
    }
  }
  double prefill_s = 0;
  for (const json& r : shared.ranks) prefill_s = std::max(prefill_s, r["prefill"]["seconds"].get<double>());
  const double prefill_tps = 4096.0 * o.ep / prefill_s;
  out["prefill"] = {{"prompt", 4096}, {"chunk", o.chunk}, {"prompts", o.ep}, {"seconds", prefill_s},
                    {"tokens_per_s", prefill_tps}, {"tokens_per_s_per_gpu", prefill_tps / o.ep}};
  std::printf("\nprefill: %d prompts of 4096 (one per rank, chunks of %d): %.3f s, %.0f tokens/s, %.0f per GPU\n",
              o.ep, o.chunk, prefill_s, prefill_tps, prefill_tps / o.ep);
  std::vector<std::pair<std::string, double>> phases;
  for (auto& [name, ms] : shared.ranks[0]["phases_ms"].items()) phases.push_back({name, ms.get<double>()});
  std::sort(phases.begin(), phases.end(), [](auto& a, auto& b) { return a.second > b.second; });
  std::printf("\nrank 0, one eager decode step at global batch 256 (ms):\n");
  for (auto& [name, ms] : phases) std::printf("  %-24s %8.3f\n", name.c_str(), ms);
  std::ofstream(o.out) << out.dump(2) << "\n";
  return 0;
}
