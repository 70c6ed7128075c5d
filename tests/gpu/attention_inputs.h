// The random inputs of the sink-attention decode tests (test_attention.cpp, test_batch_invariance.cpp): the window
// and compressed KV pools, the queries and the per-head sinks, the ragged key lists of a batch, and the CPU reference
// of one sequence over its selected rows.
#pragma once

#include <cstdint>
#include <utility>
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

// The key lists of a decode batch as cuda::KvRows reads them: [batch, window_stride] window rows and
// [batch, compressed_stride] compressed rows of the pools, -1 for an empty slot.
struct AttentionRows {
  std::vector<int32_t> window, compressed;
  int window_stride = 0, compressed_stride = 0;
};

// Ragged key lists: sequence b fills its first counts(b) = {window rows, compressed picks} slots with random pool rows
// and leaves the rest empty (a short sequence, fewer picks than top-k); with `hole`, one random compressed slot of
// every sequence is emptied afterwards (a hole in the middle of the list). Drawn per sequence in that order: the
// counts, the window rows, the compressed rows, the hole.
template <class CountsFn>
AttentionRows ragged_attention_rows(Rng& rng, int batch, int window_stride, int compressed_stride, int pool_rows,
                                    bool hole, CountsFn counts) {
  AttentionRows rows{std::vector<int32_t>(size_t(batch) * window_stride, -1),
                     std::vector<int32_t>(size_t(batch) * compressed_stride, -1), window_stride, compressed_stride};
  for (int b = 0; b < batch; ++b) {
    const std::pair<int, int> n = counts(b);
    for (int i = 0; i < n.first; ++i) rows.window[size_t(b) * window_stride + i] = rng.integer(0, pool_rows - 1);
    for (int i = 0; i < n.second; ++i)
      rows.compressed[size_t(b) * compressed_stride + i] = rng.integer(0, pool_rows - 1);
    if (hole && compressed_stride > 0)
      rows.compressed[size_t(b) * compressed_stride + rng.integer(0, compressed_stride - 1)] = -1;
  }
  return rows;
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

// The CPU reference of every sequence of the batch: [batch, kAttnHeads, kAttnDim].
inline std::vector<float> sink_attention_reference(const AttentionInputs& in, const AttentionRows& rows, float scale) {
  constexpr size_t HD = size_t(cuda::kAttnHeads) * cuda::kAttnDim;
  std::vector<float> ref(in.q.size());
  for (size_t b = 0; b < in.q.size() / HD; ++b)
    sink_attention_reference(in, int(b), rows.window, rows.window_stride, rows.compressed, rows.compressed_stride,
                             scale, ref.data() + b * HD);
  return ref;
}

// The batch on the device as cuda::sink_attention_decode takes it (bf16 queries and pools, the key lists, the sinks),
// with its bf16 output and its workspace.
struct DeviceAttentionBatch {
  DeviceAttentionBatch(const AttentionInputs& in, const AttentionRows& rows)
      : q(cuda::to_device(to_bf16(in.q))),
        window_pool(cuda::to_device(to_bf16(in.window_pool))),
        comp_pool(cuda::to_device(to_bf16(in.comp_pool))),
        window_rows(cuda::to_device(rows.window)),
        compressed_rows(cuda::to_device(rows.compressed)),
        sink(cuda::to_device(in.sink)),
        out(in.q.size() * 2),
        ws(cuda::sink_attention_workspace_bytes(batch(in), rows.window_stride, rows.compressed_stride)),
        window{window_pool.as<cuda::bf16>(), window_rows.as<int32_t>(), rows.window_stride},
        compressed{comp_pool.as<cuda::bf16>(), compressed_rows.as<int32_t>(), rows.compressed_stride} {}

  static int batch(const AttentionInputs& in) { return int(in.q.size() / (size_t(cuda::kAttnHeads) * cuda::kAttnDim)); }

  cuda::DeviceBuffer q, window_pool, comp_pool, window_rows, compressed_rows, sink, out, ws;
  cuda::KvRows window, compressed;
};

}  // namespace deepinfer::gputest
