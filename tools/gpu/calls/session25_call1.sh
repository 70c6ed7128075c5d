#!/usr/bin/env bash
# First device call of session 25 (binaries with the query norm in wq_b's prologue, DEEPINFER_FP8_NORM_PROLOGUE,
# default 1 row):
#   - the new bitwise tests (GpuFp8Gemm.NormPrologueBitwise; GpuNormPrologue.V4/V41StepBitwiseOnAndOff) beside the
#     neighbouring fused-form tests they share code with (the bf16 quantizing prologue, the RoPE epilogue, the grid cap,
#     the norm kernels);
#   - same-call A/Bs of the switch (0: the norm's own launch; 1: the prologue), V4 (16 layers, 4K) and V4.1 (10).
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session25_call1.sh
# Needs binaries built from bench/gpu/attempts/session25_run142.patch applied on a770a8a (branch
# attempt/s25-fused-prologues, commit fda045f): the switch it measures lost and is not on main.
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='new_tests_tail|timeout 240 $b/test_gpu --gtest_filter="GpuFp8Gemm.NormPrologue*:GpuFp8Gemm.QuantPrologue*:GpuFp8Gemm.RopeEpilogue*:GpuFp8Gemm.StreamGridCap*:GpuRmsNorm*:GpuNorm*" > $OUT/new_tests.log 2>&1 || true && timeout 200 $b/test_gpu_model --gtest_filter="GpuNormPrologue.*:GpuQuantPrologue.*:GpuQRopeEpilogue.*:GpuIndexQuery*" > $OUT/new_model_tests.log 2>&1 || true && cat $OUT/new_tests.log $OUT/new_model_tests.log | grep -cE "mismatches=[1-9]" || true && cat $OUT/new_tests.log $OUT/new_model_tests.log | grep -E "^\[  (PASSED|FAILED) |FAILED|rel_l2.*FAIL" | head -20;
ab_norm|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP8_NORM_PROLOGUE "0 1" 3;
ab_norm_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP8_NORM_PROLOGUE "0 1" 3 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
