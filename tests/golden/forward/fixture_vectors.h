// Reference-vector files of the golden tests (tests/golden/fixtures/*.safetensors, written by the scripts in
// tools/fixtures/ from an independent implementation): a tensor's elements copied out as the C++ type of its dtype.
#pragma once

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/checkpoint.h"

namespace deepinfer::golden {

inline Checkpoint open_fixture_vectors(const std::string& file_name) {
  return Checkpoint::open_file(std::string(DEEPINFER_FIXTURES_DIR) + "/" + file_name);
}

// T: float for F32, uint16_t for the bits of BF16, int64_t for I64; a T of another size than the dtype's throws.
template <class T>
std::vector<T> fixture_elements(const Checkpoint& file, const std::string& name, std::vector<int64_t>* shape = nullptr) {
  const TensorEntry& e = file.get(name);
  if (dtype_size(e.dtype) != sizeof(T))
    throw std::runtime_error("fixture tensor " + name + ": " + std::to_string(dtype_size(e.dtype)) +
                             "-byte elements read as " + std::to_string(sizeof(T)) + "-byte ones");
  if (shape) *shape = e.shape;
  std::vector<T> v(e.nbytes / sizeof(T));
  std::memcpy(v.data(), e.data, v.size() * sizeof(T));
  return v;
}

}  // namespace deepinfer::golden
