#!/usr/bin/env bash
# Session 43's experiments, second call (session43_call1.sh says what they are): the model tests of the four
# switches (the bitwise on / off steps of the overlap, the routed PDL and the late shared w2; the forward tests with
# four warpgroups) and a batch-1 trace with each switch on.
#   usage (GPU machine, repo root; .gpubin: test_gpu_model, v4_decode of this commit or later):
#     bash tools/gpu/calls/session43_call2.sh (~7 min)
set -uo pipefail
export SKIP_SUITES=1
O=DEEPINFER_FP4_HALF_OVERLAP=1 R=DEEPINFER_MOE_ROUTED_PDL=1 W=DEEPINFER_FP4_WARPGROUPS=4
L=DEEPINFER_MOE_SHARED_W2_LATE=1
export EXTRA_GPU0="tests_model|\$b/test_gpu_model --gtest_filter='GpuFp4HalfOverlap.*:GpuMoeRoutedPdl.*:GpuMoeSharedW2Late.*:V4GpuForward.*:V41GpuForward.*';
tests_model_wg4|$W \$b/test_gpu_model --gtest_filter='V4GpuForward.*:V41GpuForward.*';
trace_ovl|$O OUT=\$OUT/trace_ovl bash tools/gpu/trace_decode.sh 1 16;
trace_wg4|$W OUT=\$OUT/trace_wg4 bash tools/gpu/trace_decode.sh 1 16;
trace_rpdl|$R OUT=\$OUT/trace_rpdl bash tools/gpu/trace_decode.sh 1 16;
trace_w2late|$L OUT=\$OUT/trace_w2late bash tools/gpu/trace_decode.sh 1 16"
exec bash "$(dirname "$0")/../device_call.sh"
