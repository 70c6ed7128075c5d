// Host side of the FP8 decode stream on wgmma (cuda/stream_fp8_wgmma.cuh): the process-wide switch for callers that
// do not include CUDA headers (tests, benchmarks). Off unless DEEPINFER_STREAM_FP8=wgmma at start-up.
#pragma once

namespace deepinfer::cuda {

// Whether launch_stream runs the dense FP8 products (1..8 rows per group) on wgmma; the setter overrides the
// environment for the whole process (bench/gpu/NOTES.md "FP8 decode stream on wgmma").
bool stream_fp8_wgmma();
void set_stream_fp8_wgmma(bool on);

}  // namespace deepinfer::cuda
