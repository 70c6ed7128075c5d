// Host API of the CUDA kernels (issue 4): plain functions over device pointers, enqueued on a stream, never
// synchronizing. Each kernel lives in a .cu file next to its CPU reference and is tested against it
// (tests/gpu/). Shapes follow the model's own names: `hidden`, `heads`, `experts`; the formats are the
// checkpoint's (model-spec.md §2, §5): bf16 activations, e4m3 FP8 with ue8m0 power-of-two block scales,
// MXFP4 experts (e2m1 pairs, even column in the low nibble, one e8m0 scale per 32 along K).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "layers/attention/kv_record.h"  // KvFormat

namespace deepinfer::cuda {

using bf16 = __nv_bfloat16;

// ---------------------------------------------------------------------------------------------------------
// RMSNorm (model-spec §2): y = w * x * rsqrt(mean(x^2) + eps) in fp32, rounded to bf16. `weight` may be null
// (V4's per-head q norm). x [rows, n], y [rows, n]; y may alias x.
void rms_norm(const bf16* x, const bf16* weight, bf16* y, int64_t rows, int n, float eps, cudaStream_t stream);
// rms_norm_f32 (cuda/step_kernels.h: the norm of an fp32 GEMM output) followed by fp8_quantize of its bf16 result
// with `block`, in one launch and bitwise equal to the two (V4's q_norm feeding wq_b and the indexer). y (the bf16
// values) may be null when only the codes q [rows, n] and scales [rows, n / block] are wanted.
void rms_norm_f32_quantize(const float* x, const bf16* weight, bf16* y, uint8_t* q, float* scales, int64_t rows,
                           int n, float eps, int block, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// Partial interleaved RoPE (model-spec §2), in place: for token t and head h, the channel pairs
// (2i, 2i+1) of the last `rope_dim` channels of x[t * token_stride + h * head_dim ...] rotate by
// positions[t] * inv_freq[i]. inv_freq [rope_dim / 2] holds the layer's frequencies (plain, or YaRN-scaled on
// compressed layers: Rope::inv_freq()). inverse = true rotates by the conjugate (output de-rotation).
void rope(bf16* x, int64_t token_stride, const int32_t* positions, const float* inv_freq, int64_t tokens, int heads,
          int head_dim, int rope_dim, bool inverse, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// FP8 activation quantization for W8A8 (model-spec §2): per block of `block` (128 on V4, 32 on V4.1) values
// along K, scale = 2^ceil(log2(max(amax, 1e-4) / 448)), q = e4m3(x / scale) with round-to-nearest-even and
// saturation. x [rows, k] bf16 -> q [rows, k] e4m3 bytes, scales [rows, k / block] fp32 (exact powers of two).
// k must be a multiple of `block`, `block` a power of two in [8, 256].
void fp8_quantize(const bf16* x, uint8_t* q, float* scales, int64_t rows, int k, int block, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// Which decode kernel reads the packed weights (Fp8Linear::packed, Fp4Experts::packed_*), bench/gpu/NOTES.md:
// `Registers` is v7 (cuda/packed_gemm.cuh: weights through registers, any rows per group); `Stream` is v8
// (cuda/stream_gemm.cuh: bulk asynchronous copies into a shared-memory ring, persistent blocks) for groups of at
// most 8 rows, falling back to v7 above that. `Auto` is v7 until the H200 run confirms v8; the environment
// variable DEEPINFER_DECODE_KERNEL=stream|registers overrides `Auto` process-wide (A/B without a rebuild).
enum class DecodeKernel { Auto, Registers, Stream };

// W8A8 block-scaled GEMM: y[m, n] = sum_k (q[m, k] * xs[m, k / B]) * (w[n, k] * ws[n / B, k / B]), fp32
// accumulation with the scales applied per 32-wide K step (exact: the scales are powers of two).
struct Fp8Linear {
  const uint8_t* weight = nullptr;  // [n, k] e4m3
  const uint8_t* scale = nullptr;   // [ceil(n / block), ceil(k / block)] e8m0
  int64_t n = 0, k = 0;
  int block = 128;                  // weight and activation block: 128 (V4) or 32 (V4.1)
  // Optional load-time copy of `weight` in the decode kernel's fragment order (fp8_pack). When set, the decode
  // (Skinny) path streams it instead of `weight`: every thread issues 16-byte loads and each warp reads 512
  // contiguous bytes per load. `weight` / `scale` stay the checkpoint's layout (the prefill path and the tests
  // read them).
  const uint8_t* packed = nullptr;
  DecodeKernel decode = DecodeKernel::Auto;  // which kernel streams `packed` (decode paths only)
};

// Fragment-ordered FP8 weights: [ceil(n / 16) row tiles][k / 32 steps][32 lanes][16 bytes]; lane (g, c) holds
// columns 8c .. 8c + 7 of the step for rows 16t + g (bytes 0-7) and 16t + g + 8 (bytes 8-15); rows past n are
// zero codes. The e8m0 scales are used as they are.
size_t fp8_packed_bytes(int64_t n, int64_t k);
void fp8_pack(const Fp8Linear& w, uint8_t* packed, cudaStream_t stream);

enum class OutType { BF16, F32 };

// The grid of one decode stream launch (stream_gemm.cuh stream_gemm_kernel) where a caller wants SM room left beside
// it: the kernel is persistent (up to two blocks per SM that live for the whole weight stream), so a small kernel on
// another stream of the step waits for a block to end (run 111's trace: the compressor branch's add_ape_kernel 8.4 us
// behind wq_b on the query branch; bench/gpu/NOTES.md "Session 19"). The default (both 0) is launch_stream's own
// grid. blocks_per_sm > 0: at most that many blocks per SM; spare_sms > 0: one block fewer than that on as many SMs
// (the grid is SMs x blocks per SM - spare_sms). Only the grid changes, not the stages, the chunks or the kernel: each
// work item is one 16-row tile over all of k in one block, so the output bits do not depend on the grid
// (GpuFp8Gemm.StreamGridCapBitwise).
struct StreamGrid {
  int blocks_per_sm = 0;
  int spare_sms = 0;
  bool capped() const { return blocks_per_sm > 0 || spare_sms > 0; }
};

// A second stream for an independent branch of a layer (the shared expert beside the routed ones, the KV row
// beside the query): the branch starts after the main stream's work so far (fork) and the main stream waits for
// it before its results are read (join). Both are plain event edges, so graph capture turns them into parallel
// branches. `grid`: the grid of the decode stream GEMVs launched on the branch (the MoE's shared expert beside the
// routing; {}: their own), so that the main stream's latency kernels find SM room beside them.
struct SideStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  StreamGrid grid;
};

// Which kernel runs: `Skinny` streams the weight once through mma.sync with the tokens as the narrow side (the
// decode path, any m but meant for m <= 64); `Wgmma` is the Hopper tensor-core tile kernel for prefill; `Auto`
// picks by m.
enum class GemmPath { Auto, Skinny, Wgmma };

// q [m, k] e4m3 and xs [m, k / block] from fp8_quantize with the weight's block. k % 128 == 0; n % 2 == 0.
void fp8_gemm(const uint8_t* q, const float* xs, int64_t m, const Fp8Linear& w, void* y, OutType out_type,
              cudaStream_t stream, GemmPath path = GemmPath::Auto);
// fp8_quantize(x, w.block) into q / xs ([m, k] e4m3, [m, k / block]), then fp8_gemm (Auto). Where fp8_gemm takes
// decode v8's stream kernel (packed weights) and m <= fp8_quant_prologue_rows() (layers/quant/fp8_gemm.h), that kernel
// quantizes x in its prologue instead: one launch, the same bits, q / xs not written.
void fp8_gemm_bf16(const bf16* x, int64_t m, const Fp8Linear& w, void* y, OutType out_type, uint8_t* q, float* xs,
                   cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// Which grouped MXFP4 prefill kernel runs (mxfp4_grouped_gemm_prefill, bench/gpu/NOTES.md): `Bf16` is v1 (bf16
// operands, one block per (n tile, group, row tile); reads the checkpoint layout `weight` / `scale`), the kernel that
// runs wherever the packed kernels do not (no packed experts, or a call they do not take, e.g. an activation block
// other than 128 / 32). The others read the packed experts `packed_weight` / `packed_scale` of mxfp4_pack and give
// the same bits as v3: `Fp8Swapped` is v3 (weights as wgmma's M side expanded in registers, tokens as N), the
// reference and the last fallback of the others. `Fp8SwappedV5` is v5: v3's items and numerics with every stage
// byte (nibbles, tokens, token scales) brought by TMA / bulk copies from one producer thread and a lean consumer path
// for clean items; v3 runs where its token-scale map does not apply (k / act_block % 4 != 0). `Auto` is v8 where the
// packed experts exist (since session 9; run 57: x1.20 / x1.11 of v5 on V4 w13 / w2 at 4096 tokens, x1.00 on V4.1),
// on groups wider than v8's (> 112 rows on average) v9 at activation block 32 and v13 at 128; where those do not
// apply v5, then v3; else v1. DEEPINFER_PREFILL_KERNEL=swapped|v5|v8|v9|v13 overrides `Auto` process-wide (any other
// value: v1). The removed variants (v2 `Fp8`, the NoExpand probe, v4's clusters, v6, v7, v9-halves) are recorded in
// bench/gpu/NOTES.md.
enum class PrefillKernel {
  Auto,
  Bf16,
  Fp8Swapped,
  Fp8SwappedV5,
  Fp8SwappedV8,  // v7 (v5 with three consumer warpgroups) with per-warpgroup weight barriers, one TMA box per stage
                 // piece, bitwise v5 (NOTES "v8"); env v8
  Fp8SwappedV9,  // v8's pieces, 128-row x <= 192-token items for wide groups, bitwise v3 (NOTES "v9 (wide groups)"); v9
  Fp8SwappedV13  // v9 with a lean epilogue on clean items (NOTES "prefill v13"), bitwise v9; act block 32: v9; env v13
};

// MXFP4 routed experts (model-spec §3 "MoE", §5): a grouped GEMM over the experts a batch touches. The token
// rows are gathered by expert: group g multiplies expert expert_ids[g] with the rows
// [row_offsets[g], row_offsets[g + 1]) of q (FP8-quantized activations, model-spec §2) into the same rows of y.
struct Fp4Experts {
  const uint8_t* weight = nullptr;  // [experts, n, k / 2]: two e2m1 per byte, even column in the low nibble
  const uint8_t* scale = nullptr;   // [experts, n, k / 32] e8m0
  int experts = 0;
  int64_t n = 0, k = 0;
  // Optional load-time repack for decode (mxfp4_pack); when both are set the decode kernel streams them.
  const uint8_t* packed_weight = nullptr;
  const uint8_t* packed_scale = nullptr;
  DecodeKernel decode = DecodeKernel::Auto;  // which kernel streams the packed copy (mxfp4_grouped_gemm)
  PrefillKernel prefill = PrefillKernel::Auto;  // which kernel mxfp4_grouped_gemm_prefill runs
  // The decode wgmma stream's leftover items (64-row items that do not divide evenly over its blocks) on the first
  // blocks instead of spread over the grid: a per-model choice, since it is measured per model (cuda/stream_fp4_wgmma.h
  // Fp4Items). Which block takes an item changes no bit.
  bool front_items = false;
};

// Fragment-ordered MXFP4 experts, per expert:
//  weights [ceil(n / 16) row tiles][k / 64 step pairs][32 lanes][16 bytes]: lane (g, c) holds the 4 bytes of
//    columns 8c .. 8c + 7 of step 2p for row g, then row g + 8, then the same two for step 2p + 1;
//  scales  [ceil(n / 16) row tiles][ceil(k / 256) groups of 8 steps][8][16 bytes]: entry g holds the e8m0
//    scales of the group's 8 steps for row g (bytes 0-7) and row g + 8 (bytes 8-15).
// Rows past n are zero codes; scale slots past k / 32 or n hold 2^0.
size_t mxfp4_packed_weight_bytes(int experts, int64_t n, int64_t k);
size_t mxfp4_packed_scale_bytes(int experts, int64_t n, int64_t k);
void mxfp4_pack(const Fp4Experts& w, uint8_t* packed_weight, uint8_t* packed_scale, cudaStream_t stream);

// q [rows, k] e4m3 with xs [rows, k / act_block]; y [rows, n] fp32. `max_rows_per_group` is a host-side bound
// that picks how many tokens share one pass over an expert's weights. k % 128 == 0. With `row_index` [rows], row r
// of the product reads row row_index[r] of q / xs (a gather without a copy: the MoE reads x's FP8 rows in expert
// order); y stays in the product's row order. pdl: launched with programmatic dependent launch behind the stream's
// previous kernel (the decode stream kernels wait for it before reading anything; moe_gpu.h moe_routed_pdl_rows).
void mxfp4_grouped_gemm(const uint8_t* q, const float* xs, int act_block, const Fp4Experts& w,
                        const int32_t* expert_ids, const int32_t* row_offsets, int groups, int max_rows_per_group,
                        float* y, cudaStream_t stream, const int32_t* row_index = nullptr, bool pdl = false);

// The MoE's W2 input (model-spec §3 "MoE", §2): a = silu(min(g, limit)) * clamp(u, +-limit) * row_weight[r] from
// h [rows, 2 inter] fp32 (W1's inter outputs, then W3's; limit <= 0: no clamp; row_weight null: weight 1),
// quantized from fp32 to e4m3 per `block` (32 / 64 / 128 / 256) values: q [rows, inter], scales [rows, inter / block].
// h in bf16 (the prefill kernel's y_type BF16): the same bits as h in fp32 rounded to bf16 (the SwiGLU rounds g and
// u to bf16 on entry, as the reference's GEMMs return them).
void moe_swiglu_quant(const float* h, const float* row_weight, int64_t rows, int64_t inter, int block, float limit,
                      uint8_t* q, float* scales, cudaStream_t stream);
void moe_swiglu_quant(const bf16* h, const float* row_weight, int64_t rows, int64_t inter, int block, float limit,
                      uint8_t* q, float* scales, cudaStream_t stream);

// W2 with moe_swiglu_quant fused into its activation load: the same bits as moe_swiglu_quant followed by
// mxfp4_grouped_gemm (k = inter, h and row_weight in the product's row order). Only decode v8 has the fused form:
// returns false, launching nothing, unless the experts are packed for DecodeKernel::Stream and every group has
// <= 8 rows (the caller then runs the two steps). y must not overlap h: some blocks still read h while others write.
bool mxfp4_grouped_gemm_swiglu(const float* h, const float* row_weight, float swiglu_limit, int act_block,
                               const Fp4Experts& w, const int32_t* expert_ids, const int32_t* row_offsets, int groups,
                               int max_rows_per_group, float* y, cudaStream_t stream);

// Prefill form of the same grouped product (many tokens per expert): the activations are expanded once to
// bf16 (q * xs, exact) into `workspace`, each expert's e2m1 codes times their e8m0 scales are expanded to bf16
// (exact) in shared memory, and wgmma multiplies them with fp32 accumulation over the whole K (no per-block
// promotion: every scale is already inside the bf16 operands). Reads the checkpoint layout (`weight`, `scale`).
// max_rows_per_group bounds the row tiles launched per group. k % 128 == 0, n % 128 == 0. y [rows, n] in y_type: fp32,
// or each fp32 product rounded to bf16 (half the bytes stored; the MoE's prefill path, whose readers round to bf16).
// v3 (PrefillKernel::Fp8Swapped) reads the packed copy instead and needs only it (weight / scale may be null).
size_t mxfp4_prefill_workspace_bytes(int64_t rows, int64_t k);
// True when the prefill call on `w` would take v3 over its packed copy, so experts kept only in the decode layout
// (the GPU model's) can run the prefill kernel.
bool mxfp4_prefill_reads_packed(const Fp4Experts& w);
void mxfp4_grouped_gemm_prefill(const uint8_t* q, const float* xs, int64_t rows, int act_block, const Fp4Experts& w,
                                const int32_t* expert_ids, const int32_t* row_offsets, int groups,
                                int max_rows_per_group, void* y, OutType y_type, void* workspace,
                                cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// Sink attention for decode (model-spec §3 "Attention"): one query per sequence, 64 heads of 512, over the
// rows of a shared K=V latent pool named by index lists: the window rows and the selected compressed rows.
// Every head's softmax has the sink in its denominator: out = sum_s exp(s - M) v_s / (sum_s exp(s - M) +
// exp(sink_h - M)).
// The pool is bf16 [pool_rows, 512] (KvFormat::Bf16) or packed records (layers/attention/kv_record.h), decoded on
// load into the same bf16 values (the same output bits): V4's FP8 records in both segments, or V4.1's MXFP8 window
// records with FP4 compressed records.
struct KvRows {
  const void* pool = nullptr;       // [pool_rows] latent rows (keys = values)
  const int32_t* rows = nullptr;    // [batch, stride] pool row per slot; -1 = empty slot
  int stride = 0;                   // slots per sequence (0: the segment is absent)
  KvFormat format = KvFormat::Bf16;
};

constexpr int kAttnHeads = 64;
constexpr int kAttnDim = 512;

size_t sink_attention_workspace_bytes(int batch, int window_stride, int compressed_stride);

// q [batch, 64, 512] bf16 (already RoPE'd), sink [64] fp32 (natural-log units), out [batch, 64, 512] bf16.
// `workspace` holds the split-K partial results (sink_attention_workspace_bytes).
void sink_attention_decode(const bf16* q, int batch, const KvRows& window, const KvRows& compressed, const float* sink,
                           float scale, bf16* out, void* workspace, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// mHC site (model-spec §3 "mHC site"). X [tokens, hc, hidden] bf16 residual streams.
// hc_site_mix writes mix [tokens, (2 + hc) * hc] fp32 = pre (hc) | post (hc) | comb (hc * hc, comb[j * hc + k]
// = weight of input stream j in output stream k), after the Sinkhorn normalisation.
struct HcSite {
  const float* fn = nullptr;     // [(2 + hc) * hc, hc * hidden]
  const float* base = nullptr;   // [(2 + hc) * hc]
  const float* scale = nullptr;  // [3]
};
// The workspace (partial sums and per-token arrival counters) is zero-filled once before its first use; the
// kernels leave its counters at zero, so one workspace serves every later call (and graph replay) on a stream.
size_t hc_site_mix_workspace_bytes(int64_t tokens, int hc, int64_t hidden);
void hc_site_mix(const bf16* X, int64_t tokens, int hc, int64_t hidden, const HcSite& site, float norm_eps,
                 float hc_eps, int sinkhorn_iters, float* mix, void* workspace, cudaStream_t stream);
// A site's whole pre-sublayer half: hc_site_mix, then u = rms_norm(hc_collapse(X, pre), norm_weight, norm_eps)
// [tokens, hidden] bf16 and, when uq is set, fp8_quantize(u, quant_block) into uq / us; bitwise equal to that chain
// of four launches, and one launch below 64 tokens (the chain itself from 64 on). hidden <= 8192. Same
// workspace as hc_site_mix.
void hc_site_pre(const bf16* X, int64_t tokens, int hc, int64_t hidden, const HcSite& site, float norm_eps,
                 float hc_eps, int sinkhorn_iters, const bf16* norm_weight, float* mix, bf16* u, uint8_t* uq,
                 float* us, int quant_block, void* workspace, cudaStream_t stream);
// u[t] = sum_j pre[t, j] * X[t, j] (bf16 out); `mix` rows have stride (2 + hc) * hc, pre first.
void hc_collapse(const bf16* X, const float* mix, int64_t tokens, int hc, int64_t hidden, bf16* u,
                 cudaStream_t stream);
// X_out[t, k] = post[t, k] * y[t] + sum_j comb[t, j, k] * X[t, j]; X_out may alias X.
void hc_expand(const bf16* X, const bf16* y, const float* mix, int64_t tokens, int hc, int64_t hidden, bf16* X_out,
               cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// Router (model-spec §3 "MoE", §4): s = sqrt(softplus(logit / temp)); top_k by s + bias (bias may be null,
// ties to the lower expert id); w = s / (sum s + eps) * route_scale when `normalize`, else s * route_scale.
// logits [tokens, experts] fp32 -> expert ids and weights [tokens, top_k]. experts <= 1024, top_k <= 16.
void route_topk(const float* logits, const float* bias, int64_t tokens, int experts, int top_k, float temp,
                bool normalize, float eps, float route_scale, int32_t* expert_ids, float* weights,
                cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------------
// Structured output on the device (issue 6): row rows[i] of logits [*, vocab] keeps token v only where bit v of its
// mask (words [i * mask_words ..], bit v % 32 of word v / 32) is set and v < mask_vocab; every other logit
// becomes -inf. The host sampler's apply_token_mask on the same words gives the same logits.
void apply_token_bitmask(float* logits, int64_t vocab, const int32_t* rows, int count, const uint32_t* masks,
                         int64_t mask_words, int64_t mask_vocab, cudaStream_t stream);

// Greedy sampling: out[r] = argmax over logits[r, 0 .. vocab), the lowest index among equal maxima (torch).
void argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* out, cudaStream_t stream);

// Seeded sampling on the device (sampling_params.h step 3, without penalties, logprobs or a grammar): the token of
// logits row `row` drawn from softmax(logits / temperature) truncated by top-k (ties: the lower ids), then top-p
// on the top-k mass, then min-p, with the host sampler's uniform runtime::uniform_at(seed, position) (Philox4x64-10,
// bitwise the same u). The distribution is computed in fp32 with the weights summed as exact fixed-point integers,
// so the token is a pure function of the row and its parameters (batch-invariant, any launch order); it differs
// from the host sampler's double-precision, token-order sums only where the draw falls on a near-tie.
struct SampleRow {
  int32_t row = 0;           // logits row
  float temperature = 1.0f;  // > 0
  int32_t top_k = 0;         // <= 0 or >= vocab: off
  float top_p = 1.0f;        // in (0, 1]
  float min_p = 0.0f;        // in [0, 1]
  uint64_t seed = 0;
  uint64_t position = 0;
};
void sample_rows(const float* logits, int64_t vocab, const SampleRow* rows, int count, int32_t* tokens,
                 cudaStream_t stream);

// Makes tokens[i] the arg-max of logits row rows[i].row for argmax_rows (which ranks NaN first, the lowest index among
// NaNs): the row's other NaNs become -inf and the token's logit NaN. The asynchronous step samples with
// sample_rows, then takes every row's token with argmax_rows into the buffer the next step resolves from.
void mark_sampled_tokens(float* logits, int64_t vocab, const SampleRow* rows, const int32_t* tokens, int count,
                         cudaStream_t stream);

}  // namespace deepinfer::cuda
