// The V4 MoE FFN sublayer on the GPU (model-spec.md §3 "MoE", §2 W8A8; issue 4), the device twin of
// model/v4/v4_moe.cpp (v4_moe_step with NumericsOptions all on) for a batch of rows:
//   logits = x . gate^T (fp32)  ->  sqrt-softplus scores, top_k by score + bias (or tid2eid[token] on the hash
//   layers), normalised weights times route_scale  ->  dispatch the (row, slot) pairs into expert order  ->
//   x quantized once to FP8 (block act_block), gathered  ->  MXFP4 w1|w3  ->  clamped SwiGLU times the routing
//   weight, FP8-quantized  ->  MXFP4 w2  ->  y[r] = bf16( sum_{k = 0 .. top_k-1} expert_k(x[r]) + shared(x[r]) ).
// The shared expert is the same SwiGLU on FP8 weights (fp8_gemm) with weight 1.
//
// Graph capture: one call enqueues kernels (and one 4-byte memset of its own workspace) on `stream` only; no host
// synchronization, no device -> host copy, no allocation (everything lives in `workspace`, which the caller may
// share with other modules between calls: nothing is kept in it across calls), and every launch size is a function
// of the host-known `rows` and the weights' shapes, never of the routing.
//
// Launches at decode (rows <= 16, the fused forms; moe_gpu.cu's top comment): a memset and 4 kernels on `stream`
// (routing, w1|w3, w2 with the SwiGLU prologue, combine) and 2 for the shared expert, where the experts and the
// shared expert are packed for decode v8 (the GPU model); 3 more on the checkpoint layout (the two SwiGLU
// quantizations and fp8_gemm's separate launches).
//
// Batch invariance (algorithms.md §4): below the prefill threshold (see MoeGemmPath) every kernel computes a
// row's result with a reduction order that does not depend on the other rows (the router logits use a kernel of
// our own rather than cuBLAS for that reason, and the fused and separate routing kernels share its code; the
// decode expert / FP8 GEMMs split K per warp independently of the token count), and the top_k expert outputs are
// summed in slot order k = 0 .. top_k-1, so a row's output is bitwise the same alone or inside a batch. Above the
// threshold the prefill kernels (cuBLAS gate, wgmma experts and shared expert) take over: still deterministic run
// to run, but their sums are ordered differently from the decode kernels', so a row's bits depend on which side
// of the threshold its batch falls. Two limits of that rule without batch-invariant mode: decode v8 takes groups
// of <= 8 rows, so a batch with more rows per expert (or more than 8 rows for the shared expert) runs v7, which
// sums in another order. With cuda::batch_invariant() on, Auto always takes the decode side with groups of 8 rows
// (v8 wherever the weights are packed for it, the shared expert too), so a row's bits never depend on the batch.
#pragma once

#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels.h"

namespace deepinfer::cuda {

// Which expert GEMMs run. Auto takes the prefill kernels when the batch brings at least
// kMoePrefillRowsPerExpert rows per expert on average (rows * top_k >= kMoePrefillRowsPerExpert * experts) and
// every product meets the prefill kernel's n % 128 == 0 / k % 128 == 0, except in batch-invariant mode
// (cuda::batch_invariant()), where Auto is always Decode; Decode / Prefill force a side (tests, benchmarks;
// Prefill still falls back to Decode where the shapes do not allow it).
enum class MoeGemmPath { Auto, Decode, Prefill };

// Half of the prefill kernel's 128-row tile: below it most tiles would be more than half padding, while the
// decode kernel streams each expert's weights once per 64 rows. A starting point for the benchmarks to tune;
// V4-Flash (256 experts, top 6) crosses it at 2731 rows.
constexpr int kMoePrefillRowsPerExpert = 64;

struct MoeGpu {
  const bf16* gate = nullptr;        // [experts, hidden] (bf16 on disk; logits are fp32, model-spec §8)
  const float* gate_bias = nullptr;  // [experts], selection only; null on hash layers
  const int32_t* tid2eid = nullptr;  // [vocab, top_k] on hash layers (V4's first num_hash_layers), else null
  Fp4Experts w13;                    // n = 2 * inter: rows [0, inter) = w1, [inter, 2 inter) = w3; k = hidden
  Fp4Experts w2;                     // n = hidden, k = inter
  Fp8Linear shared_w13;              // n = 2 * shared_inter (w1 rows then w3 rows), k = hidden
  Fp8Linear shared_w2;               // n = hidden, k = shared_inter
  int experts = 0, top_k = 0, act_block = 128;
  int64_t hidden = 0, inter = 0, shared_inter = 0;
  float swiglu_limit = 0, route_scale = 1, route_eps = 0, gate_temp = 1;
  bool normalize = true;
  int64_t vocab = 0;                 // rows of tid2eid (hash layers): a token outside [0, vocab) traps
  MoeGemmPath expert_path = MoeGemmPath::Auto;
};

// Throws deepinfer::Error naming the first inconsistent or unsupported shape (moe_workspace_bytes and
// moe_forward call it; the uploads call it so a bad checkpoint fails at load).
void moe_validate(const MoeGpu&);

// Bytes of workspace for calls of up to max_rows rows (256-byte aligned pieces; the caller's buffer should be
// 256-byte aligned too, as cudaMalloc's are).
size_t moe_workspace_bytes(int max_rows, const MoeGpu&);

// y[r] = sum over the row's top_k experts of w_e * expert_e(x[r]) + shared(x[r]), rounded to bf16 (official
// numerics: W8A8 FP8 input quantization for the expert GEMMs, the W2 input quantized after the routing weight,
// as v4_moe_step with NumericsOptions all on). tokens[r] (the row's token id) is read only on hash layers.
// x [rows, hidden] bf16 (16-byte aligned), y [rows, hidden] bf16.
void moe_forward(const bf16* x, const int32_t* tokens, int rows, const MoeGpu& w, bf16* y, void* workspace,
                 cublasHandle_t blas, cudaStream_t stream,
                 const SideStream* side = nullptr);

// Where the last moe_forward(rows) on `workspace` left its routing (tests and diagnostics): the selected experts
// in selection order and their weights (already times route_scale), [rows, top_k] each.
struct MoeRoutingView {
  const int32_t* experts = nullptr;
  const float* weights = nullptr;
};
MoeRoutingView moe_routing_view(void* workspace, int rows, const MoeGpu& w);

}  // namespace deepinfer::cuda
