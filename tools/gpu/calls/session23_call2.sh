#!/usr/bin/env bash
# Second device call of session 23 (binaries of c92c19d: the rows gate removed, the dense stream's entry trigger
# switch DEEPINFER_STREAM_TRIGGER=entry (default last), helper-118's in-step FP8 stamps):
#   - the new tests (GpuFp8Gemm.StreamEntryTriggerChainBitwise, GpuFp8StepStamps.*);
#   - `v4_decode --fp8-stamps` V4 / V4.1 with the alone rows (tools/gpu/fp8_step_stamps.sh), and V4 with the entry
#     trigger (its gap_s / waited columns against the default's);
#   - same-call A/B of DEEPINFER_STREAM_TRIGGER=last|entry on V4 and V4.1.
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session23_call2.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='new_tests|timeout 300 $b/test_gpu --gtest_filter="GpuFp8Gemm.StreamEntryTrigger*:GpuFp8StepStamps.*" > $OUT/new_tests.log 2>&1 || true && grep -cE "mismatches=[1-9]" $OUT/new_tests.log || true && grep -E "^\[  (PASSED|FAILED) |FAILED" $OUT/new_tests.log | head;
fp8_step_stamps|bash tools/gpu/fp8_step_stamps.sh $b $OUT;
fp8_step_stamps_entry|DEEPINFER_STREAM_TRIGGER=entry timeout 150 $b/v4_decode --quick --pdl on --fp8-stamps --out $OUT/fp8_stamps_v4_entry.json > $OUT/fp8_stamps_v4_entry.log 2>&1 || true && grep -E "^ *all " $OUT/fp8_stamps_v4_entry.log | cut -c1-300;
ab_trigger|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_TRIGGER "last entry" 3;
ab_trigger_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_TRIGGER "last entry" 3 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
