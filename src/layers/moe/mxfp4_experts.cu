// MXFP4 routed experts on the GPU (model-spec §3 "MoE", §5 expert layout), the CUDA side of swiglu_expert.cpp's
// W1 / W3 / W2 products: a grouped GEMM over the experts the batch touches, each group being one expert and the
// token rows routed to it. Decode sends a few tokens per expert, so this is the skinny kernel of
// cuda/skinny_gemm.cuh: the e2m1 codes are widened to e4m3 in registers (exact: every e2m1 value is an e4m3
// value, algorithms.md §3.5 "W4A8"), multiplied with the FP8 activations on the tensor cores, and each 32-wide
// K step is scaled by its e8m0 weight scale and the activation block scale before it joins the fp32 sum.
#include "cuda/check.h"
#include "cuda/kernels.h"
#include "cuda/packed_gemm.cuh"
#include "cuda/skinny_gemm.cuh"
#include "cuda/stream_gemm.cuh"
#include "layers/moe/moe_gpu.h"

namespace deepinfer::cuda {

namespace {

void check_shapes(const char* where, int act_block, const Fp4Experts& w, const int32_t* expert_ids,
                  const int32_t* row_offsets) {
  const std::string f = std::string("cuda::") + where + ": ";
  DI_CHECK(w.k % 128 == 0, f + "k = " + std::to_string(w.k) + " is not a multiple of 128");
  DI_CHECK(act_block >= 32 && act_block % 32 == 0 && w.k % act_block == 0,
           f + "activation block " + std::to_string(act_block) + " must be a multiple of 32 dividing k");
  DI_CHECK((act_block & (act_block - 1)) == 0, f + "activation block " + std::to_string(act_block) +
                                                   " is not a power of two");
  DI_CHECK(expert_ids && row_offsets, f + "expert ids and row offsets are required");
  DI_CHECK(w.n < (int64_t(1) << 31) && w.k < (int64_t(1) << 31), f + "n or k too large");
}

// The fused SwiGLU prologue's bound: one warp finds an activation block's amax.
void check_swiglu_block(const char* where, int act_block) {
  DI_CHECK(act_block <= 256, std::string("cuda::") + where + ": activation block " + std::to_string(act_block) +
                                 " above 256 (one warp per block amax)");
}

// Whether the experts run on the decode stream (decode v8 and its wgmma form): packed, and the stream chosen.
bool on_decode_stream(const Fp4Experts& w) {
  return w.packed_weight && w.packed_scale && stream_gemm::wants_stream(w.decode);
}

stream_gemm::SwigluInput swiglu_input(const float* h, const float* row_weight, float swiglu_limit) {
  stream_gemm::SwigluInput sw;
  sw.h = h;
  sw.row_weight = row_weight;
  sw.limit = swiglu_limit;
  return sw;
}

}  // namespace

void mxfp4_grouped_gemm(const uint8_t* q, const float* xs, int act_block, const Fp4Experts& w,
                        const int32_t* expert_ids, const int32_t* row_offsets, int groups, int max_rows_per_group,
                        float* y, cudaStream_t stream, const int32_t* row_index, bool pdl) {
  check_shapes("mxfp4_grouped_gemm", act_block, w, expert_ids, row_offsets);
  if (groups == 0 || max_rows_per_group == 0) return;
  const packed::Args pa =
      stream_gemm::mxfp4_expert_args(q, xs, act_block, w, expert_ids, row_offsets, y, row_index);
  if (w.packed_weight && w.packed_scale) {  // decode v5: fragment-ordered weights (cuda/packed_gemm.cuh)
    // Decode v8 (cuda/stream_gemm.cuh) when asked for and every group has <= 8 rows; v7 otherwise.
    if (stream_gemm::wants_stream(w.decode) &&
        stream_gemm::launch_stream<skinny::WeightFormat::MXFP4, float>(pa, groups, max_rows_per_group, stream, {},
                                                                       pdl)) {
      DI_CUDA_CHECK_LAUNCH("stream_gemm_kernel<MXFP4>");
      return;
    }
    packed::launch_packed<skinny::WeightFormat::MXFP4, float>(pa, groups, max_rows_per_group, stream);
    DI_CUDA_CHECK_LAUNCH("packed_gemm_kernel<MXFP4>");
    return;
  }
  skinny::launch_skinny<skinny::WeightFormat::MXFP4, float>(pa.base, groups, max_rows_per_group, stream);
  DI_CUDA_CHECK_LAUNCH("skinny_gemm_kernel<MXFP4>");
}

bool mxfp4_grouped_gemm_swiglu(const float* h, const float* row_weight, float swiglu_limit, int act_block,
                               const Fp4Experts& w, const int32_t* expert_ids, const int32_t* row_offsets, int groups,
                               int max_rows_per_group, float* y, cudaStream_t stream) {
  check_shapes("mxfp4_grouped_gemm_swiglu", act_block, w, expert_ids, row_offsets);
  DI_CHECK(h, "cuda::mxfp4_grouped_gemm_swiglu: h is required");
  check_swiglu_block("mxfp4_grouped_gemm_swiglu", act_block);
  if (!on_decode_stream(w)) return false;
  if (max_rows_per_group < 1 || max_rows_per_group > stream_gemm::kMaxRows) return false;
  if (groups == 0) return true;
  const packed::Args pa =
      stream_gemm::mxfp4_expert_args(nullptr, nullptr, act_block, w, expert_ids, row_offsets, y, nullptr);
  if (!stream_gemm::launch_stream<skinny::WeightFormat::MXFP4, float>(pa, groups, max_rows_per_group, stream,
                                                                      swiglu_input(h, row_weight, swiglu_limit)))
    return false;
  DI_CUDA_CHECK_LAUNCH("stream_gemm_kernel<MXFP4> (SwiGLU prologue)");
  return true;
}

bool mxfp4_grouped_gemm_chain(const uint8_t* q, const float* xs, int act_block, const Fp4Experts& w13,
                              const Fp4Experts& w2, const int32_t* expert_ids, const int32_t* row_offsets, int groups,
                              int max_rows_per_group, const int32_t* row_index, float* h, const float* row_weight,
                              float swiglu_limit, float* y, uint32_t* ready, cudaStream_t stream, bool pdl) {
  check_shapes("mxfp4_grouped_gemm_chain", act_block, w13, expert_ids, row_offsets);
  check_shapes("mxfp4_grouped_gemm_chain", act_block, w2, expert_ids, row_offsets);
  DI_CHECK(h && y && ready, "cuda::mxfp4_grouped_gemm_chain: h, y and the ready words are required");
  DI_CHECK(w13.n == 2 * w2.k && w2.n == w13.k, "cuda::mxfp4_grouped_gemm_chain: w1|w3 [" + std::to_string(w13.n) +
                                                   " x " + std::to_string(w13.k) + "] and w2 [" +
                                                   std::to_string(w2.n) + " x " + std::to_string(w2.k) +
                                                   "] are not one expert's products");
  check_swiglu_block("mxfp4_grouped_gemm_chain", act_block);
  if (!on_decode_stream(w13) || !on_decode_stream(w2)) return false;
  if (max_rows_per_group < 1 || max_rows_per_group > stream_gemm::kMaxRows) return false;
  if (groups == 0) return true;
  const packed::Args a13 =
      stream_gemm::mxfp4_expert_args(q, xs, act_block, w13, expert_ids, row_offsets, h, row_index);
  const packed::Args a2 =
      stream_gemm::mxfp4_expert_args(nullptr, nullptr, act_block, w2, expert_ids, row_offsets, y, nullptr);
  if (!stream_gemm::launch_fp4_wgmma_chain<float>(a13, a2, swiglu_input(h, row_weight, swiglu_limit), groups,
                                                  max_rows_per_group, ready, stream, pdl))
    return false;
  DI_CUDA_CHECK_LAUNCH("fp4_wgmma_chain_kernel");
  return true;
}

bool fp4_perm_widen() { return stream_gemm::fp4_perm_widen(); }
void set_fp4_perm_widen(bool on) { stream_gemm::set_fp4_perm_widen(on); }

}  // namespace deepinfer::cuda
