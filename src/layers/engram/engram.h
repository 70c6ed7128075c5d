// The Engram memory of DeepSeek-V4.1 (model-spec.md §4 "Engram"): before its layer, every token looks up
// (max_ngram - 1) * n_heads rows of a large hashed table, projects their concatenation with `wkv` into a
// key per residual stream and one shared value, and adds the value to each stream behind a
// signed-square-root sigmoid gate computed from the stream / key similarity.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/checkpoint.h"

namespace deepinfer {

// The hashed table, read in place from the mapped checkpoint: the real tables are ~100 GB each, so rows
// are decoded only when looked up. Stored as F8_E4M3 [rows, dim] with row-wise F8_E8M0 scales
// [rows, dim / 32] (model-spec §5), or dense BF16 / F32.
class EngramTable {
 public:
  EngramTable() = default;
  // `prefix` = "layers.L.engram.embed"; throws Error naming the tensor on a bad dtype or shape.
  EngramTable(const Checkpoint& ck, const std::string& prefix, int64_t min_rows, int64_t dim);
  int64_t rows() const { return rows_; }
  int64_t dim() const { return dim_; }
  // Decodes row `r` into out[dim].
  void read_row(int64_t r, float* out) const;

 private:
  const TensorEntry* weight_ = nullptr;
  const TensorEntry* scale_ = nullptr;
  int64_t rows_ = 0, dim_ = 0;
};

struct EngramWeights {
  EngramTable table;
  Tensor wkv;       // [hidden * (hc + 1), hash_heads * head_dim]: hc keys, then the value
  Tensor q_weight;  // [hc, hidden]
  Tensor k_weight;  // [hc, hidden]
};

// Applies the Engram update to the streams X [hc, hidden] of one token in place, given its table rows
// (row_ids [hash_heads]). eps is rms_norm_eps.
void engram_apply(const EngramWeights& w, const int64_t* row_ids, int hash_heads, int hc, int64_t hidden, float eps,
                  float* X);

}  // namespace deepinfer
