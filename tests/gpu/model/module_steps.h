// What the GPU module tests (compressors, indexers, Engram; V4 and V4.1) feed their modules: steps whose rows are
// runs of consecutive positions of interleaved slots, as the model's steps are, and page tables that scatter every
// slot's pages over the pool; and (namespace module_io) the host-side tensors and FP8 activations both tests build
// and their comparisons of values and pool entries with the CPU's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
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

// Nested, so that a test file that includes this header and defines its own tensor_of / quantize_rows /
// compare_pool in an anonymous namespace still compiles.
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

// GPU values against the CPU's: relative L2 within `bound`, and at least `min_identical` of them bit-identical
// (printed with `digits` decimals).
inline void compare_values(const std::string& name, const std::vector<float>& gpu, const std::vector<float>& ref,
                           double bound, double min_identical, int digits) {
  ASSERT_FALSE(ref.empty()) << name << ": nothing to compare";
  check_rel_l2(name, gpu, ref, bound);
  size_t same = 0;
  for (size_t i = 0; i < gpu.size() && i < ref.size(); ++i) same += gpu[i] == ref[i];
  const double frac = double(same) / double(ref.size());
  std::printf("GPU_CHECK %s bit_identical=%.5f (%zu/%zu) bound>=%.*f\n", name.c_str(), frac, same, ref.size(), digits,
              min_identical);
  EXPECT_GE(frac, min_identical) << name;
}

using EntryMap = std::map<std::pair<int, int>, std::vector<float>>;  // (slot, entry) -> stored values

// Entries (pool rows) the CPU produced vs the pool after the run (compare_values); every other row must still hold
// the 0xFF poison (no stray writes: unused slot, entries not yet closed, spare pages).
inline void compare_pool(const std::string& name, const std::vector<uint16_t>& pool, int width, const Paging& pg,
                         const EntryMap& expected, double bound, double min_identical, int digits) {
  std::vector<float> gpu, ref;
  std::set<int64_t> written;
  for (const auto& [key, entry] : expected) {
    const int64_t row = pg.row(key.first, key.second);
    written.insert(row);
    for (int d = 0; d < width; ++d) gpu.push_back(bf16_to_float(pool[size_t(row * width + d)]));
    ref.insert(ref.end(), entry.begin(), entry.end());
  }
  compare_values(name + " entries=" + std::to_string(expected.size()), gpu, ref, bound, min_identical, digits);
  size_t stray = 0;
  for (int64_t row = 0; row < pg.pool_rows(); ++row) {
    if (written.count(row)) continue;
    for (int d = 0; d < width; ++d) stray += pool[size_t(row * width + d)] != 0xFFFFu;
  }
  report_exact(name + " untouched_rows", stray, size_t(pg.pool_rows() - int64_t(written.size())) * size_t(width));
}

}  // namespace module_io

}  // namespace deepinfer::gputest
