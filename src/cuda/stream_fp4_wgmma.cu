// The switch of cuda/stream_fp4_wgmma.cuh for host-only callers (cuda/stream_fp4_wgmma.h). The flag is a static of
// an inline function, one per program, so this translation unit sets the one every launch_stream reads.
#include "cuda/stream_fp4_wgmma.h"

#include "cuda/stream_gemm.cuh"

namespace deepinfer::cuda {

bool stream_fp4_wgmma() { return stream_gemm::fp4_wgmma(); }
void set_stream_fp4_wgmma(bool on) { stream_gemm::set_fp4_wgmma(on); }
int stream_fp4_early_start() { return stream_gemm::fp4_early_start(); }
void set_stream_fp4_early_start(int form) { stream_gemm::set_fp4_early_start(form); }
void set_stream_fp4_stamps(unsigned long long* stamps) { stream_gemm::fp4wg::stamp_target() = stamps; }
static_assert(kFp4StampSlots == stream_gemm::fp4wg::kStampSlots, "cuda/stream_fp4_wgmma.h's slot count");

}  // namespace deepinfer::cuda
