#include "layers/engram/engram.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/linalg.h"

namespace deepinfer {

namespace {
constexpr int kRowScaleBlock = 32;  // model-spec §5: one e8m0 scale per 32 columns of a table row
}

EngramTable::EngramTable(const Checkpoint& ck, const std::string& prefix, int64_t min_rows, int64_t dim)
    : dim_(dim) {
  const std::string wname = prefix + ".weight";
  weight_ = &ck.get(wname);
  DI_CHECK(weight_->shape.size() == 2 && weight_->shape[1] == dim,
           "checkpoint: tensor '" + wname + "' has shape " + shape_string(weight_->shape) + ", expected [rows, " +
               std::to_string(dim) + "]");
  rows_ = weight_->shape[0];
  DI_CHECK(rows_ >= min_rows, "checkpoint: tensor '" + wname + "' has " + std::to_string(rows_) +
                                  " rows but the Engram hash buckets need " + std::to_string(min_rows));
  if (weight_->dtype == DType::F8_E4M3) {
    DI_CHECK(dim % kRowScaleBlock == 0, "checkpoint: tensor '" + wname + "' width is not a multiple of 32");
    scale_ = &ck.expect(prefix + ".scale", DType::F8_E8M0, {rows_, dim / kRowScaleBlock});
  } else {
    DI_CHECK(weight_->dtype == DType::BF16 || weight_->dtype == DType::F32,
             "checkpoint: tensor '" + wname + "' must be F8_E4M3 (+ .scale), BF16 or F32");
  }
}

void EngramTable::read_row(int64_t r, float* out) const {
  DI_CHECK(r >= 0 && r < rows_, "engram: row " + std::to_string(r) + " outside the table of " +
                                    std::to_string(rows_) + " rows");
  const size_t base = size_t(r) * size_t(dim_);
  if (weight_->dtype == DType::F8_E4M3) {
    for (int64_t c = 0; c < dim_; ++c) {
      float scale = e8m0_to_float(scale_->data[size_t(r) * size_t(dim_ / kRowScaleBlock) + size_t(c / kRowScaleBlock)]);
      out[c] = e4m3_to_float(weight_->data[base + size_t(c)]) * scale;
    }
  } else if (weight_->dtype == DType::BF16) {
    for (int64_t c = 0; c < dim_; ++c) {
      uint16_t h;
      std::memcpy(&h, weight_->data + 2 * (base + size_t(c)), 2);
      out[c] = bf16_to_float(h);
    }
  } else {
    std::memcpy(out, weight_->data + 4 * base, size_t(dim_) * 4);
  }
}

void engram_apply(const EngramWeights& w, const int64_t* row_ids, int hash_heads, int hc, int64_t hidden, float eps,
                  float* X) {
  const int64_t dim = w.table.dim();
  std::vector<float> rows(size_t(hash_heads) * size_t(dim));
  for (int h = 0; h < hash_heads; ++h) w.table.read_row(row_ids[h], rows.data() + size_t(h) * size_t(dim));
  std::vector<float> kv(size_t(hidden) * size_t(hc + 1));
  matmul_nt(rows.data(), 1, int64_t(rows.size()), w.wkv.ptr(), int64_t(kv.size()), kv.data());
  const float* value = kv.data() + size_t(hc) * size_t(hidden);
  for (int k = 0; k < hc; ++k) {
    float* x = X + size_t(k) * size_t(hidden);
    const float* key = kv.data() + size_t(k) * size_t(hidden);
    const float* qw = w.q_weight.row(k);
    const float* kw = w.k_weight.row(k);
    double sim = 0, xx = 0, kk = 0;
    for (int64_t d = 0; d < hidden; ++d) {
      sim += double(x[d]) * double(qw[d] * kw[d]) * key[d];
      xx += double(x[d]) * x[d];
      kk += double(key[d]) * key[d];
    }
    // Similarity of the stream and its key, both RMS-normalised, over sqrt(hidden) (model-spec §4).
    float rstd = float(1.0 / std::sqrt(xx / double(hidden) + eps)) * float(1.0 / std::sqrt(kk / double(hidden) + eps));
    float d = float(sim) * rstd / std::sqrt(float(hidden));
    // Signed square root keeps the gate sensitive near zero; the 1e-6 floor keeps it finite.
    float signed_root = std::copysign(std::sqrt(std::max(std::fabs(d), 1e-6f)), d);
    float gate = 1.0f / (1.0f + std::exp(-signed_root));
    for (int64_t dd = 0; dd < hidden; ++dd) x[dd] += gate * value[dd];
  }
}

}  // namespace deepinfer
