#!/usr/bin/env bash
# Session 33, third call: the CSA2 entry kernel with every weight read before the PDL wait (wk by bulk copies into
# shared memory at decode, norm / k_norm / inv_freq by every thread) and three dependent round trips after it (run
# 184: wk alone took the ratio-1 source's entry 42 -> 23 us). Its tests (the CSA2 compressor against the CPU, the
# staged path against the global one bit for bit in chunked_vs_one_call, V4's compressor through the shared
# push_rows.cuh, the V4 / V4.1 model tests), a same-call BIN A/B against main (v4_decode_old) on both models, and a
# traced V4.1 batch-1 step.
#   usage (GPU machine, repo root, .gpubin with v4_decode_old): bash tools/gpu/calls/session33_call3.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="entry_tests|\$b/test_gpu_model --gtest_filter='GpuV41Modules.*:V41GpuForward.*:V4GpuForward.*:GpuCsa2*:GpuCompressor*';
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_old v4_decode' 4 --family v41;
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_old v4_decode' 2;
trace_v41|OUT=\$OUT/trace_v41 bash tools/gpu/trace_decode.sh 1 10 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
