// A plain row-major fp32 tensor for the CPU reference path. It owns its data; views are raw
// pointers with explicit extents. The reference favours clarity over speed (DESIGN.md §2).
#pragma once

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"

namespace deepinfer {

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;

  Tensor() = default;
  explicit Tensor(std::vector<int64_t> s, float fill = 0.0f) : shape(std::move(s)) {
    data.assign(size_t(numel_of(shape)), fill);
  }

  static int64_t numel_of(const std::vector<int64_t>& s) {
    return std::accumulate(s.begin(), s.end(), int64_t(1), std::multiplies<int64_t>());
  }
  int64_t numel() const { return int64_t(data.size()); }
  int64_t dim(int i) const { return shape[size_t(i < 0 ? int(shape.size()) + i : i)]; }
  int rank() const { return int(shape.size()); }
  // Row r of a tensor viewed as [numel / last_dim, last_dim].
  float* row(int64_t r) { return data.data() + r * shape.back(); }
  const float* row(int64_t r) const { return data.data() + r * shape.back(); }
  float* ptr() { return data.data(); }
  const float* ptr() const { return data.data(); }
};

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace deepinfer
