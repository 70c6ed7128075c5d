// The small kernels that join the big ones into a model step (issue 4): embedding into the mHC streams, the
// head's mHC collapse, RMSNorm of fp32 GEMM outputs, the V4 KV cache format, and the index lists the sink
// attention reads (window ring rows and compressed pool rows). All enqueue on a stream and never synchronize,
// so a whole step can be captured in a CUDA graph.
//
// Rows of a step: row r is the token at positions[r] of the sequence in slot slots[r]. A slot occupies one row
// per step in decode, or a run of consecutive rows with consecutive positions (a prefill chunk); chunk_first[r]
// is the row that starts r's run (r itself in decode).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels.h"  // HcSite
#include "layers/moe/moe_combine.h"

namespace deepinfer::cuda {

using bf16 = __nv_bfloat16;

// X[r, j, :] = table[tokens[r], :] for each of the hc streams (model-spec §3 "Embedding": the embedding is
// copied into every residual stream).
void embed_streams(const bf16* table, const int32_t* tokens, int rows, int hc, int64_t hidden, bf16* X,
                   cudaStream_t stream);

// Tokens resolved on the device (algorithms.md §5): a row whose token is negative takes the token that the
// previous step sampled for its row -token - 1 (sampled[-token - 1]), so step N + 1 can be enqueued before the
// host has seen step N's tokens.
void resolve_tokens(int32_t* tokens, const int32_t* sampled, int rows, cudaStream_t stream);

// RMSNorm of fp32 rows (a GEMM's fp32 output), bf16 out. Each value is read as the bf16 the reference's GEMM
// returns (rounded on load, dev::gemm_out4), then normalised in fp32 (model-spec §2 "RMSNorm"); without a weight
// (V4's per-head query norm) in the reference's bf16 ops instead (model-spec §3, the CPU's head_rms_norm_bf16).
// n % 4 == 0.
void rms_norm_f32(const float* x, const bf16* weight, bf16* y, int64_t rows, int n, float eps, cudaStream_t stream);

// Where rms_norm_f32_rope also writes the window KV cache row format of its result: rows [rows, n] (null: no
// cache row); channels [0, quantized) in FP8 e4m3 blocks of `block` (32 or 64) channels from channel 0, each with
// its scale 2^ceil(log2(max(amax, 1e-4) / 448)) (a last partial block its own), as bf16 values; the others as they
// are. V4 (kv_fake_quant): block 64 over the dim - rope_dim nope channels. V4.1 (mxfp8_window_fake_quant): block 32
// over all dim channels. format Fp8 / Mxfp8: the same codes and scales as packed records (layers/attention/
// kv_record.h; Fp8: V4's shape, n 512, block 64, 448 quantized channels, records of kvrec::kRowBytes; Mxfp8: V4.1's,
// n 512, block 32, all 512 quantized, records of kvrec41::kWindowRowBytes), rows then points at the records.
struct KvCacheRows {
  void* rows = nullptr;
  int block = 64;
  int quantized = 0;
  KvFormat format = KvFormat::Bf16;
};

// rms_norm_f32, then RoPE (cuda::rope, forward) of the last rope_dim channels of each row, in one launch: rows are
// attention heads of width n (token = row / heads, position positions[token]). With cache.rows set, also the window
// KV cache format of the result (KvCacheRows); y may then be null. Bitwise rms_norm_f32 -> rope (-> kv_fake_quant /
// mxfp8_window_fake_quant) (tests/gpu/test_norm_rope.cpp). The query heads (heads = H, weight null, no cache) and
// the KV row (heads = 1, kv_norm, the window pool's scratch rows) at decode.
void rms_norm_f32_rope(const float* x, const bf16* weight, bf16* y, int64_t rows, int n, float eps, int heads,
                       const int32_t* positions, const float* inv_freq, int rope_dim, KvCacheRows cache,
                       cudaStream_t stream);

// Whether the models call the fused attention steps (rms_norm_f32_rope, window_commit_derotate) instead of the
// chains they replace: DEEPINFER_FUSED_ATTENTION_STEPS=0 (read once) keeps the chains; default on (the same bits,
// tests/gpu/test_norm_rope.cpp, test_decode_fusion.cpp).
bool fused_attention_steps();
// Whether V4's mHC sites also expand the previous sublayer's output into the streams (hc_expand_site_pre) instead
// of a separate hc_expand: DEEPINFER_FUSED_MHC_EXPAND=0 (read once) keeps the separate launches; default on (the
// same bits, tests/gpu/test_mhc.cpp).
bool fused_mhc_expand();

// hc_expand(X, y, mix, ..., X) then hc_site_pre(X, ..., mix, ...) (cuda/kernels.h) in one launch below 64 tokens
// (the two calls from 64 on): the streams expanded with the previous site's coefficients (still in `mix`), then
// the next site on them, mix overwritten with its coefficients; X in place. Issue 4: the expansion after a
// sublayer was a launch of its own in front of the next site at decode. Bitwise the two calls
// (tests/gpu/test_mhc.cpp). Same workspace as hc_site_mix.
// y_parts (optional, set): y is the MoE's output before its combine (moe_forward's defer, layers/moe/moe_combine.h),
// left unwritten in the buffer y; the spread kernel sums the parts where it reads y (the same bits), other forms
// combine them into y first.
void hc_expand_site_pre(bf16* X, const bf16* y, int64_t tokens, int hc, int64_t hidden, const HcSite& site,
                        float norm_eps, float hc_eps, int sinkhorn_iters, const bf16* norm_weight, float* mix, bf16* u,
                        uint8_t* uq, float* us, int quant_block, void* workspace, cudaStream_t stream,
                        const MoeCombineParts* y_parts = nullptr);

// V4.1's site entry (model-spec §4: the collapse takes the previous site's pre, row `mix`): when y != nullptr first
// hc_expand(X, y, mix) in place, then u = rms_norm(hc_collapse(X, mix), norm_weight, norm_eps) and, when uq is set,
// fp8_quantize(u, quant_block) into uq / us; bitwise equal to that chain, in one launch. hidden <= 8192. y_parts
// (optional, with y): y is the MoE's output left uncombined (moe_forward's defer); the entry reads the combine of the
// parts where it reads y (the cluster form, mhc_site_tail.h), or combines them into y first: the same bits.
void hc_lagged_site_pre(bf16* X, const bf16* y, const float* mix, int64_t tokens, int hc, int64_t hidden,
                        const bf16* norm_weight, float norm_eps, bf16* u, uint8_t* uq, float* us, int quant_block,
                        cudaStream_t stream, const MoeCombineParts* y_parts = nullptr);

// The head's mHC collapse (model-spec §3 "Head"): pre_j = sigmoid((fn_j . x) * rsqrt(mean x^2 + eps) * scale
// + base_j) + hc_eps over the flattened streams x = X[r] [hc * hidden], then h[r] = sum_j pre_j X[r, j] (bf16).
// fn [hc, hc * hidden] fp32, base [hc], scale [1].
void hc_head_collapse(const bf16* X, int rows, int hc, int64_t hidden, const float* fn, const float* base,
                      const float* scale, float norm_eps, float hc_eps, bf16* h, cudaStream_t stream);

// The V4 KV cache row format (model-spec §3, v4_quantize_kv_row): the first dim - rope_dim channels FP8 e4m3
// with one power-of-two scale per 64 (a last partial block gets its own), the rope channels unchanged. The
// result is written as bf16 values (exact: e4m3 times a power of two) to dst [rows, dim], or with format Fp8 as
// packed records (layers/attention/kv_record.h: the same codes and scales; dim 512, rope_dim 64) to dst [rows].
void kv_fake_quant(const bf16* kv, int rows, int dim, int rope_dim, void* dst, cudaStream_t stream,
                   KvFormat format = KvFormat::Bf16);

// The window part of the attention's key list (model-spec §3 "Attention": the query at p reads positions
// max(0, p - window + 1) .. p). The window pool holds, per layer, a ring of `window` rows per slot
// (row slot * window + q % window holds position q) followed by one scratch row per step row (row
// slots_capacity * window + r holds the KV of step row r). Positions inside r's own chunk come from the
// scratch rows, older ones from the ring. out [rows, window] (-1 for positions before 0).
void window_rows(const int32_t* slots, const int32_t* positions, const int32_t* chunk_first, int rows, int window,
                 int slots_capacity, int32_t* out, cudaStream_t stream);

// After the layer's attention: the last `window` rows of every chunk move from the scratch rows into the ring. The
// pool's rows are bf16 [dim] or packed records (format Fp8 / Mxfp8, kv_row_bytes): a row is copied as it is.
void window_commit(void* pool, const int32_t* slots, const int32_t* positions, const int32_t* chunk_first,
                   const int32_t* chunk_rows, int rows, int window, int slots_capacity, int dim,
                   cudaStream_t stream, KvFormat format = KvFormat::Bf16);

// window_commit of `rows` rows and the attention output's de-rotation (rope(o, ..., inverse = true) of o_rows
// query rows of `heads` heads of width dim, token stride heads * dim, positions o_positions) in one launch: the
// attention core's two successors (model-spec §2: V = K carries RoPE). Bitwise the two calls.
void window_commit_derotate(void* pool, const int32_t* slots, const int32_t* positions, const int32_t* chunk_first,
                            const int32_t* chunk_rows, int rows, int window, int slots_capacity, int dim, bf16* o,
                            const int32_t* o_positions, int o_rows, int heads, int rope_dim, const float* inv_freq,
                            cudaStream_t stream, KvFormat format = KvFormat::Bf16);
// What every V4 / V4.1 layer runs after its attention core: window_commit_derotate, or with
// DEEPINFER_FUSED_ATTENTION_STEPS=0 (fused_attention_steps()) the two launches it replaces (window_commit, then
// rope(o, inverse) when o_rows > 0). The same bits either way.
void commit_window_and_derotate(void* pool, const int32_t* slots, const int32_t* positions, const int32_t* chunk_first,
                                const int32_t* chunk_rows, int rows, int window, int slots_capacity, int dim, bf16* o,
                                const int32_t* o_positions, int o_rows, int heads, int rope_dim,
                                const float* inv_freq, cudaStream_t stream, KvFormat format = KvFormat::Bf16);

// The attention core's epilogue as one argument (commit_window_and_derotate's): commit the step's `rows` window rows
// (window_commit) and de-rotate the attention output o (o_rows query rows of `heads` heads of width dim, positions
// o_positions; rope(o, inverse), model-spec §2: V = K carries RoPE).
struct AttentionEpilogue {
  void* pool = nullptr;
  const int32_t* slots = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* chunk_first = nullptr;
  const int32_t* chunk_rows = nullptr;
  int rows = 0, window = 0, slots_capacity = 0, dim = 0;
  bf16* o = nullptr;
  const int32_t* o_positions = nullptr;
  int o_rows = 0, heads = 0, rope_dim = 0;
  const float* inv_freq = nullptr;
  KvFormat format = KvFormat::Bf16;
};
void commit_window_and_derotate(const AttentionEpilogue& e, cudaStream_t stream);

// sink_attention_decode (kernels.h) into e.o, then its epilogue e. With merge_epilogue() (layers/attention/
// decode_fused.h; default on) the split + merge form runs the epilogue inside the merge launch (one
// launch fewer on the layer's chain, bench/gpu/NOTES.md "Attention epilogue in the merge"), where it applies: one
// step row per query row (e.rows == batch == e.o_rows, decode) and a RoPE span of whole thread quads; otherwise
// the two calls. The same bits either way.
void sink_attention_decode_committed(const bf16* q, int batch, const KvRows& window, const KvRows& compressed,
                                     const float* sink, float scale, void* workspace, const AttentionEpilogue& e,
                                     cudaStream_t stream);

// Every compressed entry visible to row r (entries 0 .. (positions[r] + 1) / ratio - 1, HCA layers read them
// all) as pool rows under the paging of compressor_gpu.h; -1 past the visible count. out [rows, stride].
void visible_entry_rows(const int32_t* slots, const int32_t* positions, int rows, int ratio, const int32_t* page_table,
                        int max_pages, int page_size, int stride, int32_t* out, cudaStream_t stream);

}  // namespace deepinfer::cuda
