// The switch between the decode-fused selection kernel of the CSA indexer (issue 4: batch-1 decode is launch
// latency, bench/gpu/NOTES.md "Decode-fused indexer and attention core") and the split kernels it replaces at few
// rows. Both paths give the same bits (the fused kernel runs the same device functions in the same order:
// index_scoring.cuh's scores, one top-k select), so the switch is for A/B timing and for the tests that compare the
// two, not a numerics choice. (The attention core's fused split + merge cluster launch, slower on the H200 in run 21,
// is gone; its design is in that NOTES section and git history.) This header also holds the attention core's
// decode switches below.
//
// DEEPINFER_DECODE_FUSED=0 keeps the split kernels process-wide; default on. Read once, at the first query or set
// (core/env_switch.h); set_decode_fused overrides it (tests). Like batch_invariant(), it is set before steps are in flight: a CUDA
// graph replays the kernels of the mode it was captured in.
#pragma once

#include "core/env_switch.h"
#include "cuda/step_kernels.h"

namespace deepinfer::cuda {

inline EnvSwitch<bool>& decode_fused_switch() {
  static EnvSwitch<bool> on{"DEEPINFER_DECODE_FUSED", [](const char* v) { return !env_equals(v, "0"); }};
  return on;
}
inline bool decode_fused() { return decode_fused_switch().get(); }
inline void set_decode_fused(bool on) { decode_fused_switch().set(on); }

// The attention core's epilogue (window commit + output de-rotation, step_kernels.h AttentionEpilogue) inside the
// merge launch instead of its own; DEEPINFER_MERGE_EPILOGUE=0 keeps the separate launch (H200 run 99: batch 1 -0.6 %
// on V4, -0.3 % on V4.1; bench/gpu/NOTES.md "Attention epilogue in the merge"). Same bits either way.
inline EnvSwitch<bool>& merge_epilogue_switch() {
  static EnvSwitch<bool> on{"DEEPINFER_MERGE_EPILOGUE", [](const char* v) { return !env_equals(v, "0"); }};
  return on;
}
inline bool merge_epilogue() { return merge_epilogue_switch().get(); }
inline void set_merge_epilogue(bool on) { merge_epilogue_switch().set(on); }

// V4's per-head query norm + RoPE (rms_norm_f32_rope of wq_b's fp32 output, no weight, no cache) inside the attention
// split kernel's prologue instead of its own launch in front of it (the overload of sink_attention_decode_committed
// below; bench/gpu/NOTES.md "Query norm + RoPE in the split kernel's prologue"). Same bits either way. On by default
// since session 19 (16 V4-Flash layers at 4K, same-call A/Bs: batch 1 flat, runs 110 / 111; batch 256 -0.6 / -0.7 %,
// prefill +1.0 / +0.4 %; one launch less per layer); DEEPINFER_Q_NORM_PROLOGUE=0 runs the norm's own launch.
inline EnvSwitch<bool>& query_norm_prologue_switch() {
  static EnvSwitch<bool> on{"DEEPINFER_Q_NORM_PROLOGUE", [](const char* v) { return !env_equals(v, "0"); }};
  return on;
}
inline bool query_norm_prologue() { return query_norm_prologue_switch().get(); }
inline void set_query_norm_prologue(bool on) { query_norm_prologue_switch().set(on); }

// The attention core's split and merge launched with programmatic dependent launch (cuda/launch.h), where both were
// plain launches: each starts its blocks while its predecessor drains (the select, the visible-entry list or wq_b
// before the split; the split before the merge) instead of ~0.45 us after its end plus the blocks' ramp (run 220's
// timeline: the split 0.45-0.61 us after its predecessor on every layer, the merge 0.45-0.55 after the split). Both
// kernels wait (pdl_wait) before any global access, so the bits do not change (GpuAttentionPdl). Run 222 (4 / 3
// repeats): V4 batch 1 2.203-2.208 -> 2.194-2.202 ms (-0.3 %), batch 8 flat, V4.1 flat (1.907-1.913 / 1.907-1.915).
// On by default; DEEPINFER_ATTENTION_PDL=0 launches both plainly (read once; with DEEPINFER_PDL=0 they are plain too).
inline EnvSwitch<bool>& attention_pdl_switch() {
  static EnvSwitch<bool> on{"DEEPINFER_ATTENTION_PDL", [](const char* v) { return !env_equals(v, "0"); }};
  return on;
}
inline bool attention_pdl() { return attention_pdl_switch().get(); }
inline void set_attention_pdl(bool on) { attention_pdl_switch().set(on); }

// The query's norm + RoPE that precedes V4's attention core at decode (model-spec §3 "Attention": the unweighted
// per-head RMSNorm, then RoPE on the last rope_dim channels at the row's position): x [batch, kAttnHeads, kAttnDim]
// fp32 (wq_b's output), positions [batch].
struct QueryNormRope {
  const float* x = nullptr;
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;
  float eps = 0.0f;
  int rope_dim = 0;
};

// rms_norm_f32_rope(n.x, nullptr, q, batch * kAttnHeads, kAttnDim, n.eps, kAttnHeads, n.positions, n.inv_freq,
// n.rope_dim, {}) then sink_attention_decode_committed(q, batch, ...) (step_kernels.h). With query_norm_prologue() the
// split kernel's blocks normalise and rotate their own heads' query rows from x instead (q is not written), where
// that applies: a RoPE span of at most 64 channels (one pair per lane). Bitwise the two calls (tests/gpu/test_attention.cpp).
void sink_attention_decode_committed(const QueryNormRope& n, bf16* q, int batch, const KvRows& window,
                                     const KvRows& compressed, const float* sink, float scale, void* workspace,
                                     const AttentionEpilogue& e, cudaStream_t stream);

}  // namespace deepinfer::cuda
