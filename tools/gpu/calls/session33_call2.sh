#!/usr/bin/env bash
# Session 33, second call: the CSA2 entry kernel with wk staged in shared memory before the PDL wait (decode calls;
# run 162's trace: the ratio-1 source's entry took ~42 us on its layer's critical path). Its tests (the compressor
# against the CPU, the staged path against the global one bit for bit in chunked_vs_one_call, the V4.1 model
# tests), then a same-call BIN A/B against the previous build (v4_decode_old) on both models, and a traced V4.1
# batch-1 step at the new code.
#   usage (GPU machine, repo root, .gpubin with v4_decode_old): bash tools/gpu/calls/session33_call2.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="csa2_tests|\$b/test_gpu_model --gtest_filter='GpuV41Modules.*:V41GpuForward.*:GpuCsa2*:GpuQRopeEpilogue.V41*:GpuMergeEpilogue.V41*';
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_old v4_decode' 4 --family v41;
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_old v4_decode' 2;
trace_v41|OUT=\$OUT/trace_v41 bash tools/gpu/trace_decode.sh 1 10 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
