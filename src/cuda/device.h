// Device memory for the CUDA backend: an owning buffer (cudaMalloc / cudaFree) and typed views. Plain
// allocations only: managed memory can hang the GPU when over-asked (device README).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "cuda/check.h"

namespace deepinfer::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes) DI_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_) cudaFree(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }

  void* get() const { return ptr_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

  // Synchronous copies, for setup and tests (the engine's hot path uses the stream-ordered kernels).
  void upload(const void* host, size_t bytes, size_t offset = 0) {
    DI_CUDA_CHECK(cudaMemcpy(static_cast<char*>(ptr_) + offset, host, bytes, cudaMemcpyHostToDevice));
  }
  void download(void* host, size_t bytes, size_t offset = 0) const {
    DI_CUDA_CHECK(cudaMemcpy(host, static_cast<const char*>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost));
  }
  // Fills every byte with `value` (tests poison outputs with 0xFF: NaN in every float format used here).
  void fill_bytes(int value) { DI_CUDA_CHECK(cudaMemset(ptr_, value, bytes_)); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Pinned host memory mapped into the device's address space (cudaHostAllocMapped): kernels read it over the bus
// through device_ptr(). For tables too large for the GPU that are read a few rows per token (V4.1's Engram,
// model-spec §5).
class MappedHostBuffer {
 public:
  explicit MappedHostBuffer(size_t bytes) : bytes_(bytes) {
    if (!bytes) return;
    DI_CUDA_CHECK(cudaHostAlloc(&host_, bytes, cudaHostAllocMapped));
    DI_CUDA_CHECK(cudaHostGetDevicePointer(&device_, host_, 0));
  }
  ~MappedHostBuffer() {
    if (host_) cudaFreeHost(host_);
  }
  MappedHostBuffer(const MappedHostBuffer&) = delete;
  MappedHostBuffer& operator=(const MappedHostBuffer&) = delete;
  MappedHostBuffer(MappedHostBuffer&& o) noexcept
      : host_(std::exchange(o.host_, nullptr)), device_(std::exchange(o.device_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)) {}

  void* host_ptr() const { return host_; }
  void* device_ptr() const { return device_; }
  size_t bytes() const { return bytes_; }

 private:
  void* host_ = nullptr;
  void* device_ = nullptr;
  size_t bytes_ = 0;
};

// Uploads a host vector into a new buffer of exactly its size.
template <class T>
DeviceBuffer to_device(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  b.upload(v.data(), v.size() * sizeof(T));
  return b;
}

template <class T>
std::vector<T> to_host(const DeviceBuffer& b, size_t count) {
  std::vector<T> v(count);
  b.download(v.data(), count * sizeof(T));
  return v;
}

// Number of CUDA devices, 0 when the runtime finds none or no driver (CI): GPU tests skip then.
inline int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

}  // namespace deepinfer::cuda
