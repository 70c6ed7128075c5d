// Cold address translations for the latency benchmarks (roofline's route phases "tlb=thrashed", index_select_latency
// --cold): a decode step streams ~62 GB of weights between two calls of one latency kernel, so the kernel's own
// buffers may miss in the GPU's TLBs (and in L2) at every step, which a benchmark of back-to-back calls never sees
// (bench/gpu/NOTES.md "Fused decode routing in the step: stamps and a TLB experiment (session 14, runs 86-89)").
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "latency_bench.h"

namespace deepinfer::bench {

// One 4-byte read per page of `page_words` words of [p, p + pages * page_words): every translation of the buffer
// through the GPU's TLBs, as a decode step's weight stream touches pages the latency kernel then does not find. The
// sum lands in *sink only if it matches an impossible value, so the reads stay.
__global__ void touch_pages(const uint32_t* __restrict__ p, size_t pages, size_t page_words,
                            uint32_t* __restrict__ sink) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < pages && __ldcg(p + i * page_words) == 0xDEADBEEFu) *sink = uint32_t(i);
}

// Reads [p, p + n16) through L2 (ld.global.cg: kept in L2, not in L1), as the weights a step streams between two
// calls of a latency kernel evict its lines. *sink as touch_pages.
__global__ void stream_through_l2(const uint4* __restrict__ p, size_t n16, uint32_t* __restrict__ sink) {
  uint32_t x = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n16; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(p + i);
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0xDEADBEEFu) *sink = x;
}

// A buffer of `gib` GiB (zeroed once) whose pages of `stride_bytes` are each read once by enqueue(), then its first
// `stream_bytes` read through L2: before a measured call, its translations (and with stream_bytes, its L2 lines)
// cold as in the step. Off (on() false) when default-constructed.
class ColdTranslations {
 public:
  ColdTranslations() = default;
  // Throws std::runtime_error with the sizes when the buffer does not fit beside `keep_bytes` for the benchmark's own
  // buffers, or when its allocation fails.
  ColdTranslations(double gib, size_t stride_bytes, size_t stream_bytes, size_t keep_bytes = size_t(1) << 30) {
    if (stride_bytes == 0 || stride_bytes % 16 || stream_bytes % 16)
      throw std::runtime_error("--cold: the page stride (" + std::to_string(stride_bytes) + " bytes) and the L2 "
                               "stream (" + std::to_string(stream_bytes) + " bytes) multiples of 16 bytes, the stride "
                               "above 0");
    const size_t bytes = size_t(gib * double(size_t(1) << 30)) / stride_bytes * stride_bytes;
    if (bytes == 0 || stream_bytes > bytes)
      throw std::runtime_error("--cold: a buffer of at least one page, the L2 stream within it");
    size_t free_bytes = 0, total_bytes = 0;
    DI_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    char what[256];
    if (bytes + keep_bytes > free_bytes) {
      std::snprintf(what, sizeof what, "--cold %.2f GiB: %.2f GiB free of %.2f, %.2f GiB kept for the benchmark's own "
                    "buffers; ask for at most %.2f", double(bytes) / (1 << 30), double(free_bytes) / (1 << 30),
                    double(total_bytes) / (1 << 30), double(keep_bytes) / (1 << 30),
                    double(free_bytes > keep_bytes ? free_bytes - keep_bytes : 0) / (1 << 30));
      throw std::runtime_error(what);
    }
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      std::snprintf(what, sizeof what, "--cold %.2f GiB: cudaMalloc failed (%s) with %.2f GiB free",
                    double(bytes) / (1 << 30), cudaGetErrorString(e), double(free_bytes) / (1 << 30));
      throw std::runtime_error(what);
    }
    buffer_ = static_cast<uint32_t*>(p);
    DI_CUDA_CHECK(cudaMalloc(&sink_, sizeof(uint32_t)));
    DI_CUDA_CHECK(cudaMemset(buffer_, 0, bytes));  // touch_pages and stream_through_l2 read zeros
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    bytes_ = bytes;
    stride_bytes_ = stride_bytes;
    stream_bytes_ = stream_bytes;
  }
  ColdTranslations(const ColdTranslations&) = delete;
  ColdTranslations& operator=(const ColdTranslations&) = delete;
  ~ColdTranslations() {
    cudaFree(sink_);
    cudaFree(buffer_);
  }

  bool on() const { return buffer_ != nullptr; }
  size_t bytes() const { return bytes_; }
  size_t stride_bytes() const { return stride_bytes_; }
  size_t stream_bytes() const { return stream_bytes_; }

  // Every page read once, then the L2 stream; capturable.
  void enqueue(cudaStream_t stream) const {
    const size_t pages = bytes_ / stride_bytes_;
    touch_pages<<<unsigned((pages + 255) / 256), 256, 0, stream>>>(buffer_, pages, stride_bytes_ / 4, sink_);
    DI_CUDA_CHECK(cudaGetLastError());
    if (stream_bytes_) {
      stream_through_l2<<<1024, 256, 0, stream>>>(reinterpret_cast<const uint4*>(buffer_), stream_bytes_ / 16,
                                                  sink_);
      DI_CUDA_CHECK(cudaGetLastError());
    }
  }

 private:
  uint32_t* buffer_ = nullptr;
  uint32_t* sink_ = nullptr;
  size_t bytes_ = 0, stride_bytes_ = 0, stream_bytes_ = 0;
};

// Microseconds per call of `enqueue` with `cold` before each call: graph_us_per_call of `calls` (cold, call) pairs
// minus that of `calls` colds alone (the per-call time cannot come from back-to-back calls: the cold part runs
// between them). *cold_us, when given, gets the cold part alone per call.
inline double cold_us_per_call(cudaStream_t stream, const ColdTranslations& cold, int calls, int replays, int timings,
                               const std::function<void()>& enqueue, double* cold_us = nullptr) {
  const double both = graph_us_per_call(stream, calls, replays, timings, [&] {
    cold.enqueue(stream);
    enqueue();
  });
  const double alone = graph_us_per_call(stream, calls, replays, timings, [&] { cold.enqueue(stream); });
  if (cold_us) *cold_us = alone;
  return both - alone;
}

}  // namespace deepinfer::bench
