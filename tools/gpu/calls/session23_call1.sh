#!/usr/bin/env bash
# First device call of session 23 (binaries of 08afe4f + the rows gate, DEEPINFER_STREAM_ROWS_GATE, default off):
#   - the gate's bitwise test and the balanced grid's (the default since c94a8f9, first run as the default);
#   - `roofline --fp8-phases` without the gate and at gates 0 / 1 (wo_b / shared w1|w3: first rows staged 2.5-4.8 us
#     in run 130; the prediction: ~1 us at gate 0);
#   - same-call A/B of the gate (-1 = none, 0, 1) on V4 and V4.1, and of the quantizing prologue (0 = the separate
#     fp8_quantize launch, 1 = the default);
#   - `v4_decode --fp4-stamps` (V4): the product labels fixed in session 22, not run since.
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session23_call1.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='gate_tests|timeout 300 $b/test_gpu --gtest_filter="GpuFp8Gemm.StreamRowsGate*:GpuFp8Gemm.StreamBalancedGrid*" > $OUT/gate_tests.log 2>&1 || true && grep -cE "mismatches=[1-9]" $OUT/gate_tests.log || true && grep -E "^\[  (PASSED|FAILED) |FAILED" $OUT/gate_tests.log | head;
fp8_phases|timeout 150 $b/roofline --fp8-phases --out $OUT/fp8_phases.json > $OUT/fp8_phases.log 2>&1 || true && grep -A1 phases $OUT/fp8_phases.log | cut -c1-420 | head -24;
fp8_phases_gate0|DEEPINFER_STREAM_ROWS_GATE=0 timeout 150 $b/roofline --fp8-phases --out $OUT/fp8_phases_g0.json > $OUT/fp8_phases_g0.log 2>&1 || true && grep -A1 phases $OUT/fp8_phases_g0.log | cut -c1-420 | head -24;
fp8_phases_gate1|DEEPINFER_STREAM_ROWS_GATE=1 timeout 150 $b/roofline --fp8-phases --out $OUT/fp8_phases_g1.json > $OUT/fp8_phases_g1.log 2>&1 || true && grep -A1 phases $OUT/fp8_phases_g1.log | cut -c1-420 | head -24;
ab_gate|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_ROWS_GATE "-1 0 1" 3;
ab_gate_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_ROWS_GATE "-1 0 1" 3 --family v41;
ab_prologue|OUT=$OUT/v4p bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP8_QUANT_PROLOGUE "0 1" 3;
ab_prologue_v41|OUT=$OUT/v41p bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP8_QUANT_PROLOGUE "0 1" 3 --family v41;
fp4_stamps|timeout 150 $b/v4_decode --quick --pdl on --fp4-stamps --out $OUT/fp4_stamps.json > $OUT/fp4_stamps.log 2>&1 || true && tail -14 $OUT/fp4_stamps.log | cut -c1-300'
exec bash "$(dirname "$0")/../device_call.sh"
