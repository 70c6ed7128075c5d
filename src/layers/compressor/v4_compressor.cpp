#include "layers/compressor/v4_compressor.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "core/linalg.h"
#include "layers/norm_rope/rms_norm.h"

namespace deepinfer {

void V4CompressorState::reset(const V4CompressorWeights& w) {
  size_t width = size_t(w.series()) * size_t(w.dim);
  open_kv.assign(size_t(w.ratio) * width, 0.0f);
  open_gate.assign(size_t(w.ratio) * width, 0.0f);
  open_rows = 0;
  prev_kv.assign(w.overlap ? size_t(w.ratio) * size_t(w.dim) : 0, 0.0f);
  prev_gate.assign(prev_kv.size(), 0.0f);
  has_prev = false;
  entries = 0;
}

namespace {

// One channel of the pooled entry: sum_r softmax_r(gate) * kv over the rows of the channel (fp32 softmax,
// model-spec §3 / §8 "the compressor softmax runs in fp32"). Rows are given as (kv, gate) pointer pairs with
// a stride, so the overlapping and the plain layouts share the loop.
struct ChannelRows {
  const float* kv;
  const float* gate;
  int64_t stride;
  int rows;
};

float pool_channel(const ChannelRows* parts, int n_parts) {
  float mx = -INFINITY;
  for (int p = 0; p < n_parts; ++p)
    for (int r = 0; r < parts[p].rows; ++r) mx = std::max(mx, parts[p].gate[r * parts[p].stride]);
  double den = 0, num = 0;
  for (int p = 0; p < n_parts; ++p) {
    for (int r = 0; r < parts[p].rows; ++r) {
      double e = std::exp(double(parts[p].gate[r * parts[p].stride]) - mx);
      den += e;
      num += e * parts[p].kv[r * parts[p].stride];
    }
  }
  return float(num / den);
}

}  // namespace

bool v4_compressor_push(const V4CompressorWeights& w, V4CompressorState& s, const float* x, int64_t hidden,
                        int64_t pos, float norm_eps, bool bf16_pooled, float* entry) {
  const int64_t width = w.series() * w.dim;
  DI_CHECK(int64_t(s.open_kv.size()) == w.ratio * width, "v4 compressor: state was not reset for this layer");
  DI_CHECK(pos == s.entries * w.ratio + s.open_rows,
           "v4 compressor: token position " + std::to_string(pos) + " arrives out of order (expected " +
               std::to_string(s.entries * w.ratio + s.open_rows) + ")");
  // kv = wkv x, gate = wgate x + ape[pos mod m] (model-spec §3).
  float* kv_row = s.open_kv.data() + s.open_rows * width;
  float* gate_row = s.open_gate.data() + s.open_rows * width;
  matmul_nt(x, 1, hidden, w.wkv.ptr(), width, kv_row);
  matmul_nt(x, 1, hidden, w.wgate.ptr(), width, gate_row);
  const float* ape_row = w.ape.row(pos % w.ratio);
  for (int64_t c = 0; c < width; ++c) gate_row[c] += ape_row[c];
  if (++s.open_rows < w.ratio) return false;

  for (int64_t d = 0; d < w.dim; ++d) {
    if (w.overlap) {
      // CSA: Ca of the previous group (absent for entry 0: weight 0) then Cb of this group.
      ChannelRows parts[2] = {
          {s.prev_kv.data() + d, s.prev_gate.data() + d, w.dim, s.has_prev ? w.ratio : 0},
          {s.open_kv.data() + w.dim + d, s.open_gate.data() + w.dim + d, width, w.ratio},
      };
      entry[d] = pool_channel(parts, 2);
    } else {
      ChannelRows part{s.open_kv.data() + d, s.open_gate.data() + d, width, w.ratio};
      entry[d] = pool_channel(&part, 1);
    }
  }
  if (bf16_pooled)
    for (int64_t d = 0; d < w.dim; ++d) entry[d] = round_bf16(entry[d]);
  rms_norm(entry, w.norm.ptr(), w.dim, norm_eps, entry);

  if (w.overlap) {
    // Keep this group's Ca rows: the next entry pools them (model-spec §6).
    for (int r = 0; r < w.ratio; ++r) {
      std::copy_n(s.open_kv.data() + r * width, w.dim, s.prev_kv.data() + r * w.dim);
      std::copy_n(s.open_gate.data() + r * width, w.dim, s.prev_gate.data() + r * w.dim);
    }
    s.has_prev = true;
  }
  s.open_rows = 0;
  ++s.entries;
  return true;
}

}  // namespace deepinfer
