// Shared helpers of the GPU tests: fresh random inputs (the seed is printed and can be replayed with
// DEEPINFER_TEST_SEED), bf16 conversions, the relative L2 error, and one report line per comparison
// ("GPU_CHECK <name> rel_l2=<value> bound=<bound>") that tools/gpu/check.sh collects into its summary.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cuda/check.h"
#include "cuda/device.h"

namespace deepinfer::gputest {

// Without a GPU the tests skip (a CI machine may run the binary by hand); tools/gpu/check.sh sets
// DEEPINFER_REQUIRE_GPU=1 so that a GPU machine whose device is not found fails instead of passing quietly.
#define DI_SKIP_WITHOUT_GPU()                                                          \
  if (::deepinfer::cuda::device_count() == 0) {                                        \
    if (std::getenv("DEEPINFER_REQUIRE_GPU")) FAIL() << "DEEPINFER_REQUIRE_GPU: no CUDA device"; \
    GTEST_SKIP() << "no CUDA device";                                                  \
  }

class Rng {
 public:
  Rng() {
    if (const char* s = std::getenv("DEEPINFER_TEST_SEED")) {
      seed_ = std::stoull(s);
    } else {
      std::random_device rd;
      seed_ = (uint64_t(rd()) << 32) ^ rd();
    }
    gen_.seed(seed_);
    std::printf("[seed] %s DEEPINFER_TEST_SEED=%llu\n",
                ::testing::UnitTest::GetInstance()->current_test_info()->name(), (unsigned long long)seed_);
  }
  float normal(float mean = 0.0f, float sd = 1.0f) { return std::normal_distribution<float>(mean, sd)(gen_); }
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  int integer(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen_); }  // [lo, hi]
  std::vector<float> normals(size_t n, float mean = 0.0f, float sd = 1.0f) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(mean, sd);
    return v;
  }
  std::mt19937_64& engine() { return gen_; }

 private:
  uint64_t seed_ = 0;
  std::mt19937_64 gen_;
};

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16(v[i]);
  return out;
}
inline std::vector<float> from_bf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_float(v[i]);
  return out;
}
// Rounds in place to bf16, so that the CPU reference sees exactly the values the GPU gets.
inline void round_to_bf16(std::vector<float>& v) {
  for (float& x : v) x = round_bf16(x);
}

