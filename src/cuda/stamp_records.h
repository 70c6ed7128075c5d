// Per-device records of a diagnostic kernel's phase stamps launched inside the model: the MoE routing's
// (layers/moe/moe_gpu.h route_stamps) and the indexer select's (layers/indexer/indexer_gpu.h index_select_stamps).
// One record of `words` u64 per layer and device; the layer is named by a weight pointer of its own (no model
// plumbing; a graph keeps the record address it was captured with), slots handed out in the order of the layers'
// first stamped launch. A device's records are cudaMalloc'd and zeroed once, outside any capture, and kept for the
// process (not a __device__ array: a module variable takes the first entry of the kernels' constant bank of global
// addresses, which moved the measured production kernels' loads; their SASS stays byte-identical this way).
#pragma once

#include <cuda_runtime.h>

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

 private:
  static int device() {
    int dev = 0;
    DI_CUDA_CHECK(cudaGetDevice(&dev));
    return dev;
  }
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

}  // namespace deepinfer::cuda
