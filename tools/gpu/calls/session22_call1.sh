#!/usr/bin/env bash
# First device call of session 22 (binaries of d7d5c5a, a fresh build): the forms and stamps compiled at the end of
# session 21 and never run (bench/gpu/NOTES.md "The MXFP4 stream's early start", "wo_a's W8A16 GEMV prefetch forms",
# "The MXFP4 stream's stamps inside the step", "The dense FP8 stream's phase stamps"):
#   - their bitwise tests (early start, W8A16 prefetch forms, stamped vs plain for both streams);
#   - `roofline --fp4-phases` per DEEPINFER_FP4_EARLY_START 0..3, `roofline --w8a16-only`, `roofline --fp8-phases`;
#   - same-call A/B of DEEPINFER_FP4_EARLY_START and DEEPINFER_W8A16_GEMV on V4 and V4.1;
#   - `v4_decode --fp4-stamps` (V4, V4.1, V4 without PDL).
# (A record of run 128: DEEPINFER_FP4_EARLY_START and DEEPINFER_W8A16_GEMV were removed after it, 88b71d9, so their
# A/B steps now compare the default with itself and fp4_phases_sweep.sh makes one plain run.)
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session22_call1.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='new_tests|timeout 300 $b/test_gpu --gtest_filter="GpuStreamFp4Wgmma.*:StreamFp4Wgmma.*:GpuW8A16.*:GpuFp8Gemm.Stream*" > $OUT/new_tests.log 2>&1 || true && grep -cE "mismatches=[1-9]" $OUT/new_tests.log || true && grep -E "^\[  (PASSED|FAILED) |FAILED" $OUT/new_tests.log | head;
fp4_phases|bash tools/gpu/fp4_phases_sweep.sh $b $OUT "0 1 2 3";
w8a16|timeout 120 $b/roofline --w8a16-only --out $OUT/w8a16.json > $OUT/w8a16.log 2>&1 || true && grep -iE "w8a16|gemv" $OUT/w8a16.log | head -20;
fp8_phases|timeout 150 $b/roofline --fp8-phases --out $OUT/fp8_phases.json > $OUT/fp8_phases.log 2>&1 || true && grep -A1 phases $OUT/fp8_phases.log | cut -c1-600 | head -24;
ab_early|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_EARLY_START "0 1 2 3" 3;
ab_early_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_EARLY_START "0 1 2 3" 2 --family v41;
ab_w8a16|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_W8A16_GEMV "default ahead early ahead_ef" 3;
ab_w8a16_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_W8A16_GEMV "default ahead early ahead_ef" 2 --family v41;
fp4_stamps|bash tools/gpu/fp4_step_stamps.sh $b $OUT'
exec bash "$(dirname "$0")/../device_call.sh"
