#!/usr/bin/env bash
# Third device call of session 23 (binaries of the session's tree after run 133: the entry trigger the default, the
# quantizing prologue (kQuantX) with rows outer, no runtime divisions, 4 units a lane with interleaved shuffles, its
# q1st / qloop stamps; plus v4_decode_c92 = c92c19d, the old prologue):
#   - GpuFp8Gemm.QuantPrologueBitwise (the prologue against fp8_quantize + fp8_gemm, bit for bit) and the other FP8
#     stream tests;
#   - `v4_decode --fp8-stamps` V4 / V4.1 (wo_b+q's stg_rw, q1st, qloop; run 133: stg_rw 4.27 / 3.52 us);
#   - same-call A/B of the two builds, both with the entry trigger (V4, V4.1).
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session23_call3.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='fp8_tests|timeout 400 $b/test_gpu --gtest_filter="GpuFp8Gemm.*:GpuFp8StepStamps.*" > $OUT/fp8_tests.log 2>&1 || true && grep -cE "mismatches=[1-9]" $OUT/fp8_tests.log || true && grep -E "^\[  (PASSED|FAILED) |FAILED" $OUT/fp8_tests.log | head;
fp8_step_stamps|bash tools/gpu/fp8_step_stamps.sh $b $OUT;
ab_prologue|DEEPINFER_STREAM_TRIGGER=entry OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b BIN "v4_decode_c92 v4_decode" 3;
ab_prologue_v41|DEEPINFER_STREAM_TRIGGER=entry OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b BIN "v4_decode_c92 v4_decode" 3 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
