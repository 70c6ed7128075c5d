// fp8_gemm's process-wide kernel choice for 9..256 rows (declared in cuda/kernels.h; bench/gpu/NOTES.md
// "FP8 GEMMs at 9-256 rows (session 5, H9)").
#pragma once

namespace deepinfer::cuda {

// Which kernel fp8_gemm runs for a packed (fp8_pack) weight at 9..256 rows outside batch-invariant mode:
//  Old: v7 (packed_gemm_kernel) at 9..64 rows and the wgmma tile kernel above (GemmPath::Auto), the default.
//  New: the mid kernel (stream_gemm.cuh stream_mid_kernel: decode v8's weight stream, up to 64 rows per weight
//       tile; each row the same bits as v8 computes it in a group of <= 8 rows) for 9..256 rows whenever the path
//       is Auto or Skinny.
// DEEPINFER_FP8_GEMM_MID=new|old, read once; set_fp8_gemm_mid overrides it (tests, the roofline program).
// Like batch-invariant mode it is read at launch: graphs captured under one choice replay its kernels.
enum class Fp8GemmMid { Old, New };
Fp8GemmMid fp8_gemm_mid();
void set_fp8_gemm_mid(Fp8GemmMid mode);

}  // namespace deepinfer::cuda
