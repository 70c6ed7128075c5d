#!/usr/bin/env bash
# Session 45, fourth call: the defaults after runs 224-226 (the MXFP4 stream's halves overlapped on by default; the
# prefill act-32 halves / slots forms, the four-warpgroup consumer and the late shared w2 deleted), checked and timed:
#  1. the kernel tests of the changed code (GpuMoePrefillGemm.*: the prefill kernels back at 377e06d's code;
#     GpuStreamFp4Wgmma.*) and the model tests (the overlap and routed-PDL on / off steps, both forwards).
#  2. ENV A/B on both models: the new default (base), the halves in turn (DEEPINFER_FP4_HALF_OVERLAP=0, the old
#     default) and DEEPINFER_MOE_ROUTED_PDL=1 (run 225: batch 1 +1.7-2.2 %, V4.1 batch 8 -3 %, V4 batch 8 +0.6 %).
#  3. batch-8 timelines of both models with the routed PDL off and on: where V4.1's batch-8 step gains.
#   usage (GPU machine, repo root; .gpubin: test_gpu, test_gpu_model, v4_decode of this commit):
#     bash tools/gpu/calls/session45_call1.sh (~4-5 min)
set -uo pipefail
export SKIP_SUITES=1
N=DEEPINFER_FP4_HALF_OVERLAP=0 R=DEEPINFER_MOE_ROUTED_PDL=1
export EXTRA_GPU0="tests_kernels|\$b/test_gpu --gtest_filter='GpuMoePrefillGemm.*:GpuStreamFp4Wgmma.*';
tests_model|\$b/test_gpu_model --gtest_filter='GpuFp4HalfOverlap.*:GpuMoeRoutedPdl.*:V4GpuForward.*:V41GpuForward.*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: novl:$N rpdl:$R' 2;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: novl:$N rpdl:$R' 2 --family v41;
trace_b8_v41|OUT=\$OUT/trace_b8_v41 bash tools/gpu/trace_decode.sh 8 10 --family v41;
trace_b8_v41_rpdl|$R OUT=\$OUT/trace_b8_v41_rpdl bash tools/gpu/trace_decode.sh 8 10 --family v41;
trace_b8_v4|OUT=\$OUT/trace_b8_v4 bash tools/gpu/trace_decode.sh 8 16;
trace_b8_v4_rpdl|$R OUT=\$OUT/trace_b8_v4_rpdl bash tools/gpu/trace_decode.sh 8 16"
exec bash "$(dirname "$0")/../device_call.sh"
