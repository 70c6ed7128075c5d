// Per-device records of a diagnostic kernel's phase stamps launched inside the model: the MoE routing's
// (layers/moe/moe_gpu.h route_stamps) and the indexer select's (layers/indexer/indexer_gpu.h index_select_stamps).
// One record of `words` u64 per layer and device; the layer is named by a weight pointer of its own (no model
// plumbing; a graph keeps the record address it was captured with), slots handed out in the order of the layers'
// first stamped launch. A device's records are cudaMalloc'd and zeroed once, outside any capture, and kept for the
// process (not a __device__ array: a module variable takes the first entry of the kernels' constant bank of global
// addresses, which moved the measured production kernels' loads; their SASS stays byte-identical this way).
// LaunchStampRecords adds, beside each record, the launch that last took it (grid, shape): the stream kernels'
// in-step stamps (cuda/stream_fp4_wgmma.cu, layers/quant/fp8_gemm.cu).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "cuda/check.h"

namespace deepinfer::cuda {

class StampRecords {
 public:
  StampRecords(int slots, int words) : slots_(slots), words_(words) {}

  // The current device's records allocated and zeroed now (call outside any capture, before stamped launches).
  void allocate() {
    std::lock_guard<std::mutex> lock(mu_);
    base(device(), true);
  }

  // The record of layer `key` on the current device; null (the launch goes unstamped) once every slot is taken, or
  // where the device has no records yet and `stream` is capturing (no allocation there).
  unsigned long long* record(const void* key, cudaStream_t stream) {
    const int dev = device();
    std::lock_guard<std::mutex> lock(mu_);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    DI_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    unsigned long long* b = base(dev, capture == cudaStreamCaptureStatusNone);
    if (!b) return nullptr;
    auto it = slot_.find({dev, key});
    if (it == slot_.end()) {
      int& used = used_[dev];
      if (used >= slots_) return nullptr;
      it = slot_.emplace(std::pair{dev, key}, used++).first;
    }
    return b + size_t(it->second) * size_t(words_);
  }

  // The current device's used records in slot order, `words` each (a synchronous copy: call with the stamped
  // launches complete).
  std::vector<unsigned long long> read() {
    const int dev = device();
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<unsigned long long> raw(size_t(used_[dev]) * size_t(words_));
    if (!raw.empty())
      DI_CUDA_CHECK(cudaMemcpy(raw.data(), base_[dev], raw.size() * sizeof(unsigned long long),
                               cudaMemcpyDeviceToHost));
    return raw;
  }

  static int device() {
    int dev = 0;
    DI_CUDA_CHECK(cudaGetDevice(&dev));
    return dev;
  }

 private:
  // The device's records, allocated and zeroed (the accumulators' start) here where `allocate`; under mu_.
  unsigned long long* base(int dev, bool allocate) {
    unsigned long long*& b = base_[dev];
    if (!b && allocate) {
      const size_t bytes = sizeof(unsigned long long) * size_t(slots_) * size_t(words_);
      void* p = nullptr;
      DI_CUDA_CHECK(cudaMalloc(&p, bytes));
      DI_CUDA_CHECK(cudaMemset(p, 0, bytes));
      DI_CUDA_CHECK(cudaDeviceSynchronize());  // zeroed before any stream's next launch
      b = static_cast<unsigned long long*>(p);
    }
    return b;
  }

  const int slots_, words_;
  std::mutex mu_;
  std::map<std::pair<int, const void*>, int> slot_;
  std::map<int, int> used_;
  std::map<int, unsigned long long*> base_;
};

// StampRecords keyed by Launch::key (a launch's packed weights), each record paired with the Launch that last took
// it, for the reader (a graph replays the launch it captured, so the latest description is the one that ran).
template <class Launch>
class LaunchStampRecords {
 public:
  LaunchStampRecords(int slots, int words) : records_(slots, words) {}

  void allocate() { records_.allocate(); }

  // The record of `launch` (StampRecords::record); its description kept beside it.
  unsigned long long* record(const Launch& launch, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mu_);  // the slot and its launch entry taken together: the two orders agree
    unsigned long long* r = records_.record(launch.key, stream);
    if (!r) return nullptr;
    std::vector<Launch>& order = launches_[StampRecords::device()];
    auto it = std::find_if(order.begin(), order.end(), [&](const Launch& l) { return l.key == launch.key; });
    if (it == order.end()) order.push_back(launch);
    else *it = launch;
    return r;
  }

  // The current device's launches in slot order and their records (StampRecords::read).
  std::pair<std::vector<Launch>, std::vector<unsigned long long>> read() {
    std::lock_guard<std::mutex> lock(mu_);
    return {launches_[StampRecords::device()], records_.read()};
  }

 private:
  std::mutex mu_;
  StampRecords records_;
  std::map<int, std::vector<Launch>> launches_;  // per device, in slot order
};

}  // namespace deepinfer::cuda