// ||out - ref|| / ||ref|| in double; any NaN / Inf in `out` (e.g. a poisoned element never written) gives +inf.
inline double rel_l2(const std::vector<float>& out, const std::vector<float>& ref) {
  if (out.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    double d = double(out[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

inline void check_rel_l2(const std::string& name, const std::vector<float>& out, const std::vector<float>& ref,
                         double bound) {
  double r = rel_l2(out, ref);
  std::printf("GPU_CHECK %s rel_l2=%.3e bound=%.1e\n", name.c_str(), r, bound);
  EXPECT_LE(r, bound) << name;
  if (!(r <= bound) && out.size() == ref.size()) {
    // Where it goes wrong tells a layout bug from a precision problem: the first few bad elements.
    double ss = 0;
    for (float v : ref) ss += double(v) * v;
    const double tol = 4 * std::max(bound, 1e-6) * std::sqrt(ss / double(std::max<size_t>(ref.size(), 1)));
    int shown = 0;
    size_t bad = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      if (std::isfinite(out[i]) && std::fabs(double(out[i]) - ref[i]) <= tol) continue;
      ++bad;
      if (shown++ < 12) std::printf("  bad [%zu] out=%.6g ref=%.6g\n", i, out[i], ref[i]);
    }
    std::printf("  %zu of %zu elements off by more than %.3g\n", bad, out.size(), tol);
  }
}

// Elements whose bytes differ (a size difference counts as the longer size): the count report_exact takes.
template <class T>
size_t bitwise_mismatches(const std::vector<T>& a, const std::vector<T>& b) {
  size_t bad = a.size() == b.size() ? 0 : std::max(a.size(), b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) bad += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return bad;
}

// Exact comparisons report as a count of mismatches (bound 0).
inline void report_exact(const std::string& name, size_t mismatches, size_t total) {
  std::printf("GPU_CHECK %s mismatches=%zu/%zu bound=0\n", name.c_str(), mismatches, total);
  EXPECT_EQ(mismatches, 0u) << name;
}

// Captures what `enqueue` puts on `stream` (and the streams it forks) into a graph. A throw inside ends the capture
// first, so that a failing test does not leave the stream capturing and fail every later test with
// cudaErrorStreamCaptureUnsupported. The caller destroys the graph.
inline cudaGraph_t capture_graph(cudaStream_t stream, const std::function<void()>& enqueue,
                                 cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal) {
  cudaGraph_t graph = nullptr;
  DI_CUDA_CHECK(cudaStreamBeginCapture(stream, mode));
  try {
    enqueue();
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  DI_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  return graph;
}

// capture_graph, instantiated (the graph itself destroyed); the caller destroys the executable graph.
inline cudaGraphExec_t capture_exec(cudaStream_t stream, const std::function<void()>& enqueue,
                                    cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal) {
  cudaGraph_t graph = capture_graph(stream, enqueue, mode);
  cudaGraphExec_t exec = nullptr;
  DI_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  DI_CUDA_CHECK(cudaGraphDestroy(graph));
  return exec;
}

// The nodes of a captured graph by kind: kernels, memsets, anything else.
struct GraphNodes {
  int kernels = 0, memsets = 0, other = 0;
};
inline GraphNodes graph_nodes(cudaGraph_t graph) {
  size_t count = 0;
  DI_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  DI_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  GraphNodes kinds;
  for (cudaGraphNode_t n : nodes) {
    cudaGraphNodeType t;
    DI_CUDA_CHECK(cudaGraphNodeGetType(n, &t));
    kinds.kernels += t == cudaGraphNodeTypeKernel;
    kinds.memsets += t == cudaGraphNodeTypeMemset;
    kinds.other += t != cudaGraphNodeTypeKernel && t != cudaGraphNodeTypeMemset;
  }
  return kinds;
}

// Kernel nodes of the graph that `enqueue` captures on `stream` (thread-local capture; the graph is destroyed): how a
// test checks that a fused form took one launch fewer.
inline int captured_kernel_nodes(cudaStream_t stream, const std::function<void()>& enqueue) {
  cudaGraph_t graph = capture_graph(stream, enqueue, cudaStreamCaptureModeThreadLocal);
  const int kernels = graph_nodes(graph).kernels;
  DI_CUDA_CHECK(cudaGraphDestroy(graph));
  return kernels;
}

// Device us per call of `enqueue` on `stream`: a graph of `calls` calls (thread-local capture: a kernel's one-time
// setup may run inside it), replayed `reps` times after a warm-up of 3.
inline double time_per_call_us(cudaStream_t stream, const std::function<void()>& enqueue, int calls = 20,
                               int reps = 10) {
  cudaGraphExec_t exec = capture_exec(
      stream,
      [&] {
        for (int i = 0; i < calls; ++i) enqueue();
      },
      cudaStreamCaptureModeThreadLocal);
  cudaEvent_t t0, t1;
  DI_CUDA_CHECK(cudaEventCreate(&t0));
  DI_CUDA_CHECK(cudaEventCreate(&t1));
  for (int i = 0; i < 3; ++i) DI_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  DI_CUDA_CHECK(cudaEventRecord(t0, stream));
  for (int i = 0; i < reps; ++i) DI_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  DI_CUDA_CHECK(cudaEventRecord(t1, stream));
  DI_CUDA_CHECK(cudaEventSynchronize(t1));
  float ms = 0;
  DI_CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  DI_CUDA_CHECK(cudaGraphExecDestroy(exec));
  return double(ms) * 1e3 / double(calls * reps);
}

// Sets a process-wide switch (Get / Set, e.g. cuda::pdl_enabled / cuda::set_pdl) for one scope, or only restores it
// (default constructor: the test sets it as it goes), then restores its value (also when an assertion leaves the
// test early).
template <class T, T (*Get)(), void (*Set)(T)>
struct SwitchScope {
  T before = Get();
  SwitchScope() = default;
  explicit SwitchScope(T v) { Set(v); }
  ~SwitchScope() { Set(before); }
};

}  // namespace deepinfer::gputest

namespace deepinfer::gputest {
// bf16 keeps 8 significant bits: round-to-nearest moves a value by at most 2^-8 of itself, so an output
// rounded once to bf16 is within 2^-8 of the fp32 reference in relative L2 (fp32 arithmetic adds ~1e-7).
constexpr double kBf16OutputBound = 1.0 / 256.0 + 1e-5;
}  // namespace deepinfer::gputest
