// The V4.1 Engram memory on the GPU (model-spec.md §4 "Engram", §5 checkpoint), the CUDA twin of engram_apply
// (engram.cpp). The hash row ids depend only on the tokens: the host computes them with engram_row_ids
// (ngram_hash.h) from the per-sequence n-gram history and uploads them with the step's rows.
//
// The tables are ~100 GB each (model-spec §5), so `table` / `table_scale` may point into pinned host memory
// (cudaHostAlloc with cudaHostAllocMapped; the kernel reads a token's rows over the bus through the mapped
// pointer, 24 x 256 B per token and layer) or into device memory; the kernel is the same.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/kernels.h"

namespace deepinfer::cuda {

struct EngramGpu {
  const uint8_t* table = nullptr;        // [table_rows, dim] e4m3 codes (16-byte aligned)
  const uint8_t* table_scale = nullptr;  // [table_rows, dim / 32] e8m0: one scale per 32 values of a row
  int64_t table_rows = 0;
  int dim = 0;              // engram_head_dim (256)
  int hash_heads = 0;       // (engram_max_ngram_size - 1) * engram_n_heads (24)
  Fp8Linear wkv;            // [hidden * (hc + 1), hash_heads * dim], FP8 with 32 x 32 blocks: hc keys, then the value
  const float* q_weight = nullptr;  // [hc, hidden]
  const float* k_weight = nullptr;  // [hc, hidden]
  int hc = 0;               // mHC streams (4)
  int64_t hidden = 0;
};

size_t engram_workspace_bytes(int rows, const EngramGpu& w);

// Applies the Engram update to the streams X [rows, hc, hidden] (bf16, in place) of `rows` tokens, given their
// table rows row_ids [rows, hash_heads] (device, int64, each in [0, table_rows); an id outside gives NaN streams):
//   rows -> concat [hash_heads * dim] (e4m3 codes times their e8m0 scales, exact: they are the FP8 activation of
//   the block-32 W8A8 GEMM as they are, no requantization) -> wkv -> keys [hc, hidden], value [hidden];
//   per stream k: d = sum(X_k * qw_k * kw_k * key_k) * rsqrt(mean X_k^2 + eps) * rsqrt(mean key_k^2 + eps)
//   / sqrt(hidden), gate = sigmoid(sign(d) sqrt(max(|d|, 1e-6))), X_k += gate * value, in fp32 (the sums in double
//   like the CPU reference), then rounded to bf16 (the streams' storage). eps is rms_norm_eps.
// Stream-ordered, no synchronization, graph-capturable.
void engram_apply(bf16* X, const int64_t* row_ids, int rows, const EngramGpu& w, float eps, void* workspace,
                  cudaStream_t stream);

}  // namespace deepinfer::cuda
