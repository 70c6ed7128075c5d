// One SwiGLU expert of the V4 family (model-spec.md §3 "MoE"): g = clamp(W1 x, max=limit),
// u = clamp(W3 x, -limit, limit), a = silu(g) * u * route_weight, out += W2 a. The routing weight multiplies
// BEFORE W2 because W2's input is FP8-quantized in the real model; `quantize_w2_input` applies that step.
#pragma once

#include <cstdint>

namespace deepinfer {

struct ExpertWeights {
  const float* w1 = nullptr;  // [inter, hidden]
  const float* w3 = nullptr;  // [inter, hidden]
  const float* w2 = nullptr;  // [hidden, inter]
  int64_t inter = 0;
};

// out[hidden] += expert(x[hidden]) * route_weight. swiglu_limit <= 0 disables the clamp.
// act_quant_block > 0 fake-quantizes W2's input to FP8 with that block (model-spec §2 W8A8).
// bf16_gemm_outputs (the official numerics): the reference's quantized GEMMs return bf16 and its expert casts W2's
// input to bf16 (`w2(x.to(dtype))`), so W1 x and W3 x, a (before its FP8 quantization) and W2 a are rounded to bf16
// (bench/gpu/NOTES.md "Session 57"); false (the fp32 reference mode): no rounding.
void swiglu_expert_accumulate(const float* x, int64_t hidden, const ExpertWeights& w, float swiglu_limit,
                              float route_weight, int act_quant_block, bool bf16_gemm_outputs, double* out);

}  // namespace deepinfer
