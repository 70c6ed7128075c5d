// The numerics switches of the V4 reference forward (model.h NumericsOptions) turned into the concrete
// steps of the official V4 code (model-spec.md §2, §3). HF transformers (the V4 test reference) runs with
// all three off; the official semantics have all three on.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"

namespace deepinfer {

struct V4Numerics {
  bool quantize_cache = false;        // window / compressed KV FP8 (nope dims, block 64); index keys+queries FP4
  bool quantize_activations = false;  // FP8 input of the FP8/FP4 weight GEMMs, block = weight_block_size
  bool bf16_activations = false;      // bf16 rounding where the official code casts
  int activation_block = 128;

  static V4Numerics from(const NumericsOptions& o, int activation_block) {
    return {o.quantize_cache, o.quantize_activations, o.bf16_activations, activation_block};
  }
};

// model-spec §3: the V4 KV cache keeps the nope channels in FP8 with a ue8m0 scale per 64 channels; the
// rope channels stay bf16.
constexpr int kV4KvFp8Block = 64;

// In place: the stored form of a window / compressed KV row (FP8 nope part, bf16 rope part).
void v4_quantize_kv_row(float* kv, int64_t head_dim, int rope_dim, const V4Numerics& n);

// The input an FP8/FP4-weight GEMM sees: x itself, or its FP8 block quantization under W8A8.
std::vector<float> v4_gemm_input(const float* x, int64_t n, const V4Numerics& numerics);

// Rounds to bf16 in place when the official casts are on.
void v4_maybe_bf16(float* x, int64_t n, const V4Numerics& numerics);

}  // namespace deepinfer
