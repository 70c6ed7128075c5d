#!/usr/bin/env bash
# Second device call of session 25 (binaries with the query norm in wq_b's prologue, second form: the row's sums once
# a block through shared memory, DEEPINFER_FP8_NORM_PROLOGUE; and wo_b's quantization in wo_a's epilogue,
# DEEPINFER_W8A16_QUANT_EPILOGUE, default on):
#   - the bitwise tests of both (kernel and model level) and of the code they touched (fp8_codes8, the cluster helpers
#     the mid split kernel shares, the W8A16 kernel);
#   - same-call A/Bs: the norm prologue 0|1 (V4 16 layers, V4.1 10; V4 also with DEEPINFER_STREAM_TRIGGER=last, to
#     tell whether wq_b's early launch behind wq_a is what costs), the quantizing epilogue 0|1 (V4, V4.1);
#   - the V4 batch-1 trace with the defaults (tools/gpu/trace_decode.sh).
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session25_call2.sh
# Needs binaries built from bench/gpu/attempts/session25_run143.patch applied on a770a8a (branch
# attempt/s25-fused-prologues, commit 774060f): the switch it measures lost and is not on main.
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='new_tests_tail|timeout 240 $b/test_gpu --gtest_filter="GpuW8A16.*:GpuFp8Gemm.NormPrologue*:GpuFp8Gemm.QuantPrologue*:GpuFp8Quantize*:GpuFp8Gemm.MidSplit*:GpuFp8Gemm.MidRows*" > $OUT/new_tests.log 2>&1 || true && timeout 200 $b/test_gpu_model --gtest_filter="GpuQuantEpilogue.*:GpuNormPrologue.*:GpuQuantPrologue.*" > $OUT/new_model_tests.log 2>&1 || true && cat $OUT/new_tests.log $OUT/new_model_tests.log | grep -cE "mismatches=[1-9]" || true && cat $OUT/new_tests.log $OUT/new_model_tests.log | grep -E "^\[  (PASSED|FAILED) |FAILED|rel_l2.*FAIL" | head -20;
ab_norm|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP8_NORM_PROLOGUE "0 1" 3;
ab_norm_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP8_NORM_PROLOGUE "0 1" 3 --family v41;
ab_norm_last|DEEPINFER_STREAM_TRIGGER=last OUT=$OUT/v4last bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP8_NORM_PROLOGUE "0 1" 2;
ab_quant|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_W8A16_QUANT_EPILOGUE "0 1" 3;
ab_quant_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_W8A16_QUANT_EPILOGUE "0 1" 3 --family v41;
trace|OUT=$OUT/trace bash tools/gpu/trace_decode.sh 1 16 > /dev/null && head -30 $OUT/trace/trace_b1.txt'
exec bash "$(dirname "$0")/../device_call.sh"
