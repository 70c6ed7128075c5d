// The CPU side of the MXFP4 grouped expert GEMM tests (test_experts.cpp, test_moe_prefill_gemm.cpp): random expert
// weights in the checkpoint's layout, decoded as model/weight_formats.cpp reads them (two e2m1 per byte, even column
// in the low nibble, one e8m0 scale per 32 along K); the groups (distinct experts in a random order, given row
// counts); the activation rows; and the reference product, core/linalg.cpp's matmul per group.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/dtype.h"
#include "core/linalg.h"
#include "gpu_test_util.h"

namespace deepinfer::gputest {

// experts x [n, k] weights: codes [experts * n, k / 2], scales [experts * n, k / 32].
struct Mxfp4Experts {
  int experts = 0;
  int64_t n = 0, k = 0;
  std::vector<uint8_t> codes, scales;

  float weight(int e, int64_t r, int64_t c) const {
    uint8_t byte = codes[size_t((int64_t(e) * n + r) * (k / 2) + c / 2)];
    float v = e2m1_to_float(c % 2 == 0 ? (byte & 0xF) : (byte >> 4));
    return v * e8m0_to_float(scales[size_t((int64_t(e) * n + r) * (k / 32) + c / 32)]);
  }
};

// Random codes (every nibble value, both signs), then scales 2^-10 .. 2^-2 per 32 along K.
inline Mxfp4Experts random_mxfp4_experts(Rng& rng, int experts, int64_t n, int64_t k) {
  Mxfp4Experts w{experts, n, k, std::vector<uint8_t>(size_t(experts) * n * (k / 2)),
                 std::vector<uint8_t>(size_t(experts) * n * (k / 32))};
  for (auto& c : w.codes) c = uint8_t(rng.integer(0, 255));
  for (auto& s : w.scales) s = uint8_t(rng.integer(127 - 10, 127 - 2));
  return w;
}

// Groups: distinct experts in a random order (one shuffle of 0..experts-1), row counts as given (0 = a
// touched-but-empty group); offsets[g] is group g's first row.
struct ExpertGroups {
  std::vector<int> ids;
  std::vector<int32_t> offsets;
  int groups = 0;
  int64_t rows = 0;
  int max_rows = 0;
};

inline ExpertGroups random_expert_groups(Rng& rng, int experts, const std::vector<int>& group_rows) {
  ExpertGroups g;
  g.ids.resize(static_cast<size_t>(experts));
  std::iota(g.ids.begin(), g.ids.end(), 0);
  std::shuffle(g.ids.begin(), g.ids.end(), rng.engine());
  g.groups = int(group_rows.size());
  g.ids.resize(size_t(g.groups));
  g.offsets.assign(size_t(g.groups) + 1, 0);
  for (int i = 0; i < g.groups; ++i) g.offsets[size_t(i) + 1] = g.offsets[size_t(i)] + group_rows[size_t(i)];
  g.rows = g.offsets.back();
  g.max_rows = *std::max_element(group_rows.begin(), group_rows.end());
  return g;
}

// rows x k activations, N(0, s) with s = exp(U(-3, 3)) per row (drawn row by row), rounded to bf16.
inline std::vector<float> random_activation_rows(Rng& rng, int64_t rows, int64_t k) {
  std::vector<float> x(size_t(rows * k));
  for (int64_t r = 0; r < rows; ++r) {
    const float s = std::exp(rng.uniform(-3.0f, 3.0f));
    for (int64_t i = 0; i < k; ++i) x[size_t(r * k + i)] = rng.normal(0.0f, s);
  }
  round_to_bf16(x);
  return x;
}

// The grouped product [rows, n]: group i's group_rows[i] rows of `act` [rows, k] times expert ids[i]'s decoded
// weights.
inline std::vector<float> grouped_reference(const Mxfp4Experts& w, const ExpertGroups& g,
                                            const std::vector<int>& group_rows, const float* act) {
  const int64_t n = w.n, k = w.k;
  std::vector<float> ref(size_t(g.rows * n));
  std::vector<float> wdeq(size_t(n * k));
  for (int i = 0; i < g.groups; ++i) {
    if (group_rows[size_t(i)] == 0) continue;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) wdeq[size_t(r * k + c)] = w.weight(g.ids[size_t(i)], r, c);
    matmul_nt(act + g.offsets[size_t(i)] * k, group_rows[size_t(i)], k, wdeq.data(), n,
              ref.data() + g.offsets[size_t(i)] * n);
  }
  return ref;
}

}  // namespace deepinfer::gputest
