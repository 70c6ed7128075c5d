// The pieces every small latency benchmark of bench/gpu shares (icache_probe, route_latency, ...): the command line
// `[--out results.json]`, the command as run (kept in the JSON), device 0, and the median of repeated measurements.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/check.h"

namespace deepinfer::bench {

struct LatencyBenchArgs {
  std::string out_path;  // empty: no JSON
  std::string command;   // argv joined by spaces
};

// False after printing the usage on a bad command line.
inline bool parse_latency_args(int argc, char** argv, LatencyBenchArgs& args) {
  for (int i = 0; i < argc; ++i) args.command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) {
      args.out_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--out results.json]\n", argv[0]);
      return false;
    }
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

}  // namespace deepinfer::bench
