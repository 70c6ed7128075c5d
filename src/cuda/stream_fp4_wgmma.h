// Host side of the MXFP4 decode stream on wgmma (cuda/stream_fp4_wgmma.cuh): the process-wide switch for callers
// that do not include CUDA headers (tests, benchmarks). On unless DEEPINFER_STREAM_FP4=f16 at start-up.
#pragma once

namespace deepinfer::cuda {

// Whether launch_stream runs the routed MXFP4 products (1..8 rows per group) on wgmma; the setter overrides the
// environment for the whole process (bench/gpu/NOTES.md "MXFP4 decode stream on wgmma").
bool stream_fp4_wgmma();
void set_stream_fp4_wgmma(bool on);
// The ring's depth cap of that form (0 = as many stages as fit, up to 12; DEEPINFER_STREAM_FP4_STAGES=N, read once;
// bench/gpu/NOTES.md "MXFP4 decode stream: ring depth"); the setter overrides it for the whole process.
int stream_fp4_stage_cap();
void set_stream_fp4_stage_cap(int stages);

}  // namespace deepinfer::cuda
