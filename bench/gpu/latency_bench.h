// The pieces every small latency benchmark of bench/gpu shares (icache_probe, route_latency, index_select_latency,
// mhc_site_latency): the command line `[--out results.json]`, the command as run (kept in the JSON), device 0, the
// median of repeated measurements, the time per call of a CUDA graph of back-to-back calls, and main's frame.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <exception>
#include <fstream>
#include <cstdio>
#include <functional>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda/check.h"

namespace deepinfer::bench {

struct LatencyBenchArgs {
  std::string out_path;  // empty: no JSON
  std::string command;   // argv joined by spaces
};

// False after printing the usage on a bad command line. `extra(i)` may take a program's own option at argv[i] (and
// its value: it returns the index of the last argument it used, or -1 when argv[i] is not its option); `extra_usage`
// is that option's part of the usage line.
inline bool parse_latency_args(int argc, char** argv, LatencyBenchArgs& args,
                               const std::function<int(int)>& extra = nullptr, const char* extra_usage = "") {
  for (int i = 0; i < argc; ++i) args.command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) {
      args.out_path = argv[++i];
      continue;
    }
    const int used = extra ? extra(i) : -1;
    if (used < i) {
      std::fprintf(stderr, "usage: %s %s[--out results.json]\n", argv[0], extra_usage);
      return false;
    }
    i = used;
  }
  return true;
}

// Device 0's properties; throws when the machine has no CUDA device.
inline cudaDeviceProp first_device(const char* program) {
  int count = 0;
  DI_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (count == 0) throw std::runtime_error(std::string(program) + ": no CUDA device");
  cudaDeviceProp prop;
  DI_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  return prop;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Microseconds per call of `enqueue` (one call's launches on `stream`): a CUDA graph of `calls` calls, replayed
// `replays` times per timing after one warm-up replay; the median of `timings` timings.
inline double graph_us_per_call(cudaStream_t stream, int calls, int replays, int timings,
                                const std::function<void()>& enqueue) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  DI_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) enqueue();
  DI_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  DI_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start = nullptr, stop = nullptr;
  DI_CUDA_CHECK(cudaEventCreate(&start));
  DI_CUDA_CHECK(cudaEventCreate(&stop));
  DI_CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm-up
  std::vector<double> us;
  for (int t = 0; t < timings; ++t) {
    DI_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int r = 0; r < replays; ++r) DI_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    DI_CUDA_CHECK(cudaEventRecord(stop, stream));
    DI_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    DI_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(1e3 * double(ms) / (double(replays) * calls));
  }
  DI_CUDA_CHECK(cudaEventDestroy(start));
  DI_CUDA_CHECK(cudaEventDestroy(stop));
  DI_CUDA_CHECK(cudaGraphExecDestroy(exec));
  DI_CUDA_CHECK(cudaGraphDestroy(graph));
  return median(us);
}

// A latency benchmark's main: the command line (usage and exit 2 when bad), device 0 (its name, SMs, L2 and SM clock
// printed), `body` (its rows, JSON), the JSON written to --out ({command, device, method, rows}); an error is printed
// as "<program>: <what>" with exit 1.
inline int run_latency_bench(int argc, char** argv, const char* program, const char* method,
                             const std::function<nlohmann::json(const cudaDeviceProp&)>& body,
                             const std::function<int(int)>& extra = nullptr, const char* extra_usage = "") {
  LatencyBenchArgs args;
  if (!parse_latency_args(argc, argv, args, extra, extra_usage)) return 2;
  try {
    const cudaDeviceProp prop = first_device(program);
    int clock_khz = 0;
    DI_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    std::printf("device: %s, %d SMs, %.0f MB L2, max SM clock %.2f GHz\n", prop.name, prop.multiProcessorCount,
                prop.l2CacheSize / 1e6, clock_khz * 1e-6);
    const nlohmann::json rows = body(prop);
    if (!args.out_path.empty()) {
      const nlohmann::json doc = {{"command", args.command},
                                  {"device",
                                   {{"name", prop.name},
                                    {"sms", prop.multiProcessorCount},
                                    {"l2_bytes", prop.l2CacheSize},
                                    {"max_sm_clock_khz", clock_khz}}},
                                  {"method", method},
                                  {"rows", rows}};
      std::ofstream(args.out_path) << doc.dump(2) << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
  return 0;
}

}  // namespace deepinfer::bench
