#!/usr/bin/env bash
# Second device call of session 22 (binaries of the kQuantX prologue's load-ahead, plus v4_decode_old = d7d5c5a):
#   - the FP8 stream tests (GpuFp8Gemm.*: QuantPrologueBitwise covers k = 8192 at m 1 / 2 / 8 and partial passes);
#   - `roofline --fp8-phases` (wo_b's first rows staged 4.76 us in run 128, its prologue 4.09 us);
#   - same-call A/B of the two builds (V4, V4.1), then the prologue's row bound 1 / 2 / 8 with the new build;
#   - one traced batch-1 V4 step.
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session22_call2.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='fp8_tests|timeout 300 $b/test_gpu --gtest_filter="GpuFp8Gemm.*" > $OUT/fp8_tests.log 2>&1 || true && grep -cE "mismatches=[1-9]" $OUT/fp8_tests.log || true && grep -E "^\[  (PASSED|FAILED) |FAILED" $OUT/fp8_tests.log | head;
fp8_phases|timeout 150 $b/roofline --fp8-phases --out $OUT/fp8_phases.json > $OUT/fp8_phases.log 2>&1 || true && grep -A1 phases $OUT/fp8_phases.log | cut -c1-600 | head -24;
ab_prologue|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b BIN "v4_decode_old v4_decode" 3;
ab_prologue_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b BIN "v4_decode_old v4_decode" 3 --family v41;
ab_rows|OUT=$OUT/rows bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP8_QUANT_PROLOGUE "1 2 8" 2;
trace_tail|OUT=$OUT/trace bash tools/gpu/trace_decode.sh 1 16 > /dev/null 2>&1 || true && head -14 $OUT/trace/trace_b1.txt'
exec bash "$(dirname "$0")/../device_call.sh"
