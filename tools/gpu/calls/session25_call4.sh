#!/usr/bin/env bash
# Fourth device call of session 25 (binaries of a770a8a + the thin dense launches' whole-item ring,
# DEEPINFER_STREAM_THIN_RING, default off): its bitwise test (GpuFp8Gemm.StreamRingDepthBitwise, now with the thin
# ring beside the depths 0 / 3) and same-call A/Bs of the switch, V4 (16 layers, 4K) and V4.1 (10 layers).
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session25_call4.sh
# Needs binaries built from bench/gpu/attempts/session25_run145.patch applied on a770a8a (branch
# attempt/s25-fused-prologues, commit e0fdbe1): the switch it measures lost and is not on main.
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='new_tests_tail|timeout 200 $b/test_gpu --gtest_filter="GpuFp8Gemm.StreamRingDepthBitwise" > $OUT/new_tests.log 2>&1 || true && grep -cE "mismatches=[1-9]" $OUT/new_tests.log || true && grep -E "^\[  (PASSED|FAILED) |FAILED" $OUT/new_tests.log | head;
ab_thin|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_THIN_RING "0 1" 3;
ab_thin_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_THIN_RING "0 1" 3 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
