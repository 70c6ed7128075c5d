// Host side of the MXFP4 decode stream on wgmma (cuda/stream_fp4_wgmma.cuh): the process-wide switch for callers
// that do not include CUDA headers (tests, benchmarks). On unless DEEPINFER_STREAM_FP4=f16 at start-up.
#pragma once

namespace deepinfer::cuda {

// Whether launch_stream runs the routed MXFP4 products (1..8 rows per group) on wgmma; the setter overrides the
// environment for the whole process (bench/gpu/NOTES.md "MXFP4 decode stream on wgmma").
bool stream_fp4_wgmma();
void set_stream_fp4_wgmma(bool on);

// Whether the wgmma form's consumers run software-pipelined across stages (consume_item_pipelined: the same bits;
// DEEPINFER_FP4_PIPELINE=1, off until measured); the setter overrides the environment for the whole process.
bool stream_fp4_pipeline();
void set_stream_fp4_pipeline(bool on);

}  // namespace deepinfer::cuda
