// V4-Flash over several GPUs of one host (issue 7, docs/parallel.md): expert parallelism (the routed experts split
// over the ranks, layers/moe/moe_gpu.h "Expert parallelism") with attention data parallelism (each rank its own
// sequences), ranks as threads, one GPU each. The model is synthetic: V4-Flash widths at full depth by default (43
// layers, random weights in the official formats, ~160 GB, which only fits with the experts split), every rank
// building the same replicated weights and its share of the experts (random_v4_gpu_weights with a placement).
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
// prefilled (a) by all ranks together through V4GpuModel::prefill_context_parallel (each rank the query side of
// its share of every chunk, the caches replicated) and (b) by rank 0 alone (the other ranks join each step's MoE
// exchange with no rows), both in chunks of --chunk rows with the experts EP-sharded; prints both tokens/s and the
// speedup. The model is built for this only (2 slots of N + 64 positions).
//
// usage: v4_ep_decode --out results.json [--ep 2] [--layers 43] [--chunk 1024] [--quick] [--cp-prefill N]
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../v4_flash_config.h"
#include "cuda/check.h"
#include "model/config.h"
#include "model/v4/gpu/v4_gpu_model.h"
#include "parallel/comm.h"
#include "parallel/eplb.h"

using nlohmann::json;
using namespace deepinfer;

namespace {

struct Options {
  std::string out = "v4_ep_decode.json";
  int ep = 2, layers = 43, chunk = 1024;
  int cp_prefill = 0;  // > 0: the context-parallel prefill comparison only
  bool quick = false;
};

// Device milliseconds between two events recorded around `steps` calls of fn on the model's stream.
template <class Fn>
double time_steps(gpu::V4GpuModel& m, int steps, Fn&& fn) {
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

// --cp-prefill: the context-parallel prefill of one prompt vs rank 0 prefilling it alone (EP-sharded experts).
void run_rank_cp(parallel::Comm& comm, int rank, const Options& o, const ModelConfig& config, Shared& shared) {
  const parallel::ExpertPlacement placement =
      parallel::contiguous_placement(config.num_layers, config.n_routed_experts, o.ep);
  const int len = o.cp_prefill;
  StepCapacity cap;
  cap.slots = 2;
  cap.max_context = len + 64;
  cap.max_rows = o.chunk;
  gpu::V4GpuModel model(config, gpu::random_v4_gpu_weights(config, 7, &placement, rank), cap, &comm);
  std::printf("rank %d: %d layers, weights %.1f GB, caches + scratch %.1f GB\n", rank, config.num_layers,
              double(model.weight_bytes()) / 1e9, double(model.state_bytes()) / 1e9);
  std::fflush(stdout);
  auto prompt = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) t[size_t(p)] = int32_t(3 + (int64_t(p) * 104729) % 120000);
    return t;
  };
  const std::vector<int32_t> tokens = prompt(len), warm = prompt(std::min(len, 2 * o.chunk));
  // Rank 0 alone: its rows, every other rank joins the MoE exchange with none.
  auto alone = [&](int slot, const std::vector<int32_t>& t) {
    std::vector<gpu::V4GpuRow> rows;
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

void run_rank(const parallel::CommId& id, int rank, const Options& o, const ModelConfig& config, Shared& shared) {
  parallel::Comm comm(id, rank, o.ep, rank);
  if (o.cp_prefill > 0) {
    run_rank_cp(comm, rank, o, config, shared);
    return;
  }
  const parallel::ExpertPlacement placement =
      parallel::contiguous_placement(config.num_layers, config.n_routed_experts, o.ep);
  const int max_global_batch = 256;
  StepCapacity cap;
  cap.slots = max_global_batch / o.ep;
  cap.max_context = 4096 + 64;
  cap.max_rows = std::max(cap.slots, o.chunk);
  const auto t0 = std::chrono::steady_clock::now();
  gpu::V4GpuModel model(config, gpu::random_v4_gpu_weights(config, 7, &placement, rank), cap, &comm);
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  json mine{{"rank", rank}, {"weights_GB", double(model.weight_bytes()) / 1e9},
            {"state_GB", double(model.state_bytes()) / 1e9}, {"build_s", build_s}};
  std::printf("rank %d: %d layers, weights %.1f GB, caches + scratch %.1f GB (built in %.1f s)\n", rank,
              config.num_layers, double(model.weight_bytes()) / 1e9, double(model.state_bytes()) / 1e9, build_s);
  std::fflush(stdout);

  // Decode at 4K context, from CUDA graphs.
  for (int global : {64, 256}) {
    const int B = global / o.ep;
    for (int s = 0; s < B; ++s) model.assume_length(s, 4096);
    std::vector<gpu::V4GpuRow> rows(static_cast<size_t>(B));
    int32_t pos = 4096;
    auto next = [&] {
      for (int s = 0; s < B; ++s) rows[size_t(s)] = {s, int32_t(3 + (s * 7919 + rank * 131 + pos) % 120000), pos};
      ++pos;
    };
    for (int i = 0; i < 3; ++i) {  // capture + warm-up
      next();
      model.step_graph(rows, B);
    }
    const int steps = o.quick ? 5 : 10;
    const double ms = time_steps(model, steps, [&](int) {
      next();
      model.step_graph(rows, B);
    });
    mine["decode"].push_back({{"global_batch", global}, {"rows_per_rank", B}, {"step_ms", ms / steps}});
  }

  // One eager decode step at global batch 256, phase by phase (rank 0 reports it).
  {
    const int B = max_global_batch / o.ep;
    std::vector<gpu::V4GpuRow> rows(static_cast<size_t>(B));
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
    std::vector<gpu::V4GpuRow> rows;
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

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) o.out = argv[++i];
    else if (a == "--ep" && i + 1 < argc) o.ep = std::stoi(argv[++i]);
    else if (a == "--layers" && i + 1 < argc) o.layers = std::stoi(argv[++i]);
    else if (a == "--chunk" && i + 1 < argc) o.chunk = std::stoi(argv[++i]);
    else if (a == "--quick") o.quick = true;
    else if (a == "--cp-prefill" && i + 1 < argc) o.cp_prefill = std::stoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: v4_ep_decode --out results.json [--ep 2] [--layers 43] [--chunk 1024] [--quick] "
                           "[--cp-prefill N]\n");
      return 2;
    }
  }
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (o.ep < 2 || o.ep > devices || 256 % o.ep != 0) {
    std::fprintf(stderr, "v4_ep_decode: --ep %d needs that many GPUs (this machine has %d) dividing 256\n", o.ep,
                 devices);
    return 2;
  }
  json out;
  out["command"] = "v4_ep_decode --ep " + std::to_string(o.ep) + " --layers " + std::to_string(o.layers) +
                   " --chunk " + std::to_string(o.chunk) + (o.quick ? " --quick" : "") +
                   (o.cp_prefill > 0 ? " --cp-prefill " + std::to_string(o.cp_prefill) : "");
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  out["device"] = prop.name;
  out["ranks"] = o.ep;
  out["nccl_version"] = parallel::nccl_version();
  const ModelConfig config = parse_model_config(flash_config(o.layers));

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
  out["model"] = {{"layers", o.layers}, {"weights_GB_per_rank", shared.ranks[0]["weights_GB"]}};

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
