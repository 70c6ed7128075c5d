// The switch of cuda/stream_fp8_wgmma.cuh for host-only callers (cuda/stream_fp8_wgmma.h). The flag is a static of
// an inline function, one per program, so this translation unit sets the one every launch_stream reads.
#include "cuda/stream_fp8_wgmma.h"

#include "cuda/stream_gemm.cuh"

namespace deepinfer::cuda {

bool stream_fp8_wgmma() { return stream_gemm::fp8_wgmma(); }
void set_stream_fp8_wgmma(bool on) { stream_gemm::set_fp8_wgmma(on); }

}  // namespace deepinfer::cuda
