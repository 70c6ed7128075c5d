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
  DI_CHECK(act_block <= 256, "cuda::mxfp4_grouped_gemm_swiglu: activation block " + std::to_string(act_block) +
                                 " above 256 (one warp per block amax)");
  if (!(w.packed_weight && w.packed_scale && stream_gemm::wants_stream(w.decode))) return false;
  if (max_rows_per_group < 1 || max_rows_per_group > stream_gemm::kMaxRows) return false;
  if (groups == 0) return true;
  const packed::Args pa =
      stream_gemm::mxfp4_expert_args(nullptr, nullptr, act_block, w, expert_ids, row_offsets, y, nullptr);
  stream_gemm::SwigluInput sw;
  sw.h = h;
  sw.row_weight = row_weight;
  sw.limit = swiglu_limit;
  if (!stream_gemm::launch_stream<skinny::WeightFormat::MXFP4, float>(pa, groups, max_rows_per_group, stream, sw))
    return false;
  DI_CUDA_CHECK_LAUNCH("stream_gemm_kernel<MXFP4> (SwiGLU prologue)");
  return true;
}

bool fp4_perm_widen() { return stream_gemm::fp4_perm_widen(); }
void set_fp4_perm_widen(bool on) { stream_gemm::set_fp4_perm_widen(on); }

}  // namespace deepinfer::cuda
