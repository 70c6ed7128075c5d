// The sliding-window KV of one layer of one sequence (model-spec.md §3, §6): the last `window` latents,
// the current token included, stored in a ring indexed by position mod window. It is the only KV that
// window-only layers keep, and the "recent" part every other layer attends to.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"

namespace deepinfer {

class WindowRing {
 public:
  WindowRing() = default;
  WindowRing(int window, int64_t dim) : window_(window), dim_(dim), rows_(size_t(window) * size_t(dim)) {}

  // Stores the latent of position `pos`; positions must arrive in order.
  void push(int64_t pos, const float* latent) {
    DI_CHECK(pos == next_, "window ring: position " + std::to_string(pos) + " pushed, expected " +
                               std::to_string(next_));
    std::copy(latent, latent + dim_, rows_.begin() + (pos % window_) * dim_);
    ++next_;
  }
  // First position still held when the newest is `pos`: max(0, pos - window + 1).
  int64_t oldest(int64_t pos) const { return pos - window_ + 1 > 0 ? pos - window_ + 1 : 0; }
  // The latent of position `pos`, which must be inside the window of the newest pushed position.
  const float* at(int64_t pos) const {
    DI_CHECK(pos < next_ && pos >= oldest(next_ - 1), "window ring: position " + std::to_string(pos) +
                                                          " is outside the window");
    return rows_.data() + (pos % window_) * dim_;
  }
  int64_t length() const { return next_; }
  int window() const { return window_; }

 private:
  int window_ = 0;
  int64_t dim_ = 0;
  std::vector<float> rows_;
  int64_t next_ = 0;
};

}  // namespace deepinfer
