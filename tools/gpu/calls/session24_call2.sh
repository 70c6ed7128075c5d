#!/usr/bin/env bash
# Second device call of session 24 (binaries of the prefetched start: DEEPINFER_STREAM_START_PREFETCH /
# DEEPINFER_FP4_START_PREFETCH / DEEPINFER_STREAM_START_COPIES, default off):
#   - the new bitwise tests (GpuFp8Gemm.StreamStartPrefetchBitwise, GpuStreamFp4Wgmma.StartPrefetchBitwise);
#   - same-call A/Bs on V4 (16 layers, 4K): the dense prefetch depth 0|2|4|8, the same with one copy before the hold,
#     the MXFP4 prefetch depth 0|2|4; V4.1 0|4 for each;
#   - the in-step dense stamps with prefetch 4 (their waited / staged / landed columns against run 133's).
# The three switches and the two tests were removed after run 137 (every form lost): this script needs 8a23105's
# binaries. No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session24_call2.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='new_tests|timeout 300 $b/test_gpu --gtest_filter="GpuFp8Gemm.StreamStartPrefetch*:GpuStreamFp4Wgmma.StartPrefetch*" > $OUT/new_tests.log 2>&1 || true && grep -cE "mismatches=[1-9]" $OUT/new_tests.log || true && grep -E "^\[  (PASSED|FAILED) |FAILED" $OUT/new_tests.log | head;
ab_dense|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_START_PREFETCH "0 2 4 8" 2;
ab_dense_c1|DEEPINFER_STREAM_START_COPIES=1 OUT=$OUT/v4c1 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_START_PREFETCH "0 4 8" 2;
ab_fp4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_START_PREFETCH "0 2 4" 2;
ab_dense_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_START_PREFETCH "0 4" 2 --family v41;
ab_fp4_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_START_PREFETCH "0 4" 2 --family v41;
stamps_p4|DEEPINFER_STREAM_START_PREFETCH=4 timeout 150 $b/v4_decode --quick --pdl on --fp8-stamps --out $OUT/fp8_stamps_p4.json > $OUT/fp8_stamps_p4.log 2>&1 || true && grep -E "^ *all " $OUT/fp8_stamps_p4.log | cut -c1-300;
stamps_p0|timeout 150 $b/v4_decode --quick --pdl on --fp8-stamps --out $OUT/fp8_stamps_p0.json > $OUT/fp8_stamps_p0.log 2>&1 || true && grep -E "^ *all " $OUT/fp8_stamps_p0.log | cut -c1-300'
exec bash "$(dirname "$0")/../device_call.sh"
