#include "cuda/host_file_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "core/error.h"
#include "cuda/check.h"

namespace deepinfer::cuda {

HostFileMapping::HostFileMapping(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  DI_CHECK(fd >= 0, "host file mapping: cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
    ::close(fd);
    throw Error("host file mapping: '" + path + "' is empty or cannot be stat'ed");
  }
  bytes_ = size_t(st.st_size);
  // MAP_SHARED: the pages are the page cache's, so other processes mapping the file read the same memory.
  void* p = ::mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  DI_CHECK(p != MAP_FAILED, "host file mapping: cannot map '" + path + "': " + std::strerror(errno));
  host_ = static_cast<const uint8_t*>(p);
  // ReadOnly: the mapping has no write permission (the driver would otherwise pin the pages for writing and fail).
  // Portable: every device of the process reads it, not only the current one.
  const cudaError_t reg = cudaHostRegister(p, bytes_, cudaHostRegisterMapped | cudaHostRegisterReadOnly |
                                                          cudaHostRegisterPortable);
  if (reg != cudaSuccess) {
    ::munmap(p, bytes_);
    throw Error("host file mapping: cudaHostRegister of '" + path + "' (" + std::to_string(bytes_) +
                " bytes) failed: " + cudaGetErrorString(reg));
  }
  void* d = nullptr;
  DI_CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0));
  device_ = static_cast<const uint8_t*>(d);
}

HostFileMapping::~HostFileMapping() {
  if (!host_) return;
  cudaHostUnregister(const_cast<uint8_t*>(host_));
  ::munmap(const_cast<uint8_t*>(host_), bytes_);
}

std::shared_ptr<const HostFileMapping> shared_host_file_mapping(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<const HostFileMapping>> mappings;
  std::lock_guard<std::mutex> lock(mu);
  std::weak_ptr<const HostFileMapping>& cached = mappings[path];
  if (auto m = cached.lock()) return m;
  auto m = std::make_shared<const HostFileMapping>(path);
  cached = m;
  return m;
}

}  // namespace deepinfer::cuda
