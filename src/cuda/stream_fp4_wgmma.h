// Host side of the MXFP4 decode stream on wgmma (cuda/stream_fp4_wgmma.cuh): the process-wide switch for callers
// that do not include CUDA headers (tests, benchmarks). On unless DEEPINFER_STREAM_FP4=f16 at start-up.
#pragma once

namespace deepinfer::cuda {

// Whether launch_stream runs the routed MXFP4 products (1..8 rows per group) on wgmma; the setter overrides the
// environment for the whole process (bench/gpu/NOTES.md "MXFP4 decode stream on wgmma").
bool stream_fp4_wgmma();
void set_stream_fp4_wgmma(bool on);

// The wgmma stream's early start (DEEPINFER_FP4_EARLY_START, cuda/stream_fp4_wgmma.cuh "The early start"): 0 (the
// default) off; 1 the first group's activations prefetched before the producer's first copy; 2 that and the first
// stage alone first; 3 that and at most 2 stages in flight per block. The same output bits in every form; the setter
// overrides the environment for the whole process and throws outside 0..3.
int stream_fp4_early_start();
void set_stream_fp4_early_start(int form);

// Phase stamps of the next launches (a diagnostic, roofline --fp4-phases; cuda/stream_fp4_wgmma.cuh StampSlot): each
// block writes kFp4StampSlots values at stamps + block x kFp4StampSlots (one block per SM); null (the default): off,
// the default kernel runs.
constexpr int kFp4StampSlots = 16;
void set_stream_fp4_stamps(unsigned long long* stamps);

}  // namespace deepinfer::cuda
