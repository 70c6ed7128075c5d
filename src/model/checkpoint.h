// Memory-mapped safetensors checkpoints in DeepSeek's official layout (model-spec.md §5): either one
// `model.safetensors` or shards listed by `model.safetensors.index.json`. Every tensor is validated
// against its file (dtype known, extent inside the file) when the checkpoint is opened, so a truncated
// or corrupt shard is reported by name before any weight is read.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace deepinfer {

struct TensorEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // points into the mapped shard
  size_t nbytes = 0;
  std::string file;  // shard file name, for error messages
  std::string path;        // the shard's full path
  size_t file_offset = 0;  // the tensor's first byte in that file (readers that map the file themselves,
                           // e.g. cuda/host_file_mapping.h)
};

class MappedFile;

// Progress callback: (shards opened so far, total shards, current shard file name).
using LoadProgress = std::function<void(int, int, const std::string&)>;

class Checkpoint {
 public:
  // Opens `dir`. Throws deepinfer::Error naming the file and the problem for a missing index or shard,
  // bad JSON, an unknown dtype, a shape/size mismatch, or a tensor extending past the end of its file.
  static Checkpoint open(const std::string& dir, const LoadProgress& progress = nullptr);
  // Opens one safetensors file on its own (e.g. reference outputs), with the same validation.
  static Checkpoint open_file(const std::string& path);

  Checkpoint();
  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;
  ~Checkpoint();

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws "checkpoint: missing tensor 'name'".
  const TensorEntry& get(const std::string& name) const;
  // get() plus a dtype and shape check with a message naming expected and actual.
  const TensorEntry& expect(const std::string& name, DType dtype, const std::vector<int64_t>& shape) const;

  // Names starting with `prefix`, sorted.
  std::vector<std::string> names_with_prefix(const std::string& prefix) const;
  const std::map<std::string, TensorEntry>& tensors() const { return tensors_; }
  const std::string& dir() const { return dir_; }
  size_t total_bytes() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::map<std::string, TensorEntry> tensors_;
};

}  // namespace deepinfer
