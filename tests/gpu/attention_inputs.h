// The random inputs of the sink-attention decode tests (test_attention.cpp, test_batch_invariance.cpp,
// model/test_decode_fused_gpu.cpp): the window and compressed KV pools, the queries and the per-head sinks, and the
// CPU reference of one sequence over its selected rows.
#pragma once

#include <vector>

#include "cuda/kernels.h"
#include "gpu_test_util.h"
#include "layers/attention/sink_attention.h"

namespace deepinfer::gputest {

struct AttentionInputs {
  std::vector<float> window_pool, comp_pool;  // [pool_rows, kAttnDim] each, bf16 values
  std::vector<float> q;                       // [batch, kAttnHeads, kAttnDim], bf16 values
  std::vector<float> sink;                    // [kAttnHeads]
};

// Drawn in this order: the window pool ~ N(0, 1), the compressed pool ~ N(0, 1), the queries ~ N(0, q_sd), the sinks
// ~ N(0, 2) (not rounded).
inline AttentionInputs random_attention_inputs(Rng& rng, int batch, int pool_rows, float q_sd) {
  constexpr int H = cuda::kAttnHeads, D = cuda::kAttnDim;
  AttentionInputs in;
  in.window_pool.resize(size_t(pool_rows) * D);
  in.comp_pool.resize(size_t(pool_rows) * D);
  for (float& v : in.window_pool) v = rng.normal(0.0f, 1.0f);
  for (float& v : in.comp_pool) v = rng.normal(0.0f, 1.0f);
  round_to_bf16(in.window_pool);
  round_to_bf16(in.comp_pool);
  in.q.resize(size_t(batch) * H * D);
  in.sink.resize(H);
  for (float& v : in.q) v = rng.normal(0.0f, q_sd);
  round_to_bf16(in.q);
  for (float& v : in.sink) v = rng.normal(0.0f, 2.0f);
  return in;
}

// The CPU reference (attend_with_sink, layers/attention/sink_attention.h) of sequence b: its selected window rows
// then its compressed rows (-1 slots skipped), as the decode kernel visits them. out: [kAttnHeads, kAttnDim].
inline void sink_attention_reference(const AttentionInputs& in, int b, const std::vector<int32_t>& wrows,
                                     int window_stride, const std::vector<int32_t>& crows, int compressed_stride,
                                     float scale, float* out) {
  constexpr int H = cuda::kAttnHeads, D = cuda::kAttnDim;
  std::vector<const float*> keys;
  for (int i = 0; i < window_stride; ++i)
    if (int r = wrows[size_t(b) * window_stride + i]; r >= 0) keys.push_back(in.window_pool.data() + size_t(r) * D);
  for (int i = 0; i < compressed_stride; ++i)
    if (int r = crows[size_t(b) * compressed_stride + i]; r >= 0) keys.push_back(in.comp_pool.data() + size_t(r) * D);
  attend_with_sink(in.q.data() + size_t(b) * H * D, H, D, keys.data(), int64_t(keys.size()), in.sink.data(), scale,
                   out);
}

}  // namespace deepinfer::gputest
