// A file's bytes, read-only in host memory that the GPU reads directly (issue 7: "Engram tables in pinned host
// memory with device-side gathers", once per machine). The file is mapped shared and read-only, and the mapping is
// registered with CUDA (cudaHostRegisterMapped | ReadOnly | Portable), so kernels on any device read the page
// cache itself: every process on the machine that maps the same checkpoint shard shares the same physical pages,
// with no copy and no per-process pinned allocation. V4.1-Flash's two Engram tables are ~203 GB
// (docs/parallel.md's memory plan): one pinned copy per rank process would not fit a machine's memory at EP 8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace deepinfer::cuda {

class HostFileMapping {
 public:
  // Maps all of `path` and registers it; throws deepinfer::Error naming the file and the failing call.
  explicit HostFileMapping(const std::string& path);
  ~HostFileMapping();
  HostFileMapping(const HostFileMapping&) = delete;
  HostFileMapping& operator=(const HostFileMapping&) = delete;

  const uint8_t* host_ptr() const { return host_; }
  // The address kernels read the file's byte 0 through (the same on every device under unified addressing).
  const uint8_t* device_ptr() const { return device_; }
  size_t bytes() const { return bytes_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* host_ = nullptr;
  const uint8_t* device_ = nullptr;
  size_t bytes_ = 0;
};

// The process's one mapping of `path` (a registered range cannot be registered twice, and every model of the
// process that reads the file shares it): created on first use, released when the last holder lets it go.
std::shared_ptr<const HostFileMapping> shared_host_file_mapping(const std::string& path);

}  // namespace deepinfer::cuda
