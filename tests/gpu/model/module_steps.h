// What the GPU module tests (compressors, indexers, Engram; V4 and V4.1) feed their modules: steps whose rows are
// runs of consecutive positions of interleaved slots, as the model's steps are, and page tables that scatter every
// slot's pages over the pool; and (namespace module_io) the host-side tensors and FP8 activations both tests build.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "gpu_test_util.h"

namespace deepinfer::gputest {

// One call of the step: rows grouped by slot (runs of consecutive positions), slots interleaved across calls.
struct Call {
  std::vector<int32_t> slots, positions;
  int rows() const { return int(slots.size()); }
};

// slots[i]'s sequence of lengths[i] positions cut into calls: each call takes a random non-empty subset of the
// unfinished slots, in random order, each with a chunk of 1 token (half the time) or 2 .. max_chunk tokens, so
// compression groups and windows fall inside and across calls.
inline std::vector<Call> make_schedule(Rng& rng, const std::vector<int>& slots, const std::vector<int>& lengths,
                                       int max_chunk) {
  std::vector<int> next(slots.size(), 0);
  std::vector<Call> calls;
  for (;;) {
    std::vector<size_t> active;
    for (size_t i = 0; i < slots.size(); ++i)
      if (next[i] < lengths[i]) active.push_back(i);
    if (active.empty()) break;
    std::shuffle(active.begin(), active.end(), rng.engine());
    const size_t take = size_t(rng.integer(1, int(active.size())));
    Call call;
    for (size_t a = 0; a < take; ++a) {
      const size_t i = active[a];
      const int chunk = rng.uniform(0.0f, 1.0f) < 0.5f ? 1 : rng.integer(2, max_chunk);
      const int n = std::min(chunk, lengths[i] - next[i]);
      for (int t = 0; t < n; ++t) {
        call.slots.push_back(slots[i]);
        call.positions.push_back(next[i]++);
      }
    }
    calls.push_back(std::move(call));
  }
  return calls;
}

// Every slot's whole sequence in one call (one run per slot).
inline Call one_call(const std::vector<int>& slots, const std::vector<int>& lengths) {
  Call call;
  for (size_t i = 0; i < slots.size(); ++i)
    for (int p = 0; p < lengths[i]; ++p) {
      call.slots.push_back(slots[i]);
      call.positions.push_back(p);
    }
  return call;
}

inline int max_rows(const std::vector<Call>& calls) {
  int m = 0;
  for (const Call& c : calls) m = std::max(m, c.rows());
  return m;
}

// Random page tables: every slot's pages are scattered over the pool.
struct Paging {
  int slots = 0, max_pages = 0, page_size = 0;
  std::vector<int32_t> table;  // [slots, max_pages]
  int64_t row(int slot, int e) const {
    return int64_t(table[size_t(slot * max_pages + e / page_size)]) * page_size + e % page_size;
  }
  int64_t pool_rows() const { return int64_t(slots) * max_pages * page_size; }
  int capacity() const { return max_pages * page_size; }
};

inline Paging make_paging(Rng& rng, int slots, int max_pages, int page_size) {
  Paging p{slots, max_pages, page_size, {}};
  p.table.resize(size_t(slots * max_pages));
  for (size_t i = 0; i < p.table.size(); ++i) p.table[i] = int32_t(i);
  std::shuffle(p.table.begin(), p.table.end(), rng.engine());
  return p;
}

// Nested, so that a test file that includes this header and defines its own tensor_of / quantize_rows in an
// anonymous namespace still compiles.
namespace module_io {

inline Tensor tensor_of(std::vector<int64_t> shape, std::vector<float> data) {
  Tensor t;
  t.shape = std::move(shape);
  t.data = std::move(data);
  return t;
}

// The FP8 W8A8 activation of a GEMM (model-spec §2; block 128 on V4, 32 on V4.1): codes, power-of-two scales, and
// the dequantized values the CPU reference multiplies (fp8_fake_quant_ragged).
struct Fp8Rows {
  std::vector<uint8_t> codes;
  std::vector<float> scales, dequantized;
};

inline Fp8Rows quantize_rows(const std::vector<float>& x, int rows, int k, int block) {
  Fp8Rows out;
  out.codes.resize(x.size());
  out.dequantized.resize(x.size());
  for (int r = 0; r < rows; ++r) {
    for (int b = 0; b < k; b += block) {
      const float* v = x.data() + size_t(r) * k + b;
      float amax = 0;
      for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(v[i]));
      const float scale = pow2_ceil(std::max(amax, 1e-4f) / 448.0f);
      out.scales.push_back(scale);
      for (int i = 0; i < block; ++i) {
        const size_t at = size_t(r) * k + b + i;
        out.codes[at] = float_to_e4m3(v[i] / scale);
        out.dequantized[at] = e4m3_to_float(out.codes[at]) * scale;
      }
    }
  }
  return out;
}

}  // namespace module_io

}  // namespace deepinfer::gputest
